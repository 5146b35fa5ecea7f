"""Behaviour differences once found against google-adk 2.13, now checked against it directly.

Each test runs one small scenario on google-adk (installed with the ``devui`` extra) and on
``orchestrator``, written once against a namespace of either framework's classes, and compares
what a user of the framework sees: events, what the model was sent, what a tool received,
what was logged. The whole module is skipped when google-adk 2.13 is not installed.
"""

import asyncio
import contextlib
import datetime
import enum
import functools
import importlib
import json
import logging
import re
import threading
from types import SimpleNamespace
from typing import Any

import anyio
import pydantic
import pytest
from google.genai import types

from tests.golden import scenarios as s

google_adk = pytest.importorskip(
    "google.adk", reason="google-adk (the devui extra) is needed to compare against it"
)
pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore:.*EXPERIMENTAL.*:UserWarning"
)
if google_adk.__version__ != "2.13.0":
    pytest.skip(f"compares with google-adk 2.13.0, found {google_adk.__version__}",
                allow_module_level=True)


NAMES = {
    # name: (google-adk module, orchestrator module)
    "AgentTool": ("google.adk.tools", "orchestrator"),
    "App": ("google.adk.apps", "orchestrator"),
    "BaseAgent": ("google.adk.agents", "orchestrator"),
    "BaseAgentState": ("google.adk.agents.base_agent", "orchestrator"),
    "BaseLlm": ("google.adk.models", "orchestrator"),
    "BasePlugin": ("google.adk.plugins", "orchestrator.plugins"),
    "BaseTool": ("google.adk.tools", "orchestrator"),
    "Event": ("google.adk.events", "orchestrator"),
    "EventActions": ("google.adk.events", "orchestrator"),
    "FunctionTool": ("google.adk.tools", "orchestrator"),
    "InMemoryRunner": ("google.adk.runners", "orchestrator"),
    "InMemorySessionService": ("google.adk.sessions", "orchestrator"),
    "InvocationContext": ("google.adk.agents.invocation_context", "orchestrator"),
    "LlmAgent": ("google.adk.agents", "orchestrator"),
    "LlmCallsLimitExceededError": ("google.adk.agents.invocation_context", "orchestrator.errors"),
    "LlmCapabilities": ("google.adk.models", "orchestrator.models"),
    "LlmResponse": ("google.adk.models", "orchestrator"),
    "LongRunningFunctionTool": ("google.adk.tools", "orchestrator"),
    "LoopAgent": ("google.adk.agents", "orchestrator"),
    "ReflectAndRetryToolPlugin": ("google.adk.plugins.reflect_retry_tool_plugin",
                                  "orchestrator.plugins.reflect_retry_tool_plugin"),
    "ResumabilityConfig": ("google.adk.apps", "orchestrator"),
    "RunConfig": ("google.adk.agents", "orchestrator"),
    "SequentialAgent": ("google.adk.agents", "orchestrator"),
    "Session": ("google.adk.sessions", "orchestrator"),
    "StreamingMode": ("google.adk.agents.run_config", "orchestrator"),
    "ToolContext": ("google.adk.tools", "orchestrator"),
    "TransferToAgentTool": ("google.adk.tools.transfer_to_agent_tool",
                            "orchestrator.tools.transfer_to_agent_tool"),
}


def adk_namespace() -> SimpleNamespace:
    """google-adk's classes under the names the scenarios use."""
    return SimpleNamespace(**{
        name: getattr(importlib.import_module(modules[0]), name) for name, modules in NAMES.items()
    })


def our_namespace() -> SimpleNamespace:
    """orchestrator's classes under the same names."""
    return SimpleNamespace(**{
        name: getattr(importlib.import_module(modules[1]), name) for name, modules in NAMES.items()
    })


def on_both(scenario: Any) -> tuple[Any, Any]:
    """Run ``scenario(namespace)`` on google-adk, then on orchestrator; return both results."""
    run = (lambda ns: asyncio.run(scenario(ns))) if asyncio.iscoroutinefunction(scenario) \
        else scenario
    return run(adk_namespace()), run(our_namespace())


def assert_same(scenario: Any) -> Any:
    """Both frameworks give the same result; return it."""
    theirs, ours = on_both(scenario)
    assert ours == theirs, f"\ngoogle-adk:   {theirs}\norchestrator: {ours}"
    return ours


def events_of(record: dict[str, Any]) -> list[list[Any]]:
    """Per turn, each yielded event as (author, payload, final); raw call ids in payloads hidden.

    (A confirmation request quotes the original call, id included, in its arguments.)
    """
    return json.loads(re.sub(
        r"adk-[0-9a-f]{8}-[0-9a-f-]{27}", "<adk-id>",
        json.dumps([[(e["author"], e["payload"], e["final"]) for e in t["events"]]
                    for t in record["turns"]]),
    ))


def confirmation_call_id(events: list[Any]) -> str:
    """The id of the ``adk_request_confirmation`` call among ``events``."""
    for event in events:
        for call in event.get_function_calls():
            if call.name == "adk_request_confirmation":
                return call.id
    raise AssertionError("no confirmation was requested")


# --------------------------------------------------------------------------------------------
# Agents


class Mood(enum.Enum):
    CALM = "calm"


async def agent_state_scenario(adk: Any) -> dict[str, Any]:
    class Checkpoint(adk.BaseAgentState):
        step: int
        since: datetime.datetime
        mood: Mood
        seen: tuple[str, ...]

    stored: list[Any] = []

    class Stepper(adk.BaseAgent):
        async def _run_async_impl(self, ctx: Any) -> Any:
            checkpoint = Checkpoint(step=2, since=datetime.datetime(2026, 1, 2, 3, 4, 5),
                                    mood=Mood.CALM, seen=("a", "b"))
            ctx.set_agent_state(self.name, agent_state=checkpoint)
            stored.append(ctx.agent_states[self.name])
            yield self._create_agent_state_event(ctx)

    app = adk.App(name="app", root_agent=Stepper(name="stepper"),
                  resumability_config=adk.ResumabilityConfig(is_resumable=True))
    runner = adk.InMemoryRunner(app=app)
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    yielded = [e.actions.agent_state async for e in runner.run_async(
        user_id="u", session_id=session.id, new_message=s.user_text("go"))]
    session = await runner.session_service.get_session(
        app_name="app", user_id="u", session_id=session.id)
    persisted = [e.actions.agent_state for e in session.events if e.author == "stepper"]
    return {
        "kept": [(type(v).__name__, v) for v in stored],
        "yielded": [(type(v).__name__, v) for v in yielded],
        "persisted": [(type(v).__name__, v) for v in persisted],
    }


def test_agent_states_are_kept_and_sent_as_json_dicts() -> None:
    result = assert_same(agent_state_scenario)
    assert result["kept"][0] == ("dict", {"step": 2, "since": "2026-01-02T03:04:05",
                                          "mood": "calm", "seen": ["a", "b"]})


def populate_scenario(adk: Any) -> dict[str, Any]:
    def event(author: str, **actions: Any) -> Any:
        return adk.Event(invocation_id="e-1", author=author,
                         content=s.user_text("x") if not actions else None,
                         actions=adk.EventActions(**actions))

    events = [event("user"), event("seq", agent_state={"current_sub_agent": "b"}),
              event("a", end_of_agent=True), event("b")]
    result = {}
    for resumable in (False, True):
        agent = adk.SequentialAgent(name="seq", sub_agents=[adk.LlmAgent(name="a"),
                                                            adk.LlmAgent(name="b")])
        ctx = adk.InvocationContext(
            session_service=adk.InMemorySessionService(), invocation_id="e-1", agent=agent,
            session=adk.Session(id="s", app_name="app", user_id="u", events=events),
            resumability_config=adk.ResumabilityConfig(is_resumable=resumable),
        )
        ctx.populate_invocation_agent_states()
        result[resumable] = (dict(ctx.end_of_agents), dict(ctx.agent_states))
    return result


