"""How a :class:`~workers.client.Client` waits for and follows an invocation.

The checks of a wait's or follow's ``timeout`` and ``until``, the status wait on a
synchronous connection in the caller's thread, the follow of the invocation's live stream
on a connection of its own, and the bridge that iterates an async source from synchronous
code. The Client keeps its state (connections, what it sent and answered) and passes it in.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import AsyncIterator, Container, Iterator
from typing import Any, TypeVar

import redis

from config import Settings
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.connection import connect
from orchestrator.backends.redis.invocation_store import READ_RECORD, StatusWait
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.intake import preview
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.streams import StreamItem, time_limit
from orchestrator.errors import InvocationNotFoundError, RequestError, no_invocation_text
from workers.runtime import Runtime


def no_invocation(app_name: str, invocation_id: str) -> InvocationNotFoundError:
    """The error for an invocation that has no record, in the words of the CLI and the API."""
    return InvocationNotFoundError(no_invocation_text(app_name, invocation_id))


def wait_for_status(
    redis_client: redis.Redis, app_name: str, invocation_id: str,
    statuses: set[InvocationStatus], timeout: float | None, *, after: str | None,
    sent: Container[tuple[str, str]],
) -> InvocationRecord | None:
    """Follow the invocation's status entries on a synchronous connection, in this thread.

    Never returns a pause that is over (its calls all answered); raises
    InvocationNotFoundError at once for an invocation without a record, unless it is in
    ``sent`` (sent as a task, not recorded yet). ``after``: a status entry id already seen
    (only later statuses count), or None.
    """
    wait = StatusWait(app_name, invocation_id, statuses, timeout, after=after)
    with redis_client.pipeline(transaction=True) as pipe:
        wait.queue_start(pipe)
        found = wait.started(pipe.execute())
    if wait.missing and (app_name, invocation_id) not in sent:
        raise no_invocation(app_name, invocation_id)
    while True:
        while found is None and (block_ms := wait.block_ms()) is not None:
            found = wait.feed(redis_client.xread({wait.stream: wait.last_id}, block=block_ms))
        if found is READ_RECORD:  # an entry without its record: the record as it is now
            raw = redis_client.hget(wait.record_key, "record")
            record = InvocationRecord.model_validate_json(raw) if raw else None
            found = record if record is not None and record.status in statuses else None
            if record is None:
                return None
            continue
        if not isinstance(found, InvocationRecord):
            return None  # timed out
        if not wait.is_pause(found):
            return found
        with redis_client.pipeline(transaction=False) as pipe:
            wait.queue_answers(pipe, found)
            if wait.pause_still_on(pipe.execute()):
                return found
        found = None  # answered, its resume queued: what comes next


async def follow_stream(
    settings: Settings, app_name: str, invocation_id: str, timeout: float | None,
    until: frozenset[InvocationStatus], from_start: bool, sent: Container[tuple[str, str]],
) -> AsyncIterator[StreamItem]:
    """The invocation's live stream, on a connection of its own on the caller's event loop.

    InvocationNotFoundError at the first item for an invocation without a record, unless it
    is in ``sent``; the connection is closed when the iteration ends.
    """
    redis_client = connect(settings.redis_url or "")
    stream = RedisEventStream(redis_client, ttl_seconds=settings.record_ttl_seconds)
    try:
        if (not await redis_client.exists(keys.invocation(app_name, invocation_id))
                and (app_name, invocation_id) not in sent):
            raise no_invocation(app_name, invocation_id)
        async for item in stream.follow(
            app_name, invocation_id, from_start=from_start, until=until, timeout=timeout,
        ):
            yield item
    finally:
        await redis_client.aclose()


def check_timeout(timeout: Any) -> float | None:
    """A wait's or follow's ``timeout`` checked: seconds, 0 or more; None for no limit."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, numbers.Real)):
        raise RequestError("timeout", f"must be a number of seconds (None or math.inf: no limit), "
                                      f"not {type(timeout).__name__}.")
    limit = time_limit(None if timeout is None else float(timeout))  # NaN: ValueError
    if limit is not None and limit < 0:
        raise RequestError("timeout", f"must be 0 or more seconds (None or math.inf: no limit), "
                                      f"not {timeout!r}.")
    return limit


def check_statuses(until: Any) -> frozenset[InvocationStatus]:
    """``until`` as a set of statuses: members of InvocationStatus or their values."""
    if isinstance(until, str):  # one status (an InvocationStatus is a str too)
        until = (until,)
    try:
        given = list(until)
    except TypeError:
        raise RequestError("until", f"must be a collection of statuses, not "
                                    f"{type(until).__name__}.") from None
    known = {status.value for status in InvocationStatus}
    found = set()
    for status in given:
        if isinstance(status, InvocationStatus):
            found.add(status)
        elif isinstance(status, str) and status in known:
            found.add(InvocationStatus(status))
        else:
            raise RequestError("until", f"{preview(status)} is not a status (one of: "
                                        f"{', '.join(s.value for s in InvocationStatus)}).")
    return frozenset(found)


T = TypeVar("T")
_DONE = object()


def iterate(runtime: Runtime, source: AsyncIterator[T]) -> Iterator[T]:
    """A synchronous iterator over ``source``, which runs on ``runtime``'s loop thread.

    Each item is fetched on demand (no read-ahead). Closing the iterator (``break``, an
    exception, garbage collection) closes ``source`` on the loop; an item still being waited
    for when the caller is interrupted (Ctrl-C) is cancelled first.
    """

    async def step() -> Any:
        try:
            return await anext(source)
        except StopAsyncIteration:
            return _DONE

    async def close() -> None:
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(RuntimeError):  # still unwinding from a cancelled step
                await aclose()

    try:
        while True:
            future = runtime.submit(step())
            try:
                item = future.result()
            except BaseException:
                future.cancel()
                raise
            if item is _DONE:
                return
            yield item
    finally:
        with contextlib.suppress(Exception):
            runtime.submit(close()).result(timeout=10)
