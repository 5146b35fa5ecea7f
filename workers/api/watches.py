"""What one follower of a live stream sees: its entries (:class:`LiveItem`) and its place (:class:`Watch`).

The process's one stream reader (:mod:`workers.api.stream_hub`) reads the streams and hands
each :class:`Watch` the entries past its place; a follower waits on its watch.

Events stay the wire JSON the stream holds: ``/run`` sends that JSON on as it is; an
:class:`~orchestrator.events.event.Event` is parsed only for a follower that asks for one.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from orchestrator.backends.redis.streams import parse_entry
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.streams import Progress
from orchestrator.events.event import Event


def position_of(entry_id: str) -> tuple[int, int]:
    """A stream entry id (``<ms>-<seq>``) as a pair that orders as the stream does."""
    milliseconds, _, sequence = entry_id.partition("-")
    return int(milliseconds), int(sequence or 0)


class LiveItem:
    """One entry of an invocation's live stream, as :class:`StreamItem` but parsed on demand.

    ``kind`` is ``event``, ``status``, ``progress`` or ``waiting`` (a call left to an answer
    from outside: see :mod:`orchestrator.distributed.streams`); :attr:`wire` is an event's
    JSON as the stream holds it (ADK's wire form), :attr:`event` that event parsed.
    """

    __slots__ = ("_event", "_event_json", "_record", "_record_json", "_wire", "call", "entry_id",
                 "kind", "partial", "position", "progress", "status")

    def __init__(self, entry_id: str, kind: Literal["event", "status", "progress", "waiting"], *,
                 event_json: str | None = None, partial: bool = False,
                 status: InvocationStatus | None = None, record_json: str | None = None,
                 progress: Progress | None = None, call: str | None = None) -> None:
        self.entry_id = entry_id
        """Its id in the stream, to resume after it."""
        self.position = position_of(entry_id)
        self.kind = kind
        self.partial = partial
        """True for a streaming chunk (never stored in the session)."""
        self.status = status
        """The invocation's new status (``kind == "status"``)."""
        self.progress = progress
        """A remote call's progress report (``kind == "progress"``)."""
        self.call = call
        """The call now waiting for an answer from outside (``kind == "waiting"``)."""
        self._event_json = event_json
        self._record_json = record_json
        self._wire: dict[str, Any] | None = None
        self._event: Event | None = None
        self._record: InvocationRecord | None = None

    @classmethod
    def parse(cls, entry_id: str, fields: dict[str, str]) -> LiveItem | None:
        """The item of one stream entry; None for kinds this version does not know."""
        if fields.get("kind") == "event" and "event" in fields:
            raw = fields["event"]
            partial = (fields["partial"] == "1" if "partial" in fields
                       else bool(json.loads(raw).get("partial")))
            return cls(entry_id, "event", event_json=raw, partial=partial)
        if fields.get("kind") == "waiting" and "call" in fields:
            return cls(entry_id, "waiting", call=fields["call"])
        item = parse_entry(fields)
        if item is None or item.kind == "event":
            return None
        return cls(entry_id, item.kind, status=item.status, progress=item.progress,
                   record_json=fields.get("record") if item.kind == "status" else None)

    @property
    def json(self) -> str | None:
        """The event's wire JSON as the stream holds it; None if no event."""
        return self._event_json

    @property
    def wire(self) -> dict[str, Any] | None:
        """The event as ADK's API server writes it (camelCase, no nulls); None if no event."""
        if self._wire is None and self._event_json is not None:
            self._wire = json.loads(self._event_json)
        return self._wire

    @property
    def event(self) -> Event | None:
        """The event, parsed (``kind == "event"``)."""
        if self._event is None and self._event_json is not None:
            self._event = Event.from_wire(self._event_json)
        return self._event

    @property
    def record(self) -> InvocationRecord | None:
        """The record as saved with a status entry (None if the entry has none)."""
        if self._record is None and self._record_json:
            self._record = InvocationRecord.model_validate_json(self._record_json)
        return self._record


class Watch:
    """One follower's place in one invocation's stream: what came after :attr:`last_id`.

    ``events_key``: with a status stream watched, the invocation's own stream; when a
    finished status comes the reader reads its events too, in the same exchange with Redis
    as its next read, and wakes the watch with both (:attr:`events`).
    """

    def __init__(self, key: str, last_id: str, *, events_key: str | None = None) -> None:
        self.key = key
        self.events_key = events_key
        self.events: list[LiveItem] | None = None
        """The invocation's events, read once its finished status came (``events_key``)."""
        self._waits_for_events = False
        self.last_id = last_id
        """The last entry handed to this watch (``0-0``: none yet)."""
        self.position = position_of(last_id)
        self.read_to = last_id
        """The last entry its follower has (handed out by :meth:`read`, or read on its own:
        :meth:`caught_up`); those after it, up to :attr:`last_id`, wait to be read."""
        self._items: list[LiveItem] = []
        self._at_end = False
        self._end_seen = True
        """Whether the last :meth:`read` ended at the stream's end (nothing to tell then)."""
        self._error: BaseException | None = None
        self._ready = asyncio.Event()

    def deliver(self, items: list[LiveItem], last_id: str | None, last: tuple[int, int] | None,
                at_end: bool) -> bool:
        """Entries read from this watch's position or before: keep those past it.

        ``last_id``: the last entry read (unknown kinds included), at position ``last``;
        ``at_end``: the read reached the end of the stream. True if the watch now waits for
        its events (``events_key``: see :meth:`take_events`) before it wakes.
        """
        if last is not None and last > self.position:
            new = [item for item in items if item.position > self.position]
            self._items += new
            self.last_id, self.position = last_id or self.last_id, last  # last_id is set with last
            if self.events_key is not None and self.events is None and any(
                    item.status is not None and item.status.is_finished for item in new):
                self._waits_for_events = True
        self._at_end = at_end
        if self._waits_for_events:
            return True
        if self._items or (at_end and not self._end_seen):
            self._ready.set()
        return False

    def take_events(self, events: list[LiveItem] | None) -> None:
        """The invocation's events, read after its finished status (None: that read failed)."""
        self.events = events
        self._waits_for_events = False
        self._ready.set()

    def skip_to(self, entry_id: str) -> None:
        """Follow on after entry ``entry_id`` (what came before it is dropped)."""
        position = position_of(entry_id)
        if position > self.position:
            self.last_id, self.position = entry_id, position
            self._items = [item for item in self._items if item.position > position]

    def caught_up(self, entry_id: str) -> None:
        """Its follower read the entries up to ``entry_id`` on its own: follow on after them.

        Those of them handed to the watch meanwhile are dropped, not read twice.
        """
        position = position_of(entry_id)
        self._items = [item for item in self._items if item.position > position]
        self.read_to = entry_id
        if position > self.position:
            self.last_id, self.position = entry_id, position

    def fail(self, error: BaseException) -> None:
        """The reader could not read: the next :meth:`read` raises ``error``."""
        self._error = error
        self._ready.set()

    async def read(self, timeout: float | None = None) -> tuple[list[LiveItem], bool]:
        """The entries that came since the last read (waiting for one), and ``at_end``.

        ``at_end``: the last of them was the stream's latest entry when read. Also returns,
        with no entries, once the end of a stream read in several parts is reached.
        TimeoutError after ``timeout`` seconds without either.
        """
        if not self._ready.is_set():
            await asyncio.wait_for(self._ready.wait(), timeout)
        if self._error is not None:
            error, self._error = self._error, None
            if not self._items and not (self._at_end and not self._end_seen):
                # The failure was all there was to tell: the next read waits for the reader's
                # next one (its follower reads again through an outage: runs.py).
                self._ready.clear()
            raise error
        items, self._items = self._items, []
        self.read_to = self.last_id
        self._ready.clear()
        self._end_seen = self._at_end
        return items, self._at_end