def test_agent_end_flags_are_not_rebuilt_when_the_app_is_not_resumable() -> None:
    result = assert_same(populate_scenario)
    assert result[False] == ({}, {})
    assert result[True][0] == {"seq": False, "a": True, "b": False}


async def loop_answers_scenario(adk: Any) -> list[tuple[str, str]]:
    """A resumable ``loop[seq[a, b]]`` twice; a asks a human (long-running) in each iteration."""
    h = s.Harness(adk)

    def ask(what: str) -> None:
        """Ask a human."""
        return None

    a = adk.LlmAgent(name="a", model=h.model("a", s.fc("ask", what="1"), "A1",
                                             s.fc("ask", what="2"), "A2"),
                     tools=[adk.LongRunningFunctionTool(ask)])
    b = adk.LlmAgent(name="b", model=h.model("b", "B1", "B2"))
    loop = adk.LoopAgent(name="loop", max_iterations=2,
                         sub_agents=[adk.SequentialAgent(name="seq", sub_agents=[a, b])])
    runner = adk.InMemoryRunner(app=adk.App(
        name="app", root_agent=loop, resumability_config=adk.ResumabilityConfig(is_resumable=True)))
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    said: list[tuple[str, str]] = []
    message, invocation_id = s.user_text("go"), None
    for _ in range(3):
        events = [e async for e in runner.run_async(
            user_id="u", session_id=session.id, new_message=message, invocation_id=invocation_id)]
        said += [(e.author, p.text or f"call {p.function_call.name}") for e in events
                 for p in (e.content.parts if e.content else None) or []
                 if p.text or p.function_call]
        asks = [c for e in events for c in e.get_function_calls() if c.name == "ask"]
        if not asks:
            break
        message = s.function_response(asks[0].id, "ask", {"ok": True})
        invocation_id = events[0].invocation_id
    return said


def test_an_agent_answered_in_a_later_loop_iteration_goes_on() -> None:
    """The agents below a loop start afresh each iteration, in the rebuilt end flags too:
    a, ended in iteration 1, goes on with the answer to its iteration 2 call."""
    assert assert_same(loop_answers_scenario) == [
        ("a", "call ask"), ("a", "A1"), ("b", "B1"), ("a", "call ask"), ("a", "A2"), ("b", "B2")]


def duplicate_names_scenario(adk: Any) -> list[list[list[str]]]:
    def agent(name: str, *subs: Any) -> Any:
        return adk.SequentialAgent(name=name, sub_agents=list(subs))

    trees = [
        lambda: agent("root", agent("a"), agent("b")),                          # unique
        lambda: agent("root", agent("a", agent("x")), agent("b", agent("x"))),  # in 2 branches
        lambda: agent("root", agent("x"), agent("x"), agent("y"), agent("y")),  # two names
        lambda: agent("root", agent("a", agent("root"))),                       # the root's own
        lambda: agent("root", agent("a", agent("x"), agent("x"))),              # one level down
    ]
    warned = []
    for build in trees:
        records: list[logging.LogRecord] = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = records.append  # type: ignore[method-assign]
        logging.getLogger().addHandler(handler)
        # Other tests quiet google-adk's logs (tests/support/adk_live.py): hear them here.
        quieted = {name: logging.getLogger(name).level for name in ("google_adk", "orchestrator")}
        for name in quieted:
            logging.getLogger(name).setLevel(logging.WARNING)
        try:
            build()
        finally:
            logging.getLogger().removeHandler(handler)
            for name, level in quieted.items():
                logging.getLogger(name).setLevel(level)
        warned.append([sorted(re.findall(r"`(\w+)`", r.getMessage())) for r in records
                       if "unique" in r.getMessage()])
    return warned


def test_duplicate_agent_names_are_warned_once_naming_them() -> None:
    warned = assert_same(duplicate_names_scenario)
    assert warned == [[], [["x"]], [["x", "y"]], [["root"]], [["x"]]]


# --------------------------------------------------------------------------------------------
# Tools


async def own_transfer_tool_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    called: list[str] = []

    def transfer_to_agent(agent_name: str) -> str:
        """Note which agent the user asked for."""
        called.append(agent_name)
        return f"noted {agent_name}"

    sub = adk.LlmAgent(name="sub", model=h.model("sub_model", "sub here"))
    model = h.model("root_model", s.fc("transfer_to_agent", agent_name="sub"), "root again")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[transfer_to_agent],
                               sub_agents=[sub]))
    await h.turn(s.user_text("go"))
    record = await h.finish()
    return {"called": called, "events": events_of(record),
            "tools": [r["tools"] for r in record["requests"]]}


def test_an_agents_own_transfer_to_agent_tool_is_called_not_replaced() -> None:
    result = assert_same(own_transfer_tool_scenario)
    assert result["called"] == ["sub"]


def tool_declarations_scenario(adk: Any) -> dict[str, Any]:
    class AsyncDoubler:
        async def __call__(self, x: int) -> int:
            """Double x, asynchronously."""
            return 2 * x

    class SyncDoubler:
        def __call__(self, x: int) -> int:
            """Double x."""
            return 2 * x

    class DocumentedDoubler:
        """Doubles numbers."""

        async def __call__(self, x: int) -> int:
            """Not this one."""
            return 2 * x

    class Undocumented:
        def __call__(self, x: int) -> int:
            return x

    def triple(x: int, y: int) -> int:
        """Multiply x by y."""
        return x * y

    callables = [AsyncDoubler(), SyncDoubler(), DocumentedDoubler(), Undocumented(),
                 functools.partial(triple, y=3)]
    return {
        type(f).__name__: (adk.FunctionTool(f).description,
                           adk.FunctionTool(f)._get_declaration().description)
        for f in callables
    }


def test_a_callable_object_is_described_by_its_call_docstring() -> None:
    result = assert_same(tool_declarations_scenario)
    assert result["AsyncDoubler"] == ("Double x, asynchronously.",) * 2


def long_running_declaration_scenario(adk: Any) -> list[str]:
    def undocumented(job: str) -> None:
        return None

    def documented(job: str) -> None:
        """Start a job."""
        return None

    return [adk.LongRunningFunctionTool(f)._get_declaration().description
            for f in (undocumented, documented)]


def test_a_long_running_tool_without_docstring_has_no_leading_blank_lines() -> None:
    undocumented, documented = assert_same(long_running_declaration_scenario)
    assert undocumented.startswith("NOTE:")
    assert documented.startswith("Start a job.\n\nNOTE:")


def transfer_tool_scenario(adk: Any) -> dict[str, Any]:
    plain = adk.TransferToAgentTool(agent_names=["billing", "support"])
    with_reason = adk.TransferToAgentTool(agent_names=["billing"], include_transfer_reason=True)
    declaration = plain._get_declaration()
    return {
        "is_function_tool": isinstance(plain, adk.FunctionTool),
        "name": declaration.name,
        "parameters": declaration.parameters_json_schema,
        "with_reason": sorted(with_reason._get_declaration().parameters_json_schema["properties"]),
    }


def test_transfer_to_agent_tool_is_a_function_tool() -> None:
    result = assert_same(transfer_tool_scenario)
    assert result["is_function_tool"]
    assert result["parameters"]["properties"]["agent_name"]["enum"] == ["billing", "support"]


class Item(pydantic.BaseModel):
    name: str
    qty: int = 1


async def list_of_models_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    received: list[Any] = []

    def order(items: list[Item], gift: Item | None = None) -> dict[str, int]:
        """Order items."""
        received.extend((type(i).__name__, i.model_dump() if isinstance(i, Item) else i)
                        for i in [*items, gift])
        return {"lines": len(items)}

    items = [{"name": "tea"}, {"name": "cup", "qty": 2}]
    model = h.model("m", s.fc("order", items=items, gift={"name": "spoon"}), "ordered")
    await h.start(adk.LlmAgent(name="shop", model=model, tools=[order]))
    await h.turn(s.user_text("order"))
    record = await h.finish()
    return {"received": received, "events": events_of(record)}


