"""Conformance scenarios (adk-reference §11), written once against a namespace ``adk``.

The same code runs against google-adk (``tests/golden/record_adk.py``, in the google-adk venv) and
against ``orchestrator`` (``tests/test_adk_golden.py``). This module must import neither: every
framework name comes from the namespace passed in, which must provide the attributes listed in
``REQUIRED_NAMES``. Only google-genai ``types`` and pydantic, present in both venvs, are imported.

Each scenario returns a JSON-able record with nothing random in it: event ids, invocation ids and
function-call ids are replaced by labels numbered in order of first appearance (``ev#0``,
``inv#0``, ``adk-id#0``), so equal labels mean equal ids; timestamps are never recorded. What the
model saw is summarised per call; there, as ADK strips client-side ``adk-`` ids before sending
history to the model, a function-call id is shown only as ``"adk-id"`` (it still had the prefix),
``None`` (stripped or never set) or ``"id:<raw>"`` (a model-supplied id).

Deliberately no ``from __future__ import annotations``: tool signatures annotate
``tool_context: adk.ToolContext`` with the namespace's own class, evaluated at definition time, as
a user of either framework would write them.
"""

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from google.genai import types
from pydantic import Field

APP_NAME = "golden"
USER_ID = "u"

REQUIRED_NAMES = (
    "AgentTool",
    "App",
    "BaseLlm",
    "BasePlugin",
    "ContextFilterPlugin",
    "GlobalInstructionPlugin",
    "InMemoryRunner",
    "LlmAgent",
    "LlmCallsLimitExceededError",
    "LlmCapabilities",  # may be None where the framework has no capabilities property
    "LlmResponse",
    "LongRunningFunctionTool",
    "RunConfig",
    "SaveFilesAsArtifactsPlugin",
    "SequentialAgent",
    "StreamingMode",
    "ToolContext",
)

_USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=1, candidates_token_count=1, total_token_count=2
)

Record = dict[str, Any]
Scenario = Callable[[Any], Awaitable[Record]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    """Register a scenario under its function name."""
    SCENARIOS[fn.__name__] = fn
    return fn


def check_namespace(adk: Any) -> None:
    """Raise ``AttributeError`` naming every attribute the scenarios need that ``adk`` lacks."""
    missing = [name for name in REQUIRED_NAMES if not hasattr(adk, name)]
    if missing:
        raise AttributeError(f"The framework namespace lacks: {', '.join(missing)}")


def run_scenario(adk: Any, name: str) -> Record:
    """Run one scenario in a fresh event loop and return its record."""
    check_namespace(adk)
    return asyncio.run(SCENARIOS[name](adk))


def run_all(adk: Any) -> dict[str, Record]:
    """Run every scenario; return ``{name: record}``."""
    return {name: run_scenario(adk, name) for name in SCENARIOS}


def to_json(records: dict[str, Record]) -> str:
    """Serialise records the way the golden file stores them (pretty, sorted keys)."""
    return json.dumps(records, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------------------------
# Script items for the scripted model


class Chunks(list):  # type: ignore[type-arg]
    """A streamed answer: text chunks, the last being the aggregate.

    Streamed (SSE), every chunk but the last is yielded with ``partial=True``; not streamed,
    only the last is yielded.
    """


class Raise:
    """A model call that raises ``RuntimeError(message)``."""

    def __init__(self, message: str) -> None:
        self.message = message


def fc(name: str, **args: Any) -> types.Part:
    """A function-call part without an id (as most models send them)."""
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def user_text(text: str) -> types.Content:
    """A user message with one text part."""
    return types.Content(role="user", parts=[types.Part(text=text)])


def function_response(call_id: str, name: str, response: dict[str, Any]) -> types.Content:
    """A user message answering a function call."""
    return types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name, response=response))],
    )


def text_response(adk: Any, text: str) -> Any:
    """An ``LlmResponse`` of the namespace with one model text part."""
    return adk.LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        usage_metadata=_USAGE.model_copy(),
    )


