"""``SessionNotFoundError`` at google-adk's module path (``google.adk.errors.session_not_found_error``)."""

from orchestrator.errors import SessionNotFoundError

__all__ = ["SessionNotFoundError"]
