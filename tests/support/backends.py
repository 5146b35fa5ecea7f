"""Two backends for the invocation contract: in process, and Celery + Redis with real processes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from config import Settings
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from tests.apps import ALL_APPS, APP_SPECS
from tests.apps_branches import BRANCH_APP_SPECS, BRANCH_APPS
from tests.apps_confirm import CONFIRM_APP_SPECS, CONFIRM_APPS, noted_runs
from tests.apps_state import STATE_APP_SPECS, STATE_APPS
from tests.support.processes import stack_env, start_celery_process

CONTRACT_APPS = [*ALL_APPS, *CONFIRM_APPS, *BRANCH_APPS, *STATE_APPS]
"""The apps every backend of the contract suite serves."""
CONTRACT_APP_SPECS = f"{APP_SPECS},{CONFIRM_APP_SPECS},{BRANCH_APP_SPECS},{STATE_APP_SPECS}"


class EmbeddedBackend:
    def __init__(self) -> None:
        self.rt = EmbeddedRuntime(AppRegistry(CONTRACT_APPS))

    async def create_session(self, app: str, user: str, state: dict[str, Any] | None = None) -> str:
        return (await self.rt.session_service.create_session(app_name=app, user_id=user,
                                                             state=state)).id

    async def session_state(self, app: str, user: str, session_id: str) -> dict[str, Any]:
        session = await self.rt.session_service.get_session(app_name=app, user_id=user,
                                                            session_id=session_id)
        assert session is not None
        return dict(session.state)

    async def enqueue(self, app: str, user: str, message: Any, session_id: str | None = None,
                      **options: Any) -> str:
        return await self.rt.enqueue(app_name=app, user_id=user, session_id=session_id,
                                     new_message=message, **options)

    async def wait(self, app: str, inv: str, until=InvocationStatus.SETTLED):
        return await self.rt.wait(app, inv, timeout=20, until=until)

    async def events(self, app: str, inv: str):
        return await self.rt.events(app, inv)

    async def answer(self, app: str, inv: str, call_id: str, response: dict) -> None:
        await self.rt.answer(app, inv, call_id, response)

    async def cancel(self, app: str, inv: str) -> None:
        await self.rt.cancel(app, inv)

    async def tool_runs(self, tag: str) -> list[tuple[str, int]]:
        """Runs of the test apps' tools noted under ``tag`` (see ``tests.apps_confirm``)."""
        return noted_runs(tag)

    async def left_to_outside(self, app: str, inv: str, call_id: str) -> bool:
        """True once the call's job ended leaving the call to an outside answer."""
        result = (await self.rt.store.results(app, inv)).get(call_id)
        return result is not None and not result.answered


class CeleryBackend:
    def __init__(self, stack: dict[str, Any]) -> None:
        self.stack = stack
        """The processes behind this backend (``celery_stack`` or ``celery_stack_plain``)."""
        self.client = stack["client"]

    async def create_session(self, app: str, user: str, state: dict[str, Any] | None = None) -> str:
        return (await asyncio.to_thread(self.client.create_session, app, user, state=state)).id

    async def session_state(self, app: str, user: str, session_id: str) -> dict[str, Any]:
        sessions = await asyncio.to_thread(self.client.list_sessions, app, user)
        return next(dict(s.state) for s in sessions if s.id == session_id)

    async def enqueue(self, app: str, user: str, message: Any, session_id: str | None = None,
                      **options: Any) -> str:
        return await asyncio.to_thread(self.client.enqueue, app, user, message,
                                       session_id=session_id, **options)

    async def wait(self, app: str, inv: str, until=InvocationStatus.SETTLED):
        return await asyncio.to_thread(self.client.wait, app, inv, timeout=30, until=frozenset(until))

    async def events(self, app: str, inv: str):
        return await asyncio.to_thread(self.client.events, app, inv)

    async def answer(self, app: str, inv: str, call_id: str, response: dict) -> None:
        await asyncio.to_thread(self.client.answer, app, inv, call_id, response)

    async def cancel(self, app: str, inv: str) -> None:
        await asyncio.to_thread(self.client.cancel, app, inv)

    async def tool_runs(self, tag: str) -> list[tuple[str, int]]:
        """Runs of the test apps' tools noted under ``tag`` (see ``tests.apps_confirm``)."""
        return await asyncio.to_thread(noted_runs, tag, self.stack["url"])

    async def left_to_outside(self, app: str, inv: str, call_id: str) -> bool:
        """True once the call's job ended leaving the call to an outside answer."""
        calls = await asyncio.to_thread(self.client.calls, app, inv)
        return any(c.function_call_id == call_id and c.where == "waiting for an answer"
                   for c in calls)


LIBRARY_TRICKS_OFF = {
    "fast_publish": "false",
    "broker_client_reuse": "false",
    "worker_head_start_ms": "0",
}
"""Settings that switch off every trick on a library's internals (README: "Tricks on library
internals"): the contract suite runs with them on and off."""


@contextlib.contextmanager
def running_stack(redis_url: str, db: int, *args: str, apps: str = CONTRACT_APP_SPECS,
                  env: dict[str, str] | None = None, **settings: str) -> Iterator[dict[str, Any]]:
    """One orchestrator and one worker process on Redis db ``db`` (flushed), and a Client.

    ``args``: more command-line arguments of both processes; ``env``: more environment;
    ``settings``: ``ADK_CELERY_*`` settings of both.
    """
    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    env = {**stack_env(url, apps, lease_retry_seconds="0.2", **settings), **(env or {})}
    orchestrator = start_celery_process("orchestrator", f"orch-{db}", env, *args)
    worker = start_celery_process("worker", f"work-{db}", env, *args)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=apps, lease_retry_seconds=0.2))
    try:
        yield {"client": client, "orchestrator": orchestrator, "worker": worker, "url": url}
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


@pytest.fixture(scope="module")
def celery_stack(redis_url):
    """Redis db 2, one orchestrator process and one worker process."""
    with running_stack(redis_url, 2) as stack:
        yield stack


@pytest.fixture(scope="module")
def celery_stack_plain(redis_url):
    """As ``celery_stack`` (db 15), with every trick on a library's internals switched off
    and asyncio's own event loop (not uvloop): the contract runs both ways."""
    with running_stack(redis_url, 15, **LIBRARY_TRICKS_OFF, uvloop="false") as stack:
        yield stack


@pytest.fixture(params=["embedded", "celery", "celery-plain"])
def backend(request):
    if request.param == "embedded":
        return EmbeddedBackend()
    name = "celery_stack" if request.param == "celery" else "celery_stack_plain"
    return CeleryBackend(request.getfixturevalue(name))
