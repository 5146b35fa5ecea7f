"""App: an agent tree packaged with its name and app-wide settings."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.agents.base_agent import BaseAgent
from orchestrator.plugins.base_plugin import BasePlugin

_APP_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]*$")


class ResumabilityConfig(BaseModel):
    """Whether invocations can be paused and resumed by invocation id."""

    is_resumable: bool = False
    """Checkpoint agent state so ``run_async(invocation_id=...)`` can resume."""


class App(BaseModel):
    """An application: a named root agent plus app-wide configuration."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str
    """The app name (letters, digits, ``_`` and ``-``; not ``user``)."""
    root_agent: BaseAgent
    """The agent that handles every new message."""
    plugins: list[BasePlugin] = Field(default_factory=list)
    """App-wide callbacks (see ``orchestrator.plugins``), called in this order."""
    events_compaction_config: Any = None
    """Accepted for compatibility; compaction is not implemented."""
    context_cache_config: Any = None
    """Accepted for compatibility; context caching is not implemented."""
    resumability_config: ResumabilityConfig | None = None
    """Makes invocations resumable."""

    @field_validator("name")
    @classmethod
    def _validate_name(cls, value: str) -> str:
        if not _APP_NAME.match(value):
            raise ValueError(
                f"Invalid app name {value!r}: it must start with a letter and contain only "
                "letters, digits, '_' and '-'."
            )
        if value == "user":
            raise ValueError("App name cannot be 'user'.")
        return value
