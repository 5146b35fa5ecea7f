from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.sessions.base_session_service import BaseSessionService
from orchestrator.sessions.in_memory_session_service import InMemorySessionService
from orchestrator.sessions.session import GetSessionConfig, ListSessionsResponse, Session
from orchestrator.sessions.state import State

__all__ = [
    "BaseSessionService",
    "GetSessionConfig",
    "InMemorySessionService",
    "ListSessionsResponse",
    "RedisSessionService",
    "Session",
    "State",
]