def test_list_of_model_arguments_arrive_as_model_instances() -> None:
    result = assert_same(list_of_models_scenario)
    assert [kind for kind, _ in result["received"]] == ["Item", "Item", "Item"]


async def confirmation_scenario(adk: Any, *, static: bool) -> dict[str, Any]:
    """A booking tool asks to confirm the room (a payload to fill in); the user says no."""
    h = s.Harness(adk)
    seen: list[Any] = []

    def book(nights: int, tool_context: adk.ToolContext) -> dict[str, Any]:
        """Book a room."""
        confirmation = tool_context.tool_confirmation
        seen.append(None if confirmation is None else (confirmation.confirmed,
                                                       confirmation.payload))
        if static:
            return {"booked": nights}
        if confirmation is None:
            tool_context.request_confirmation(hint="Which room?", payload={"room": "single"})
            return {"status": "waiting for the room"}
        if not confirmation.confirmed:
            return {"status": "not booked", "why": (confirmation.payload or {}).get("reason")}
        return {"booked": nights, "room": confirmation.payload["room"]}

    tool = adk.FunctionTool(book, require_confirmation=True) if static else book
    model = h.model("m", s.fc("book", nights=2), "first answer", "second answer")
    await h.start(adk.LlmAgent(name="hotel", model=model, tools=[tool]))
    first = await h.turn(s.user_text("book it"))
    await h.turn(s.function_response(
        confirmation_call_id(first), "adk_request_confirmation",
        {"confirmed": False, "payload": {"reason": "too expensive"}},
    ))
    record = await h.finish()
    return {"tool_saw": seen, "events": events_of(record),
            "model_saw": [r["contents"] for r in record["requests"]]}


def test_a_rejected_confirmation_with_a_payload_reaches_the_tool_that_asked_for_it() -> None:
    result = assert_same(lambda adk: asyncio.run(confirmation_scenario(adk, static=False)))
    assert result["tool_saw"] == [None, (False, {"reason": "too expensive"})]


def test_a_rejected_confirmation_of_a_tool_requiring_one_answers_rejected() -> None:
    result = assert_same(lambda adk: asyncio.run(confirmation_scenario(adk, static=True)))
    assert result["tool_saw"] == []


async def direct_run_async_scenario(adk: Any) -> dict[str, Any]:
    """A tool of the user's own delegates to a FunctionTool that requires confirmation."""
    h = s.Harness(adk)
    paid: list[int] = []

    def pay(amount: int) -> dict[str, Any]:
        """Pay an amount."""
        paid.append(amount)
        return {"paid": amount}

    inner = adk.FunctionTool(pay, require_confirmation=True)

    class PayVia(adk.BaseTool):
        def _get_declaration(self) -> types.FunctionDeclaration:
            return types.FunctionDeclaration(
                name=self.name, description=self.description,
                parameters_json_schema={"type": "object",
                                        "properties": {"amount": {"type": "integer"}}},
            )

        async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
            return await inner.run_async(args=args, tool_context=tool_context)

    model = h.model("m", s.fc("pay_via", amount=5), "paid")
    await h.start(adk.LlmAgent(name="cashier", model=model,
                               tools=[PayVia(name="pay_via", description="Pay via a provider.")]))
    first = await h.turn(s.user_text("pay 5"))
    await h.turn(s.function_response(confirmation_call_id(first), "adk_request_confirmation",
                                     {"confirmed": True}))
    record = await h.finish()
    return {"paid": paid, "events": events_of(record)}


def test_function_tool_run_async_itself_enforces_require_confirmation() -> None:
    result = assert_same(direct_run_async_scenario)
    assert result["paid"] == [5]
    first_turn = result["events"][0]
    assert first_turn[1][1][0][1] == "adk_request_confirmation"


async def sync_and_async_tools_scenario(adk: Any) -> dict[str, Any]:
    """One model turn calls sync and async tools; each notes when it starts and ends."""
    h = s.Harness(adk)
    notes: list[str] = []

    def sync_a() -> str:
        """A."""
        notes.append("sync_a")
        return "a"

    async def async_b() -> str:
        """B."""
        notes.append("async_b")
        await asyncio.sleep(0)
        notes.append("async_b done")
        return "b"

    def sync_c() -> str:
        """C."""
        notes.append("sync_c")
        return "c"

    tools = [sync_a, async_b, sync_c]
    calls = [s.fc(name) for name in ("async_b", "sync_a", "sync_c", "sync_a")]
    await h.start(adk.LlmAgent(name="root", model=h.model("m", calls, "done"), tools=tools))
    await h.turn(s.user_text("go"))
    record = await h.finish()
    return {"notes": notes, "events": events_of(record)}


def test_answers_of_sync_and_async_tools_keep_call_order() -> None:
    """The calls of a turn are answered in one event, in call order, as in google-adk.

    The order the tools run in is ours (see the README): google-adk runs a sync tool on the
    event loop, whole, before anything else; here it runs in a helper thread.
    """
    theirs, ours = on_both(sync_and_async_tools_scenario)
    assert ours["events"] == theirs["events"]
    assert theirs["notes"] == ["async_b", "sync_a", "sync_c", "sync_a", "async_b done"]
    assert sorted(ours["notes"]) == sorted(theirs["notes"])


async def side_by_side_scenario(our: Any) -> list[list[Any]]:
    """Two sync tools that each wait for the other: they must run at the same time."""
    h = s.Harness(our)
    meet = threading.Barrier(2, timeout=30)  # a deadlock detector, not a speed limit

    def left() -> str:
        """Left."""
        meet.wait()
        return "left"

    def right() -> str:
        """Right."""
        meet.wait()
        return "right"

    model = h.model("m", [s.fc("left"), s.fc("right")], "met")
    await h.start(our.LlmAgent(name="root", model=model, tools=[left, right]))
    await h.turn(s.user_text("go"))
    return events_of(await h.finish())


def test_sync_tools_of_one_turn_run_side_by_side_off_the_event_loop() -> None:
    """Our choice: sync tools run in helper threads (google-adk would block its loop here)."""
    events = asyncio.run(side_by_side_scenario(our_namespace()))
    assert events[0][1][1] == [["response", "left", {"result": "left"}, "adk-id#0"],
                               ["response", "right", {"result": "right"}, "adk-id#1"]]


# --------------------------------------------------------------------------------------------
# Runner and flow


async def custom_metadata_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)

    def echo(text: str) -> str:
        """Echo the text."""
        return text

    def own_metadata(callback_context: Any, llm_response: Any) -> None:
        if llm_response.content and llm_response.content.parts[0].text:
            llm_response.custom_metadata = {"tenant": "the agent's", "own": True}

    model = h.model("m", s.fc("echo", text="x"), "done")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[echo],
                               after_model_callback=own_metadata))
    run_config = adk.RunConfig(custom_metadata={"tenant": "acme", "__adk_internal_x": 1})
    yielded = await h.turn(s.user_text("go"), run_config=run_config)
    session = await h.get_session()
    return {
        "yielded": [(e.author, e.custom_metadata) for e in yielded],
        "persisted": [(e.author, e.custom_metadata) for e in session.events],
    }


def test_run_config_custom_metadata_reaches_every_event_of_the_invocation() -> None:
    result = assert_same(custom_metadata_scenario)
    assert result["yielded"][0] == ("root", {"tenant": "acme"})
    assert result["yielded"][-1] == ("root", {"tenant": "the agent's", "own": True})


async def labels_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    labels: list[tuple[str, Any]] = []

    class LabelledModel(h.model_class):  # type: ignore[name-defined,misc]
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            labels.append((self.model, dict(llm_request.config.labels or {})))
            async for response in super().generate_content_async(llm_request, stream):
                yield response

    def before_model(callback_context: Any, llm_request: Any) -> None:
        labels.append(("before_model_callback", dict(llm_request.config.labels or {})))

    def model(name: str, *script: Any) -> Any:
        return LabelledModel(model=name, script=list(script), recorder=h)

    sub = adk.LlmAgent(name="billing", model=model("billing_model", "billing here"),
                       generate_content_config=types.GenerateContentConfig(labels={"team": "b"}))
    root = adk.LlmAgent(name="root", model=model("root_model", s.fc("transfer_to_agent",
                                                                     agent_name="billing")),
                        sub_agents=[sub], before_model_callback=before_model)
    await h.start(root)
    await h.turn(s.user_text("invoice?"), run_config=adk.RunConfig(labels={"env": "test"}))
    return {"labels": labels}


