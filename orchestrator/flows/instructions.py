"""An agent's instructions: their parts, and their templating.

Placeholders: ``{key}``, ``{key?}``, ``{app:key}``, ``{artifact.name}``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from google.genai import types

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
    (templated with the session state unless a provider says to bypass that), then who it is.
    """
    from orchestrator.agents.llm_agent import LlmAgent

    parts: list[str] = []
    root = agent.root_agent
    if isinstance(root, LlmAgent) and root.global_instruction:
        text, bypass = await root.canonical_global_instruction(ctx)
        parts.append(text if bypass else await inject_session_state(text, ctx))
    if agent.static_instruction:
        parts.append(_static_text(agent.static_instruction))
    if agent.instruction:
        text, bypass = await agent.canonical_instruction(ctx)
        parts.append(text if bypass else await inject_session_state(text, ctx))
    identity = f'You are an agent. Your internal name is "{agent.name}".'
    if agent.description:
        identity += f' The description about you is "{agent.description}".'
    parts.append(identity)
    return parts


def _static_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, types.Content):
        return "".join(p.text or "" for p in value.parts or [])
    return str(value)