def _responses_for(adk: Any, item: Any, stream: bool) -> list[Any]:
    """Fresh ``LlmResponse`` objects for one script item."""
    if isinstance(item, Raise):
        raise RuntimeError(item.message)
    if isinstance(item, Chunks):
        chunks = [_responses_for(adk, chunk, stream)[0] for chunk in item]
        if not stream:
            return chunks[-1:]
        for chunk in chunks[:-1]:
            chunk.partial = True
        return chunks
    if isinstance(item, str):
        parts = [types.Part(text=item)]
    elif isinstance(item, types.Part):
        parts = [item.model_copy(deep=True)]
    elif isinstance(item, list):
        parts = [p.model_copy(deep=True) for p in item]
    else:
        raise TypeError(f"Unsupported script item {item!r}")
    return [adk.LlmResponse(
        content=types.Content(role="model", parts=parts), usage_metadata=_USAGE.model_copy()
    )]


def _scripted_model_class(adk: Any) -> type:
    """A ``BaseLlm`` subclass of the namespace that answers from a script and records requests."""

    class GoldenLlm(adk.BaseLlm):  # type: ignore[name-defined,misc]
        """Answers each call with the next script item; reports each request to ``recorder``."""

        model: str = "golden"
        script: list[Any] = Field(default_factory=list)
        recorder: Any = None
        cursor: int = 0

        @classmethod
        def supported_models(cls) -> list[str]:
            return []

        @property
        def capabilities(self) -> Any:
            capabilities = adk.LlmCapabilities
            return capabilities() if capabilities is not None else None

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            self.recorder.record_request(self.model, llm_request, stream)
            if self.cursor >= len(self.script):
                raise RuntimeError(f"{self.model}: script exhausted after {self.cursor} calls")
            item = self.script[self.cursor]
            self.cursor += 1
            seen_before = self.recorder.partials_seen
            for i, response in enumerate(_responses_for(adk, item, stream)):
                if i:
                    # Like a network stream: the next chunk comes after the client saw this one.
                    await self.recorder.wait_for_partials(seen_before + i)
                yield response

    return GoldenLlm


# --------------------------------------------------------------------------------------------
# Normalisation


def jsonable(value: Any) -> Any:
    """A JSON-able copy of ``value`` (pydantic models dumped, sets sorted, tuples as lists)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if hasattr(value, "model_dump"):
        return jsonable(value.model_dump(mode="json", exclude_none=True))
    return repr(value)


class Labels:
    """Replaces random ids with stable labels numbered in order of first appearance."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}

    def label(self, kind: str, raw: str | None) -> str | None:
        """The label of ``raw`` within ``kind``; None and '' stay None."""
        if not raw:
            return None
        key = (kind, raw)
        if key not in self._seen:
            n = self._counts.get(kind, 0)
            self._counts[kind] = n + 1
            self._seen[key] = f"{kind}#{n}"
        return self._seen[key]

    def call_id(self, raw: str | None) -> str | None:
        """Label a function-call id: ``adk-id#N`` for client ids, ``id:<raw>`` otherwise."""
        if raw is None:
            return None
        if raw.startswith("adk-"):
            return self.label("adk-id", raw)
        return f"id:{raw}"


def request_call_id(raw: str | None) -> str | None:
    """A function-call id as the model saw it: ``"adk-id"``, None, or ``id:<raw>``."""
    if raw is None:
        return None
    return "adk-id" if raw.startswith("adk-") else f"id:{raw}"


def part_record(part: types.Part, call_id: Callable[[str | None], str | None]) -> list[Any]:
    """One part as ``[kind, ...]``: text, call (name, args, id) or response (name, payload, id)."""
    if part.function_call is not None:
        call = part.function_call
        return ["call", call.name, jsonable(call.args or {}), call_id(call.id)]
    if part.function_response is not None:
        response = part.function_response
        return ["response", response.name, jsonable(response.response), call_id(response.id)]
    if part.text is not None:
        return ["thought" if part.thought else "text", part.text]
    return ["other", sorted(part.model_dump(exclude_none=True))]


