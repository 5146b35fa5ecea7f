"""A run stopped right after committing a remote tool's answer is recovered as it would go on.

The answer carries the tool's actions (skip_summarization, transfer_to_agent). The run that
committed it stopped before acting on them (its orchestrator died); the orchestrator that
recovers the invocation from its log called the model again, and the transfer never came.
"""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator import App, LlmAgent, failpoints, platform
from orchestrator.backends.redis.invocation_store import RedisInvocationStore
from orchestrator.backends.redis.session_queue import RedisSessionQueue
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.backends.redis.streams import RedisEventStream
from orchestrator.distributed.models import InvocationRecord, InvocationStatus, ToolResult
from orchestrator.distributed.registry import AppRegistry
from orchestrator.distributed.service import InvocationService
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.errors import FailpointError
from orchestrator.models.fake import ScriptedLlm
from tests.support.action_tools import remote, skip_tool, to_helper
from tests.support.events import call, simplify_all
from workers.runtime import _leased_writer


class _Parked:
    """A transport that only records the jobs: the test hands their results back itself."""

    def __init__(self) -> None:
        self.jobs: list[Any] = []

    def route(self, tool: Any) -> str | None:
        return (tool.custom_metadata or {}).get(QUEUE_METADATA_KEY)

    def route_agent(self, agent: Any) -> str | None:
        return None

    def prepare_with_commit(self, job: Any) -> None:
        return None

    async def submit(self, job: Any) -> None:
        self.jobs.append(job)

    async def submit_agent(self, job: Any) -> None:
        self.jobs.append(job)


async def _recovered(redis_client, app: App, actions: dict[str, Any]) -> list[Any]:
    sessions = RedisSessionService(client=redis_client)
    store = RedisInvocationStore(redis_client)
    events = RedisEventStream(redis_client)
    transport = _Parked()
    service = InvocationService(
        AppRegistry([app]), session_service=sessions, store=store,
        queue=RedisSessionQueue(redis_client), transport=transport,
        writer_for=lambda key, token, record: _leased_writer(sessions, events, key, token, record))
    session = await sessions.create_session(app_name=app.name, user_id="u")
    key = (app.name, "u", session.id)
    record = InvocationRecord(invocation_id=platform.new_invocation_id(), app_name=app.name,
                              user_id="u", session_id=session.id,
                              new_message={"role": "user", "parts": [{"text": "go"}]})
    await service.submit(record)
    assert await service.drain(key)  # paused on the remote call
    [job] = transport.jobs
    await service.deliver(app.name, record.invocation_id, ToolResult(
        function_call_id=job.function_call_id, tool_name=job.tool_name, response={"raw": 1},
        actions=actions), key=key)
    failpoints.arm("runner.answers_committed=error*1")  # the run stops right after the commit
    try:
        with pytest.raises(FailpointError):
            await service.drain(key)
    finally:
        failpoints.disarm()
    assert await service.drain(key)  # the next holder recovers it from the log
    assert (await store.get(app.name, record.invocation_id)).status is InvocationStatus.COMPLETED
    stored = await sessions.get_session(app_name=app.name, user_id="u", session_id=session.id)
    return simplify_all([e for e in stored.events if e.content is not None])


async def test_a_recovered_run_does_not_summarise_an_answer_that_skips_it(redis_client):
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("skip_tool"), "SUMMARY"]),
                    tools=[remote(skip_tool)])
    shown = await _recovered(redis_client, App(name="skip", root_agent=root),
                             {"skip_summarization": True})
    assert shown[-1] == ("root", ("response", "skip_tool", {"raw": 1}))


async def test_a_recovered_run_makes_the_transfer_an_answer_asked_for(redis_client):
    helper = LlmAgent(name="helper", model=ScriptedLlm(responses=["helper here"]))
    root = LlmAgent(name="root", model=ScriptedLlm(responses=[call("to_helper"), "root again"]),
                    tools=[remote(to_helper)], sub_agents=[helper])
    shown = await _recovered(redis_client, App(name="transfer", root_agent=root),
                             {"transfer_to_agent": "helper"})
    assert shown[-1] == ("helper", "helper here")
