from typing import TYPE_CHECKING, Any

from orchestrator.sessions.base_session_service import BaseSessionService
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.sessions.session import GetSessionConfig, ListSessionsResponse, Session
from orchestrator.sessions.state import State

if TYPE_CHECKING:
    from orchestrator.backends.redis.session_service import RedisSessionService

__all__ = [
    "BaseSessionService",
    "GetSessionConfig",
    "InMemorySessionService",
    "ListSessionsResponse",
    "RedisSessionService",
    "Session",
    "State",
]


def __getattr__(name: str) -> Any:
    """``RedisSessionService``, imported on first use (``import orchestrator`` skips redis-py)."""
    if name != "RedisSessionService":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from orchestrator.backends.redis.session_service import RedisSessionService

    globals()[name] = RedisSessionService
    return RedisSessionService