def test_model_requests_are_labelled_with_the_agent_name() -> None:
    result = assert_same(labels_scenario)
    assert ("billing_model", {"team": "b", "env": "test", "adk_agent_name": "billing"}) \
        in result["labels"]


async def later_answers_scenario(adk: Any) -> dict[str, Any]:
    """Long-running calls answered in several steps; then the conversation goes on."""
    h = s.Harness(adk)

    def start_job(job: str) -> None:
        """Start a job."""
        return None

    def start_review(job: str) -> dict[str, str]:
        """Start a review."""
        return {"status": "pending"}

    model = h.model(
        "m",
        [s.fc("start_job", job="j"), s.fc("start_review", job="j")], "Both started.",
        "Progress noted.", "All done.", "Anything else?",
    )
    await h.start(adk.LlmAgent(name="root", model=model, tools=[
        adk.LongRunningFunctionTool(start_job), adk.LongRunningFunctionTool(start_review)]))
    first = await h.turn(s.user_text("go"))
    job_id, review_id = [c.id for c in first[0].get_function_calls()]
    await h.turn(s.function_response(job_id, "start_job", {"progress": "50%"}))
    await h.turn(types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(
            id=job_id, name="start_job", response={"progress": "100%"})),
        types.Part(function_response=types.FunctionResponse(
            id=review_id, name="start_review", response={"status": "approved"})),
    ]))
    await h.turn(s.user_text("thanks"))
    record = await h.finish()
    return {"model_saw": [r["contents"] for r in record["requests"]]}


def test_a_later_answer_to_a_long_running_call_replaces_the_earlier_one_in_history() -> None:
    result = assert_same(later_answers_scenario)
    last = result["model_saw"][-1]
    answers = [c["parts"] for c in last if c["parts"][0][0] == "response"]
    assert answers == [[["response", "start_job", {"progress": "100%"}, None],
                        ["response", "start_review", {"status": "approved"}, None]]]


async def answers_to_two_turns_scenario(adk: Any) -> dict[str, Any]:
    """Two model turns each make a long-running call; one user message answers both."""
    h = s.Harness(adk)

    def start_job(job: str) -> dict[str, str]:
        """Start a job."""
        return {"status": "pending"}

    def ask_manager(job: str) -> None:
        """Ask the manager."""
        return None

    model = h.model("m", s.fc("start_job", job="j"), s.fc("ask_manager", job="j"),
                    "All settled.", "Anything else?")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[
        adk.LongRunningFunctionTool(start_job), adk.LongRunningFunctionTool(ask_manager)]))
    first = await h.turn(s.user_text("go"))
    job_id, manager_id = [c.id for e in first for c in e.get_function_calls()]
    await h.turn(types.Content(role="user", parts=[
        types.Part(function_response=types.FunctionResponse(
            id=job_id, name="start_job", response={"status": "done"})),
        types.Part(function_response=types.FunctionResponse(
            id=manager_id, name="ask_manager", response={"ok": True})),
    ]))
    await h.turn(s.user_text("thanks"))
    record = await h.finish()
    return {"last_request": record["requests"][-1]["contents"]}


def test_a_message_answering_two_turns_calls_shows_each_turn_only_its_answers() -> None:
    """A google-adk bug we do not copy (README): it shows the whole message after each turn."""
    theirs, ours = on_both(answers_to_two_turns_scenario)
    job = ["response", "start_job", {"status": "done"}, None]
    manager = ["response", "ask_manager", {"ok": True}, None]
    answers = [c["parts"] for c in ours["last_request"] if c["parts"][0][0] == "response"]
    assert answers == [[job], [manager]]
    adk_answers = [c["parts"] for c in theirs["last_request"] if c["parts"][0][0] == "response"]
    assert adk_answers == [[job, manager], [job, manager]]


def reflect_and_retry_subclass_scenario(max_retries: int) -> Any:
    """A subclass of the retry plugin that words its own answers, as google-adk's allows."""

    async def scenario(adk: Any) -> dict[str, Any]:
        h = s.Harness(adk)

        class TerseRetries(adk.ReflectAndRetryToolPlugin):
            def _create_tool_reflection_response(self, tool, tool_args, error, retry_count):
                return {"retry": retry_count, "why": self._format_error_details(error)}

            def _get_tool_retry_exceed_msg(self, tool, tool_args, error):
                return {"gave_up_on": tool.name}

        def flaky(n: int) -> dict[str, int]:
            """Fail every time."""
            raise ValueError(f"no {n}")

        agent = adk.LlmAgent(name="root", tools=[flaky], model=h.model(
            "m", s.fc("flaky", n=1), s.fc("flaky", n=2), "I give up."))
        await h.start(agent, plugins=[TerseRetries(
            max_retries=max_retries, throw_exception_if_retry_exceeded=False)])
        await h.turn(s.user_text("go"))
        record = await h.finish()
        return {"answers": [e["payload"][0][2] for e in record["session_events"]
                            if e["payload"] and e["payload"][0][0] == "response"]}

    return scenario


@pytest.mark.parametrize(("max_retries", "answers"), [
    # An answer of the subclass's own shape is not the plugin's: after_tool takes it for a
    # success and resets the count (google-adk does the same), so each failure is the first.
    (1, [{"retry": 1, "why": "ValueError: no 1"}, {"retry": 1, "why": "ValueError: no 2"}]),
    (0, [{"gave_up_on": "flaky"}, {"gave_up_on": "flaky"}]),
])
def test_a_retry_plugin_subclass_words_its_answers_as_in_google_adk(max_retries, answers) -> None:
    assert assert_same(reflect_and_retry_subclass_scenario(max_retries))["answers"] == answers


# --------------------------------------------------------------------------------------------
# State


async def stored_sessions_scenario(adk: Any) -> dict[str, Any]:
    """What a test written for google-adk reads of its InMemorySessionService's dictionaries."""
    service = adk.InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u", session_id="s1",
                                           state={"a": 1, "user:name": "Ada", "app:v": 2})
    await service.append_event(session, adk.Event(
        author="user", invocation_id="e-1",
        actions=adk.EventActions(state_delta={"b": 2, "user:seen": True})))
    stored = service.sessions["app"]["u"]["s1"]
    return {"apps": list(service.sessions), "state": stored.state,
            "events": [e.author for e in stored.events],
            "user_state": service.user_state, "app_state": service.app_state}


def test_an_in_memory_session_services_stores_read_as_google_adks() -> None:
    result = assert_same(stored_sessions_scenario)
    assert result["state"] == {"a": 1, "b": 2}
    assert result["user_state"] == {"app": {"u": {"name": "Ada", "seen": True}}}


async def nested_state_writes_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)

    def add_to_cart(item: str, tool_context: Any) -> dict[str, Any]:
        """Add an item to the cart."""
        tool_context.state["cart"].append(item)  # a list read from state, changed in place
        tool_context.state["profile"]["visits"] += 1
        return {"cart": list(tool_context.state["cart"])}

    def count_turns(callback_context: Any) -> None:
        callback_context.state["stats"]["turns"] += 1  # from a callback

    agent = adk.LlmAgent(
        name="shop", tools=[add_to_cart], before_agent_callback=count_turns,
        model=h.model("m", s.fc("add_to_cart", item="apple"), "added",
                      s.fc("add_to_cart", item="pear"), "added"))
    await h.start(agent, state={"cart": [], "profile": {"visits": 0}, "stats": {"turns": 0}})
    await h.turn(s.user_text("add apple"))
    await h.turn(s.user_text("add pear"))
    record = await h.finish()
    return {"state": record["session_state"],
            "deltas": [(e["author"], e["state_delta"]) for e in record["session_events"]
                       if e["state_delta"]]}


