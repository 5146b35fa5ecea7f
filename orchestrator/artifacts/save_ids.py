"""The id a tool call's artifact save carries, so that a second run of the call saves nothing new.

A call may run more than once: its worker died after the tool saved an artifact and before
its result was stored, and the job ran again; an orchestrator stopped before a call's answer
was committed, and the recovered run ran it again. Each save would add a version no event
records. A save made from a tool's context therefore names itself by its call (the
invocation, the call id, the file, and how many saves of that file the run made before it):
a back-end that keeps a save's id (the Redis one) answers a second run's save with the
version the first run made, writing nothing. Set around the back-end's ``save_artifact`` by
:meth:`orchestrator.agents.context.Context.save_artifact`; other saves get a fresh id.
"""

from __future__ import annotations

import hashlib
from contextvars import ContextVar

CALL_SAVE_ID: ContextVar[str | None] = ContextVar("adk_celery_call_save_id", default=None)
"""The id of the save under way, when a tool's context makes it (None: a fresh one)."""


def call_save_id(invocation_id: str, function_call_id: str, filename: str, nth: int) -> str:
    """The save id of the ``nth`` save (from 0) of ``filename`` by one run of a call."""
    name = "\x1f".join((invocation_id, function_call_id, filename, str(nth)))
    return "c" + hashlib.sha256(name.encode()).hexdigest()[:31]
