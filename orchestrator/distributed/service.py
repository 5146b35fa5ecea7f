"""InvocationService: the orchestrator's core, the same code in embedded and Celery modes.

Work for a session (start, resume, cancel) goes through that session's queue; whoever holds
the session's lease drains it, so one orchestrator at a time writes a session, in order.
A run that ends with open long-running calls leaves the invocation ``paused``: it is then
only data. Results of remote calls are stored under (invocation, call id); a ``resume``
item appends them as function responses (one event per calling step, once every call of
that step is answered; see :mod:`orchestrator.distributed.item_plans`) and continues the
invocation in the agent that made the calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestrator import failpoints, observe, platform
from orchestrator.artifacts.base_artifact_service import BaseArtifactService
from orchestrator.distributed.app_checks import check_remote_tools
from orchestrator.distributed.cancel_seals import seal
from orchestrator.distributed.executor import deliver_result
from orchestrator.distributed.intake import (
    Limits,
    check_identifier,
)
from orchestrator.distributed.item_plans import Plan, plan_item, session_deleted
from orchestrator.distributed.ledger import CallLedger
from orchestrator.distributed.models import (
    InvocationRecord,
    InvocationStatus,
    ToolResult,
    WorkItem,
)
from orchestrator.distributed.outside_answers import answered_inside, queue_cancel, take_answers
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.session_cache import DEFAULT_MAX_BYTES, SessionCache
from orchestrator.distributed.stores import (
    InvocationStore,
    Loaded,
    SessionKey,
    SessionQueue,
    session_key,
)
from orchestrator.distributed.transport import Transport
from orchestrator.errors import InvocationCancelledError, error_text, is_infrastructure_error
from orchestrator.events.event import Event
from orchestrator.flows.retried_answers import AnswerKey, answering_as
from orchestrator.memory.base_memory_service import BaseMemoryService
from orchestrator.runners import Runner
from orchestrator.sessions.base_session_service import BaseSessionService, SessionWriter
from orchestrator.sessions.session import Session
from orchestrator.sessions.state import without_temp

logger = logging.getLogger(__name__)

_CANCEL_CHECK_SECONDS = 0.25

EventSink = Callable[[InvocationRecord, Event], Awaitable[None]]
"""``await sink(record, event)`` for each event, in order; used for live event streams."""

SaveWithNextCommit = Callable[[InvocationRecord], None]
"""Has the next committed event also save this record (one atomic write for both)."""

AbandonedChunks = Callable[[InvocationRecord, set[str]], Awaitable[dict[AnswerKey, str]]]
"""``await abandoned(record, ids in the log)``: the answers whose partial chunks the latest
run of ``record``'s invocation left on its live stream uncommitted (a run cut off
mid-answer), as ``{(agent, branch): event id}``."""

WriterFactory = Callable[
    [SessionKey, str, InvocationRecord], tuple[SessionWriter, SaveWithNextCommit | None]
]
"""``writer_for(key, fencing token, record)``: what commits the events of one piece of work
on ``record`` while the lease of ``key`` is held with that token (fenced, mirrored to the
live stream), and, if it can, a way to save a record together with its next commit."""


class InvocationService:
    """Runs queued invocations, pauses them on remote calls, and resumes them on answers."""

    def __init__(
        self,
        registry: AppRegistry,
        *,
        session_service: BaseSessionService,
        store: InvocationStore,
        queue: SessionQueue,
        transport: Transport | None = None,
        artifact_service: BaseArtifactService | None = None,
        memory_service: BaseMemoryService | None = None,
        lease_renew_seconds: float | None = None,
        event_sink: EventSink | None = None,
        abandoned_chunks: AbandonedChunks | None = None,
        writer_for: WriterFactory | None = None,
        limits: Limits | None = None,
        session_cache_max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.registry = registry
        self.limits = limits or Limits()
        """What answers and cancels from clients are checked against."""
        self.event_sink = event_sink
        """Receives every event of every run as it happens (partial chunks included)."""
        self.abandoned_chunks = abandoned_chunks
        """Reads what a run cut off mid-answer streamed: the recovering run's model calls
        answer under those ids (see :mod:`orchestrator.flows.retried_answers`)."""
        self.writer_for = writer_for
        """Builds each run's lease-bound writer (None: commit through the session service);
        a writer that mirrors its commits to the live stream leaves those to the appends."""
        self.session_service = session_service
        self.store = store
        self.queue = queue
        self.artifact_service = artifact_service
        self._lease_renew_seconds = lease_renew_seconds
        self.sessions_read = SessionCache(max_bytes=session_cache_max_bytes)
        """Each session as last read here: the next lease on it reads only what is newer
        (about ``session_cache_max_bytes`` of them at most, see :class:`SessionCache`)."""
        if transport is not None:
            for app in registry:
                check_remote_tools(app, transport.route)
        self._runners = {
            app.name: Runner(
                app=app, session_service=session_service, artifact_service=artifact_service,
                memory_service=memory_service, transport=transport,
            )
            for app in registry
        }

    # ---- intake -----------------------------------------------------------------------

    async def submit(self, record: InvocationRecord) -> InvocationRecord:
        """Record a new invocation as queued and queue its start (idempotent per id).

        One step: a record stored without its start item would stay queued for ever.
        """
        start = WorkItem(kind="start", invocation_id=record.invocation_id)
        if await self.queue.create_and_push(session_key(record), record, start):
            return record
        existing = await self.store.get(record.app_name, record.invocation_id)
        assert existing is not None
        return existing

    async def deliver(
        self,
        app_name: str,
        invocation_id: str,
        result: ToolResult,
        key: SessionKey | None = None,
    ) -> SessionKey | None:
        """Store a call's result and queue a resume (see :func:`deliver_result`)."""
        return await deliver_result(self.store, self.queue, app_name, invocation_id, result, key)

    async def answer(
        self,
        app_name: str,
        invocation_id: str,
        function_call_id: str,
        response: dict[str, Any],
    ) -> SessionKey:
        """Answer a pending call from outside (a human, another service); queue a resume.

        As :meth:`answer_all` with one answer.
        """
        return await self.answer_all(app_name, invocation_id, [(function_call_id, response)])

    async def answer_all(
        self, app_name: str, invocation_id: str, answers: Sequence[tuple[str, Any]]
    ) -> SessionKey:
        """Answer pending calls of one invocation, all or nothing; queue its resume.

        Raises RequestError for malformed input (a field of the wrong type, too large, not
        JSON), AnswerRejectedError for an unknown invocation, a call id the invocation is not
        waiting for, a call only what runs it may answer (a branch's, a plain tool's), or a
        call that already has its answer; nothing is stored either way (see
        :func:`~.outside_answers.take_answers`).
        """
        return await take_answers(self.store, self.queue, self.session_service, self.limits,
                                  app_name, invocation_id, answers)

    async def cancel(self, app_name: str, invocation_id: str) -> SessionKey | None:
        """Request cancellation; the next holder of the session records it.

        None for an unknown invocation; RequestError for malformed identifiers.
        """
        check_identifier("app_name", app_name, self.limits)
        check_identifier("invocation_id", invocation_id, self.limits)
        record = await self.store.get(app_name, invocation_id)
        if record is None:
            return None
        return await queue_cancel(self.store, self.queue, record)

    # ---- processing -------------------------------------------------------------------

    async def drain(self, key: SessionKey, hint: str | None = None) -> bool:
        """Process the session's queue if its lease is free; False if another holder has it.

        ``hint``: the invocation expected first (read together with taking the lease).
        """
        known = self.sessions_read.take(key)
        taken = await self.queue.take(key, hint, known)
        if taken is None or taken.item is None:  # lease busy, or nothing queued (released)
            if known is not None:
                self.sessions_read.put(key, known)
            return taken is not None
        token, item, loaded = taken
        renewer = self._start_renewer(key, token)
        released = False
        # The session as last read from storage: the next item reads only what was appended
        # since (a flood of messages on one session costs each of them its own events, not
        # the whole history's parse, and the event loop stays free for other sessions); kept
        # after the drain too, for the next lease on the session.
        earlier: Session | None = known if loaded is None else None
        try:
            while item is not None:
                ended, earlier = await self._process(key, token, item, loaded, earlier)
                loaded = None
                # The record is saved in the step that claims the next item or lets go.
                if ended is not None:  # before the save: a watcher that sees it sees this
                    observe.invocation_status(ended.app_name, ended.status.value, ended.created_at)
                item = await self.queue.claim_or_release(key, token, finished=item, save=ended)
                if item is not None:  # the record saved, the next item claimed; not run yet
                    failpoints.hit("orchestrator.next_claimed")
            released = True  # the queue was empty and the lease went with it
        finally:
            if renewer is not None:
                renewer.cancel()
            if earlier is not None:
                self.sessions_read.put(key, earlier)
            if not released:
                await self.queue.release(key, token)
        return True

    def _start_renewer(self, key: SessionKey, token: str) -> asyncio.Task[None] | None:
        if not self._lease_renew_seconds:
            return None
        interval = self._lease_renew_seconds

        async def renew() -> None:
            while True:
                await asyncio.sleep(interval)
                if not await self.queue.renew(key, token):
                    logger.error("Lost the lease of session %r", key)
                    return

        return asyncio.ensure_future(renew())

    async def _process(
        self, key: SessionKey, token: str, item: WorkItem, loaded: Loaded | None,
        earlier: Session | None,
    ) -> tuple[InvocationRecord | None, Session | None]:
        """Work on one item; return the record to save (None: nothing changed) and the session.

        The session returned is a copy of it as read from storage before the run: the next
        item of the drain reads only what was appended since.

        An infrastructure error (Redis gone, the lease lost) is raised, not recorded: the item
        stays claimed and whoever takes the session next works on it again, from the log.
        """
        if loaded is None:
            loaded = await self.store.load(key[0], item.invocation_id)
        record, cancelled, results, session = loaded
        if session is not None:
            earlier = _stored_copy(session)
        if record is None:
            logger.warning("Work item for unknown invocation %r dropped", item.invocation_id)
            return None, earlier
        if record.status.is_finished:
            return None, earlier
        if item.kind == "cancel" or cancelled:
            return await self._cancel(key, token, record, session, earlier)
        if item.kind == "session_deleted":  # queued by the delete: it can never go on
            record.pending_calls, record.pending_tools, record.inside_calls = [], {}, []
            return _failed(record, f"SessionNotFoundError: {session_deleted(record)}"), earlier
        runner = self._runners.get(record.app_name)
        if runner is None:
            return _failed(record, f"UnknownAppError: unknown app {record.app_name!r}; this "
                                   f"orchestrator serves: {', '.join(self.registry.names) or 'none'}."
                           ), earlier
        try:
            if session is None:
                session = await self._read_session(record, earlier)
                earlier = _stored_copy(session) if session is not None else None
            writer, save_with_commit = self._writer(key, token, record)
            plan = await plan_item(self, runner, record, item, results, session, writer)
            if plan.is_empty:
                # An answer that leaves the invocation waiting for the other calls of its turn
                # still gets a status of its own: whoever sent it and waits sees it taken.
                answered = item.kind == "resume" and record.status is InvocationStatus.PAUSED \
                    and any(r.answered for cid, r in results.items() if cid in record.pending_calls)
                return (_ended(record, InvocationStatus.PAUSED) if answered else None), earlier
            failpoints.hit("orchestrator.before_run")
            ended = await self._drive(record, plan, save_with_commit, session, writer)
            failpoints.hit(f"orchestrator.{item.kind}.before_save")
            return ended, earlier
        except InvocationCancelledError:
            # A commit before the run found the cancel flag: the cancel's own work item,
            # queued behind this one, ends the invocation.
            return None, earlier
        except Exception as error:
            if is_infrastructure_error(error):
                raise
            logger.info("Invocation %r failed: %r", record.invocation_id, error)
            return _failed(record, error_text(error)), earlier

    async def _cancel(
        self, key: SessionKey, token: str, record: InvocationRecord, session: Session | None,
        earlier: Session | None,
    ) -> tuple[InvocationRecord, Session | None]:
        """End the invocation cancelled, its open calls sealed (see :mod:`.cancel_seals`)."""
        # The flag is what workers read (a queued job skipped, a running async tool or branch
        # stopped, no lost job sent again): set here too, for a cancel whose requester died
        # between queuing this item and setting it. Setting it again changes nothing.
        await self.store.request_cancel(record.app_name, record.invocation_id)
        if record.status is not InvocationStatus.QUEUED:  # it ran: it may leave calls open
            if session is None:
                session = await self._read_session(record, earlier)
                earlier = _stored_copy(session) if session is not None else None
            if session is not None:
                writer, _ = self._writer(key, token, record)
                await seal(CallLedger.of(session.events, record.invocation_id), session, writer)
        record.pending_calls, record.pending_tools, record.inside_calls = [], {}, []
        return _ended(record, InvocationStatus.CANCELLED), earlier

    def _writer(
        self, key: SessionKey, token: str, record: InvocationRecord
    ) -> tuple[SessionWriter, SaveWithNextCommit | None]:
        """What commits the events of this piece of work (see :data:`WriterFactory`)."""
        if self.writer_for is None:
            return self.session_service, None
        return self.writer_for(key, token, record)

    async def _read_session(self, record: InvocationRecord, earlier: Session | None) -> Session | None:
        """The record's session as stored, reading only what came after ``earlier`` if given."""
        if earlier is not None and earlier.id == record.session_id:
            return await self.session_service.reread_session(earlier)
        return await self.session_service.get_session(
            app_name=record.app_name, user_id=record.user_id, session_id=record.session_id)

    async def _drive(
        self, record: InvocationRecord, plan: Plan, save_with_commit: SaveWithNextCommit | None,
        session: Session | None, writer: SessionWriter,
    ) -> InvocationRecord:
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
                await self.store.save(record)
        ledger = plan.ledger
        for event in plan.prelude:
            if self.event_sink is not None:
                await self.event_sink(record, event)
        checked = time.monotonic()
        cancelled = False
        if plan.events is not None:
            retried = await self._abandoned(record, plan, session)
            try:
                with answering_as(retried):
                    async with contextlib.aclosing(plan.events):
                        async for event in plan.events:
                            if self.event_sink is not None:
                                await self.event_sink(record, event)
                            if event.partial:
                                failpoints.hit("orchestrator.chunk_published")
                                continue
                            ledger.record(event)
                            if time.monotonic() - checked > _CANCEL_CHECK_SECONDS:
                                checked = time.monotonic()
                                if await self.store.is_cancelled(
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
            failpoints.hit("orchestrator.run_cancel_sealed")  # sealed; the record not saved
        # What the invocation waits for is what its log leaves open, never a running tally.
        record.pending_calls = sorted(ledger.open)
        record.pending_tools = {cid: ledger.calls[cid].name for cid in record.pending_calls}
        record.inside_calls = answered_inside(
            self.registry, record.app_name, (ledger.calls[cid] for cid in record.pending_calls))
        if cancelled:
            status = InvocationStatus.CANCELLED
        else:
            status = InvocationStatus.PAUSED if record.pending_calls else InvocationStatus.COMPLETED
        return _ended(record, status)

    async def _abandoned(
        self, record: InvocationRecord, plan: Plan, session: Session | None
    ) -> dict[AnswerKey, str]:
        """The ids of the answers a cut-off streamed run left unfinished (none otherwise)."""
        if not (plan.recovering and record.streaming and session is not None
                and self.abandoned_chunks is not None):
            return {}
        return await self.abandoned_chunks(record, {event.id for event in session.events})


def _stored_copy(session: Session) -> Session:
    """A copy of a session just read, kept as it was stored (the run appends to the original)."""
    return session.model_copy(update={"events": list(session.events)})


def _ended(record: InvocationRecord, status: InvocationStatus) -> InvocationRecord:
    """The record with its new status, to be saved as the work item ends."""
    record.status = status
    record.updated_at = platform.get_time()
    return record


def _failed(record: InvocationRecord, error: str) -> InvocationRecord:
    record.error = error
    return _ended(record, InvocationStatus.FAILED)