def content_record(
    content: types.Content | None, call_id: Callable[[str | None], str | None]
) -> list[list[Any]] | None:
    """The parts of ``content`` (None when there is no content)."""
    if content is None:
        return None
    return [part_record(p, call_id) for p in content.parts or []]


def _declared_tools(llm_request: Any) -> list[str]:
    names: list[str] = []
    for tool in llm_request.config.tools or []:
        for declaration in getattr(tool, "function_declarations", None) or []:
            names.append(declaration.name)
    return sorted(names)


# --------------------------------------------------------------------------------------------
# The harness shared by every scenario


class Harness:
    """Builds agents' models, runs turns and collects one scenario's record."""

    def __init__(self, adk: Any) -> None:
        self.adk = adk
        self.labels = Labels()
        self.model_class = _scripted_model_class(adk)
        self.requests: list[Record] = []
        self.turns: list[Record] = []
        self.extra: dict[str, Any] = {}
        self.runner: Any = None
        self.session_id = ""
        self.partials_seen = 0

    # -- building

    def model(self, name: str, *script: Any) -> Any:
        """A scripted model called ``name`` answering with ``script``, one item per call."""
        return self.model_class(model=name, script=list(script), recorder=self)

    def record_request(self, model: str, llm_request: Any, stream: bool) -> None:
        """Called by the scripted model: summarise what it was sent, at the time it was sent."""
        self.requests.append({
            "model": model,
            "stream": stream,
            "contents": [
                {"role": c.role, "parts": content_record(c, request_call_id)}
                for c in llm_request.contents
            ],
            "tools": _declared_tools(llm_request),
        })

    async def wait_for_partials(self, count: int) -> None:
        """Let the event loop run until ``count`` partial events were yielded (bounded wait).

        ADK runs the agent in a background task, so without this a scripted stream would be
        fully produced before the caller sees its first chunk; partial events share ``actions``
        with the final event, so what a caller sees on them would depend on that timing.
        """
        for _ in range(10_000):
            if self.partials_seen >= count:
                return
            await asyncio.sleep(0)

    async def start(
        self, agent: Any, state: dict[str, Any] | None = None, plugins: list[Any] | None = None
    ) -> None:
        """Create the runner for ``agent`` and one session (optionally with initial state).

        With ``plugins``, the agent is packaged in an ``App`` that has them.
        """
        if plugins:
            app = self.adk.App(name=APP_NAME, root_agent=agent, plugins=plugins)
            self.runner = self.adk.InMemoryRunner(app=app)
        else:
            self.runner = self.adk.InMemoryRunner(agent=agent, app_name=APP_NAME)
        session = await self.runner.session_service.create_session(
            app_name=APP_NAME, user_id=USER_ID, state=state
        )
        self.session_id = session.id

    # -- running

    async def turn(self, message: types.Content, run_config: Any = None) -> list[Any]:
        """Run one ``run_async`` call; record its events and the exception type it raised.

        Each event is recorded when it is yielded, as a streaming client would see it: partial
        chunks share their ``actions`` with the final event (in ADK and here), whose
        ``output_key`` write would otherwise show up on the partials too.
        """
        events: list[Any] = []
        records: list[Record] = []
        raised: str | None = None
        kwargs: dict[str, Any] = {}
        if run_config is not None:
            kwargs["run_config"] = run_config
        try:
            async for event in self.runner.run_async(
                user_id=USER_ID, session_id=self.session_id, new_message=message, **kwargs
            ):
                events.append(event)
                records.append(self.event_record(event))
                if event.partial:
                    self.partials_seen += 1
        except Exception as error:  # the type is part of the record
            raised = type(error).__name__
        self.turns.append({
            "message": content_record(message, self.labels.call_id),
            "events": records,
            "raised": raised,
        })
        return events

    def event_record(self, event: Any) -> Record:
        """One yielded event, normalised."""
        actions = event.actions
        return {
            "id": self.labels.label("ev", event.id),
            "invocation": self.labels.label("inv", event.invocation_id),
            "author": event.author,
            "role": event.content.role if event.content is not None else None,
            "payload": content_record(event.content, self.labels.call_id),
            "error_code": event.error_code,
            "error_message": event.error_message,
            "partial": event.partial,
            "final": event.is_final_response(),
            "long_running": bool(event.long_running_tool_ids),
            "branch": event.branch,
            "state_delta": jsonable(actions.state_delta),
            "transfer_to_agent": actions.transfer_to_agent,
            "skip_summarization": actions.skip_summarization,
            "escalate": actions.escalate,
        }

    def stored_event_record(self, event: Any) -> Record:
        """One persisted event, normalised (fewer fields than a yielded one)."""
        return {
            "id": self.labels.label("ev", event.id),
            "invocation": self.labels.label("inv", event.invocation_id),
            "author": event.author,
            "payload": content_record(event.content, self.labels.call_id),
            "error_code": event.error_code,
            "error_message": event.error_message,
            "state_delta": jsonable(event.actions.state_delta),
        }

    async def get_session(self, user_id: str = USER_ID, session_id: str | None = None) -> Any:
        """Load a session from the runner's session service."""
        return await self.runner.session_service.get_session(
            app_name=APP_NAME, user_id=user_id, session_id=session_id or self.session_id
        )

    async def finish(self) -> Record:
        """Record the persisted session, close the runner and return the scenario's record."""
        session = await self.get_session()
        stored = [self.stored_event_record(e) for e in session.events]
        state = jsonable(dict(session.state))
        with contextlib.suppress(Exception):
            await self.runner.close()
        invocations = [
            sorted({e["invocation"] for e in t["events"] if e["invocation"]}) for t in self.turns
        ]
        record: Record = {
            "turns": self.turns,
            "invocations_per_turn": invocations,
            "same_invocation_across_turns": (
                len(self.turns) > 1 and all(len(i) == 1 for i in invocations)
                and len({i[0] for i in invocations}) == 1
            ),
            "model_calls": len(self.requests),
            "requests": self.requests,
            "session_events": stored,
            "session_state": state,
        }
        if self.extra:
            record["extra"] = jsonable(self.extra)
        return record


