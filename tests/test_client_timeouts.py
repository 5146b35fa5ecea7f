"""A wait's or follow's timeout of infinity means no limit; NaN is refused with a clear
ValueError (both crashed in the arithmetic of the blocking reads: OverflowError, ValueError).
Real orchestrator and worker processes (tests/support)."""

from __future__ import annotations

import math

import pytest

from orchestrator.distributed.models import InvocationStatus
from orchestrator.errors import RequestError


def paused_approval(client, user: str) -> tuple[str, str]:
    invocation_id = client.enqueue("approval", user, "pay 1")
    [call_id] = client.wait("approval", invocation_id, timeout=15).pending_calls
    return invocation_id, call_id


def test_an_infinite_timeout_waits_and_follows_without_limit(celery_stack):
    client = celery_stack["client"]
    invocation_id, call_id = paused_approval(client, "ops-inf")
    client.answer("approval", invocation_id, call_id, {"approved": True})
    # After the answer, the wait reads the statuses that come next: it blocks at least once.
    record = client.wait("approval", invocation_id, timeout=math.inf,
                         until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED
    items = list(client.follow("approval", invocation_id, timeout=math.inf,
                               until=InvocationStatus.FINISHED))
    assert items[-1].status is InvocationStatus.COMPLETED


def test_a_nan_timeout_is_refused(celery_stack):
    client = celery_stack["client"]
    invocation_id, _ = paused_approval(client, "ops-nan")
    with pytest.raises(RequestError, match="^timeout: NaN is not a number of seconds"):
        client.wait("approval", invocation_id, timeout=math.nan)
    with pytest.raises(RequestError, match="^timeout: NaN is not a number of seconds"):
        next(client.follow("approval", invocation_id, timeout=math.nan))
