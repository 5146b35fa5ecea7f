"""An agent's instructions: their parts, and their templating.

Placeholders: ``{key}``, ``{key?}``, ``{app:key}``, ``{artifact.name}``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator.models.llm_request import instruction_parts
from orchestrator.sessions.state import State

if TYPE_CHECKING:
    from orchestrator.agents.context import ReadonlyContext
    from orchestrator.agents.llm_agent import LlmAgent

# A brace group not preceded by '$', '{' or '\' (those are literal, e.g. ${x} or \{x}).
_PLACEHOLDER = re.compile(r"(?<![$\\{])\{+[^{}]*\}+")
_PREFIXES = (State.APP_PREFIX, State.USER_PREFIX, State.TEMP_PREFIX)


def _is_state_name(name: str) -> bool:
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):].isidentifier()
    return name.isidentifier()


async def inject_session_state(template: str, readonly_context: ReadonlyContext) -> str:
    """Replace placeholders with session state values or artifact text.

    A missing key raises KeyError unless marked optional with ``?``; ``None`` renders as empty;
    a brace group that is not a valid state name is left as written.
    """
    parts: list[str] = []
    end = 0
    for match in _PLACEHOLDER.finditer(template):
        parts.append(template[end:match.start()])
        parts.append(await _render(match.group(), readonly_context))
        end = match.end()
    parts.append(template[end:])
    return "".join(parts)


async def _render(placeholder: str, ctx: ReadonlyContext) -> str:
    name = placeholder.lstrip("{").rstrip("}").strip()
    optional = name.endswith("?")
    if optional:
        name = name[:-1]
    if name.startswith("artifact."):
        return await _render_artifact(name[len("artifact."):], optional, ctx)
    if not _is_state_name(name):
        return placeholder
    state = ctx.state
    if name not in state:
        if optional:
            return ""
        raise KeyError(f"Context variable not found: `{name}` in agent '{ctx.agent_name}'.")
    value = state[name]
    return "" if value is None else str(value)


async def _render_artifact(filename: str, optional: bool, ctx: ReadonlyContext) -> str:
    invocation = ctx._invocation_context
    service = invocation.artifact_service
    if service is None:
        raise ValueError("Artifact service is not initialized.")
    part = await service.load_artifact(
        app_name=ctx.app_name,
        user_id=ctx.user_id,
        session_id=ctx.session.id,
        filename=filename,
    )
    if part is None:
        if optional:
            return ""
        raise KeyError(f"Artifact '{filename}' not found in agent '{ctx.agent_name}'.")
    return part.text or ""


async def agent_instructions(agent: LlmAgent, ctx: ReadonlyContext) -> list[str]:
    """The system instruction parts of ``agent``'s model requests, as google-adk orders them.

    The root agent's global instruction, the agent's static instruction, its instruction
    (templated with the session state unless a provider says to bypass that; with a static
    instruction, it goes in the contents instead: see :func:`turn_instruction`), then who
    it is.
    """
    from orchestrator.agents.llm_agent import LlmAgent

    parts: list[str] = []
    root = agent.root_agent
    if isinstance(root, LlmAgent) and root.global_instruction:
        text, bypass = await root.canonical_global_instruction(ctx)
        parts.append(text if bypass else await inject_session_state(text, ctx))
    if agent.static_instruction:
        parts.append(_static_text(agent.static_instruction))
    elif agent.instruction:
        parts.append(await _templated_instruction(agent, ctx))
    identity = f'You are an agent. Your internal name is "{agent.name}".'
    if agent.description:
        identity += f' The description about you is "{agent.description}".'
    parts.append(identity)
    return parts


_FENCE_BEGIN = "<<<BEGIN_SYSTEM_INSTRUCTION>>>"
_FENCE_END = "<<<END_SYSTEM_INSTRUCTION>>>"
_FENCE_NOTE = (
    "What follows between the two markers is your instruction for this turn, with the "
    "session's current state filled in. It comes from your configuration, not from the "
    "user: do not reply to it as a message. The user's own words, if any, come after the "
    "end marker."
)


async def turn_instruction(agent: LlmAgent, ctx: ReadonlyContext) -> types.Content | None:
    """An agent's instruction as a user content of its own, when it has a static one too.

    As google-adk 2.13 sends it: the system instruction then holds only what never changes
    (so a model's cache of it keeps), and the templated instruction travels in the
    contents, fenced between markers so that it does not read as the user's words (markers
    inside it are removed: state cannot close the fence early).
    """
    if not (agent.static_instruction and agent.instruction):
        return None
    text = await _templated_instruction(agent, ctx)
    for marker in (_FENCE_BEGIN, _FENCE_END):
        text = text.replace(marker, "[marker removed]")
    return types.Content(role="user", parts=[types.Part(
        text=f"{_FENCE_NOTE}\n{_FENCE_BEGIN}\n{text}\n{_FENCE_END}")])


async def _templated_instruction(agent: LlmAgent, ctx: ReadonlyContext) -> str:
    text, bypass = await agent.canonical_instruction(ctx)
    return text if bypass else await inject_session_state(text, ctx)


def static_content(value: Any) -> types.Content:
    """An agent's ``static_instruction`` as one Content.

    It may be a text, a Part, a Content, or a list of texts and Parts.
    """
    if isinstance(value, types.Content):
        return value
    items = value if isinstance(value, list) else [value]
    return types.Content(role="user", parts=[
        item if isinstance(item, types.Part) else types.Part(text=str(item)) for item in items
    ])


def static_instruction_contents(agent: LlmAgent) -> list[types.Content]:
    """The user contents carrying the data parts of ``agent``'s static instruction.

    Its system instruction names them; they lead the request's contents.
    """
    if not agent.static_instruction:
        return []
    return instruction_parts(static_content(agent.static_instruction))[1]


def _static_text(value: Any) -> str:
    return "\n\n".join(instruction_parts(static_content(value))[0])
