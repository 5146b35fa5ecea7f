"""What a process role gives the ADK core from the Settings it was started with.

The core (agents, flows, models, tools) never reads settings or ``ADK_CELERY_*`` variables
itself. Each process role (orchestrator, worker, client, API server, embedded runtime) builds
its services from the :class:`config.Settings` it is given at start-up and hands the core's
part to :func:`configure_core` once. Used as a library (a script with a ``Runner`` and
nothing else), the core behaves as google-adk's: 500 model calls per invocation, the Gemini
API key from ``GOOGLE_API_KEY``, the model id check switched off by google-adk's
``ADK_DISABLE_GEMINI_MODEL_ID_CHECK``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pydantic import SecretStr

from config import Settings


@dataclass(frozen=True)
class CoreDefaults:
    """The defaults of the ADK core that a deployment may change (see :class:`Settings`)."""

    max_llm_calls: int = 500
    """``RunConfig.max_llm_calls`` when a run does not set it (google-adk's: 500)."""
    sync_tool_threads: int = 64
    """Threads of the process-wide pool that sync tools run on."""
    google_api_key: SecretStr | None = None
    """Gemini API key of a ``Gemini`` model without ``api_key=``; None: ``GOOGLE_API_KEY``."""
    gemini_base_url: str | None = None
    """Endpoint of a ``Gemini`` model without ``base_url=`` (a proxy, or a local stub)."""
    disable_gemini_model_id_check: bool = False
    """Send Gemini's built-in tools to models whose id does not look like Gemini's."""

    @classmethod
    def from_settings(cls, settings: Settings) -> CoreDefaults:
        """The core's part of a process's settings."""
        return cls(
            max_llm_calls=settings.max_llm_calls,
            sync_tool_threads=settings.sync_tool_threads,
            google_api_key=settings.google_api_key,
            gemini_base_url=settings.gemini_base_url,
            disable_gemini_model_id_check=settings.disable_gemini_model_id_check,
        )

    def api_key(self) -> SecretStr | None:
        """The configured Gemini key, else google-genai's variable ``GOOGLE_API_KEY``."""
        if self.google_api_key is not None:
            return self.google_api_key
        key = os.environ.get("GOOGLE_API_KEY")
        return SecretStr(key) if key else None

    def model_id_check_disabled(self) -> bool:
        """Configured so, or google-adk's ``ADK_DISABLE_GEMINI_MODEL_ID_CHECK`` is true."""
        flag = os.environ.get("ADK_DISABLE_GEMINI_MODEL_ID_CHECK", "").strip().lower()
        return self.disable_gemini_model_id_check or flag in ("1", "true", "yes", "on")


_current = CoreDefaults()


def configure_core(settings: Settings | CoreDefaults) -> None:
    """Give the core its defaults: once, where a process role starts (and in tests)."""
    global _current
    _current = settings if isinstance(settings, CoreDefaults) else CoreDefaults.from_settings(
        settings)


def core_defaults() -> CoreDefaults:
    """The defaults in force: the last :func:`configure_core`, else google-adk's."""
    return _current