def first_call_id(events: list[Any]) -> str:
    """The id of the first function call among ``events``."""
    for event in events:
        if event.content is not None:
            for part in event.content.parts or []:
                if part.function_call is not None and part.function_call.id:
                    return part.function_call.id
    raise AssertionError("no function call with an id was yielded")


# --------------------------------------------------------------------------------------------
# Scenarios (numbers refer to adk-reference §11)


@scenario
async def s01_plain_reply(adk: Any) -> Record:
    """1. The model answers with text; that one event is final and persisted after the user's."""
    h = Harness(adk)
    await h.start(adk.LlmAgent(name="root", model=h.model("root_model", "hello")))
    await h.turn(user_text("hi"))
    return await h.finish()


@scenario
async def s01b_history_across_turns(adk: Any) -> Record:
    """1. A second turn: the model sees the first turn's exchange before the new message."""
    h = Harness(adk)
    await h.start(adk.LlmAgent(name="root", model=h.model("root_model", "hello", "again to you")))
    await h.turn(user_text("hi"))
    await h.turn(user_text("again"))
    return await h.finish()


@scenario
async def s02_single_tool_output_key(adk: Any) -> Record:
    """2. One tool writing state, then text saved by ``output_key``; ids stripped for the model."""
    h = Harness(adk)

    def get_weather(city: str, tool_context: adk.ToolContext) -> dict[str, Any]:
        """Return the weather for a city."""
        tool_context.state["last_city"] = city
        return {"temp": 20, "city": city}

    model = h.model("root_model", fc("get_weather", city="Paris"), "It is 20")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[get_weather], output_key="answer"))
    await h.turn(user_text("weather?"))
    return await h.finish()


