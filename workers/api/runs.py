"""How ``/run`` and ``/run_sse`` follow a run: to its end, or to a pause for an outside answer.

A run ends when its invocation ends, or pauses for an answer from outside (a human's, another
service's). A pause while workers run its remote tools is not an end, as a long-running tool
that returns a value does not end ADK's run either. A tool on a worker that leaves its call
to an outside answer says so on the stream (a ``waiting`` entry, written with its pending
placeholder): a run paused on that call ends as soon as it reads it, with no look in Redis
and no polling. Whether a pause waits for outside from the start (a call that no worker
runs) can only be seen in Redis (jobs out, answers stored), so a run that pauses and hears
nothing more for :data:`_FIRST_LOOK_SECONDS` looks once (one round trip), and keeps
following meanwhile.

A run decides on a pause with that pause's own record, never a later one. The status
stream's entries carry it (unless large); the live stream's do not, and the record read
then may be a later pause's: the run went on meanwhile (the call answered, the model's next
call left to outside), and the reader has not had those entries yet. So the record is read
together with the entries past those the run has (one transaction, in the round trip that
read the record alone), and they go out before the run decides on the pause they end with,
which is the record's own (saved with its status entry in one script). A pause that news
soon ends reads nothing: the record is read only when the look is due or a call was left
to outside.

The events go out as the live stream holds them (ADK's wire JSON), with no parse into an
``Event`` and back: ``/run``'s body is their JSON joined as it is, never encoded again (each
is decoded only to leave the user's message out). ``/run``, which answers once the run is
over, follows only the status changes (the status stream) and gets the events along with
the finished status (the stream reader reads them in the same exchange with Redis), or
reads them once after a pause for an outside answer; ``/run_sse`` follows every event as it
comes.

A run that was accepted (its invocation stored and queued, or its answer stored) is followed
through a Redis outage, however long, for as long as its client stays: the stream reader
reads again from where each follower stands once Redis is back, and every read of the run's
own is made again (:class:`_Outage`). Ending it on an outage would be an error its client
would take for "not run" and send again: the invocation goes on and finishes all the same,
and the turn would run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from orchestrator import platform
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.invocation_store import queue_waits_for_outside, waits_for_outside_in
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from workers.api.backend import Backend
from workers.api.outages import is_outage
from workers.api.stream_hub import StreamHub
from workers.api.watches import LiveItem, Watch

_FIRST_LOOK_SECONDS = 0.025
"""How long after a pause a run first looks whether it waits for an answer from outside, if
nothing came meanwhile. A call that a worker runs quickly resumes the run within a few
milliseconds, and looking sooner would cost a round trip to Redis, and the server's CPU,
just as the worker needs the machine: 0.1–0.3 ms of each such run on two busy cores.
A run that ends at a pause on a call that no worker runs (answered by a person or another
service, which take seconds) answers this much later; a worker's placeholder ends it at once."""
_OUTAGE_PAUSE_SECONDS = 0.5
"""Pause before a read of an accepted run that found Redis out of reach is made again (each
attempt already rides out several seconds of outage: this only bounds how often it tries)."""

logger = logging.getLogger(__name__)
T = TypeVar("T")


class RunFailedError(Exception):
    """The invocation of a ``/run`` failed; the message says why."""


async def run_events(backend: Backend, record: InvocationRecord, *, partial: bool,
                     after: str | None = None,
                     live: bool = True) -> AsyncIterator[dict[str, Any] | Exception]:
    """The run's events (wire JSON, without the user's message), then its end; see :func:`run_items`."""
    async for item in run_items(backend, record, partial=partial, after=after, live=live):
        yield item if isinstance(item, Exception) else item.wire or {}


