"""Workers run only the jobs an orchestrator dispatched; orchestrators never run tools.

Anyone who can send a Celery task (a broker client, a Flower login through
``POST /api/task/async-apply/adk_celery.run_tool``) can put a ``run_tool`` or ``run_agent``
message on a queue. Here an attacker does exactly that, with the project's own Celery app,
against real orchestrator and worker processes: a job for a call no model made, a job that
differs from the dispatched one (another tool, arguments, state snapshot, user, attempt), a
replay of the genuine job, and a genuine job sent to the orchestrators' queue. Each is
refused and logged; no tool runs, nothing is appended, and the real answer still lands.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from celery import Celery
from google.genai import types

from config import Settings, get_settings
from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import dispatched_job
from orchestrator.backends.redis.session_service import RedisSessionService
from orchestrator.distributed.models import InvocationStatus
from orchestrator.models.fake import FunctionLlm
from tests.apps import PARKED_QUEUE, function_responses
from tests.support.processes import ManagedProcess, stack_env, start_celery_process
from workers.celery_app import TASK_RUN_AGENT, TASK_RUN_TOOL, create_celery_app

# -- vault: the app under attack (imported by the orchestrator and worker processes too) ---

RUNS_KEY = "adk-test:vault:runs"
"""Every run of a vault tool: ``<tool> <user> <invocation> <call>``."""


def _note_run(tool: str, tool_context: ToolContext) -> None:
    client = redis.Redis.from_url(get_settings().redis_url or "", decode_responses=True)
    try:
        client.rpush(RUNS_KEY, f"{tool} {tool_context.user_id} {tool_context.invocation_id} "
                               f"{tool_context.function_call_id}")
    finally:
        client.close()


def request_approval(amount: int, tool_context: ToolContext) -> None:
    """Ask a human to approve a payment (the answer comes from outside)."""
    _note_run("request_approval", tool_context)


def grant_everything(reason: str, tool_context: ToolContext) -> dict[str, Any]:
    """What an attacker wants run: no model of the vault ever calls it."""
    _note_run("grant_everything", tool_context)
    tool_context.state["granted"] = reason
    return {"granted": reason}


def _vault_model(request: LlmRequest) -> Any:
    answers = function_responses(request)
    if not answers:
        return types.Part(function_call=types.FunctionCall(name="request_approval",
                                                           args={"amount": 100}))
    return f"approval: {answers[-1].response}"


vault_app = App(name="vault", root_agent=LlmAgent(
    name="agent", model=FunctionLlm(record_requests=False, fn=_vault_model),
    tools=[LongRunningFunctionTool(request_approval), LongRunningFunctionTool(grant_everything)]))

SPECS = "tests.test_security_jobs:vault_app,tests.apps:parked_app"


@dataclass
class Stack:
    url: str
    env: dict[str, str]
    check: redis.Redis
    orchestrator: ManagedProcess
    worker: ManagedProcess
    client: Any
    attacker: Celery
    stack: ExitStack


@pytest.fixture(scope="module")
def stack(redis_url: str) -> Iterator[Stack]:
    """Redis db 8, one orchestrator, one worker (not on the parked queue), a client, and an
    attacker's Celery app on the same broker."""
    url = redis_url.rsplit("/", 1)[0] + "/8"
    check = redis.Redis.from_url(url, decode_responses=True)
    check.flushdb()
    env = stack_env(url, SPECS, lease_retry_seconds="0.2")
    from workers.client import Client

    with ExitStack() as stack:
        stack.callback(check.close)
        orchestrator = start_celery_process("orchestrator", "secure-orch", env)
        stack.callback(orchestrator.stop)
        worker = start_celery_process("worker", "secure-work", env)
        stack.callback(worker.stop)
        client = Client(Settings(redis_url=url, apps=SPECS, lease_retry_seconds=0.2))
        stack.callback(client.close)
        attacker = create_celery_app(Settings(redis_url=url))
        stack.callback(attacker.close)
        yield Stack(url, env, check, orchestrator, worker, client, attacker, stack)


