"""``AlreadyExistsError`` at google-adk's module path (``google.adk.errors.already_exists_error``)."""

from orchestrator.errors import AlreadyExistsError

__all__ = ["AlreadyExistsError"]
