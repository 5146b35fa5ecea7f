"""Lists of invocations, a page at a time: what a query asks, its checks, and its cursor.

Two lists, answered the same way by the in-memory and the Redis invocation stores:

- the invocations of one session (app, user, session), newest first (by ``created_at``);
- the invocations of an app, of one status or of all, most recently updated first (by the
  time their record was last saved).

A page holds at most ``limit`` records and, when more follow, an opaque cursor naming the
last one; the next page starts after it. Records that change while a client pages move
within or between lists: a page never shows a record twice, but a record updated meanwhile
may move behind the cursor and be left out of that pass.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.errors import RequestError

if TYPE_CHECKING:
    from orchestrator.distributed.intake import Limits

DEFAULT_LIMIT = 50
"""Records per page when the caller does not say."""

MAX_LIMIT = 500
"""The most records one page may hold."""

_BY_CREATION = "c"
_BY_UPDATE = "u"


class Position(NamedTuple):
    """Where a record sits in a list: its score (a time) and its id (ties, newest first)."""

    score: float
    invocation_id: str

    def precedes(self, score: float, invocation_id: str) -> bool:
        """True if the entry ``(score, invocation_id)`` comes after this one (newest first)."""
        return (score, invocation_id) < (self.score, self.invocation_id)


class InvocationPage(NamedTuple):
    """One page of a list: its records, and the cursor of the next page (None: the last)."""

    records: list[InvocationRecord]
    next_cursor: str | None


@dataclass(frozen=True)
class InvocationQuery:
    """A checked request for a page of invocations (build it with :func:`invocation_query`)."""

    app_name: str
    status: InvocationStatus | None = None
    """Only invocations in this status (None: every status)."""
    user_id: str | None = None
    session_id: str | None = None
    """With ``user_id``: that session's invocations only, newest first."""
    limit: int = DEFAULT_LIMIT
    after: Position | None = None
    """The last record of the previous page (from its cursor)."""

    @property
    def of_session(self) -> bool:
        """True for a session's list (ordered by creation), False for the app's (by update)."""
        return self.session_id is not None

    def cursor(self, position: Position) -> str:
        """The opaque cursor of the page that follows ``position``."""
        kind = _BY_CREATION if self.of_session else _BY_UPDATE
        raw = json.dumps([kind, position.score, position.invocation_id], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    def page(self, entries: list[tuple[Position, InvocationRecord]]) -> InvocationPage:
        """The page made of ``entries`` (in list order, up to ``limit + 1`` of them)."""
        shown = entries[: self.limit]
        more = len(entries) > self.limit
        return InvocationPage([record for _, record in shown],
                              self.cursor(shown[-1][0]) if more and shown else None)


def invocation_query(
    app_name: object, *, status: object = None, user_id: object = None,
    session_id: object = None, limit: object = DEFAULT_LIMIT, cursor: object = None,
    limits: Limits | None = None,
) -> InvocationQuery:
    """Check a list request; RequestError naming the field if something is wrong.

    ``user_id`` and ``session_id`` go together (a session belongs to one user); ``status`` is
    a status value (``paused``, ...); ``limit`` is 1 to :data:`MAX_LIMIT`; ``cursor`` is the
    ``next_cursor`` of a page of the same list.
    """
    # Here, not on load: intake imports google-genai, which `adk-celery invocations --help` does not need.
    from orchestrator.distributed.intake import Limits, check_identifier, check_optional_identifier

    limits = limits or Limits()
    app = check_identifier("app_name", app_name, limits)
    user = check_optional_identifier("user_id", user_id, limits)
    session = check_optional_identifier("session_id", session_id, limits)
    if (user is None) != (session is None):
        missing = "session_id" if session is None else "user_id"
        raise RequestError(missing, "is required: a session's invocations are listed by user "
                                    "and session id together.")
    wanted: InvocationStatus | None = None
    if status is not None:
        try:
            wanted = InvocationStatus(status)
        except ValueError:
            names = ", ".join(s.value for s in InvocationStatus)
            raise RequestError("status", f"must be one of {names}, not {str(status)[:40]!r}.") from None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise RequestError("limit", f"must be a whole number from 1 to {MAX_LIMIT}.")
    query = InvocationQuery(app, wanted, user, session, limit)
    if cursor is None:
        return query
    return InvocationQuery(app, wanted, user, session, limit, _decode(cursor, query.of_session))


def _decode(cursor: object, of_session: bool) -> Position:
    """The position a cursor names; RequestError if it is not one this list returned."""
    refused = RequestError("cursor", "is not a cursor this list returned (pass the previous "
                                     "page's next cursor unchanged).")
    if not isinstance(cursor, str) or len(cursor) > 1024:
        raise refused
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        kind, score, invocation_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise refused from None
    expected = _BY_CREATION if of_session else _BY_UPDATE
    if (kind != expected or isinstance(score, bool) or not isinstance(score, int | float)
            or not math.isfinite(score) or not isinstance(invocation_id, str)):
        raise refused
    return Position(float(score), invocation_id)


def page_of(query: InvocationQuery,
            entries: Iterable[tuple[Position, InvocationRecord]]) -> InvocationPage:
    """The page ``query`` asks for among ``entries`` (every candidate, in any order).

    For stores that hold all their records at hand (in memory): filters by status and
    cursor, orders newest first, and cuts the page.
    """
    chosen = sorted(
        ((position, record) for position, record in entries
         if (query.status is None or record.status is query.status)
         and (query.after is None or query.after.precedes(*position))),
        key=lambda entry: entry[0], reverse=True,
    )
    return query.page(chosen[: query.limit + 1])
