"""``output_schema`` beside tools: the edge cases, on google-adk 2.13 and here, and ours alone.

Against google-adk: a model that answers in plain text (or in a fenced JSON block) instead of
calling ``set_model_response``, an invalid call answered with the validation errors, a model
that takes a response schema beside tools, and the answer given in a resumed invocation.
Ours alone: ``set_model_response`` is answered in the orchestrator whatever the routing says,
and a run stopped between its answer and the final event is recovered with that event.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pydantic
import pytest

from orchestrator import App, LlmAgent, failpoints
from orchestrator.distributed.embedded import EmbeddedRuntime
from orchestrator.distributed.models import InvocationStatus
from orchestrator.distributed.registry import AppRegistry
from orchestrator.models.fake import ScriptedLlm
from orchestrator.tools.set_model_response_tool import SetModelResponseTool
from tests.golden import scenarios as s
from tests.support.events import call, simplify_all
from tests.test_adk_differences import Forecast, assert_same, events_of, requests_seen

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)


def weather(city: str) -> dict[str, int]:
    """The temperature in a city."""
    return {"temp": 3}


async def _one_turn(adk: Any, *script: Any, model_class: Any = None,
                    **agent: Any) -> dict[str, Any]:
    """One turn of an agent with ``Forecast`` as its output schema and ``weather``."""
    h = s.Harness(adk)
    seen: list[dict[str, Any]] = []
    model = (model_class or h.model_class)(model="root_model", script=list(script), recorder=h)
    await h.start(adk.LlmAgent(name="root", model=model, output_schema=Forecast,
                               before_model_callback=requests_seen(seen),
                               **{"tools": [weather], **agent}))
    await h.turn(s.user_text("weather in Oslo?"))
    record = await h.finish()
    return {"events": events_of(record), "raised": record["turns"][0]["raised"],
            "requests": seen, "state": record["session_state"]}


async def plain_text_scenario(adk: Any) -> dict[str, Any]:
    return {
        key: await _one_turn(adk, s.fc("weather", city="Oslo"), text, **agent)
        for key, text, agent in [
            ("no_output_key", "It is 3 degrees in Oslo.", {}),
            ("output_key", "It is 3 degrees in Oslo.", {"output_key": "forecast"}),
            ("fenced_json", '```json\n{"city": "Oslo", "temp": 3}\n```',
             {"output_key": "forecast"}),
            ("blank", "  ", {"output_key": "forecast"}),
        ]
    }


def test_a_plain_text_answer_instead_of_set_model_response() -> None:
    """Final as it is; with an output_key, text that is not the schema's JSON raises (a
    ValidationError, after the event was yielded), JSON in a code fence is read inside it,
    blank text is not stored."""
    result = assert_same(plain_text_scenario)
    assert result["no_output_key"]["raised"] is None
    assert result["no_output_key"]["events"][0][-1] == [
        "root", [["text", "It is 3 degrees in Oslo."]], True]
    assert result["output_key"]["raised"] == "ValidationError"
    assert result["fenced_json"]["state"] == {"forecast": {"city": "Oslo", "temp": 3}}
    assert result["blank"]["raised"] is None and result["blank"]["state"] == {}


async def invalid_call_scenario(adk: Any) -> dict[str, Any]:
    result = await _one_turn(adk, s.fc("set_model_response", city="Oslo", temp="warm"),
                             s.fc("set_model_response", city="Oslo", temp=3),
                             output_key="forecast")
    # The words of the error are each framework's own: what they name is compared.
    answer = result["events"][0][1][1][0][2]
    answer["error"] = ("names temp" if "temp" in answer["error"]
                       and "set_model_response" in answer["error"] else answer["error"])
    return result


def test_an_invalid_set_model_response_call_is_answered_with_its_errors() -> None:
    result = assert_same(invalid_call_scenario)
    [events] = result["events"]
    error = events[1][1][0][2]["error"]
    assert error == "names temp"
    assert events[-1] == ["root", [["text", '{"city": "Oslo", "temp": 3}']], True]
    assert result["state"] == {"forecast": {"city": "Oslo", "temp": 3}}


async def capable_model_scenario(adk: Any) -> dict[str, Any]:
    class Capable(s._scripted_model_class(adk)):  # type: ignore[misc,valid-type]
        @property
        def capabilities(self) -> Any:
            return adk.LlmCapabilities(output_schema_and_tools=True)

    return await _one_turn(adk, s.fc("weather", city="Oslo"), '{"city": "Oslo", "temp": 3}',
                           model_class=Capable, output_key="forecast")


def test_a_model_that_takes_a_response_schema_beside_tools_gets_it() -> None:
    result = assert_same(capable_model_scenario)
    first = result["requests"][0]
    assert first["response_schema"] is True
    assert [d["name"] for d in first["declarations"]] == ["weather"]
    assert not first["asks_for_set_model_response"]
    assert result["state"] == {"forecast": {"city": "Oslo", "temp": 3}}


async def resumed_scenario(adk: Any) -> dict[str, Any]:
    """A resumable app: the agent asks a human first (long-running), and answers through
    set_model_response in the invocation resumed with the human's answer."""
    h = s.Harness(adk)

    def ask(question: str) -> None:
        """Ask a human."""
        return None

    model = h.model("root_model", s.fc("ask", question="which city?"),
                    s.fc("set_model_response", city="Oslo", temp=3))
    agent = adk.LlmAgent(name="root", model=model, output_schema=Forecast,
                         output_key="forecast", tools=[adk.LongRunningFunctionTool(ask)])
    runner = adk.InMemoryRunner(app=adk.App(
        name="app", root_agent=agent,
        resumability_config=adk.ResumabilityConfig(is_resumable=True)))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    first = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=s.user_text("go"))]
    [asked] = [c for e in first for c in e.get_function_calls()]
    second = [e async for e in runner.run_async(
        user_id="u", session_id=session.id, invocation_id=first[0].invocation_id,
        new_message=s.function_response(asked.id, "ask", {"answer": "Oslo"}))]
    session = await runner.session_service.get_session(
        app_name="app", user_id="u", session_id=session.id)
    shown = [(e.author, [p.text or (p.function_call or p.function_response).name
                         for p in e.content.parts or []])
             for e in second if e.content is not None]
    return {"shown": shown, "state": dict(session.state), "model_calls": len(h.requests),
            "same_invocation": {e.invocation_id for e in first + second}
            == {first[0].invocation_id}}