@contextlib.asynccontextmanager
async def enqueued(backend: Backend, fields: dict[str, Any]
                   ) -> AsyncIterator[tuple[InvocationRecord, Watch]]:
    """Enqueue a run for an existing session, its status stream watched from before (``/run``).

    The stream reader's wake-up and a look at where the status stream stands ride in the
    enqueue's own transaction (:class:`_StartOfFollow`): no command of their own, and a
    new invocation is followed from its ``queued`` entry on, without a read for that one.
    Yields the record (a refused one too) and the watch, for :func:`run_body`.
    """
    invocation_id = fields.get("invocation_id") or platform.new_invocation_id()
    app_name = fields["app_name"]
    hub = await backend.hub()
    async with hub.watch(app_name, invocation_id, statuses=True, wake=False) as watch:
        start = _StartOfFollow(hub, keys.invocation_statuses(app_name, invocation_id))
        record = await backend.enqueue({**fields, "invocation_id": invocation_id},
                                       session_must_exist=True, rider=start)
        # A repeated id of an invocation that went on is followed from its first status.
        if record.status is InvocationStatus.QUEUED and start.latest is not None:
            watch.skip_to(start.latest)
        yield record, watch


class _StartOfFollow:
    """Rides an enqueue's transaction: the reader's wake-up, the status stream's last entry."""

    def __init__(self, hub: StreamHub, statuses_key: str) -> None:
        self._hub = hub
        self._key = statuses_key
        self.latest: str | None = None
        """The id of the status stream's last entry when the enqueue ran (None: none)."""

    def queue(self, pipe: Any) -> None:
        self._hub.queue_wake(pipe)
        pipe.xrevrange(self._key, count=1)

    def took(self, replies: list[Any]) -> None:
        last = replies[-1] if replies else None
        self.latest = last[0][0] if isinstance(last, list) and last else None


async def run_body(backend: Backend, record: InvocationRecord, *, after: str | None = None,
                   watch: Watch | None = None) -> bytes:
    """``/run``'s answer: the JSON array of the run's events, joined as the stream holds them.

    ``watch``: the run's status stream as :func:`enqueued` watches it. RunFailedError
    saying why if the invocation failed.
    """
    shown: list[str] = []
    async for item in run_items(backend, record, partial=False, after=after, live=False,
                                watch=watch):
        if isinstance(item, Exception):
            raise RunFailedError(str(item))
        shown.append(item.json or "{}")
    return f"[{','.join(shown)}]".encode()


async def run_items(backend: Backend, record: InvocationRecord, *, partial: bool,
                    after: str | None = None, live: bool = True,
                    watch: Watch | None = None) -> AsyncIterator[LiveItem | Exception]:
    """The run's event entries (without the user's message, as ADK's runner), then its end.

    ``partial``: streaming chunks too. ``after``: follow after that stream entry (a resumed
    run). ``live``: hand each event out as it is committed (``/run_sse``); else (``/run``)
    only the invocation's status changes are followed, and its events are had once when
    the run ends (fewer wake-ups: a run has about twice as many events as status changes).
    ``watch``: the status stream watched already (:func:`enqueued`). A failed invocation
    ends with a RuntimeError (yielded) saying why.
    """
    at_the_end = watch is not None or (not live and after is None)  # resumed: live
    ended: LiveItem | None = None  # the finished status, if the run ends with one
    outage = _Outage(record)
    async with _watching(backend, record, after, at_the_end, watch) as watch:
        pause = _Pause(asyncio.get_running_loop())
        while ended is None:
            try:
                items, at_end = await watch.read(pause.wait())
            except TimeoutError:  # still paused, and nothing came: look
                items, at_end = [], True
            except Exception as error:
                # The reader could not read: it reads again, from where this watch stands.
                if not outage.met(error):
                    raise
                continue
            outage.over()
            shown, ended = _taken(items, pause, partial)
            for item in shown:
                yield item
            if ended is None and at_end and pause.needs_record():
                # The record as it is now may be a later pause's (the run went on meanwhile):
                # read with it every entry up to its own status entry, show them, and decide
                # on the pause it describes.
                paused, ahead = await _read_on(backend, record, watch, outage)
                shown, ended = _taken(ahead, pause, partial)
                for item in shown:
                    yield item
                pause.read(paused)
            if ended is None and at_end and await pause.waits_for_outside(backend, outage):
                break
    if at_the_end:
        # Read by the stream reader along with the finished status (else, after a pause for
        # an outside answer, once here).
        events = watch.events
        if events is None:
            events = await outage.again(lambda: _committed(backend, record))
        for item in events:
            if _shown(item, partial):
                yield item
    if ended is not None and ended.status is InvocationStatus.FAILED:
        final = ended.record or await outage.again(
            lambda: backend.record(record.app_name, record.invocation_id))
        yield RuntimeError(final.error or "the invocation failed")


