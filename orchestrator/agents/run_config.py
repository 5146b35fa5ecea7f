"""RunConfig: per-run settings (streaming, model-call limit, metadata)."""

from __future__ import annotations

import enum
import logging
from typing import Any

from google.genai import types
from pydantic import BaseModel, ConfigDict, Field, field_validator

from config import get_settings
from orchestrator.sessions.session import GetSessionConfig

logger = logging.getLogger(__name__)


class StreamingMode(enum.Enum):
    """How model output reaches the caller."""

    NONE = None
    SSE = "sse"
    BIDI = "bidi"


class ToolThreadPoolConfig(BaseModel):
    """Thread pool size for synchronous tools."""

    max_workers: int = 4


class RunConfig(BaseModel):
    """Settings for one ``run_async`` call."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    streaming_mode: StreamingMode = StreamingMode.NONE
    """``SSE`` streams partial events that share the final event's id."""
    max_llm_calls: int = Field(default_factory=lambda: get_settings().max_llm_calls)
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
    """Accepted for compatibility; synchronous tools always run off the event loop here."""
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
