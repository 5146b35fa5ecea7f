"""App: an agent tree packaged with its name and app-wide settings."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, InstanceOf, field_validator, model_validator

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
    # InstanceOf: a dict is refused, not made into a bare BaseAgent (as google-adk 2.13).
    root_agent: InstanceOf[BaseAgent]
    """The agent that handles every new message."""
    plugins: list[BasePlugin] = Field(default_factory=list)
    """App-wide callbacks (see ``orchestrator.plugins``), called in this order."""
    events_compaction_config: Any = None
    """Accepted for compatibility; compaction is not implemented."""
    context_cache_config: Any = None
    """Accepted for compatibility; context caching is not implemented."""
    resumability_config: ResumabilityConfig | None = None
    """Makes invocations resumable."""

    @model_validator(mode="before")
    @classmethod
    def _require_root_agent(cls, data: Any) -> Any:
        # google-adk 2.13's text for a missing (or None) root agent.
        if isinstance(data, dict) and data.get("root_agent") is None:
            raise ValueError("root_agent must be provided.")
        return data

    @field_validator("name")
    @classmethod
    def _validate_name(cls, value: str) -> str:
        # The texts are google-adk 2.13's.
        if not _APP_NAME.match(value):
            raise ValueError(
                f"Invalid app name '{value}': must start with a letter and can only consist "
                "of letters, digits, underscores, and hyphens."
            )
        if value == "user":
            raise ValueError("App name cannot be 'user'; reserved for end-user input.")
        return value