class _Outage:
    """An accepted run's reads through a Redis outage: made again until Redis answers.

    Its client waits on (the request holds it, and ends it when the client goes): the
    invocation goes on meanwhile, or waits for Redis as this does. Logged once an outage.
    """

    def __init__(self, record: InvocationRecord) -> None:
        self._record = record
        self._told = False

    def met(self, error: BaseException) -> bool:
        """Whether ``error`` is an outage to ride out (logged at its first)."""
        if not is_outage(error):
            return False
        if not self._told:
            self._told = True
            logger.warning("Run %s: Redis unavailable (%s: %s); the run was accepted: following "
                           "it on once Redis is back", self._record.invocation_id,
                           type(error).__name__, error)
        return True

    def over(self) -> None:
        """A read went through: a later outage is logged again."""
        self._told = False

    async def again(self, read: Callable[[], Awaitable[T]]) -> T:
        """``read()``'s result, made again after each outage until Redis answers."""
        while True:
            try:
                result = await read()
            except Exception as error:
                if not self.met(error):
                    raise
                await asyncio.sleep(_OUTAGE_PAUSE_SECONDS)
                continue
            self.over()
            return result


def _taken(items: list[LiveItem], pause: _Pause, partial: bool
           ) -> tuple[list[LiveItem], LiveItem | None]:
    """Entries read, told to ``pause``: the events the run shows, and its finished status.

    The status is None if none came; the entries after it are left.
    """
    shown: list[LiveItem] = []
    for item in items:
        if item.kind == "progress":  # a tool's report changes nothing of the pause
            continue
        pause.saw(item)
        if item.kind == "event":
            if _shown(item, partial):
                shown.append(item)
        elif item.status is not None and item.status.is_finished:
            return shown, item
    return shown, None


class _Pause:
    """The pause a run's stream ends with, if it does, and whether it waits for outside.

    What it waits for is read in the pause's own record, never in a later one: a run that
    went on meanwhile may be paused on other calls (the first answered, the model's next
    call left to outside), and the entries up to that later pause not yet shown.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pause: LiveItem | None = None
        self._record: InvocationRecord | None = None
        """The pause's own record: from its status entry (the status stream's carry it,
        unless large), or read with every entry up to that one (:meth:`read`)."""
        self._look_at: float | None = None
        """When to look in Redis whether the pause waits for outside (loop time); None: no
        look due."""
        self._left_outside: set[str] = set()
        """Calls that a worker's tool left to an outside answer (``waiting`` entries)."""

    def wait(self) -> float | None:
        """How long to wait for the next entries before looking (None: as long as it takes)."""
        return None if self._look_at is None else max(self._look_at - self._loop.time(), 0.0)

    def saw(self, item: LiveItem) -> None:
        """An entry came: a pause, a call left to an outside answer, or news that ends the pause."""
        if item.kind == "waiting":  # says what the pause waits for; ends nothing
            self._left_outside.add(item.call or "")
        elif item.status is InvocationStatus.PAUSED:
            self._pause, self._record = item, item.record
            self._look_at = self._loop.time() + _FIRST_LOOK_SECONDS
        else:
            self._pause = self._record = self._look_at = None

    def needs_record(self) -> bool:
        """At the stream's end: whether deciding on the pause needs its record, not had yet.

        Only once a call was left to outside (its entry may be one of the pause's calls) or
        the look is due: a pause that a worker's answer soon ends costs no read.
        """
        return self._pause is not None and self._record is None and (
            bool(self._left_outside) or self._look_due())

    def read(self, record: InvocationRecord) -> None:
        """The record, read with every entry up to its status entry, all of them :meth:`saw`.

        The stream's last status entry then is the record's: the pause's own, if it still
        stands (an entry that ended it left none).
        """
        if self._pause is not None:
            self._record = record

    async def waits_for_outside(self, backend: Backend, outage: _Outage) -> bool:
        """At the stream's end: whether the run ends at its pause (the pause waits for outside).

        A ``waiting`` entry for one of the pause's calls says so at once. Otherwise, once
        :data:`_FIRST_LOOK_SECONDS` have passed without news, one look in Redis finds a
        call that no worker runs, or a placeholder whose entry came before the place this
        run follows from. After that look every change comes on the stream (an answer's
        resume, a placeholder's ``waiting`` entry): no look again. Decided on the pause's
        own record only (:meth:`needs_record` says when to read it).
        """
        paused = self._record
        if self._pause is None or paused is None:
            return False
        if self._left_outside.intersection(paused.pending_calls):
            return True
        if not self._look_due():
            return False
        self._look_at = None
        return await outage.again(lambda: _waits_for_outside(backend, paused))

    def _look_due(self) -> bool:
        return self._look_at is not None and self._loop.time() >= self._look_at


