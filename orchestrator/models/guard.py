"""A process-wide switch that stops real (network) model calls, for test suites."""

from __future__ import annotations

from orchestrator.errors import ModelRequestsBlockedError

_allowed = True


def set_model_requests_allowed(allowed: bool) -> None:
    """Allow or block real model calls in this process."""
    global _allowed
    _allowed = allowed


def check_model_requests_allowed(model: str) -> None:
    """Raise if real model calls are blocked; real model classes call this first."""
    if not _allowed:
        raise ModelRequestsBlockedError(
            f"Real model requests are blocked in this process (model {model!r}); "
            "use ScriptedLlm or FunctionLlm from orchestrator.models.fake."
        )
