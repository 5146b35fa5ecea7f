"""A memory service keeping event contents in process memory, searched by keyword overlap."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
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

_UserKey = tuple[str, str]


def _iso_timestamp(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=UTC).isoformat()


@dataclass(frozen=True, slots=True)
class _Memory:
    """A stored memory plus the text it can be found by."""

    entry: MemoryEntry
    text: SearchableText


class InMemoryMemoryService(BaseMemoryService):
    r"""Remembers the text-bearing events of sessions, per (app, user), keyed by session.

    Search ranks memories by how many distinct query words they contain (see
    ``_keyword_match`` for the word rules: NFC, ``\w+``, case-insensitive, mixed-script words
    split, non-ASCII query words matched as substrings); ties keep ingestion order.
    Adding a session again replaces what was remembered of it (so events a rewind removed
    are forgotten), as in google-adk 2.13; an event is remembered once, and deleted memory
    ids are never re-ingested.
    """

    def __init__(self, *, max_results: int = DEFAULT_MAX_RESULTS) -> None:
        self._max_results = max_results
        self._memories: dict[_UserKey, dict[str | None, dict[str, _Memory]]] = {}
        self._deleted: dict[_UserKey, set[str]] = {}

    async def add_session_to_memory(self, session: Session) -> None:
        """Remember the session's events with content, replacing what was known of it."""
        key = (session.app_name, session.user_id)
        # Emptied in place rather than dropped, so the session keeps its place in search ties.
        self._memories.setdefault(key, {})[session.id] = {}
        self._ingest(key, session.id, session.events, custom_metadata=None)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Ingest a delta of events, tagging each new memory with ``custom_metadata``."""
        self._ingest((app_name, user_id), session_id, events, custom_metadata=custom_metadata)

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        """Return up to ``max_results`` memories sharing words with ``query``, best first."""
        words = query_words(query)
        if not words:
            return SearchMemoryResponse()
        scored = [
            (memory.text.match_count(words), memory)
            for memory in self._iter_memories((app_name, user_id))
        ]
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
        """Forget a memory and make sure that id is never ingested again (None: nothing)."""
        if not memory_id:
            return
        key = (app_name, user_id)
        self._deleted.setdefault(key, set()).add(memory_id)
        for bucket in self._memories.get(key, {}).values():
            bucket.pop(memory_id, None)

    def _iter_memories(self, key: _UserKey) -> Iterator[_Memory]:
        for bucket in self._memories.get(key, {}).values():
            yield from bucket.values()

    def _ingest(
        self,
        key: _UserKey,
        session_id: str | None,
        events: Iterable[Event],
        *,
        custom_metadata: Mapping[str, Any] | None,
    ) -> None:
        deleted = self._deleted.get(key, set())
        known = {memory.entry.id for memory in self._iter_memories(key)}
        bucket = self._memories.setdefault(key, {}).setdefault(session_id, {})
        for event in events:
            content = event.content
            if not content or not content.parts or event.partial or not event.id:
                continue
            if event.id in deleted or event.id in known:
                continue
            text = " ".join(part.text for part in content.parts if part.text)
            entry = MemoryEntry(
                content=content.model_copy(deep=True),
                custom_metadata=copy.deepcopy(dict(custom_metadata or {})),
                id=event.id,
                author=event.author or None,
                timestamp=_iso_timestamp(event.timestamp),
            )
            bucket[event.id] = _Memory(entry=entry, text=SearchableText.of(text))
            known.add(event.id)
