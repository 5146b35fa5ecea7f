"""An invocation may bring a state change and no message (``new_message`` None).

In process, google-adk's Runner applies such a ``state_delta`` and runs a root LlmAgent on
the history. Enqueued, the invocation's start has its id given in advance: it used to be
taken for the resume of an invocation the session did not have, and failed
(``InvocationNotFoundError`` naming its own id), the state never applied.
"""

from __future__ import annotations

from orchestrator.distributed.models import InvocationStatus


async def test_a_state_change_alone_is_applied_and_the_agent_runs_on_it(backend):
    session_id = await backend.create_session("chat", "u")
    inv = await backend.enqueue("chat", "u", None, session_id=session_id, state_delta={"k": 1})
    record = await backend.wait("chat", inv, until=InvocationStatus.FINISHED)

    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await backend.events("chat", inv)
    assert [e.author for e in events] == ["user", "agent"]
    assert events[0].content is None and events[0].actions.state_delta == {"k": 1}
    assert (await backend.session_state("chat", "u", session_id))["k"] == 1
