"""Events as google-adk 2.13 writes and answers them, checked against it directly.

Two behaviours: an event whose state holds a value of no JSON type is dumped as JSON with
that value's ``repr`` (and a warning) instead of failing, while the runtime's own stored
forms stay strict; and a confirmation answer sent again after its tool answered ends the
turn quietly (no model call, nothing yielded). Each scenario runs on both frameworks with
the helpers of ``test_adk_differences``; the module is skipped without google-adk 2.13.
"""

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from google.genai import types
from pydantic_core import PydanticSerializationError

from tests.golden import scenarios as s
from tests.test_adk_differences import (
    assert_same,
    confirmation_call_id,
    events_of,
    our_namespace,
)

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)


class Thing:
    """An object of the user's own class: pydantic has no JSON form for it."""

    def __repr__(self) -> str:
        return "Thing()"


@contextlib.contextmanager
def warnings_logged() -> Iterator[list[logging.LogRecord]]:
    """Collect the WARNING records either framework logs inside the block."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    # Other tests quiet the frameworks' logs (tests/support/adk_live.py): hear them here.
    quieted = {name: logging.getLogger(name).level for name in ("google_adk", "orchestrator")}
    for name in quieted:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield records
    finally:
        root.removeHandler(handler)
        for name, level in quieted.items():
            logging.getLogger(name).setLevel(level)


# --------------------------------------------------------------------------------------------
# State values of no JSON type


def put_things(tool_context: Any) -> str:
    """Put values pydantic writes as JSON (a datetime, a set) and one it cannot (a Thing)."""
    tool_context.state["thing"] = Thing()
    tool_context.state["when"] = datetime.datetime(2024, 1, 2)
    tool_context.state["tags"] = {"a"}
    return "ok"


async def unserialisable_state_scenario(adk: Any) -> dict[str, Any]:
    """A tool stores a Thing in state; the caller dumps the events it streamed as JSON."""
    h = s.Harness(adk)

    def put(tool_context: adk.ToolContext) -> str:
        """Put."""
        return put_things(tool_context)

    await h.start(adk.LlmAgent(name="root", model=h.model("m", s.fc("put"), "done"), tools=[put]))
    events = await h.turn(s.user_text("go"))
    session = await h.runner.session_service.get_session(
        app_name=s.APP_NAME, user_id=s.USER_ID, session_id=h.session_id)
    changed = [e for e in events if e.actions.state_delta]
    with warnings_logged() as records:
        dicts = [e.model_dump(mode="json", by_alias=True, exclude_none=True)["actions"]["stateDelta"]
                 for e in changed]
        texts = [e.model_dump_json(by_alias=True, exclude_none=True) for e in changed]
    stored = [e for e in session.events if e.actions.state_delta]
    return {
        "raised": h.turns[0]["raised"],
        "dicts": dicts,
        "texts_hold_repr": ['"thing":"Thing()"' in t for t in texts],
        "warned": bool(records) and all(r.levelno == logging.WARNING for r in records),
        # What the session keeps: the objects themselves, in the state and in the stored event.
        "state_types": {k: type(v).__name__ for k, v in session.state.items()},
        "stored_delta_types": [{k: type(v).__name__ for k, v in e.actions.state_delta.items()}
                               for e in stored],
    }


def test_a_state_value_of_no_json_type_is_dumped_as_its_repr_with_a_warning() -> None:
    result = assert_same(unserialisable_state_scenario)
    assert result["dicts"] == [{"thing": "Thing()", "when": "2024-01-02T00:00:00", "tags": ["a"]}]
    assert result["texts_hold_repr"] == [True] and result["warned"]
    assert result["state_types"] == {"thing": "Thing", "when": "datetime", "tags": "set"}
    assert result["stored_delta_types"] == [result["state_types"]]


def direct_dumps_scenario(adk: Any) -> dict[str, Any]:
    """Events built by hand: agent_state too, and ``exclude`` leaving the Thing out."""
    event = adk.Event(author="a", actions=adk.EventActions(
        state_delta={"thing": Thing(), "n": 1}, agent_state={"step": Thing()}))
    with warnings_logged() as excluded_records:
        excluded = event.model_dump(
            mode="json", include={"actions": {"state_delta"}},
            exclude={"actions": {"state_delta": {"thing"}}})
    with warnings_logged() as records:
        dumped = event.model_dump(mode="json", include={"actions": {"state_delta", "agent_state"}})
    return {
        "dumped": dumped,
        "warned_fields": sorted({f for r in records for f in ("state_delta", "agent_state")
                                 if f in r.getMessage()}),
        "excluded": excluded,
        "warned_when_excluded": len(excluded_records),
        "python_mode_keeps_objects": type(event.model_dump()["actions"]["state_delta"]["thing"])
        is Thing,
    }


def test_agent_state_falls_back_too_and_an_excluded_value_is_not_warned_about() -> None:
    result = assert_same(direct_dumps_scenario)
    assert result["dumped"] == {"actions": {"state_delta": {"thing": "Thing()", "n": 1},
                                            "agent_state": {"step": "Thing()"}}}
    assert result["warned_fields"] == ["agent_state", "state_delta"]
    assert result["warned_when_excluded"] == 0 and result["python_mode_keeps_objects"]


def test_the_runtimes_stored_forms_stay_strict() -> None:
    """What the Redis runtime stores or sends never holds a repr in place of a value.

    (Its session service refuses such state first, naming the key: test_redis_sessions.)
    """
    ns = our_namespace()
    event = ns.Event(author="a", actions=ns.EventActions(state_delta={"thing": Thing()}))
    for dump in (event.to_json, event.to_wire):
        with pytest.raises(PydanticSerializationError):
            dump()
    with pytest.raises(PydanticSerializationError):
        ns.Event(author="a", actions=ns.EventActions(agent_state={"step": Thing()})).to_json()
    assert ns.Event(author="a", actions=ns.EventActions(state_delta={"n": 1})).to_wire()[
        "actions"]["stateDelta"] == {"n": 1}


# --------------------------------------------------------------------------------------------
# A confirmation answer sent again


async def confirmation_resent_scenario(
    adk: Any, *, confirmed: bool, resumable: bool
) -> dict[str, Any]:
    """A tool needing a confirmation is confirmed (or rejected); the same answer comes again."""
    h = s.Harness(adk)
    paid: list[int] = []
    after_agent: list[str] = []

    def pay(amount: int) -> dict[str, Any]:
        """Pay."""
        paid.append(amount)
        return {"paid": amount}

    def note_after(callback_context: Any) -> None:
        after_agent.append(callback_context.agent_name)

    agent = adk.LlmAgent(
        name="root", tools=[adk.FunctionTool(pay, require_confirmation=True)],
        model=h.model("m", s.fc("pay", amount=50), "after1", "after2"),
        after_agent_callback=note_after)
    if resumable:
        app = adk.App(name=s.APP_NAME, root_agent=agent,
                      resumability_config=adk.ResumabilityConfig(is_resumable=True))
        h.runner = adk.InMemoryRunner(app=app)
        h.session_id = (await h.runner.session_service.create_session(
            app_name=s.APP_NAME, user_id=s.USER_ID)).id
    else:
        await h.start(agent)
    call_id = confirmation_call_id(await h.turn(s.user_text("go")))
    answer = s.function_response(call_id, "adk_request_confirmation", {"confirmed": confirmed})
    await h.turn(answer)
    callbacks_before_resend = len(after_agent)
    await h.turn(answer)
    record = await h.finish()
    return {
        "paid": paid,
        "events": events_of(record),
        "raised": [t["raised"] for t in record["turns"]],
        "model_calls": record["model_calls"],
        "after_agent_on_resend": len(after_agent) - callbacks_before_resend,
        "stored_tail": [(e["author"], e["payload"]) for e in record["session_events"][-2:]],
    }


@pytest.mark.parametrize("confirmed", [True, False], ids=["confirmed", "rejected"])
@pytest.mark.parametrize("resumable", [False, True], ids=["plain", "resumable"])
def test_a_confirmation_sent_again_calls_no_model_and_yields_nothing(
    confirmed: bool, resumable: bool
) -> None:
    result = assert_same(lambda adk: asyncio.run(
        confirmation_resent_scenario(adk, confirmed=confirmed, resumable=resumable)))
    assert result["paid"] == ([50] if confirmed else [])
    assert result["model_calls"] == 2 and result["after_agent_on_resend"] == 0
    # Nothing, or (a resumable app) only the agent's content-less end-of-run mark.
    assert result["events"][2] == ([["root", None, True]] if resumable else [])
    assert result["stored_tail"][-1] == (("root", None) if resumable else ("user", [[
        "response", "adk_request_confirmation", {"confirmed": confirmed}, "adk-id#1"]]))


async def resent_beside_an_answer_scenario(adk: Any) -> dict[str, Any]:
    """The confirmation is sent again together with the answer of a long-running call."""
    h = s.Harness(adk)
    paid: list[int] = []

    def pay(amount: int) -> dict[str, Any]:
        """Pay."""
        paid.append(amount)
        return {"paid": amount}

    def ask(question: str) -> None:
        """Ask a human."""
        return None

    model = h.model("m", [s.fc("pay", amount=50), s.fc("ask", question="?")], "after1", "after2")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[
        adk.FunctionTool(pay, require_confirmation=True), adk.LongRunningFunctionTool(ask)]))
    first = await h.turn(s.user_text("go"))
    confirmation_id = confirmation_call_id(first)
    ask_id = next(c.id for e in first for c in e.get_function_calls() if c.name == "ask")
    confirm = types.Part(function_response=types.FunctionResponse(
        id=confirmation_id, name="adk_request_confirmation", response={"confirmed": True}))
    await h.turn(types.Content(role="user", parts=[confirm]))
    await h.turn(types.Content(role="user", parts=[confirm, types.Part(
        function_response=types.FunctionResponse(id=ask_id, name="ask", response={"a": "yes"}))]))
    record = await h.finish()
    return {"paid": paid, "events": events_of(record), "model_calls": record["model_calls"]}


def test_a_confirmation_sent_again_beside_another_answer_lets_the_turn_go_on() -> None:
    result = assert_same(resent_beside_an_answer_scenario)
    assert result["paid"] == [50] and result["model_calls"] == 3
    assert result["events"][2] == [["root", [["text", "after2"]], True]]