@scenario
async def s02b_model_supplied_call_id(adk: Any) -> Record:
    """2. A call id chosen by the model is kept, in events and in the history sent back."""
    h = Harness(adk)
    call = types.Part(function_call=types.FunctionCall(
        id="call-1", name="echo", args={"text": "hi"}
    ))
    await h.start(adk.LlmAgent(name="root", model=h.model("root_model", call, "ok"), tools=[echo]))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s03_parallel_calls(adk: Any) -> Record:
    """3. Two calls in one model event give one merged answer event with merged deltas."""
    h = Harness(adk)

    def tool_a(tool_context: adk.ToolContext) -> str:
        """Tool A."""
        tool_context.state["a"] = 1
        tool_context.state["shared"] = "a"
        return "A"

    def tool_b(tool_context: adk.ToolContext) -> str:
        """Tool B."""
        tool_context.state["b"] = 2
        tool_context.state["shared"] = "b"
        return "B"

    model = h.model("root_model", [fc("tool_a"), fc("tool_b")], "done")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[tool_a, tool_b]))
    await h.turn(user_text("go"))
    return await h.finish()


@scenario
async def s04_long_running_returns_none(adk: Any) -> Record:
    """4. A long-running tool returning None pauses; the client's answer resumes the invocation."""
    h = Harness(adk)
    calls: list[int] = []

    def request_approval(amount: int) -> None:
        """Ask a human to approve a payment."""
        calls.append(amount)
        return None

    model = h.model("root_model", fc("request_approval", amount=100), "Approved. Done.")
    await h.start(adk.LlmAgent(
        name="approver", model=model, tools=[adk.LongRunningFunctionTool(request_approval)]
    ))
    first = await h.turn(user_text("pay 100"))
    call_id = first_call_id(first)
    await h.turn(function_response(call_id, "request_approval", {"status": "approved"}))
    h.extra["tool_calls"] = calls
    return await h.finish()


@scenario
async def s05_long_running_returns_pending(adk: Any) -> Record:
    """5. A long-running tool's interim result goes to the model; the final answer replaces it."""
    h = Harness(adk)
    calls: list[int] = []

    def request_approval(amount: int) -> dict[str, Any]:
        """Ask a human to approve a payment; returns a ticket."""
        calls.append(amount)
        return {"status": "pending", "ticket": "T-1"}

    model = h.model(
        "root_model", fc("request_approval", amount=5), "Waiting for approval.", "Approved!"
    )
    await h.start(adk.LlmAgent(
        name="approver", model=model, tools=[adk.LongRunningFunctionTool(request_approval)]
    ))
    first = await h.turn(user_text("pay 5"))
    call_id = first_call_id(first)
    await h.turn(function_response(call_id, "request_approval", {"status": "approved"}))
    h.extra["tool_calls"] = calls
    return await h.finish()


def echo(text: str) -> str:
    """Echo the text back."""
    return text


@scenario
async def s06_unknown_tool(adk: Any) -> Record:
    """6. A call to a tool that does not exist gets an error answer and the model continues."""
    h = Harness(adk)
    model = h.model("root_model", fc("nope"), "sorry")
    await h.start(adk.LlmAgent(name="root", model=model, tools=[echo]))
    await h.turn(user_text("x"))
    return await h.finish()


def broken(x: int) -> int:
    """Always fails."""
    raise RuntimeError(f"broken with {x}")