async def model_callbacks_nested_writes_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)

    def before_model(callback_context: Any, llm_request: Any) -> None:
        callback_context.state["calls"].append("before")

    def after_model(callback_context: Any, llm_response: Any) -> None:
        callback_context.state["stats"]["responses"] += 1

    agent = adk.LlmAgent(name="root", model=h.model("m", "ok", "ok again"),
                         before_model_callback=before_model, after_model_callback=after_model)
    await h.start(agent, state={"calls": [], "stats": {"responses": 0}})
    await h.turn(s.user_text("hi"))
    await h.turn(s.user_text("again"))
    record = await h.finish()
    return {"state": record["session_state"],
            "deltas": [e["state_delta"] for e in record["session_events"]]}


def test_model_callbacks_writes_into_containers_read_from_state_are_recorded() -> None:
    result = assert_same(model_callbacks_nested_writes_scenario)
    assert result["state"] == {"calls": ["before", "before"], "stats": {"responses": 2}}


def test_writes_into_a_dict_or_list_read_from_state_are_recorded() -> None:
    result = assert_same(nested_state_writes_scenario)
    assert result["state"] == {"cart": ["apple", "pear"], "profile": {"visits": 2},
                               "stats": {"turns": 2}}


async def settled_beside_gated_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)

    def pay(amount: int) -> dict[str, Any]:
        """Pay."""
        return {"paid": amount}

    tool = adk.FunctionTool(pay, require_confirmation=lambda amount: amount > 10)
    await h.start(adk.LlmAgent(name="root", tools=[tool], model=h.model(
        "m", [s.fc("pay", amount=5), s.fc("pay", amount=50)], "done")))
    events = await h.turn(s.user_text("pay both"))
    return {"answers": [(e.author, e.actions.skip_summarization, e.is_final_response())
                        for e in events if e.get_function_responses()]}


def test_settled_answers_beside_a_confirmation_are_not_the_final_response() -> None:
    # One call of the turn answered, the other waiting for its confirmation: the turn is
    # not over, so the event holding the settled answer is no final response.
    result = assert_same(settled_beside_gated_scenario)
    assert result["answers"] == [("root", None, False)]


async def agent_tool_child_error_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    child = adk.LlmAgent(name="helper", description="Helps",
                         model=h.model("c", s.Raise("child boom")))
    root = adk.LlmAgent(name="root", model=h.model("r", s.fc("helper", request="do it")),
                        tools=[adk.AgentTool(agent=child)])
    await h.start(root)
    await h.turn(s.user_text("x"))
    record = await h.finish()
    return {"raised": record["turns"][0]["raised"],
            "stored": [(e["author"], e["error_code"], e["error_message"])
                       for e in record["session_events"]]}


def test_an_agent_tools_error_leaves_an_error_event_in_the_callers_session() -> None:
    result = assert_same(agent_tool_child_error_scenario)
    assert result["stored"][-1] == ("root", "RuntimeError", "child boom")


async def static_and_templated_instruction_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    sent: list[Any] = []

    def shown(text: str) -> str:  # the fenced block without the note before it (worded apart)
        return text[text.rindex("<<<BEGIN"):] if "<<<BEGIN" in text else text

    def before_model(callback_context: Any, llm_request: Any) -> None:
        sent.append((str(llm_request.config.system_instruction),
                     [(c.role, [shown(p.text or "") for p in c.parts or []])
                      for c in llm_request.contents]))

    agent = adk.LlmAgent(name="root", model=h.model("m", "ok", "ok again"),
                         static_instruction="You are a travel bot.",
                         instruction="The user's name is {name}.",
                         before_model_callback=before_model)
    await h.start(agent, state={"name": "Ann"})
    await h.turn(s.user_text("hi"))
    await h.turn(s.user_text("and now?"))
    await h.finish()
    return {"requests": sent}


def test_with_a_static_instruction_the_templated_one_travels_in_the_contents() -> None:
    # The system instruction stays the same from turn to turn (a model can cache it); the
    # instruction with the session's state goes, fenced, before the latest user turn.
    result = assert_same(static_and_templated_instruction_scenario)
    fenced = "<<<BEGIN_SYSTEM_INSTRUCTION>>>\nThe user's name is Ann.\n<<<END_SYSTEM_INSTRUCTION>>>"
    system, contents = result["requests"][1]
    assert "Ann" not in system
    assert contents[-2:] == [("user", [fenced]), ("user", ["and now?"])]


# --------------------------------------------------------------------------------------------
# Output schema


class Forecast(pydantic.BaseModel):
    city: str = pydantic.Field(description="The city the forecast is for.")
    temp: int


def requests_seen(seen: list[dict[str, Any]]) -> Any:
    """A before-model callback noting what each request asks of the model.

    Whether the system instruction asks for ``set_model_response`` and whether the transfer
    instructions come after that; each declaration whole, but ``transfer_to_agent``'s by its
    name and ``set_model_response``'s without its description (the words the model reads
    about either are our own).
    """
    def declared(declaration: Any) -> Any:
        if declaration.name == "transfer_to_agent":
            return declaration.name
        shown = declaration.model_dump(mode="json", exclude_none=True)
        if declaration.name == "set_model_response":
            shown.pop("description", None)
        return shown

    def note(callback_context: Any, llm_request: Any) -> None:
        config = llm_request.config
        system = config.system_instruction or ""
        asks = system.find("call set_model_response")
        seen.append({
            "asks_for_set_model_response": asks >= 0,
            "transfer_after_it": system.find("transfer_to_agent") > asks >= 0,
            "declarations": [declared(d) for t in config.tools or []
                             for d in t.function_declarations or []],
            "response_schema": config.response_schema is not None,
        })
    return note


async def output_schema_with_tools_scenario(adk: Any) -> dict[str, Any]:
    """An agent with an output schema, a tool and a sub-agent: the model uses the tool, then
    gives its answer through ``set_model_response``."""
    h = s.Harness(adk)
    seen: list[dict[str, Any]] = []

    def weather(city: str) -> dict[str, int]:
        """The temperature in a city."""
        return {"temp": 3}

    model = h.model("root_model", s.fc("weather", city="Oslo"),
                    s.fc("set_model_response", city="Oslo", temp=3), "never asked")
    helper = adk.LlmAgent(name="helper", model=h.model("helper_model", "unused"))
    await h.start(adk.LlmAgent(name="root", model=model, tools=[weather], sub_agents=[helper],
                               output_schema=Forecast, output_key="forecast",
                               before_model_callback=requests_seen(seen)))
    await h.turn(s.user_text("weather in Oslo?"))
    record = await h.finish()
    return {"events": events_of(record), "requests": seen, "model_calls": record["model_calls"],
            "state": record["session_state"], "stored": record["session_events"]}


def test_an_output_schema_beside_tools_is_answered_through_set_model_response() -> None:
    """Before, the model was told of no schema (no tool, no instruction, no response schema),
    and its set_model_response call was answered 'no tool with that name'."""
    result = assert_same(output_schema_with_tools_scenario)
    assert result["model_calls"] == 2
    first = result["requests"][0]
    assert [d if isinstance(d, str) else d["name"] for d in first["declarations"]] == [
        "set_model_response", "transfer_to_agent", "weather"]
    assert first["asks_for_set_model_response"] and first["transfer_after_it"]
    assert first["response_schema"] is False
    assert result["events"][0][-1] == ["root", [["text", '{"city": "Oslo", "temp": 3}']], True]
    assert result["state"] == {"forecast": {"city": "Oslo", "temp": 3}}


# --------------------------------------------------------------------------------------------
# include_contents="none": where the agent's current turn starts


def _requests_of(record: dict[str, Any]) -> list[list[Any]]:
    """[model, contents] of each model request, the preamble quoting other agents masked."""
    from tests.support.adk_live import comparable
    return [[r["model"], r["contents"]] for r in comparable(record)["requests"]]