def test_set_model_response_in_a_resumed_invocation() -> None:
    result = assert_same(resumed_scenario)
    assert result["shown"][-1] == ("root", ['{"city": "Oslo", "temp": 3}'])
    assert result["state"] == {"forecast": {"city": "Oslo", "temp": 3}}
    assert result["model_calls"] == 2 and result["same_invocation"]


# --------------------------------------------------------------------------------------------
# Ours alone: never on a worker; recovered between its answer and the final event


def _agent(*responses: Any) -> LlmAgent:
    return LlmAgent(name="root", model=ScriptedLlm(responses=list(responses)),
                    output_schema=Forecast, output_key="forecast", tools=[weather])


async def _finished(rt: EmbeddedRuntime, app: App, invocation_id: str) -> tuple[Any, Any, Any]:
    record = await rt.wait(app.name, invocation_id, timeout=5, until=InvocationStatus.FINISHED)
    session = await rt.session_service.get_session(
        app_name=app.name, user_id="u", session_id=record.session_id)
    events = [e for e in await rt.events(app.name, invocation_id) if e.content is not None]
    return record, simplify_all(events), dict(session.state)


async def test_set_model_response_is_answered_in_the_orchestrator_whatever_the_routing():
    """Routed by name (ADK_CELERY_TOOL_QUEUES) beside a tool that does run remotely: its call
    is not long-running, no job is sent for it, and the final event follows its answer."""
    app = App(name="app", root_agent=_agent(
        call("weather", city="Oslo"), call("set_model_response", city="Oslo", temp=3)))
    rt = EmbeddedRuntime(AppRegistry([app]), tool_queues={
        "weather": "tools", SetModelResponseTool.NAME: "tools"})
    submitted: list[str] = []
    submit = rt.transport.submit

    async def noting(job: Any) -> None:
        submitted.append(job.tool_name)
        await submit(job)

    rt.transport.submit = noting  # type: ignore[method-assign]
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="weather in Oslo?")
    record, events, state = await _finished(rt, app, inv)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert submitted == ["weather"]
    assert events[-3:] == [
        ("root", ("call", "set_model_response", {"city": "Oslo", "temp": 3})),
        ("root", ("response", "set_model_response", {"city": "Oslo", "temp": 3})),
        ("root", '{"city": "Oslo", "temp": 3}'),
    ]
    answered = [e for e in await rt.events(app.name, inv) if e.get_function_responses()]
    assert answered[-1].long_running_tool_ids is None or not answered[-1].long_running_tool_ids
    assert answered[-1].actions.set_model_response == {"city": "Oslo", "temp": 3}
    assert state == {"forecast": {"city": "Oslo", "temp": 3}}