@scenario
async def s07a_tool_raises(adk: Any) -> Record:
    """7. A tool raises with no error callback: an error event is persisted, then it raises."""
    h = Harness(adk)
    model = h.model("root_model", fc("broken", x=1))
    await h.start(adk.LlmAgent(name="root", model=model, tools=[broken]))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s07b_tool_raises_on_tool_error_callback(adk: Any) -> Record:
    """7. ``on_tool_error_callback`` turns the exception into an answer; the model continues."""
    h = Harness(adk)
    seen: list[Any] = []

    def recover(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception) -> Any:
        seen.append([tool.name, args, type(error).__name__, str(error)])
        return {"error": f"{tool.name} failed: {error}"}

    model = h.model("root_model", fc("broken", x=2), "handled")
    await h.start(adk.LlmAgent(
        name="root", model=model, tools=[broken], on_tool_error_callback=recover
    ))
    await h.turn(user_text("x"))
    h.extra["on_tool_error_saw"] = seen
    return await h.finish()


@scenario
async def s07c_parallel_calls_one_raises(adk: Any) -> Record:
    """7. Two calls, the second raises: the finished answer is still emitted, then the error."""
    h = Harness(adk)

    async def fine(tool_context: adk.ToolContext) -> str:
        """Succeeds at once."""
        tool_context.state["fine"] = True
        return "ok"

    async def failing() -> str:
        """Fails at once."""
        raise ValueError("failing on purpose")

    model = h.model("root_model", [fc("fine"), fc("failing")])
    await h.start(adk.LlmAgent(name="root", model=model, tools=[fine, failing]))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08a_before_agent_callback_content(adk: Any) -> Record:
    """8. ``before_agent_callback`` returning content replaces the agent; its delta rides along."""
    h = Harness(adk)

    def gate(callback_context: Any) -> types.Content:
        callback_context.state["gated"] = True
        return types.Content(role="model", parts=[types.Part(text="closed today")])

    model = h.model("root_model")
    await h.start(adk.LlmAgent(name="root", model=model, before_agent_callback=gate))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08b_before_agent_callback_state_only(adk: Any) -> Record:
    """8. ``before_agent_callback`` writing state but returning None: delta event, agent runs."""
    h = Harness(adk)

    def note(callback_context: Any) -> None:
        callback_context.state["noted"] = "yes"
        return None

    model = h.model("root_model", "ran")
    await h.start(adk.LlmAgent(name="root", model=model, before_agent_callback=note))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08c_after_agent_callback_content(adk: Any) -> Record:
    """8. ``after_agent_callback`` returning content adds an event after the agent's."""
    h = Harness(adk)

    def after(callback_context: Any) -> types.Content:
        callback_context.state["after"] = 1
        return types.Content(role="model", parts=[types.Part(text="after text")])

    model = h.model("root_model", "main")
    await h.start(adk.LlmAgent(name="root", model=model, after_agent_callback=after))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08d_before_model_callback_response(adk: Any) -> Record:
    """8. ``before_model_callback`` returning a response skips the model call."""
    h = Harness(adk)

    def cached(callback_context: Any, llm_request: Any) -> Any:
        return text_response(adk, "cached")

    model = h.model("root_model")
    await h.start(adk.LlmAgent(name="root", model=model, before_model_callback=cached))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08e_before_model_callback_state(adk: Any) -> Record:
    """8. A model callback's state write lands in the model response event's delta."""
    h = Harness(adk)

    def note(callback_context: Any, llm_request: Any) -> None:
        callback_context.state["model_seen"] = True
        return None

    model = h.model("root_model", "hi there")
    await h.start(adk.LlmAgent(name="root", model=model, before_model_callback=note))
    await h.turn(user_text("x"))
    return await h.finish()


@scenario
async def s08f_after_model_callback_replaces(adk: Any) -> Record:
    """8. ``after_model_callback`` returning a response replaces the model's."""
    h = Harness(adk)
    seen: list[str] = []

    def shout(callback_context: Any, llm_response: Any) -> Any:
        text = llm_response.content.parts[0].text
        seen.append(text)
        return text_response(adk, text.upper())

    model = h.model("root_model", "quiet")
    await h.start(adk.LlmAgent(name="root", model=model, after_model_callback=shout))
    await h.turn(user_text("x"))
    h.extra["after_model_saw"] = seen
    return await h.finish()