async def user_answer_to_another_agents_call_scenario(adk: Any) -> list[list[Any]]:
    """A sequence's first agent asks a manager (long-running); the user's answer lets it
    finish (that run ends there, on both); at the next message the second agent's request
    shows that turn, the user's answer quoted as sent by the user."""
    h = s.Harness(adk)

    def ask_manager(item: str) -> None:
        """Ask the manager to approve an item."""
        return None

    first = adk.LlmAgent(name="requester", tools=[adk.LongRunningFunctionTool(ask_manager)],
                         model=h.model("m1", s.fc("ask_manager", item="laptop"), "Approved.",
                                       "Nothing more to ask."))
    second = adk.LlmAgent(name="buyer", model=h.model("m2", "Ordered."))
    await h.start(adk.SequentialAgent(name="flow", sub_agents=[first, second]))
    [call] = [c for e in await h.turn(s.user_text("buy a laptop")) for c in e.get_function_calls()]
    await h.turn(types.Content(role="user", parts=[types.Part(
        function_response=types.FunctionResponse(
            id=call.id, name="ask_manager", response={"approved": True}))]))
    await h.turn(s.user_text("go on"))
    return _requests_of(await h.finish())


def test_a_users_answer_to_another_agents_call_is_quoted_as_the_users() -> None:
    requests = assert_same(user_answer_to_another_agents_call_scenario)
    model, contents = requests[-1]
    assert model == "m2"
    shown = json.dumps(contents)
    assert "[user] `ask_manager` tool returned result" in shown
    assert "[requester] `ask_manager` tool returned result" not in shown


async def turn_after_transfer_scenario(adk: Any) -> list[list[Any]]:
    """The root says hello, then transfers the next message to a sub-agent that shows no
    history; the third message goes to the sub-agent directly."""
    h = s.Harness(adk)
    sub = adk.LlmAgent(name="sub", model=h.model("sub_model", "sub one", "sub two"),
                       include_contents="none")
    root = adk.LlmAgent(name="root", model=h.model(
        "root_model", "hello", s.fc("transfer_to_agent", agent_name="sub")), sub_agents=[sub])
    await h.start(root)
    for text in ("first", "second", "third"):
        await h.turn(s.user_text(text))
    return _requests_of(await h.finish())


def test_an_agent_without_history_reached_by_a_transfer_sees_the_users_message() -> None:
    """Before, the transfer's answer was taken as the turn's start and dropped: no contents."""
    requests = assert_same(turn_after_transfer_scenario)
    assert [model for model, _ in requests] == ["root_model", "root_model", "sub_model",
                                                "sub_model"]
    after_transfer = requests[2][1]
    assert after_transfer[0] == {"role": "user", "parts": [["text", "second"]]}
    assert len(after_transfer) == 3  # the transfer's call and answer, quoted
    assert requests[3][1] == [{"role": "user", "parts": [["text", "third"]]}]


async def answer_without_history_scenario(adk: Any) -> list[list[Any]]:
    """An agent showing no history calls a tool then a long-running one; the user answers it."""
    h = s.Harness(adk)

    def ask(question: str) -> None:
        """Ask a person."""
        return None

    def look_up(key: str) -> str:
        """Look a key up."""
        return "found"

    model = h.model("model", "earlier reply", s.fc("look_up", key="k"),
                    s.fc("ask", question="ok?"), "done", "later reply")
    await h.start(adk.LlmAgent(name="agent", model=model, include_contents="none",
                               tools=[adk.LongRunningFunctionTool(ask), look_up]))
    await h.turn(s.user_text("before"))
    called = await h.turn(s.user_text("go"))
    call_id = next(c.id for e in called for c in e.get_function_calls() if c.name == "ask")
    await h.turn(s.function_response(call_id, "ask", {"ok": True}))
    await h.turn(s.user_text("next"))
    return _requests_of(await h.finish())


def test_an_answer_sent_to_an_agent_without_history_shows_its_turn_up_to_the_answer() -> None:
    """Before, the sent answer was taken as the turn's start and dropped as an orphan: the
    model was asked to go on with no contents at all."""
    requests = assert_same(answer_without_history_scenario)
    after_answer = requests[3][1]
    assert [c["parts"][0][:2] for c in after_answer] == [
        ["text", "go"], ["call", "look_up"], ["response", "look_up"], ["call", "ask"],
        ["response", "ask"]]
    assert requests[4][1] == [{"role": "user", "parts": [["text", "next"]]}]


# --------------------------------------------------------------------------------------------
# Errors raised by an agent's callbacks


def callback_error_scenario(where: str) -> Any:
    """An LlmAgent root whose ``where`` callback raises (a plugin's, for ``plugin``)."""

    async def scenario(adk: Any) -> dict[str, Any]:
        h = s.Harness(adk)

        def boom(callback_context: Any) -> None:
            raise ValueError(f"{where} failed")

        plugins = None
        callbacks: dict[str, Any] = {}
        if where == "plugin":
            class Failing(adk.BasePlugin):  # type: ignore[misc,name-defined]
                async def before_agent_callback(self, *, agent: Any, callback_context: Any) -> None:
                    boom(callback_context)

            plugins = [Failing(name="failing")]
        else:
            callbacks[where] = boom
        await h.start(adk.LlmAgent(name="root", model=h.model("m", "hello"), **callbacks),
                      plugins=plugins)
        await h.turn(s.user_text("go"))
        record = await h.finish()
        return {"raised": record["turns"][0]["raised"],
                "yielded": [(e["author"], e["payload"], e["error_code"], e["error_message"])
                            for e in record["turns"][0]["events"]],
                "stored": [(e["author"], e["error_code"], e["error_message"])
                           for e in record["session_events"]]}

    return scenario


@pytest.mark.parametrize("where", ["before_agent_callback", "after_agent_callback", "plugin"])
def test_an_error_raised_by_an_agents_callback_leaves_an_error_event(where: str) -> None:
    """Before, only errors of the model and tools did; a callback's left the log silent."""
    result = assert_same(callback_error_scenario(where))
    code = "RuntimeError" if where == "plugin" else "ValueError"  # a plugin's error is wrapped
    assert result["raised"] == code
    assert result["stored"][-1][:2] == ("root", code)
    assert f"{where} failed" in result["stored"][-1][2]


async def answering_callback_output_key_scenario(adk: Any) -> dict[str, Any]:
    """A pipeline whose first agent is answered for by its before-agent callback (a cache)."""
    h = s.Harness(adk)
    told: list[str] = []
    cached = types.Content(role="model", parts=[types.Part(text="cached draft")])
    writer = adk.LlmAgent(name="writer", model=h.model("w", "unused"), output_key="draft",
                          before_agent_callback=lambda callback_context: cached)
    reviewer = adk.LlmAgent(name="reviewer", model=h.model("r", "looks good"),
                            instruction="Review this draft: {draft}",
                            before_model_callback=lambda callback_context, llm_request:
                            told.append(llm_request.config.system_instruction))
    await h.start(adk.SequentialAgent(name="pipeline", sub_agents=[writer, reviewer]))
    await h.turn(s.user_text("write"))
    record = await h.finish()
    return {"raised": record["turns"][0]["raised"], "state": record["session_state"],
            "reviewer_told": told}


def test_a_before_agent_callbacks_answer_fills_the_agents_output_key() -> None:
    """Before, the answer was not saved: the next agent's instruction failed on {draft}."""
    result = assert_same(answering_callback_output_key_scenario)
    assert result["raised"] is None and result["state"] == {"draft": "cached draft"}
    assert result["reviewer_told"][0].startswith("Review this draft: cached draft")


# --------------------------------------------------------------------------------------------
# Function tools: names, declarations, arguments


def _pure(x: int, y: int) -> int:
    """Add two numbers."""
    return x + y


class _Cat(pydantic.BaseModel):
    meow: str


class _Dog(pydantic.BaseModel):
    bark: str


