"""``InputValidationError`` at google-adk's module path (``google.adk.errors.input_validation_error``)."""

from orchestrator.errors import InputValidationError

__all__ = ["InputValidationError"]