@scenario
async def s08g_on_model_error_callback(adk: Any) -> Record:
    """8. ``on_model_error_callback`` returning a response recovers from a model exception."""
    h = Harness(adk)
    seen: list[str] = []

    def fallback(callback_context: Any, llm_request: Any, error: Exception) -> Any:
        seen.append(f"{type(error).__name__}: {error}")
        return text_response(adk, "fallback")

    model = h.model("root_model", Raise("model down"))
    await h.start(adk.LlmAgent(name="root", model=model, on_model_error_callback=fallback))
    await h.turn(user_text("x"))
    h.extra["on_model_error_saw"] = seen
    return await h.finish()


@scenario
async def s08h_before_tool_skips_after_tool_sees(adk: Any) -> Record:
    """8. ``before_tool_callback`` returning a dict skips the tool; ``after_tool`` still sees it."""
    h = Harness(adk)
    seen: list[Any] = []

    def skip(tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any]:
        return {"skipped": tool.name}

    def after(tool: Any, args: dict[str, Any], tool_context: Any, tool_response: Any) -> None:
        seen.append(tool_response)
        return None

    model = h.model("root_model", fc("broken", x=1), "ok")
    await h.start(adk.LlmAgent(
        name="root", model=model, tools=[broken],
        before_tool_callback=skip, after_tool_callback=after,
    ))
    await h.turn(user_text("x"))
    h.extra["after_tool_saw"] = seen
    return await h.finish()


@scenario
async def s08i_after_tool_callback_replaces(adk: Any) -> Record:
    """8. ``after_tool_callback`` returning a dict replaces the tool's result."""
    h = Harness(adk)

    def after(tool: Any, args: dict[str, Any], tool_context: Any, tool_response: Any) -> Any:
        return {"wrapped": tool_response}

    model = h.model("root_model", fc("echo", text="hey"), "ok")
    await h.start(adk.LlmAgent(
        name="root", model=model, tools=[echo], after_tool_callback=after
    ))
    await h.turn(user_text("x"))
    return await h.finish()


def _transfer(agent_name: str) -> types.Part:
    return fc("transfer_to_agent", agent_name=agent_name)


@scenario
async def s09a_transfer_and_next_turn_routing(adk: Any) -> Record:
    """9. root transfers to sub_agent_1 in the same invocation; the next turn goes to it."""
    h = Harness(adk)
    sub = adk.LlmAgent(
        name="sub_agent_1", model=h.model("sub_model", "response1", "response2")
    )
    root = adk.LlmAgent(
        name="root_agent", model=h.model("root_model", _transfer("sub_agent_1")),
        sub_agents=[sub],
    )
    await h.start(root)
    await h.turn(user_text("hi"))
    await h.turn(user_text("again"))
    return await h.finish()


@scenario
async def s09b_transfer_disallow_transfer_to_parent(adk: Any) -> Record:
    """9. With ``disallow_transfer_to_parent`` on the sub-agent, the next turn goes to root."""
    h = Harness(adk)
    sub = adk.LlmAgent(
        name="sub_agent_1", model=h.model("sub_model", "response1"),
        disallow_transfer_to_parent=True,
    )
    root = adk.LlmAgent(
        name="root_agent",
        model=h.model("root_model", _transfer("sub_agent_1"), "root reply"),
        sub_agents=[sub],
    )
    await h.start(root)
    await h.turn(user_text("hi"))
    await h.turn(user_text("again"))
    return await h.finish()


@scenario
async def s09c_transfer_to_sequential(adk: Any) -> Record:
    """9. Transfer into a SequentialAgent: both sub-agents reply; the next turn goes to root."""
    h = Harness(adk)
    seq = adk.SequentialAgent(name="seq", sub_agents=[
        adk.LlmAgent(name="s1", model=h.model("s1_model", "s1 reply")),
        adk.LlmAgent(name="s2", model=h.model("s2_model", "s2 reply")),
    ])
    root = adk.LlmAgent(
        name="root_agent",
        model=h.model("root_model", _transfer("seq"), "root again"),
        sub_agents=[seq],
    )
    await h.start(root)
    await h.turn(user_text("hi"))
    await h.turn(user_text("again"))
    return await h.finish()