async def tool_surface_scenario(adk: Any) -> dict[str, Any]:
    """Partials' names, Annotated fields in declarations, a declaration edited by a callback,
    and the arguments each function gets."""
    from typing import Annotated, Union

    got: dict[str, Any] = {}

    def forecast(city: Annotated[str, pydantic.Field(description="City name, e.g. Oslo")],
                 days: Annotated[int, pydantic.Field(ge=1, le=7, description="How many")] = 1,
                 ) -> str:
        """The forecast."""
        return "sunny"

    def pet(p: Union[_Cat, _Dog]) -> str:
        """Pet an animal."""
        got["pet"] = type(p).__name__
        return "ok"

    def search(query: str, **kwargs: Any) -> str:
        """Search."""
        got["search"] = kwargs
        return "ok"

    def page(n: int, ids: list[int], size: int | None = None) -> str:
        """One page."""
        got["page"] = [repr(n), repr(ids), repr(size)]
        return "abc"[n]

    def wait_for(what: str) -> None:
        """Wait for something."""

    descriptions: list[list[str]] = []

    def edit(callback_context: Any, llm_request: Any) -> None:
        declarations = [d for t in llm_request.config.tools or []
                        for d in t.function_declarations or []]
        descriptions.append([d.description for d in declarations])
        for declaration in declarations:
            declaration.description = (declaration.description or "") + " [edited]"

    h = s.Harness(adk)
    tools = [adk.FunctionTool(functools.partial(_pure, y=3)), forecast, pet, search, page,
             adk.LongRunningFunctionTool(wait_for)]
    model = h.model("m", [s.fc("_pure", x=1), s.fc("pet", p={"bark": "woof"}),
                          s.fc("search", query="q", made_up=1),
                          s.fc("page", n=1.0, ids=[1.0, 2.0], size=10.0)], "done", "again")
    await h.start(adk.LlmAgent(name="root", model=model, tools=tools, before_model_callback=edit))
    events = await h.turn(s.user_text("go"))
    await h.turn(s.user_text("once more"))
    record = await h.finish()
    answers = {r.name: r.response for e in events for r in e.get_function_responses()}
    return {"declared": record["requests"][0]["tools"], "got": got, "answers": answers,
            "descriptions": descriptions,
            "forecast": adk.FunctionTool(forecast)._get_declaration().parameters_json_schema}


def test_function_tools_are_named_declared_and_called_as_in_google_adk() -> None:
    """Before: a partial was declared as ``partial`` (the model's call of it found no tool);
    ``Annotated[..., Field(...)]`` descriptions and bounds were dropped; a callback's edit of
    a declaration stayed on the tool for every later request; a union of models, whole
    floats for ints and made-up arguments reached the function unconverted."""
    result = assert_same(tool_surface_scenario)
    assert "_pure" in str(result["declared"])
    assert result["answers"]["_pure"] == {"result": 4}
    assert result["got"] == {"pet": "_Dog", "search": {}, "page": ["1", "[1, 2]", "10"]}
    assert result["answers"]["page"] == {"result": "b"}
    days = result["forecast"]["properties"]["days"]
    assert (days["minimum"], days["maximum"], days["description"]) == (1, 7, "How many")
    assert all(" [edited]" not in d for request in result["descriptions"] for d in request)


# --------------------------------------------------------------------------------------------
# run_async(abort_signal=...)


def abort_scenario(when: str) -> Any:
    """A caller sets ``abort_signal`` before the run, or once it sees the tool's call."""

    async def scenario(adk: Any) -> dict[str, Any]:
        h = s.Harness(adk)
        ran: list[str] = []

        async def fetch() -> str:
            """Fetch something."""
            ran.append("fetch")
            if when == "during_the_tool":
                signal.set()
                await asyncio.Event().wait()  # never set: only a cancel ends it
            return "fetched"

        await h.start(adk.LlmAgent(name="root", tools=[fetch], model=h.model(
            "m", s.fc("fetch"), "after the tool", "next answer")))
        signal = asyncio.Event()
        if when == "before":
            signal.set()
        yielded = []
        async for event in h.runner.run_async(user_id=s.USER_ID, session_id=h.session_id,
                                              new_message=s.user_text("hi"), abort_signal=signal):
            yielded.append(h.event_record(event))
            if when != "during_the_tool":
                signal.set()
        calls_in_aborted_run, ran_in_aborted_run = len(h.requests), list(ran)
        await h.turn(s.user_text("next"))
        record = await h.finish()
        return {"yielded": [(e["author"], e["payload"], e["error_code"]) for e in yielded],
                "tool_ran": ran_in_aborted_run, "model_calls": calls_in_aborted_run,
                "stored": [(e["author"], e["payload"], e["error_code"], e["error_message"])
                           for e in record["session_events"]],
                "next_turn_saw": record["requests"][-1]["contents"]}

    return scenario


@pytest.mark.parametrize("when", ["before", "after_the_call", "during_the_tool"])
def test_an_aborted_run_stops_where_google_adk_stops_and_says_so(when: str) -> None:
    """Before, the model was called anyway (signal set before), the tool ran and its call
    stayed unanswered (the next turn's model saw the call dropped from the history), or a
    tool under way held the run until it ended."""
    result = assert_same(abort_scenario(when))
    assert result["tool_ran"] == (["fetch"] if when == "during_the_tool" else [])
    if when == "before":
        assert result["model_calls"] == 0
        assert result["yielded"] == [("root", None, "INVOCATION_ABORTED")]
    else:
        sealed = result["stored"][2]
        assert sealed[0] == "root" and sealed[2] == "INVOCATION_ABORTED"
        assert sealed[1][0][2] == {"error": "Invocation was aborted by client."}
        assert [c["parts"][0][0] for c in result["next_turn_saw"]] == [
            "text", "call", "response", "text"]


# --------------------------------------------------------------------------------------------
# Instructions: static_instruction's forms, LlmRequest's helpers, providers


class _Reply(pydantic.BaseModel):
    x: int


