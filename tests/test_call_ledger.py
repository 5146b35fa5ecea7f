"""CallLedger: what an invocation waits for, read from its log, around a tool confirmation."""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import Event, EventActions
from orchestrator.distributed.ledger import CallLedger

INV = "e-1"


def _calls(*calls: types.FunctionCall, waiting: set[str]) -> Event:
    return Event(author="agent", invocation_id=INV, long_running_tool_ids=waiting,
                 content=types.Content(role="model", parts=[
                     types.Part(function_call=c) for c in calls]))


def _answer(call_id: str, name: str, response: dict[str, Any], *, author: str = "agent",
            **actions: Any) -> Event:
    return Event(author=author, invocation_id=INV, actions=EventActions(**actions),
                 content=types.Content(role="user", parts=[types.Part(function_response=(
                     types.FunctionResponse(id=call_id, name=name, response=response)))]))


GATE = {"error": "This tool call requires confirmation, please approve or reject."}


def _gated() -> list[Event]:
    """A remote call X, its confirmation request C, and the gate's provisional answer to X."""
    call = types.FunctionCall(id="X", name="pay_out", args={"amount": 10})
    request = types.FunctionCall(id="C", name="adk_request_confirmation", args={
        "originalFunctionCall": call.model_dump(mode="json", exclude_none=True),
        "toolConfirmation": {"hint": "sure?", "confirmed": False}})
    return [
        _calls(call, waiting={"X"}),
        _calls(request, waiting={"C"}),
        _answer("X", "pay_out", GATE, requested_tool_confirmations={"X": {"hint": "sure?"}}),
    ]


def _confirm(response: dict[str, Any]) -> Event:
    return _answer("C", "adk_request_confirmation", response, author="user")


def test_a_call_waiting_for_its_confirmation_is_not_open_its_request_is():
    ledger = CallLedger.of(_gated(), INV)
    assert ledger.open == {"C"}  # a recovery must not send X's job unconfirmed
    assert ledger.answered == set() and ledger.responded == {"X"}
    assert ledger.approved("X") is None


def test_an_approved_call_is_open_until_its_real_answer():
    ledger = CallLedger.of([*_gated(), _confirm({"confirmed": True, "payload": {"n": 1}})], INV)
    assert ledger.open == {"X"} and [e.id for e in ledger.open_calls()] == ["X"]
    approved = ledger.approved("X")
    assert approved is not None and approved.confirmed and approved.payload == {"n": 1}
    ledger.record(_answer("X", "pay_out", {"paid": 10}))
    assert ledger.open == set() and ledger.answered == {"C", "X"}


def test_a_rejected_call_is_not_open_it_is_answered_without_a_job():
    for response in ({"confirmed": False}, {"confirmed": "yes", "unknown": 1}, {"response": "{"}):
        ledger = CallLedger.of([*_gated(), _confirm(response)], INV)
        assert ledger.open == set(), response  # nothing approved: no job, ever
        assert ledger.approved("X") is None


def test_events_of_other_invocations_do_not_count():
    events = _gated()
    stray = _confirm({"confirmed": True}).model_copy(update={"invocation_id": "e-2"})
    assert CallLedger.of([*events, stray], INV).open == {"C"}
