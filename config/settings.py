"""Settings: the one place that reads the environment (prefix ``ADK_CELERY_``)."""

from __future__ import annotations

from functools import lru_cache

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Runtime settings for orchestrators, workers and clients."""

    model_config = SettingsConfigDict(env_prefix="ADK_CELERY_", extra="ignore")

    redis_url: str | None = None
    """Redis URL; unset means embedded in-process mode (no Redis needed)."""
    apps: str = ""
    """Comma-separated ``module:attribute`` import strings naming Apps or root agents."""
    google_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ADK_CELERY_GOOGLE_API_KEY", "GOOGLE_API_KEY"),
    )
    """Gemini API key (``GOOGLE_API_KEY`` is accepted too); unset = offline demo model."""
    gemini_base_url: str | None = None
    """Override the Gemini API endpoint (a proxy, or a local stub in tests)."""
    max_llm_calls: int = 500
    """Default limit of model calls per invocation (<= 0 means unlimited)."""

    def app_specs(self) -> list[str]:
        """Return the ``module:attribute`` strings of ``apps``."""
        return [s.strip() for s in self.apps.split(",") if s.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process settings, read once from the environment."""
    return Settings()
