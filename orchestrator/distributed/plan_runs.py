"""Driving one work item's plan: the run's events streamed, cancels watched, the end recorded.

:class:`~.service.InvocationService` takes a session's items one by one; for each,
:func:`~.item_plans.plan_item` says which events to drive and :func:`drive_plan` drives them:
each event goes to the service's event sink, the invocation's cancel flag is checked as the
run goes, and what the log then leaves open decides whether the invocation is paused,
completed or cancelled.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from orchestrator import failpoints, observe, platform
from orchestrator.distributed.cancel_seals import seal
from orchestrator.distributed.item_plans import Plan
from orchestrator.distributed.ledger import CallLedger
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.outside_answers import answered_inside
from orchestrator.errors import InvocationCancelledError
from orchestrator.flows.retried_answers import AnswerKey, answering_as
from orchestrator.sessions.base_session_service import SessionWriter
from orchestrator.sessions.session import Session
from orchestrator.sessions.state import without_temp

if TYPE_CHECKING:
    from orchestrator.distributed.service import InvocationService, SaveWithNextCommit

_CANCEL_CHECK_SECONDS = 0.25
"""Least seconds between two looks at the invocation's cancel flag while its run goes on."""


async def drive_plan(
    service: InvocationService, record: InvocationRecord, plan: Plan,
    save_with_commit: SaveWithNextCommit | None, session: Session | None, writer: SessionWriter,
) -> InvocationRecord:
    """Drive ``plan``'s run of ``record``'s invocation; return the record as the item ends it.

    Its events go to the service's event sink as they come; a cancel (its flag checked about
    every :data:`_CANCEL_CHECK_SECONDS`, or an append refused) seals the open calls. What the
    invocation then waits for is what its log leaves open.
    """
    if record.status is InvocationStatus.QUEUED:
        # Resumes skip this write: paused -> completed is one step for watchers.
        record.status = InvocationStatus.RUNNING
        record.updated_at = platform.get_time()
        # temp: values are the start's alone (it holds them already): they leave the
        # record with this save, as they never enter the log.
        record.state_delta = without_temp(record.state_delta)
        observe.invocation_status(record.app_name, record.status.value, record.created_at)
        if save_with_commit is not None:
            # "running" lands with the user's message: a crash before it leaves the
            # invocation queued (nothing of it ran), after it, running with its message.
            save_with_commit(record)
        else:
            await service.store.save(record)
    ledger = plan.ledger
    for event in plan.prelude:
        if service.event_sink is not None:
            await service.event_sink(record, event)
    checked = time.monotonic()
    cancelled = False
    if plan.events is not None:
        retried = await _abandoned(service, record, plan, session)
        try:
            with answering_as(retried):
                async with contextlib.aclosing(plan.events):
                    async for event in plan.events:
                        if service.event_sink is not None:
                            await service.event_sink(record, event)
                        if event.partial:
                            failpoints.hit("orchestrator.chunk_published")
                            continue
                        ledger.record(event)
                        if time.monotonic() - checked > _CANCEL_CHECK_SECONDS:
                            checked = time.monotonic()
                            if await service.store.is_cancelled(
                                    record.app_name, record.invocation_id):
                                cancelled = True
                                break
        except InvocationCancelledError:  # an append found the cancel flag set
            cancelled = True
    if cancelled and session is not None:
        # From the session, which holds every event committed: an append refused as
        # cancelled may have been stored by its own first run (a lost reply), unyielded.
        ledger = CallLedger.of(session.events, record.invocation_id)
        await seal(ledger, session, writer)
    # What the invocation waits for is what its log leaves open, never a running tally.
    record.pending_calls = sorted(ledger.open)
    record.pending_tools = {cid: ledger.calls[cid].name for cid in record.pending_calls}
    record.inside_calls = answered_inside(
        service.registry, record.app_name, (ledger.calls[cid] for cid in record.pending_calls))
    if cancelled:
        status = InvocationStatus.CANCELLED
    else:
        status = InvocationStatus.PAUSED if record.pending_calls else InvocationStatus.COMPLETED
    return ended_as(record, status)


async def _abandoned(
    service: InvocationService, record: InvocationRecord, plan: Plan, session: Session | None
) -> dict[AnswerKey, str]:
    """The ids of the answers a cut-off streamed run left unfinished (none otherwise)."""
    if not (plan.recovering and record.streaming and session is not None
            and service.abandoned_chunks is not None):
        return {}
    return await service.abandoned_chunks(record, {event.id for event in session.events})


def ended_as(record: InvocationRecord, status: InvocationStatus) -> InvocationRecord:
    """The record with its new status, to be saved as the work item ends."""
    record.status = status
    record.updated_at = platform.get_time()
    return record
