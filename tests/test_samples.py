"""The ADK-sample-shaped agents of ``examples/samples`` run in process and distributed.

Each is run with its offline model: once with ``InMemoryRunner`` (the google-adk way), once
enqueued on a real orchestrator and worker over Redis; both must give the same answer.
"""

from __future__ import annotations

import asyncio

import pytest
import redis

from config import Settings
from orchestrator.distributed.models import InvocationStatus
from orchestrator.runners import InMemoryRunner
from tests.support.events import user_text
from tests.support.processes import stack_env, start_celery_process

SPECS = ",".join(f"examples.samples.{module}:app" for module in (
    "coordinator", "guarded_tools", "critic_reviser", "artifact_reader"))

CASES = [
    # (app, message, final text, state the turn leaves)
    ("travel_coordinator", "Plan 3 nights in Oslo",
     "Oslo: Cheapest fare: 140 EUR. Hotel total: 540 EUR.", {}),
    ("bank_assistant", "What is the balance of alice", "alice has 120 EUR.", {}),
    ("bank_assistant", "What is the balance of root",
     "Sorry: the account 'root' is protected.", {"blocked_tool_calls": 1}),
    ("bank_assistant", "Tell me the password of bob", "I cannot help with passwords.",
     {"blocked_messages": 1}),
    ("answer_auditor", "The capital of Australia is Sydney", "Revised: Canberra.",
     {"findings": "Findings: inaccurate; search says Canberra."}),
    ("report_writer", "Write the pilot report",
     "The report says: Report on the pilot: three findings, all positive.", {}),
]


def final_text(events) -> str:
    texts = [p.text for e in events if e.content and not e.partial
             for p in e.content.parts or [] if p.text]
    return texts[-1] if texts else ""


async def run_in_process(app_name: str, message: str):
    import importlib

    module = next(importlib.import_module(f"examples.samples.{m}") for m in (
        "coordinator", "guarded_tools", "critic_reviser", "artifact_reader")
        if importlib.import_module(f"examples.samples.{m}").app.name == app_name)
    runner = InMemoryRunner(app=module.app)
    session = await runner.session_service.create_session(app_name=app_name, user_id="u")
    events = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=user_text(message))]
    session = await runner.session_service.get_session(
        app_name=app_name, user_id="u", session_id=session.id)
    return events, session.state


@pytest.mark.parametrize(("app_name", "message", "answer", "state"), CASES)
async def test_sample_in_process(app_name, message, answer, state):
    events, final_state = await run_in_process(app_name, message)
    assert final_text(events) == answer
    assert state.items() <= final_state.items()


@pytest.fixture(scope="module")
def samples_stack(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/5"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, SPECS)
    orchestrator = start_celery_process("orchestrator", "samples-orch", env)
    worker = start_celery_process("worker", "samples-work", env)
    from workers.client import Client

    client = Client(Settings(redis_url=url, apps=SPECS))
    try:
        yield client
    finally:
        client.close()
        orchestrator.stop()
        worker.stop()


@pytest.mark.parametrize(("app_name", "message", "answer", "state"), CASES)
async def test_sample_distributed(samples_stack, app_name, message, answer, state):
    client = samples_stack
    session = await asyncio.to_thread(client.create_session, app_name, "u")
    inv = await asyncio.to_thread(client.enqueue, app_name, "u", message, session_id=session.id)
    record = await asyncio.to_thread(client.wait, app_name, inv, timeout=30, until=InvocationStatus.FINISHED)
    assert record.status is InvocationStatus.COMPLETED, record.error
    events = await asyncio.to_thread(client.events, app_name, inv)
    assert final_text(events) == answer
    sessions = await asyncio.to_thread(client.list_sessions, app_name, "u")
    stored = next(s for s in sessions if s.id == session.id)
    assert state.items() <= stored.state.items()


async def test_the_demo_planner_plans_each_trip_of_a_session_on_its_own():
    """The README's demo model read the session's first message and every earlier answer:
    a second trip on the same session got the first one's summary, without a tool call."""
    from google.genai import types

    from examples.trip_planner import offline_planner
    from orchestrator import LlmRequest

    def answer(name: str, response: dict) -> types.Content:
        return types.Content(role="user", parts=[types.Part(
            function_response=types.FunctionResponse(name=name, response=response))])

    first_trip = [user_text("Plan 3 nights in Lisbon"),
                  answer("get_weather", {"forecast": "sunny", "high_c": 24}),
                  answer("request_booking_approval", {"approved": True})]
    assert "3 nights in Lisbon" in offline_planner(LlmRequest(contents=first_trip))

    second = offline_planner(LlmRequest(contents=[*first_trip, user_text("Plan 2 nights in Rome")]))
    assert second.function_call.name == "get_weather" and second.function_call.args == {"city": "Rome"}


def test_the_demo_talks_to_the_gemini_endpoint_and_key_of_its_settings():
    """With ADK_CELERY_GOOGLE_API_KEY the trip planner picks Gemini; the demo then sent its
    calls without that key (a configuration error) and to Google's host, not to
    ADK_CELERY_GEMINI_BASE_URL."""
    import os
    import subprocess
    import sys

    from tests.support.gemini_stub import GeminiStub, text_response
    from tests.support.processes import ROOT

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ADK_CELERY_") and k not in ("GOOGLE_API_KEY", "GEMINI_API_KEY")}
    with GeminiStub() as stub:
        stub.enqueue(text_response("Lisbon looks sunny: enjoy the trip."))
        env.update(ADK_CELERY_GOOGLE_API_KEY="demo-key", ADK_CELERY_GEMINI_BASE_URL=stub.base_url,
                   HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="127.0.0.1,localhost")
        done = subprocess.run([sys.executable, "-m", "examples.demo"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        requests = stub.requests
    assert done.returncode == 0, done.stderr[-2000:]
    assert [r.headers.get("x-goog-api-key") for r in requests] == ["demo-key"]
    assert "Lisbon looks sunny" in done.stdout
    assert "demo-key" not in done.stdout + done.stderr