def _wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> Any:
    """Poll Redis state until ``predicate`` holds (nothing to wait on for a stored result)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _runs(s: Stack) -> list[str]:
    return s.check.lrange(RUNS_KEY, 0, -1)


def _session_state(s: Stack, user_id: str, session_id: str) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        service = RedisSessionService(s.url)
        try:
            session = await service.get_session(app_name="vault", user_id=user_id,
                                                session_id=session_id)
        finally:
            await service.aclose()
        assert session is not None
        return dict(session.state)

    return asyncio.run(read())


def _paused_on_approval(s: Stack, user_id: str) -> tuple[str, str, dict[str, Any]]:
    """A vault invocation whose approval call ran on the worker and waits for a human:
    its id, the call id, and the job the orchestrator dispatched for it (from the journal)."""
    inv = s.client.enqueue("vault", user_id, "pay")
    assert s.client.wait("vault", inv, timeout=15).status is InvocationStatus.PAUSED
    call = _wait_for(lambda: next((c for c in s.client.calls("vault", inv)
                                   if c.where == "waiting for an answer"), None),
                     what="the approval call waiting for an answer")
    dispatch = s.check.hget(keys.invocation_jobs("vault", inv), f"c:{call.function_call_id}")
    return inv, call.function_call_id, dispatched_job(json.loads(dispatch))


def _refused(process: ManagedProcess, call_id: str, count: int = 1) -> None:
    for _ in range(count):
        process.wait_for_line(lambda line: "Refused" in line and repr(call_id) in line)


def _answers(s: Stack, inv: str) -> list[Any]:
    return [r for e in s.client.events("vault", inv) for r in e.get_function_responses()]


def test_a_forged_job_for_a_call_no_model_made_runs_nothing(stack: Stack):
    s = stack
    inv, call_id, genuine = _paused_on_approval(s, "victim")
    before = s.client.events("vault", inv)
    forged = {"app_name": "vault", "user_id": "victim", "session_id": genuine["session_id"],
              "invocation_id": inv, "function_call_id": "adk-forged-1",
              "tool_name": "grant_everything", "agent_name": "agent",
              "args": {"reason": "forged"}, "state": {"user:role": "admin"}, "queue": "adk.tools"}
    s.attacker.send_task(TASK_RUN_TOOL, kwargs=forged, queue="adk.tools")
    s.attacker.send_task(TASK_RUN_TOOL, queue="adk.tools", kwargs={
        **forged, "invocation_id": "e-never-started", "function_call_id": "adk-forged-2"})
    s.attacker.send_task(TASK_RUN_AGENT, queue="adk.tools", kwargs={
        "app_name": "vault", "user_id": "victim", "session_id": genuine["session_id"],
        "invocation_id": inv, "function_call_id": "adk-forged-3", "parallel_agent": "agent",
        "agent_name": "agent", "branch": "agent.agent"})
    for forged_id in ("adk-forged-1", "adk-forged-2", "adk-forged-3"):
        _refused(s.worker, forged_id)

    assert [run.split()[0] for run in _runs(s) if inv in run] == ["request_approval"]
    assert not any("e-never-started" in run for run in _runs(s))
    assert [e.id for e in s.client.events("vault", inv)] == [e.id for e in before]
    assert s.client.status("vault", inv).pending_calls == [call_id]
    # The human's answer is the one that lands; the attacker's state never does.
    s.client.answer("vault", inv, call_id, {"approved": True})
    record = s.client.wait("vault", inv, timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert [a.response for a in _answers(s, inv)] == [{"approved": True}]
    state = _session_state(s, "victim", genuine["session_id"])
    assert "granted" not in state and "user:role" not in state


def test_a_job_that_differs_from_the_dispatched_call_is_refused_and_the_real_answer_lands(
    stack: Stack,
):
    s = stack
    inv, call_id, genuine = _paused_on_approval(s, "victim")
    variants = [
        # the case: the pending approval answered by running another tool
        {"tool_name": "grant_everything", "args": {"reason": "forged"}},
        {"args": {"amount": 1_000_000}},
        {"state": {**genuine["state"], "granted": "by injection"}},
        {"user_id": "attacker"},
        {"attempt": 2},  # an attempt nobody dispatched
    ]
    for change in variants:
        s.attacker.send_task(TASK_RUN_TOOL, kwargs={**genuine, **change}, queue="adk.tools")
    _refused(s.worker, call_id, count=len(variants))

    assert [run.split()[0] for run in _runs(s) if inv in run] == ["request_approval"]
    assert _answers(s, inv) == []
    s.client.answer("vault", inv, call_id, {"approved": False})  # not refused: still pending
    record = s.client.wait("vault", inv, timeout=15, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert [a.response for a in _answers(s, inv)] == [{"approved": False}]
    assert "granted" not in _session_state(s, "victim", genuine["session_id"])


def test_a_replayed_job_is_refused(stack: Stack):
    s = stack
    inv, call_id, genuine = _paused_on_approval(s, "victim")

    # The exact job again while the call waits for its human: the tool does not run again.
    s.attacker.send_task(TASK_RUN_TOOL, kwargs=genuine, queue="adk.tools")
    s.worker.wait_for_line(lambda line: "Skipped call" in line and repr(call_id) in line
                           and "waits for an answer" in line)
    assert [run.split()[0] for run in _runs(s) if inv in run] == ["request_approval"]

    s.client.answer("vault", inv, call_id, {"approved": True})
    assert s.client.wait("vault", inv, timeout=15, until=InvocationStatus.FINISHED).status is (
        InvocationStatus.COMPLETED)
    # And once the call is answered.
    s.attacker.send_task(TASK_RUN_TOOL, kwargs=genuine, queue="adk.tools")
    s.worker.wait_for_line(lambda line: "Skipped call" in line and repr(call_id) in line
                           and "already answered" in line)
    assert [run.split()[0] for run in _runs(s) if inv in run] == ["request_approval"]
    assert [a.response for a in _answers(s, inv)] == [{"approved": True}]


def test_an_orchestrator_never_runs_a_tool_even_a_genuine_job(stack: Stack):
    s = stack
    inv = s.client.enqueue("parked", "u", "sent-to-orchestrator")
    assert s.client.wait("parked", inv, timeout=15).status is InvocationStatus.PAUSED
    [call] = s.client.calls("parked", inv)
    assert call.where == "queued"  # nothing consumes the parked queue yet
    dispatch = s.check.hget(keys.invocation_jobs("parked", inv), f"c:{call.function_call_id}")
    genuine = dispatched_job(json.loads(dispatch))

    # The very job the orchestrator dispatched, delivered to the orchestrators' queue.
    s.attacker.send_task(TASK_RUN_TOOL, kwargs=genuine, queue="adk.invocations")
    s.attacker.send_task(TASK_RUN_AGENT, queue="adk.invocations", kwargs={
        "app_name": "parked", "user_id": "u", "session_id": genuine["session_id"],
        "invocation_id": inv, "function_call_id": "adk-branch", "parallel_agent": "agent",
        "agent_name": "agent", "branch": "agent.agent"})
    for refused_id in (call.function_call_id, "adk-branch"):
        s.orchestrator.wait_for_line(lambda line, cid=refused_id: "delivered to an orchestrator"
                                     in line and repr(cid) in line)
    assert s.check.get("test:parked:sent-to-orchestrator") is None  # the tool did not run
    assert s.client.calls("parked", inv)[0].where == "queued"

    # The job still in its own queue runs on a worker of that queue, and answers.
    parked = start_celery_process("worker", "secure-parked", s.env, "-Q", PARKED_QUEUE)
    s.stack.callback(parked.stop)
    record = s.client.wait("parked", inv, timeout=20, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert s.check.get("test:parked:sent-to-orchestrator") == str(parked.pid)


def test_a_malformed_job_is_refused_and_logged_without_its_values(stack: Stack):
    s = stack
    secret = "PERSONALDATA-patient-has-a-condition"
    s.attacker.send_task(TASK_RUN_TOOL, queue="adk.tools", kwargs={
        "app_name": "vault", "user_id": "victim", "session_id": "s", "invocation_id": "e-x",
        "function_call_id": "adk-malformed-1", "tool_name": "grant_everything",
        "agent_name": "agent", "args": secret, "state": [secret], "attempt": secret})
    line = s.worker.wait_for_line(lambda text: "Malformed tool job rejected" in text)
    assert "args" in line and "state" in line
    assert not any(secret in text for text in s.worker.lines)


def test_a_worker_never_takes_an_invocations_own_task(stack: Stack):
    s = stack
    sent = s.attacker.send_task("adk_celery.invoke", queue="adk.tools", kwargs={
        "app_name": "vault", "user_id": "on-a-worker", "new_message": "hi"})
    refusal = sent.get(timeout=15)
    assert "only orchestrators take an invocation's own tasks" in refusal["error"]
    assert not [r for r in s.client.invocations("vault").records if r.user_id == "on-a-worker"]
    s.worker.wait_for_line(lambda line: "Refused adk_celery.invoke delivered to a worker" in line)
