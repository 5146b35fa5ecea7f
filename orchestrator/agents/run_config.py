"""RunConfig: per-run settings (streaming, model-call limit, metadata)."""

from __future__ import annotations

import enum
import logging
from typing import Any

from google.genai import types
from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.process_setup import core_defaults
from orchestrator.sessions.session import GetSessionConfig

logger = logging.getLogger(__name__)


class StreamingMode(enum.Enum):
    """How model output reaches the caller."""

    NONE = None
    SSE = "sse"
    BIDI = "bidi"


class ToolThreadPoolConfig(BaseModel):
    """A run's own pool for synchronous tool functions (google-adk's default size: 4)."""

    model_config = ConfigDict(extra="forbid")

    max_workers: int = Field(default=4, ge=1)
    """Threads in the pool: at most this many sync calls of the run wait at once."""


class RunConfig(BaseModel):
    """Settings for one ``run_async`` call."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    streaming_mode: StreamingMode = StreamingMode.NONE
    """``SSE`` streams partial events that share the final event's id."""
    max_llm_calls: int = Field(default_factory=lambda: core_defaults().max_llm_calls)
    """Model calls allowed per invocation; <= 0 means unlimited."""
    custom_metadata: dict[str, Any] | None = None
    """Merged into the ``custom_metadata`` of every event of the invocation."""
    get_session_config: GetSessionConfig | None = None
    """Which events to load with the session."""
    model_input_context: list[types.Content] | None = None
    """Transient context sent to the model before the current user content, never stored."""
    include_thoughts_from_other_agents: bool = False
    """Keep other agents' thought parts in history."""
    tool_thread_pool_config: ToolThreadPoolConfig | None = None
    """Run synchronous tools on a pool of this size. They always run off the event loop
    here; without this, on the process's pool (setting ``sync_tool_threads``)."""
    save_input_blobs_as_artifacts: bool = False
    """Deprecated in ADK; accepted and ignored."""
    response_modalities: list[str] | None = None
    """Live-only in ADK; accepted and ignored."""
    speech_config: types.SpeechConfig | None = None
    """Live-only in ADK; accepted and ignored."""
    labels: dict[str, str] | None = None
    """Labels sent with model calls."""

    @field_validator("max_llm_calls")
    @classmethod
    def _validate_max_llm_calls(cls, value: int) -> int:
        if value <= 0:
            logger.warning("max_llm_calls <= 0: model calls per invocation are unlimited.")
        return value
