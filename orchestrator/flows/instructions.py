"""Instruction templating: ``{key}``, ``{key?}``, ``{app:key}``, ``{artifact.name}``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from orchestrator.sessions.state import State

if TYPE_CHECKING:
    from orchestrator.agents.context import ReadonlyContext

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
        raise KeyError(f"Context variable not found: `{name}`.")
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
        raise KeyError(f"Artifact {filename} not found.")
    return part.text or ""