@pytest.mark.parametrize("resumable", [False, True])
async def test_set_model_response_beside_a_call_out_on_a_worker_ends_the_agent_once(resumable):
    """One model turn calls a tool that runs on a worker and set_model_response: the final
    event waits for the worker's answer, then ends the agent (before, it came first, and the
    worker's answer made the model answer again, or failed the invocation)."""
    from orchestrator import ResumabilityConfig

    app = App(name="app", root_agent=_agent(
        [call("weather", city="Oslo"), call("set_model_response", city="Oslo", temp=3)],
        "a second answer the model is never asked for"),
        resumability_config=ResumabilityConfig(is_resumable=resumable))
    rt = EmbeddedRuntime(AppRegistry([app]), tool_queues={"weather": "tools"})
    inv = await rt.enqueue(app_name="app", user_id="u", new_message="weather in Oslo?")
    record, events, state = await _finished(rt, app, inv)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert [e for e in events if e[0] == "root"][-3:] == [
        ("root", ("response", "set_model_response", {"city": "Oslo", "temp": 3})),
        ("root", ("response", "weather", {"temp": 3})),
        ("root", '{"city": "Oslo", "temp": 3}'),
    ]
    assert app.root_agent.model.call_count == 1  # type: ignore[union-attr]
    assert state == {"forecast": {"city": "Oslo", "temp": 3}}


@pytest.mark.parametrize("resumable", [False, True])
async def test_a_run_stopped_after_the_answer_is_recovered_with_the_final_event(resumable: bool):
    """The orchestrator stops once set_model_response's answer is committed: the run that
    recovers the invocation ends it with the final event, without calling the model again."""
    from orchestrator import ResumabilityConfig

    app = App(name="app", root_agent=_agent(call("set_model_response", city="Oslo", temp=3),
                                            "never asked"),
              resumability_config=ResumabilityConfig(is_resumable=resumable))
    rt = EmbeddedRuntime(AppRegistry([app]))
    failpoints.arm("flow.model_response_answered=error*1")
    try:
        inv = await rt.enqueue(app_name="app", user_id="u", new_message="weather in Oslo?")
        for _ in range(500):
            await asyncio.sleep(0.01)
            if not rt._drains and not rt.transport._tasks:
                break
    finally:
        failpoints.disarm()
    stopped = await rt.status(app.name, inv)
    assert stopped.status is not InvocationStatus.COMPLETED
    await rt.service.drain((app.name, "u", stopped.session_id))
    record, events, state = await _finished(rt, app, inv)
    assert record.status is InvocationStatus.COMPLETED, record.error
    assert events[-2:] == [
        ("root", ("response", "set_model_response", {"city": "Oslo", "temp": 3})),
        ("root", '{"city": "Oslo", "temp": 3}'),
    ]
    assert state == {"forecast": {"city": "Oslo", "temp": 3}}
    assert app.root_agent.model.call_count == 1  # type: ignore[union-attr]


def test_the_tool_declares_what_google_adks_declares() -> None:
    from google.adk.tools.set_model_response_tool import SetModelResponseTool as Theirs

    class Inner(pydantic.BaseModel):
        x: int = pydantic.Field(description="an x")

    class Rich(pydantic.BaseModel):
        city: str = pydantic.Field(description="The city", max_length=20)
        note: str | None = None
        tags: list[str] = pydantic.Field(default_factory=list, description="Tags")
        inner: Inner | None = pydantic.Field(None, description="Nested")
        inners: list[Inner] = pydantic.Field(default_factory=list)

    for schema in (Forecast, Rich, Inner):
        ours = SetModelResponseTool(schema)._get_declaration()
        theirs = Theirs(schema)._get_declaration()
        assert ours is not None and theirs is not None
        # The same parameters; the description is worded apart.
        assert ours.model_dump(exclude_none=True, exclude={"description"}) \
            == theirs.model_dump(exclude_none=True, exclude={"description"})
