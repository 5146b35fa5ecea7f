"""Session: a conversation's events and state, plus the GetSessionConfig filter."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt
from pydantic.alias_generators import to_camel

from orchestrator.events.event import Event


class Session(BaseModel):
    """A conversation between a user and an app: its event log and merged state."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True,
        arbitrary_types_allowed=True,
    )

    id: str
    """The session id."""
    app_name: str
    """The app the session belongs to."""
    user_id: str
    """The user the session belongs to."""
    state: dict[str, Any] = Field(default_factory=dict)
    """Session state merged with ``app:`` and ``user:`` state."""
    events: list[Event] = Field(default_factory=list)
    """Committed events, oldest first."""
    last_update_time: float = 0.0
    """Timestamp of the last committed event."""


class GetSessionConfig(BaseModel):
    """Limits the events returned by ``get_session``."""

    num_recent_events: NonNegativeInt | None = None
    """Return only the last N events (0 = none)."""
    after_timestamp: float | None = None
    """Return only events at or after this time."""


class ListSessionsResponse(BaseModel):
    """Sessions of an app or user, without their events."""

    sessions: list[Session] = Field(default_factory=list)
