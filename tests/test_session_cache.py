"""SessionCache: sessions kept by an orchestrator, bounded by an approximate size in bytes."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config import Settings
from config.settings import describe_settings_error
from orchestrator import Event
from orchestrator.distributed.session_cache import (
    EVENT_OVERHEAD_BYTES,
    SessionCache,
    charge,
    note_stored_size,
    stored_size,
)
from orchestrator.sessions.session import Session


def read(session_id: str, events_bytes: int, state_bytes: int = 0, events: int = 1) -> Session:
    """A session as a reader builds it: with the size of what it read noted."""
    session = Session(id=session_id, app_name="a", user_id="u", events=[
        Event(author="user", invocation_id="e-1") for _ in range(events)])
    return note_stored_size(session, events_bytes, state_bytes)


def key(session_id: str) -> tuple[str, str, str]:
    return ("a", "u", session_id)


def test_a_session_counts_what_it_was_read_as_plus_a_parsed_events_cost():
    session = read("s", 10_000, 500, events=3)
    assert stored_size(session) == (10_000, 500)
    assert charge(session) == 10_000 + 500 + 3 * EVENT_OVERHEAD_BYTES
    # A copy made to keep (model_copy) carries the size; the size is no field of the session.
    assert stored_size(session.model_copy(update={"events": list(session.events)})) == (10_000, 500)
    assert "_adk_celery_stored_size" not in session.model_dump_json()
    assert session == Session(id="s", app_name="a", user_id="u", events=session.events)


def test_the_bytes_bound_evicts_the_least_recently_kept_first():
    one = charge(read("x", 50_000))
    cache = SessionCache(max_bytes=2 * one)
    cache.put(key("1"), read("1", 50_000))
    cache.put(key("2"), read("2", 50_000))
    assert len(cache) == 2 and cache.bytes == 2 * one
    cache.put(key("3"), read("3", 50_000))  # over the bound: the oldest goes
    assert cache.take(key("1")) is None
    assert cache.take(key("2")).id == "2" and cache.take(key("3")).id == "3"
    assert cache.bytes == 0


def test_a_session_larger_than_the_bound_is_not_kept_and_replaces_the_older_copy():
    cache = SessionCache(max_bytes=100_000)
    cache.put(key("s"), read("s", 10_000))
    cache.put(key("other"), read("other", 10_000))
    cache.put(key("s"), read("s", 200_000))  # the session grew past the bound
    assert cache.take(key("s")) is None  # neither the new read nor the older one is kept
    assert len(cache) == 1 and cache.bytes == charge(read("other", 10_000))


def test_take_and_put_keep_the_byte_count_right():
    cache = SessionCache(max_bytes=1_000_000)
    a, b = read("a", 30_000, 100, events=2), read("b", 70_000, events=5)
    cache.put(key("a"), a)
    cache.put(key("b"), b)
    assert cache.bytes == charge(a) + charge(b)
    assert cache.take(key("a")) is a
    assert cache.bytes == charge(b)
    assert cache.take(key("a")) is None and cache.bytes == charge(b)
    cache.put(key("a"), a)  # put back as taken
    grown = read("b", 90_000, events=6)
    cache.put(key("b"), grown)  # a newer read replaces the copy, counted once
    assert cache.bytes == charge(a) + charge(grown) and len(cache) == 2


def test_zero_bytes_keeps_nothing():
    cache = SessionCache(max_bytes=0)
    cache.put(key("s"), read("s", 0, events=0))
    assert cache.take(key("s")) is None and len(cache) == 0 and cache.bytes == 0


def test_a_session_whose_size_no_reader_noted_is_not_kept():
    cache = SessionCache(max_bytes=10**9)
    cache.put(key("s"), Session(id="s", app_name="a", user_id="u"))
    assert cache.take(key("s")) is None and cache.bytes == 0


def test_the_session_count_still_bounds_the_cache():
    cache = SessionCache(max_bytes=10**9, max_sessions=2)
    for name in ("1", "2", "3"):
        cache.put(key(name), read(name, 10))
    assert cache.take(key("1")) is None and len(cache) == 2


def test_the_setting_defaults_to_256_mib_and_refuses_a_negative_bound_by_name():
    assert Settings().session_cache_max_bytes == 256 * 1024 * 1024
    assert SessionCache().take(key("s")) is None  # the default comes from the settings
    with pytest.raises(ValidationError) as refused:
        Settings(session_cache_max_bytes=-1)
    assert describe_settings_error(refused.value).startswith("ADK_CELERY_SESSION_CACHE_MAX_BYTES:")