@contextlib.asynccontextmanager
async def _watching(backend: Backend, record: InvocationRecord, after: str | None,
                    statuses: bool, watch: Watch | None) -> AsyncIterator[Watch]:
    """``watch``, or a watch of the run's stream (its status stream with ``statuses``)."""
    if watch is not None:
        yield watch
        return
    hub = await backend.hub()
    async with hub.watch(record.app_name, record.invocation_id, after, statuses=statuses) as opened:
        yield opened


def _shown(item: LiveItem, partial: bool) -> bool:
    """An event the run shows: not the user's message, a chunk only when streaming."""
    wire = item.wire
    return wire is not None and wire.get("author") != "user" and (partial or not item.partial)


async def _committed(backend: Backend, record: InvocationRecord) -> list[LiveItem]:
    """Every event of the invocation's live stream so far (one read, batched with others)."""
    key = keys.invocation_stream(record.app_name, record.invocation_id)
    entries, = await (await backend.batcher()).run(lambda pipe: pipe.xrange(key))
    return [item for entry_id, fields in entries if fields.get("kind") == "event"
            and (item := LiveItem.parse(entry_id, fields)) is not None]


async def _read_on(backend: Backend, record: InvocationRecord, watch: Watch, outage: _Outage
                   ) -> tuple[InvocationRecord, list[LiveItem]]:
    """The invocation's record, and the watched stream's entries past those its follower has.

    Read together (one transaction): the record is saved with its status entry in one
    script, so the last status among what the follower then has is the record's own. The
    watch follows on after them (:meth:`Watch.caught_up`).
    """
    record_key = keys.invocation(record.app_name, record.invocation_id)
    start = watch.read_to
    transactions = await backend.transactions()
    raw, entries = await outage.again(lambda: transactions.run(
        lambda pipe: (pipe.hget(record_key, "record"), pipe.xrange(watch.key, start))))
    # XRANGE's start is inclusive (an exclusive one needs Redis 6.2).
    entries = [(entry_id, fields) for entry_id, fields in entries if entry_id != start]
    if entries:
        watch.caught_up(entries[-1][0])
    # A record gone (expired) is the 404 Backend.record says.
    current = (InvocationRecord.model_validate_json(raw) if raw else await outage.again(
        lambda: backend.record(record.app_name, record.invocation_id)))
    return current, [item for entry_id, fields in entries
                     if (item := LiveItem.parse(entry_id, fields)) is not None]


async def _waits_for_outside(backend: Backend, pause: InvocationRecord) -> bool:
    """Whether the pause waits for an answer from outside (one read, batched with others)."""
    if not pause.pending_calls:
        return False
    replies = await (await backend.batcher()).run(lambda pipe: queue_waits_for_outside(pipe, pause))
    return waits_for_outside_in(replies)