@scenario
async def s18_sse_partials(adk: Any) -> Record:
    """18. SSE: two partial chunks and the aggregate share one id; only the aggregate persists."""
    h = Harness(adk)
    model = h.model("root_model", Chunks(["Hel", "lo", "Hello"]))
    await h.start(adk.LlmAgent(name="root", model=model, output_key="out"))
    await h.turn(user_text("x"), run_config=adk.RunConfig(streaming_mode=adk.StreamingMode.SSE))
    return await h.finish()


@scenario
async def s18b_sse_partials_then_function_call(adk: Any) -> Record:
    """18. SSE: a partial then an aggregate carrying a call; only the aggregate runs the tool."""
    h = Harness(adk)
    model = h.model(
        "root_model",
        Chunks(["Let me", [types.Part(text="Let me check"), fc("echo", text="hi")]]),
        Chunks(["Do", "Done"]),
    )
    await h.start(adk.LlmAgent(name="root", model=model, tools=[echo]))
    await h.turn(user_text("x"), run_config=adk.RunConfig(streaming_mode=adk.StreamingMode.SSE))
    return await h.finish()


@scenario
async def s19_state_scoping(adk: Any) -> Record:
    """19. app:/user:/temp: prefixes at creation and in a tool's delta, seen across sessions."""
    h = Harness(adk)

    def write_state(tool_context: adk.ToolContext) -> dict[str, Any]:
        """Write and read state with every prefix."""
        state = tool_context.state
        seen = {k: state.get(k) for k in ("app:a", "user:b", "temp:c", "d")}
        state["app:x"] = "ax"
        state["user:y"] = "uy"
        state["temp:z"] = "tz"
        state["w"] = "w"
        seen["temp:z (after write)"] = state.get("temp:z")
        return seen

    def read_temp(callback_context: Any, llm_request: Any) -> None:
        h.extra.setdefault("before_model_temp_z", []).append(
            callback_context.state.get("temp:z")
        )
        return None

    model = h.model("root_model", fc("write_state"), "ok")
    await h.start(
        adk.LlmAgent(
            name="root", model=model, tools=[write_state], before_model_callback=read_temp
        ),
        state={"app:a": "A", "user:b": "B", "temp:c": "C", "d": "D"},
    )
    created = await h.get_session()
    h.extra["state_after_create"] = dict(created.state)
    await h.turn(user_text("x"))
    service = h.runner.session_service
    other = await service.create_session(app_name=APP_NAME, user_id=USER_ID)
    other_user = await service.create_session(app_name=APP_NAME, user_id="other")
    h.extra["same_user_other_session_state"] = dict(other.state)
    h.extra["other_user_state"] = dict(other_user.state)
    return await h.finish()


@scenario
async def s21_max_llm_calls(adk: Any) -> Record:
    """21. ``max_llm_calls=2`` with a model that keeps calling tools: two pairs, then an error."""
    h = Harness(adk)
    model = h.model(
        "root_model", fc("echo", text="a"), fc("echo", text="b"), fc("echo", text="c")
    )
    await h.start(adk.LlmAgent(name="root", model=model, tools=[echo]))
    await h.turn(user_text("x"), run_config=adk.RunConfig(max_llm_calls=2))
    return await h.finish()


def namespace(**names: Any) -> SimpleNamespace:
    """Build the framework namespace from keyword arguments and check it is complete."""
    ns = SimpleNamespace(**names)
    check_namespace(ns)
    return ns


def _register_plugin_scenarios() -> None:
    """The plugin scenarios live in ``plugin_scenarios.py``; they register here."""
    import importlib
    import sys

    module = importlib.import_module(f"{__package__}.plugin_scenarios" if __package__
                                     else "plugin_scenarios")
    module.register(sys.modules[__name__])


_register_plugin_scenarios()
