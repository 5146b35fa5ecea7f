"""How a session is read from Redis: the keys and reads of one session, and their decoding.

A whole read (:func:`queue_session_reads`, :func:`session_from_replies`), or a read of what
came after a copy the caller holds (:func:`first_unread`, :func:`session_after`): events are
only ever appended, so a reader that holds a session as stored reads its newer events only.
The session service reads this way, and so does taking a session's lease with its first work
item (``session_queue``), in the same round trip. Listing an app's or a user's sessions
(:func:`list_sessions`) reads their state without events. Each session read notes the byte length of
what it was built from (:func:`~orchestrator.distributed.session_cache.note_stored_size`),
the size an orchestrator's session cache counts it as.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import decode_hash, loads, text
from orchestrator.distributed.session_cache import note_stored_size, stored_size
from orchestrator.events.event import Event
from orchestrator.sessions.base_session_service import ListSessionsResponse, merge_state
from orchestrator.sessions.session import Session


def queue_session_reads(
    pipe: Any, app_name: str, user_id: str, session_id: str, recent: int | None = None
) -> int:
    """Add the reads of one session to a pipeline; return how many replies they make."""
    meta, state, app_state, user_state, events = session_read_keys(app_name, user_id, session_id)
    for hash_key in (meta, state, app_state, user_state):
        pipe.hgetall(hash_key)
    if recent == 0:
        return 4
    pipe.lrange(events, -recent if recent else 0, -1)
    return 5


def session_read_keys(app_name: str, user_id: str, session_id: str) -> list[str]:
    """The keys a session read reads, in reply order (four hashes, then the events list)."""
    return [keys.session(app_name, user_id, session_id),
            keys.session_state(app_name, user_id, session_id),
            keys.app_state(app_name), keys.user_state(app_name, user_id),
            keys.session_events(app_name, user_id, session_id)]


def session_from_replies(
    app_name: str, user_id: str, session_id: str, replies: list[Any],
    after_timestamp: float | None = None,
) -> Session | None:
    """The session from the replies of :func:`queue_session_reads`; None if it does not exist.

    The session carries the byte length of its events and state as read (see
    :func:`~orchestrator.distributed.session_cache.stored_size`).
    """
    built = _session(app_name, user_id, session_id, replies, after_timestamp)
    if built is None:
        return None
    session, events_bytes, state_bytes = built
    return note_stored_size(session, events_bytes, state_bytes)


def _session(
    app_name: str, user_id: str, session_id: str, replies: list[Any],
    after_timestamp: float | None = None,
) -> tuple[Session, int, int] | None:
    """The session, the byte length of its events as read and that of its state."""
    meta_raw, state_raw, app_raw, user_raw = replies[:4]
    if not meta_raw:
        return None
    meta = {text(k): text(v) for k, v in meta_raw.items()}
    events, events_bytes = _parse_events(replies[4] if len(replies) > 4 else [], after_timestamp)
    session = Session.model_construct(
        id=session_id,
        app_name=app_name,
        user_id=user_id,
        state=merge_state(decode_hash(state_raw), decode_hash(app_raw), decode_hash(user_raw)),
        events=events,
        last_update_time=float(meta["last_update_time"]),
    )
    state_bytes = sum(len(k) + len(v) for raw_hash in (state_raw, app_raw, user_raw)
                      for k, v in raw_hash.items())
    return session, events_bytes, state_bytes


def first_unread(known: Session | None) -> int:
    """The index to read a session's events from, given ``known`` (a copy as stored earlier).

    ``known``'s last event (read again to check it is still there), else the first one.
    """
    return max(len(known.events) - 1, 0) if known is not None else 0


def session_after(
    known: Session, hashes: list[Any], tail: list[Any]
) -> tuple[bool, Session | None]:
    """The session from its hashes and the events read from :func:`first_unread` on.

    Events are only ever appended, so the stored list starts with ``known``'s while the
    event at its last index still has its id: then ``(True, session)``, with ``known``'s
    events (not parsed again) followed by the newer ones; None if the session is gone.
    ``(False, None)`` if the list is not what ``known`` says (the session was deleted and
    made again): read it whole.

    The session's noted size is ``known``'s events' and the newer ones', and the state just
    read; none if ``known`` has none.
    """
    if known.events and (not tail or event_id(tail[0]) != known.events[-1].id):
        return False, None
    built = _session(known.app_name, known.user_id, known.id,
                     [*hashes, tail[1:] if known.events else tail])
    if built is None:
        return True, None
    session, events_bytes, state_bytes = built
    session.events[:0] = known.events
    earlier = stored_size(known)
    if earlier is not None:
        note_stored_size(session, earlier.events + events_bytes, state_bytes)
    return True, session


def event_id(raw: Any) -> str | None:
    """The id of a stored event (its JSON), without building the Event."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value.get("id") if isinstance(value, dict) else None


def _parse_events(raw: list[Any], after_timestamp: float | None) -> tuple[list[Event], int]:
    """Parse stored events; with ``after_timestamp`` keep the suffix the in-memory store keeps.

    Walks backwards from the newest event and stops at the first one older than
    ``after_timestamp``, so only the kept events are parsed. Also returns the byte length
    of the kept events as stored.
    """
    if after_timestamp is None:
        return [Event.from_wire(item) for item in raw], sum(map(len, raw))
    kept: list[Event] = []
    kept_bytes = 0
    for item in reversed(raw):
        event = Event.from_wire(item)
        if event.timestamp < after_timestamp:
            break
        kept.append(event)
        kept_bytes += len(item)
    kept.reverse()
    return kept, kept_bytes


async def list_sessions(client: Any, app_name: str, user_id: str | None) -> ListSessionsResponse:
    """The app's sessions (of ``user_id`` when given), without events; two round trips.

    Each with its merged state; oldest update first, then by user and id (as the in-memory
    service).
    """
    async with client.pipeline(transaction=True) as pipe:
        if user_id is not None:
            pipe.zrange(keys.user_sessions(app_name, user_id), 0, -1)
        else:
            pipe.zrange(keys.app_sessions(app_name), 0, -1)
        pipe.hgetall(keys.app_state(app_name))
        members, app_raw = await pipe.execute()
    refs: list[tuple[str, str]] = []
    for member in members:
        if user_id is not None:
            refs.append((user_id, text(member)))
        else:
            user, sid = loads(member)
            refs.append((user, sid))
    if not refs:
        return ListSessionsResponse(sessions=[])
    users = sorted({user for user, _ in refs})
    async with client.pipeline(transaction=True) as pipe:
        for user in users:
            pipe.hgetall(keys.user_state(app_name, user))
        for user, sid in refs:
            pipe.hgetall(keys.session(app_name, user, sid))
            pipe.hgetall(keys.session_state(app_name, user, sid))
        replies = await pipe.execute()
    app_state = decode_hash(app_raw)
    user_states = {user: decode_hash(raw) for user, raw in zip(users, replies, strict=False)}
    found: list[Session] = []
    session_replies = replies[len(users):]
    for (user, sid), meta_raw, state_raw in zip(
        refs, session_replies[0::2], session_replies[1::2], strict=True
    ):
        if not meta_raw:  # deleted between the two round trips
            continue
        meta = {text(k): text(v) for k, v in meta_raw.items()}
        updated = float(meta["last_update_time"])
        found.append(Session.model_construct(
            id=sid, app_name=app_name, user_id=user,
            state=merge_state(decode_hash(state_raw), app_state, user_states[user]),
            events=[], last_update_time=updated,
        ))
    # As the in-memory service (and google-adk): by update time, then user and id.
    found.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
    return ListSessionsResponse(sessions=found)
