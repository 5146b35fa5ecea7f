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
