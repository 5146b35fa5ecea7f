"""After a run paused: save the pause, or go on at once with answers that came first.

An orchestrator whose run paused on calls that workers answer (a tool's job, a branch) may
keep the session a little (``pause_linger_seconds`` of :class:`InvocationService`, the
``ADK_CELERY_PAUSE_LINGER_MS`` setting) for their answers: the worker that stores an answer
queues a ``resume`` item and posts a wake-up, which the wake-up consumer passes to the drain
holding the session (``news``). One step of the session queue then either claims that item
with the paused record carried over, never saved (the record says ``running`` until the
invocation next pauses or ends), or saves the pause and claims whatever else is queued, or
releases the session.

What a crash leaves: the same as an orchestrator that died after committing a call and before
saving its record: the record says running, the call and its job are in the log and the
journal, and the next holder of the session resumes the invocation from its log.
"""

from __future__ import annotations

import time

from orchestrator import failpoints, observe
from orchestrator.distributed.models import InvocationRecord, WorkItem
from orchestrator.distributed.stores import Loaded, SessionKey, SessionQueue
from orchestrator.distributed.wakeups import News
from orchestrator.flows.contents import REQUEST_CONFIRMATION, REQUEST_CREDENTIAL
from orchestrator.sessions.session import Session

_OUTSIDE_ANSWERS = frozenset({REQUEST_CONFIRMATION, REQUEST_CREDENTIAL})
"""Calls that only an answer from outside ends: a pause on those alone does not linger."""


async def after_pause(
    queue: SessionQueue, key: SessionKey, token: str, finished: WorkItem,
    paused: InvocationRecord, earlier: Session | None, news: News | None, linger_until: float,
) -> tuple[WorkItem | None, Loaded | None]:
    """Save the pause and claim the next item, unless the pause's answers came first.

    With ``news``, a pause on calls that workers answer first waits for them (holding the
    lease) until ``linger_until`` (monotonic) at the latest. If the next queued item is the
    paused invocation's own, it is claimed with ``paused`` carried over as its record (see
    :meth:`SessionQueue.claim_after_pause`; ``loaded.carried``). ``earlier``: the session
    as last read, for reading only what came after it.
    """
    left = linger_until - time.monotonic()
    if news is not None and left > 0 and lingers(paused):
        failpoints.hit("orchestrator.lingering")
        await news(left)
    taken = await queue.claim_after_pause(
        key, token, finished=finished, paused=paused, known=earlier)
    if taken.loaded is None:  # saved: watchers may see it now
        observe.invocation_status(paused.app_name, paused.status.value, paused.created_at)
        return taken.item, None
    failpoints.hit("orchestrator.went_on")
    return taken.item, taken.loaded._replace(carried=True)


def lingers(paused: InvocationRecord) -> bool:
    """True if ``paused`` waits for calls that workers answer on their own.

    A tool's job or a branch, not only answers from outside (a confirmation, a credential).
    """
    return any(name not in _OUTSIDE_ANSWERS for name in paused.pending_tools.values())
