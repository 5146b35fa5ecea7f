"""A memory service keeping event contents in process memory, searched by keyword overlap."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.memory._keyword_match import SearchableText, query_words
from orchestrator.memory.base_memory_service import (
    BaseMemoryService,
    MemoryEntry,
    SearchMemoryResponse,
)

if TYPE_CHECKING:
    from orchestrator.events.event import Event
    from orchestrator.sessions.session import Session

DEFAULT_MAX_RESULTS = 10
"""How many memories a search returns at most, unless configured otherwise."""

_NO_SESSION = "__unknown_session_id__"
"""The bucket of events added without a session id (google-adk's name for it, so a session
really called that shares it, as there)."""

_UserKey = tuple[str, str]


def _iso_timestamp(timestamp: float) -> str:
    # UTC with its offset, on purpose (google-adk: the server's local time without one); the
    # README's compatibility notes say so.
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()


@dataclass(frozen=True, slots=True)
class _Memory:
    """A stored memory plus the text it can be found by."""

    entry: MemoryEntry
    text: SearchableText


def _remembered(events: Iterable[Event], skip_ids: set[str]) -> list[_Memory]:
    """The memories of ``events`` that have content parts and whose ids are not skipped."""
    memories: list[_Memory] = []
    for event in events:
        content = event.content
        # Partial (streamed) events are remembered too, as in google-adk.
        if not content or not content.parts or event.id in skip_ids:
            continue
        text = " ".join(part.text for part in content.parts if part.text)
        entry = MemoryEntry(
            content=content.model_copy(deep=True),
            id=event.id,
            author=event.author,
            timestamp=_iso_timestamp(event.timestamp),
        )
        memories.append(_Memory(entry=entry, text=SearchableText.of(text)))
    return memories


class InMemoryMemoryService(BaseMemoryService):
    r"""Remembers the content-bearing events of sessions, per (app, user), keyed by session.

    Search ranks memories by how many distinct query words they contain (see
    ``_keyword_match`` for the word rules: NFC, ``\w+``, case-insensitive, mixed-script words
    split, non-ASCII query words matched as substrings); ties keep ingestion order.

    As in google-adk 2.13: adding a session replaces what was remembered of it (so events a
    rewind removed are forgotten); ``add_events_to_memory`` only appends events not yet in
    that session's memories (events without a session id share one bucket); the same event
    remembered under two sessions is found twice; ``custom_metadata`` is not stored; a
    deleted memory is never ingested again, while deleting an id not remembered records
    nothing. It is thread-safe.
    """

    def __init__(self, *, max_results: int = DEFAULT_MAX_RESULTS) -> None:
        self._max_results = max_results
        # Thread-safe, as google-adk's: a service may be shared by runners on several threads
        # (or reached from a sync tool's own event loop on a worker thread).
        self._lock = threading.Lock()
        self._memories: dict[_UserKey, dict[str, list[_Memory]]] = {}
        self._deleted: dict[_UserKey, set[str]] = {}

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember the session's events with content, replacing what was known of it."""
        key = (session.app_name, session.user_id)
        with self._lock:
            memories = _remembered(session.events, self._deleted.get(key, set()))
            # Set over the old list: the session keeps its place among equally good matches.
            self._memories.setdefault(key, {})[session.id] = memories

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Append the events not yet remembered for that session (``custom_metadata``: unused)."""
        del custom_metadata  # google-adk's in-memory service ignores it too
        key = (app_name, user_id)
        with self._lock:
            bucket = self._memories.setdefault(key, {}).setdefault(session_id or _NO_SESSION, [])
            skip = self._deleted.get(key, set()) | {memory.entry.id or "" for memory in bucket}
            for memory in _remembered(events, skip):
                # Ids within one delta are skipped once seen, too.
                if memory.entry.id not in skip:
                    bucket.append(memory)
                    skip.add(memory.entry.id or "")

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """Return up to ``max_results`` memories sharing words with ``query``, best first."""
        words = query_words(query)
        if not words:
            return SearchMemoryResponse()
        with self._lock:
            # A snapshot: a writer on another thread may replace or grow the lists meanwhile.
            memories = [
                memory
                for bucket in self._memories.get((app_name, user_id), {}).values()
                for memory in bucket
            ]
        scored = [(memory.text.match_count(words), memory) for memory in memories]
        # A stable sort on the count alone keeps equally good memories in ingestion order.
        ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: -item[0])
        return SearchMemoryResponse(
            memories=[
                memory.entry.model_copy(deep=True) for _, memory in ranked[: self._max_results]
            ]
        )

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Forget a remembered memory for good (an id not remembered, or None: nothing)."""
        if not memory_id:
            return
        key = (app_name, user_id)
        with self._lock:
            buckets = self._memories.get(key, {})
            for session_id, bucket in buckets.items():
                kept = [memory for memory in bucket if memory.entry.id != memory_id]
                if len(kept) != len(bucket):
                    buckets[session_id] = kept
                    # Only a memory actually forgotten is kept from coming back.
                    self._deleted.setdefault(key, set()).add(memory_id)