def instruction_forms_scenario(form: str) -> Any:
    """One agent whose static instruction has the given form; a before-model callback
    using LlmRequest's helpers notes what the request holds."""
    image = types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG"))
    forms = {
        "part": types.Part(text="Be brief."),
        "list": ["Be brief.", types.Part(text="Be kind.")],
        "content": types.Content(role="user", parts=[types.Part(text="Be brief."),
                                                     types.Part(text="Be kind.")]),
        "content_with_image": types.Content(role="user", parts=[types.Part(text="Logo:"), image]),
    }

    async def scenario(adk: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def note(callback_context: Any, llm_request: Any) -> None:
            seen["added_list"] = llm_request.append_instructions(["Extra one."])
            added = llm_request.append_instructions(types.Content(role="user", parts=[
                types.Part(text="Extra two."), image]))
            seen["added_content"] = [s.content_record(c, str) for c in added]
            llm_request.set_output_schema(output_schema=_Reply)
            seen["schema"] = (llm_request.config.response_mime_type,
                              llm_request.config.response_schema is _Reply)
            seen["system"] = llm_request.config.system_instruction
            seen["contents"] = [s.content_record(c, str) for c in llm_request.contents]

        h = s.Harness(adk)
        await h.start(adk.LlmAgent(name="root", model=h.model("m", '{"x": 1}'),
                                   static_instruction=forms[form], before_model_callback=note))
        await h.turn(s.user_text("hi"))
        await h.finish()
        return seen

    return scenario


@pytest.mark.parametrize("form", ["part", "list", "content", "content_with_image"])
def test_static_instructions_of_every_form_and_request_helpers_as_in_google_adk(form: str) -> None:
    """Before: a Part or a list reached the model as its Python repr, a Content's texts ran
    together, its image was dropped; append_instructions(Content) raised TypeError and
    set_output_schema(output_schema=...) refused its keyword."""
    seen = assert_same(instruction_forms_scenario(form))
    assert seen["system"].startswith({"part": "Be brief.\n\nYou are", "list": "Be brief.\n\nBe kind.",
                                      "content": "Be brief.\n\nBe kind.",
                                      "content_with_image": "Logo:\n\n[Reference to inline"}[form])
    assert seen["added_list"] == [] and seen["schema"] == ("application/json", True)
    assert len(seen["added_content"]) == 1


async def provider_returning_a_number_scenario(adk: Any) -> dict[str, Any]:
    h = s.Harness(adk)
    await h.start(adk.LlmAgent(name="root", model=h.model("m", "ok"), instruction=lambda ctx: 42))
    events = await h.turn(s.user_text("hi"))
    record = await h.finish()
    return {"raised": record["turns"][0]["raised"], "model_calls": record["model_calls"],
            "error_codes": [e.error_code for e in events]}


def test_an_instruction_provider_returning_no_text_fails_the_run() -> None:
    """Before, str(42) was sent to the model as its instruction."""
    result = assert_same(provider_returning_a_number_scenario)
    assert result == {"raised": "TypeError", "model_calls": 0, "error_codes": ["TypeError"]}


async def unknown_tool_without_tools_scenario(adk: Any) -> Any:
    h = s.Harness(adk)
    await h.start(adk.LlmAgent(name="root", model=h.model("m", s.fc("lookup"), "sorry")))
    events = await h.turn(s.user_text("hi"))
    return [r.response for e in events for r in e.get_function_responses()]


def test_a_call_to_an_agent_without_tools_is_told_there_are_none() -> None:
    assert "The tools you can call are: none." in assert_same(
        unknown_tool_without_tools_scenario)[0]["error"]


def abort_signal_never_set_scenario(case: str) -> Any:
    """A run given an abort signal that is never set: its agent keeps one task across its
    steps (a cancel scope entered in one step is left in another), and a caller that gives
    up on the run (a timeout) cancels the tool under way."""

    async def scenario(adk: Any) -> dict[str, Any]:
        h = s.Harness(adk)
        seen: list[str] = []
        tasks: set[int] = set()

        async def slow() -> str:
            """Take long."""
            seen.append("started")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            return "done"

        inner = adk.LlmAgent(name="inner", tools=[slow], model=h.model(
            "m", "one" if case == "task" else s.fc("slow"), "after"))

        class Scoped(adk.BaseAgent):  # type: ignore[misc,name-defined]
            async def _run_async_impl(self, ctx: Any) -> Any:
                with anyio.CancelScope():  # bound to the task that entered it
                    async for event in inner.run_async(ctx):
                        tasks.add(id(asyncio.current_task()))
                        yield event
                tasks.add(id(asyncio.current_task()))

        await h.start(Scoped(name="scoped", sub_agents=[inner]))

        async def consume() -> None:
            async for _ in h.runner.run_async(user_id=s.USER_ID, session_id=h.session_id,
                                              new_message=s.user_text("hi"),
                                              abort_signal=asyncio.Event()):
                pass

        async def leave_early() -> None:  # the caller stops reading at the tool's call
            async with contextlib.aclosing(h.runner.run_async(
                    user_id=s.USER_ID, session_id=h.session_id, new_message=s.user_text("hi"),
                    abort_signal=asyncio.Event())) as events:
                async for event in events:
                    if event.get_function_calls():
                        break
            await asyncio.sleep(0.1)  # the tool, had it been left running, would start

        try:
            if case == "caller_leaves":
                await leave_early()
            else:
                await asyncio.wait_for(consume(), 1.0 if case == "task" else 0.3)
            outcome = "completed"
        except BaseException as error:  # noqa: BLE001 - the type is the outcome
            outcome = type(error).__name__
        await asyncio.sleep(0)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
        return {"outcome": outcome, "tool": seen, "tasks_running_the_agent": len(tasks),
                "tasks_left": len(left)}

    return scenario


@pytest.mark.parametrize("case", ["task", "caller_gives_up", "caller_leaves"])
def test_a_run_with_an_abort_signal_runs_its_agent_in_one_task(case: str) -> None:
    """Before, each step ran in a task of its own (a cancel scope failed to exit), and a
    caller's timeout raised RuntimeError while the tool ran on to its end."""
    result = assert_same(abort_signal_never_set_scenario(case))
    if case == "task":
        assert result["outcome"] == "completed" and result["tasks_running_the_agent"] == 1
    elif case == "caller_leaves":
        assert result["outcome"] == "completed" and result["tasks_left"] == 0
        assert result["tool"] == []
    else:
        assert result["outcome"] == "TimeoutError" and result["tool"] == ["started", "cancelled"]
        assert result["tasks_left"] == 0


class _Item(pydantic.BaseModel):
    name: str


async def annotated_and_partial_tools_scenario(adk: Any) -> dict[str, Any]:
    """Annotated hints around a context parameter and a list's models, and a partial of a
    function whose module postpones its annotations."""
    from typing import Annotated, Optional

    from tests.support.future_tools import order

    h = s.Harness(adk)
    seen: dict[str, Any] = {}

    def stamp(note: str,
              ctx: Optional[Annotated[adk.ToolContext, "the call's context"]] = None) -> str:  # noqa: UP045
        """Stamp a note."""
        seen["stamp has a context"] = ctx is not None
        return "ok"

    def buy(items: list[Annotated[_Item, pydantic.Field(description="one item")]]) -> str:
        """Buy items."""
        seen["buy got"] = [type(i).__name__ for i in items]
        return "ok"

    partial_order = functools.partial(order, shop="corner")
    model = h.model("m", [s.fc("stamp", note="x"), s.fc("buy", items=[{"name": "pen"}]),
                          s.fc("order", item={"name": "ink"}, count=2)], "done")
    await h.start(adk.LlmAgent(name="a", model=model, tools=[stamp, buy, partial_order]))
    events = await h.turn(s.user_text("go"))
    record = await h.finish()
    return {"raised": record["turns"][0]["raised"], "seen": seen,
            "declared": record["requests"][0]["tools"],
            "answers": {r.name: r.response for e in events for r in e.get_function_responses()}}


def test_annotated_context_and_models_and_partials_of_postponed_annotations() -> None:
    """Keeping Annotated for declarations briefly lost an Optional[Annotated[ToolContext]]
    context parameter and the models of list[Annotated[Model, ...]]; a partial's hints were
    read from the partial, which postponed annotations leave unresolved."""
    result = assert_same(annotated_and_partial_tools_scenario)
    assert result["raised"] is None
    assert result["seen"] == {"stamp has a context": True, "buy got": ["_Item"]}
    assert result["answers"]["order"] == {"result": "2 x Item:ink from corner, context True"}


async def static_image_and_instruction_scenario(adk: Any) -> dict[str, Any]:
    """A static instruction holding an image, beside a templated instruction; and a
    before-agent callback answering with an empty text for an agent with output_key."""
    h = s.Harness(adk)
    image = types.Part(inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG"))
    await h.start(adk.LlmAgent(
        name="root", model=h.model("m", "ok"), instruction="Be {mood}.",
        static_instruction=types.Content(role="user", parts=[types.Part(text="Logo:"), image])),
        state={"mood": "nice"})
    await h.turn(s.user_text("hi"))
    record = await h.finish()
    shapes = [[part[0] if part[0] != "text" else part[1][:12] for part in c["parts"]]
              for c in record["requests"][0]["contents"]]

    quiet = s.Harness(adk)
    empty = types.Content(role="model", parts=[types.Part(text="")])
    await quiet.start(adk.LlmAgent(name="quiet", model=quiet.model("m", "unused"),
                                   output_key="said", before_agent_callback=lambda **_: empty))
    await quiet.turn(s.user_text("hi"))
    return {"shapes": shapes, "said": (await quiet.finish())["session_state"]}


def test_a_static_image_leads_the_contents_and_an_empty_answer_is_an_output() -> None:
    """Before, the templated instruction was put ahead of the image's user content (taken
    for part of the latest user turn); an empty answer left output_key unwritten."""
    for result in on_both(static_image_and_instruction_scenario):  # the fence's words differ
        image, instruction, message = result["shapes"]
        assert image == ["Referenced i", "other"] and message == ["hi"]
        assert instruction[0] not in ("Referenced i", "hi")
        assert result["said"] == {"said": ""}
