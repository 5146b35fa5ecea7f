"""``wait``, ``answer``, ``wait`` reads as the flow it is (the README's Client example)."""

from __future__ import annotations

from orchestrator.distributed.models import InvocationStatus


def test_wait_after_answer_returns_what_came_after_the_answer(celery_stack):
    client = celery_stack["client"]
    for _ in range(5):  # it used to return the answered pause, every time
        invocation_id = client.enqueue("approval", "readme", "pay 100")
        record = client.wait("approval", invocation_id, timeout=15)
        assert record.status is InvocationStatus.PAUSED
        client.answer("approval", invocation_id, record.pending_calls[0], {"approved": True})

        record = client.wait("approval", invocation_id, timeout=15)

        assert record.status is InvocationStatus.COMPLETED, record
        # Once that status was returned, wait returns the current state at once again.
        assert client.wait("approval", invocation_id, timeout=5).status is InvocationStatus.COMPLETED


def test_an_answer_that_leaves_another_call_open_ends_no_pause(celery_stack):
    client = celery_stack["client"]
    invocation_id = client.enqueue("two_approvals", "u", "pay twice")
    record = client.wait("two_approvals", invocation_id, timeout=15)
    assert record.status is InvocationStatus.PAUSED and len(record.pending_calls) == 2
    first, second = record.pending_calls

    client.answer("two_approvals", invocation_id, first, {"approved": True})
    # Still paused for the other call: wait says so at once (it used to wait for ever).
    record = client.wait("two_approvals", invocation_id, timeout=15)
    assert record.status is InvocationStatus.PAUSED
    where = {c.function_call_id: c.where for c in client.calls("two_approvals", invocation_id)}
    assert where[first] == "answered" and where[second] != "answered"

    client.answer("two_approvals", invocation_id, second, {"approved": False})
    record = client.wait("two_approvals", invocation_id, timeout=15)
    assert record.status is InvocationStatus.COMPLETED, record


def test_wait_after_an_answer_sent_again_returns_the_finished_invocation(celery_stack):
    # The documented retry (the same bytes again, its reply lost), or a second operator
    # sending the same approval: taken, and the wait after it returns (it used to wait for a
    # status after ``completed``, which never comes).
    from config import Settings
    from workers.client import Client

    client = celery_stack["client"]
    invocation_id = client.enqueue("approval", "retry", "pay 100")
    [call] = client.wait("approval", invocation_id, timeout=15).pending_calls
    client.answer("approval", invocation_id, call, {"approved": True})
    assert client.wait("approval", invocation_id, timeout=15).status is InvocationStatus.COMPLETED

    client.answer("approval", invocation_id, call, {"approved": True})
    assert client.wait("approval", invocation_id, timeout=15).status is InvocationStatus.COMPLETED

    other = Client(Settings(redis_url=celery_stack["url"], apps=""))
    try:
        other.answer("approval", invocation_id, call, {"approved": True})
        record = other.wait("approval", invocation_id, timeout=15, until=InvocationStatus.FINISHED)
        assert record.status is InvocationStatus.COMPLETED
    finally:
        other.close()


def test_wait_after_an_answer_sent_again_returns_the_pause_still_waiting(celery_stack):
    client = celery_stack["client"]
    invocation_id = client.enqueue("two_approvals", "retry", "pay twice")
    first, second = client.wait("two_approvals", invocation_id, timeout=15).pending_calls
    client.answer("two_approvals", invocation_id, first, {"approved": True})
    assert client.wait("two_approvals", invocation_id, timeout=15).status is InvocationStatus.PAUSED

    client.answer("two_approvals", invocation_id, first, {"approved": True})  # a retry

    record = client.wait("two_approvals", invocation_id, timeout=15)
    assert record.status is InvocationStatus.PAUSED and second in record.pending_calls


def _blocked_xreads(check) -> int:
    """Connections blocked in a plain XREAD (a follow waiting for its next entry)."""
    return sum(1 for c in check.client_list() if c.get("cmd") == "xread" and "b" in c.get("flags", ""))


def test_follow_right_after_an_answer_goes_on_to_what_the_answer_brings(celery_stack):
    # README's flow: follow stops at the pause, answer, follow again with from_start=False.
    # Followed before the orchestrator took the answer (stopped here), the follow used to end
    # at once with the pause the answer had just ended.
    import os
    import signal
    import threading

    import redis

    from tests.support.polling import eventually

    client = celery_stack["client"]
    check = redis.Redis.from_url(celery_stack["url"], decode_responses=True)
    invocation_id = client.enqueue("approval", "follow", "pay 100")
    items = list(client.follow("approval", invocation_id, timeout=15))
    assert items[-1].status is InvocationStatus.PAUSED
    [call] = client.status("approval", invocation_id).pending_calls
    orchestrator = celery_stack["orchestrator"].proc.pid
    blocked = _blocked_xreads(check)
    os.kill(orchestrator, signal.SIGSTOP)
    try:
        client.answer("approval", invocation_id, call, {"approved": True})
        followed: list = []
        follower = threading.Thread(target=lambda: followed.extend(
            client.follow("approval", invocation_id, timeout=30, from_start=False)))
        follower.start()
        # The follow ended (at the stale pause), or waits for what comes next.
        eventually("the follow to end or wait", lambda: not follower.is_alive()
                   or _blocked_xreads(check) > blocked)
    finally:
        os.kill(orchestrator, signal.SIGCONT)
    follower.join(30)
    assert [item.status for item in followed if item.kind == "status"] == [
        InvocationStatus.COMPLETED], followed
    assert any(item.kind == "event" for item in followed)
