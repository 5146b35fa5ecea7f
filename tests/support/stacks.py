"""One orchestrator, one worker and a client over a flushed Redis db: a test module's stack."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from config import Settings
from tests.support.processes import ManagedProcess, stack_env, start_celery_process


@dataclass
class Stack:
    """The processes and clients of :func:`running_stack`."""

    url: str
    check: redis.Redis
    """A plain client of the db (decoded replies), for the test's own reads."""
    orchestrator: ManagedProcess
    worker: ManagedProcess
    client: Any
    settings: Settings
    exit: ExitStack
    """Closes everything; more can be added to it (stopped first)."""


@contextmanager
def running_stack(redis_url: str, db: int, specs: str, name: str) -> Iterator[Stack]:
    """Redis db ``db`` flushed, an orchestrator and a worker serving ``specs`` (named after
    ``name``), and a ``Client``; all stopped on exit."""
    from workers.client import Client

    url = redis_url.rsplit("/", 1)[0] + f"/{db}"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    env = stack_env(url, specs, lease_retry_seconds="0.2")
    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process("orchestrator", f"{name}-orch", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", f"{name}-work", env)
        stack.callback(worker.stop)
        settings = Settings(redis_url=url, apps=specs, lease_retry_seconds=0.2)
        client = Client(settings)
        stack.callback(client.close)
        yield Stack(url, check, orchestrator, worker, client, settings, stack)
