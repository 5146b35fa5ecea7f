"""EventActions: the side effects an event carries (state delta, transfers, escalation, ...)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)
from pydantic.alias_generators import to_camel

from orchestrator.events.state_json import dump_leniently
from orchestrator.tools.tool_confirmation import ToolConfirmation


class EventCompaction(BaseModel):
    """A summary that stands in for the events between two timestamps."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    start_timestamp: float
    end_timestamp: float
    compacted_content: Any


class EventActions(BaseModel):
    """Actions attached to an event; the session service applies them when it commits."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True)

    skip_summarization: bool | None = None
    """If true, the model is not called again to summarise a function response."""
    state_delta: dict[str, Any] = Field(default_factory=dict)
    """State changes, applied by ``append_event``; ``temp:`` keys are never persisted."""
    artifact_delta: dict[str, int] = Field(default_factory=dict)
    """Artifact filename -> version saved while producing this event."""
    transfer_to_agent: str | None = None
    """Name of the agent to hand control to."""
    transfer_reason: str | None = None
    """Why the transfer happened (informational)."""
    escalate: bool | None = None
    """Ends the enclosing LoopAgent (and cancels ParallelAgent siblings)."""
    requested_auth_configs: dict[str, Any] = Field(default_factory=dict)
    """Function-call id -> auth config requested by a tool."""
    requested_tool_confirmations: dict[str, ToolConfirmation] = Field(default_factory=dict)
    """Function-call id -> confirmation requested by a tool."""
    compaction: EventCompaction | None = None
    """A compaction summary."""
    end_of_agent: bool | None = None
    """The authoring agent finished (resumable apps)."""
    agent_state: dict[str, Any] | None = None
    """Checkpoint of the authoring agent (resumable apps)."""
    rewind_before_invocation_id: str | None = None
    """Marks every event from that invocation onwards as rewound."""
    set_model_response: Any = None
    """The structured answer a ``set_model_response`` call gave (the agent's final output)."""

    # As google-adk: a JSON dump writes a non-JSON value of state_delta / agent_state as its
    # repr (with a warning) rather than failing; the runtime's stored dumps stay strict (see
    # state_json). One model-level serializer, not field serializers: a field serializer
    # makes pydantic dump those fields even under ``exclude_defaults``. No return annotation:
    # pydantic would take it for the serialised form's schema and lose the fields'.
    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo):
        return dump_leniently(self, handler, info)
