"""Handing a call's result back: store it and queue the invocation's resume.

What a worker (or the orchestrators' job watchdog) does with a finished job needs only the
invocation store and the session queue, never the orchestrator's Runner loop: this is the
whole of it, shared by :meth:`InvocationService.deliver` and the Celery workers.
"""

from __future__ import annotations

import logging

from orchestrator.distributed.models import ToolResult, WorkItem
from orchestrator.distributed.stores import InvocationStore, SessionKey, SessionQueue, session_key

logger = logging.getLogger(__name__)


async def deliver_result(
    store: InvocationStore,
    queue: SessionQueue,
    app_name: str,
    invocation_id: str,
    result: ToolResult,
    key: SessionKey | None = None,
) -> SessionKey | None:
    """Store a call's result and queue a resume; None if there is nothing to resume.

    ``key`` (app, user, session) saves looking the invocation up when the job carries it.
    A second copy of a result is ignored (no second resume is queued): the first stored
    result wins.
    """
    if key is None:
        record = await store.get(app_name, invocation_id)
        if record is None:
            logger.warning("Result for unknown invocation %r/%r dropped", app_name, invocation_id)
            return None
        key = session_key(record)
    if not result.answered:
        # Still waiting for an answer from outside: store the placeholder, resume nothing.
        await store.put_result(app_name, invocation_id, result)
        return None
    resume = WorkItem(kind="resume", invocation_id=invocation_id)
    return key if await queue.push(key, resume, result=result) else None
