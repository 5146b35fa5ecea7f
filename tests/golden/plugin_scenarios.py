"""Plugin scenarios for the golden comparison: which callback runs when, with what, in order.

Registered into ``scenarios.SCENARIOS`` by ``scenarios.py`` (``register`` gets that module, so
this file imports neither framework nor ``scenarios`` itself). Each scenario's record has the
usual turns, requests and session, plus ``extra.trace``: every plugin and agent callback in
the order it ran, as ``[who, callback, details...]`` with ids replaced by labels. ``who`` is
the plugin's name, or ``agent:<name>`` for an agent's own callback.

Deliberately no ``from __future__ import annotations`` (see ``scenarios.py``).
"""

from collections.abc import Callable
from typing import Any

from google.genai import types

base: Any = None
"""The ``scenarios`` module, set by :func:`register`."""
_SCENARIOS: list[Callable[..., Any]] = []


def plugin_scenario(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Collect a scenario; :func:`register` hands it to ``scenarios``."""
    _SCENARIOS.append(fn)
    return fn


def register(scenarios_module: Any) -> None:
    """Register every plugin scenario with the ``scenarios`` module."""
    global base
    base = scenarios_module
    for fn in _SCENARIOS:
        scenarios_module.scenario(fn)


# --------------------------------------------------------------------------------------------
# Recording callbacks


class Trace:
    """The callbacks of one scenario in the order they ran, ids replaced by labels."""

    def __init__(self, h: Any) -> None:
        self.h = h
        self.entries: list[list[Any]] = []

    def content(self, content: Any) -> Any:
        return base.content_record(content, self.h.labels.call_id)

    def add(self, who: str, callback: str, *details: Any) -> None:
        self.entries.append([who, callback, *[base.jsonable(d) for d in details]])

    def details(self, callback: str, kwargs: dict[str, Any]) -> list[Any]:
        """What is worth recording of a callback's arguments."""
        if "invocation_context" in kwargs and "event" in kwargs:
            event = kwargs["event"]
            return [event.author, self.content(event.content), bool(event.partial),
                    dict(event.actions.artifact_delta or {})]
        if "user_message" in kwargs:
            return [self.content(kwargs["user_message"])]
        if "invocation_context" in kwargs:
            error = kwargs.get("error")
            return [kwargs["invocation_context"].agent.name] + (
                [type(error).__name__] if error is not None else [])
        if "agent" in kwargs:
            error = kwargs.get("error")
            return [kwargs["agent"].name, kwargs["callback_context"].agent_name] + (
                [type(error).__name__] if error is not None else [])
        if "llm_request" in kwargs:
            request = kwargs["llm_request"]
            last = request.contents[-1] if request.contents else None
            error = kwargs.get("error")
            return [kwargs["callback_context"].agent_name, self.content(last)] + (
                [type(error).__name__, str(error)] if error is not None else [])
        if "llm_response" in kwargs:
            response = kwargs["llm_response"]
            return [kwargs["callback_context"].agent_name, self.content(response.content),
                    bool(response.partial)]
        tool_context = kwargs["tool_context"]
        found = [kwargs["tool"].name, kwargs.get("tool_args", kwargs.get("args")),
                 self.h.labels.call_id(tool_context.function_call_id)]
        if "result" in kwargs or "tool_response" in kwargs:
            found.append(kwargs.get("result", kwargs.get("tool_response")))
        if "error" in kwargs:
            found += [type(kwargs["error"]).__name__, str(kwargs["error"])]
        return found


PLUGIN_CALLBACKS = (
    "on_user_message_callback", "before_run_callback", "on_event_callback", "after_run_callback",
    "on_run_error_callback", "before_agent_callback", "after_agent_callback",
    "on_agent_error_callback", "before_model_callback", "after_model_callback",
    "on_model_error_callback", "before_tool_callback", "after_tool_callback",
    "on_tool_error_callback",
)


def recorder(adk: Any, trace: Trace, name: str, answers: dict[str, Any] | None = None) -> Any:
    """A plugin of the namespace that records every callback; ``answers`` say what to return.

    ``answers`` maps a callback name (without ``_callback``) to a function of the callback's
    keyword arguments; a callback without one returns None.
    """
    answers = answers or {}

    def method(callback: str) -> Any:
        short = callback.removesuffix("_callback")

        async def hook(self: Any, **kwargs: Any) -> Any:
            trace.add(self.name, short, *trace.details(callback, kwargs))
            answer = answers.get(short)
            return answer(**kwargs) if answer is not None else None

        return hook

    cls = type("Recorder", (adk.BasePlugin,), {c: method(c) for c in PLUGIN_CALLBACKS})
    return cls(name)


def agent_callbacks(trace: Trace, answers: dict[str, Any] | None = None) -> dict[str, Any]:
    """An agent's own callbacks (keyword arguments of LlmAgent), recording like the plugins."""
    answers = answers or {}

    def record(short: str, context: Any, **kwargs: Any) -> Any:
        trace.add(f"agent:{context.agent_name}", short, *trace.details(short, kwargs))
        answer = answers.get(short)
        return answer(**kwargs) if answer is not None else None

    def before_agent(callback_context: Any) -> Any:
        return record("before_agent", callback_context, callback_context=callback_context,
                      agent=_Named(callback_context.agent_name))

    def after_agent(callback_context: Any) -> Any:
        return record("after_agent", callback_context, callback_context=callback_context,
                      agent=_Named(callback_context.agent_name))

    def before_model(callback_context: Any, llm_request: Any) -> Any:
        return record("before_model", callback_context, callback_context=callback_context,
                      llm_request=llm_request)

    def after_model(callback_context: Any, llm_response: Any) -> Any:
        return record("after_model", callback_context, callback_context=callback_context,
                      llm_response=llm_response)

    def on_model_error(callback_context: Any, llm_request: Any, error: Exception) -> Any:
        return record("on_model_error", callback_context, callback_context=callback_context,
                      llm_request=llm_request, error=error)

    def before_tool(tool: Any, args: dict[str, Any], tool_context: Any) -> Any:
        return record("before_tool", tool_context, tool=tool, args=args,
                      tool_context=tool_context)

    def after_tool(tool: Any, args: dict[str, Any], tool_context: Any, tool_response: Any) -> Any:
        return record("after_tool", tool_context, tool=tool, args=args,
                      tool_context=tool_context, tool_response=tool_response)

    def on_tool_error(tool: Any, args: dict[str, Any], tool_context: Any, error: Exception) -> Any:
        return record("on_tool_error", tool_context, tool=tool, args=args,
                      tool_context=tool_context, error=error)

    return {
        "before_agent_callback": before_agent,
        "after_agent_callback": after_agent,
        "before_model_callback": before_model,
        "after_model_callback": after_model,
        "on_model_error_callback": on_model_error,
        "before_tool_callback": before_tool,
        "after_tool_callback": after_tool,
        "on_tool_error_callback": on_tool_error,
    }


class _Named:
    """Stands for an agent in a trace entry (agent callbacks get no agent argument)."""

    def __init__(self, name: str) -> None:
        self.name = name


def model_text(adk: Any, text: str) -> Any:
    return base.text_response(adk, text)


def text_content(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    return {"city": city, "found": True}


def fails(x: int) -> dict[str, Any]:
    """Always fails."""
    raise ValueError(f"fails on {x}")


async def _finish(h: Any, trace: Trace) -> Any:
    h.extra["trace"] = trace.entries
    return await h.finish()


# --------------------------------------------------------------------------------------------
# Scenarios


@plugin_scenario
async def p01_every_callback_in_order(adk: Any) -> Any:
    """Plugins: a tool turn with two recording plugins and recording agent callbacks."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model", base.fc("lookup", city="Oslo"), "Oslo found")
    agent = adk.LlmAgent(name="root", model=model, tools=[lookup], **agent_callbacks(trace))
    await h.start(agent, plugins=[recorder(adk, trace, "first"), recorder(adk, trace, "second")])
    await h.turn(base.user_text("find Oslo"))
    return await _finish(h, trace)


@plugin_scenario
async def p02_first_plugin_answers_model_call(adk: Any) -> Any:
    """Plugins: the first plugin's before_model answer skips the second plugin, agent and model."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model")
    agent = adk.LlmAgent(name="root", model=model, **agent_callbacks(trace))
    first = recorder(adk, trace, "first", {"before_model": lambda **_: model_text(adk, "cached")})
    await h.start(agent, plugins=[first, recorder(adk, trace, "second")])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p03_plugin_answers_tool_call(adk: Any) -> Any:
    """Plugins: before_tool answer skips the tool and agent before_tool; after_tool still runs."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model", base.fc("fails", x=1), "done")
    agent = adk.LlmAgent(name="root", model=model, tools=[fails], **agent_callbacks(trace))
    plugin = recorder(adk, trace, "guard", {"before_tool": lambda **_: {"blocked": True}})
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p04_plugin_replaces_results(adk: Any) -> Any:
    """Plugins: after_model and after_tool replacements skip the agent's after-callbacks."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model", base.fc("lookup", city="Rome"), "original text")

    def replace_response(llm_response: Any, **_: Any) -> Any:
        if llm_response.content and llm_response.content.parts[0].text:
            return model_text(adk, "replaced text")
        return None

    plugin = recorder(adk, trace, "rewriter", {
        "after_model": replace_response,
        "after_tool": lambda result, **_: {**result, "checked": True},
    })
    agent = adk.LlmAgent(name="root", model=model, tools=[lookup], **agent_callbacks(trace))
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p05_agent_callback_answers_after_plugin(adk: Any) -> Any:
    """Plugins: plugins return None, the agent's before_model answers; the model is not called."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model")
    callbacks = agent_callbacks(trace, {"before_model": lambda **_: model_text(adk, "from agent")})
    agent = adk.LlmAgent(name="root", model=model, **callbacks)
    await h.start(agent, plugins=[recorder(adk, trace, "watcher")])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p06_before_agent_and_after_agent_content(adk: Any) -> Any:
    """Plugins: before_agent content skips an agent (siblings run); after_agent content adds one."""
    h = base.Harness(adk)
    trace = Trace(h)

    def skip_first(agent: Any, **_: Any) -> Any:
        return text_content("first skipped") if agent.name == "first" else None

    def add_after_second(agent: Any, **_: Any) -> Any:
        return text_content("after second") if agent.name == "second" else None

    plugin = recorder(adk, trace, "gate", {"before_agent": skip_first,
                                           "after_agent": add_after_second})
    first = adk.LlmAgent(name="first", model=h.model("first_model"), **agent_callbacks(trace))
    second = adk.LlmAgent(name="second", model=h.model("second_model", "second ran"),
                          **agent_callbacks(trace))
    await h.start(adk.SequentialAgent(name="pipeline", sub_agents=[first, second]),
                  plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p07_on_event_and_user_message_rewrites(adk: Any) -> Any:
    """Plugins: on_user_message replaces the message; on_event rewrites what is stored and seen."""
    h = base.Harness(adk)
    trace = Trace(h)

    def shout(event: Any, **_: Any) -> Any:
        if event.content and event.content.parts and event.content.parts[0].text:
            return adk_event_with_text(event, event.content.parts[0].text.upper())
        return None

    plugin = recorder(adk, trace, "editor", {
        "on_user_message": lambda **_: base.user_text("rewritten question"),
        "on_event": shout,
    })
    model = h.model("root_model", base.fc("lookup", city="Oslo"), "quiet answer", "again")
    agent = adk.LlmAgent(name="root", model=model, tools=[lookup])
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("original question"))
    await h.turn(base.user_text("second turn"))
    return await _finish(h, trace)


def adk_event_with_text(event: Any, text: str) -> Any:
    """A copy of ``event`` (of whichever framework) with its text replaced."""
    return event.model_copy(update={"content": text_content(text)})


@plugin_scenario
async def p08_before_run_ends_the_run(adk: Any) -> Any:
    """Plugins: before_run content ends the run with one event by 'model'; after_run still runs."""
    h = base.Harness(adk)
    trace = Trace(h)
    plugin = recorder(adk, trace, "closed", {"before_run": lambda **_: text_content("closed")})
    agent = adk.LlmAgent(name="root", model=h.model("root_model"), **agent_callbacks(trace))
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p09_error_callbacks_recover(adk: Any) -> Any:
    """Plugins: on_model_error and on_tool_error answers replace the errors; after-callbacks run."""
    h = base.Harness(adk)
    trace = Trace(h)
    plugin = recorder(adk, trace, "rescuer", {
        "on_model_error": lambda **_: model_text(adk, "model rescued"),
        "on_tool_error": lambda error, **_: {"rescued": str(error)},
    })
    model = h.model("root_model", base.fc("fails", x=3), base.Raise("model down"))
    agent = adk.LlmAgent(name="root", model=model, tools=[fails], **agent_callbacks(trace))
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p10_unrecovered_tool_error(adk: Any) -> Any:
    """Plugins: nothing recovers a tool error: error callbacks, then agent and run errors told."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model", base.fc("fails", x=4))
    agent = adk.LlmAgent(name="root", model=model, tools=[fails], **agent_callbacks(trace))
    await h.start(agent, plugins=[recorder(adk, trace, "watcher")])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p11_unknown_tool_through_callbacks(adk: Any) -> Any:
    """Plugins: a call of an unknown tool goes to before_tool, then on_tool_error (which answers)."""
    h = base.Harness(adk)
    trace = Trace(h)
    plugin = recorder(adk, trace, "watcher", {
        "on_tool_error": lambda tool, **_: {"unknown": tool.name},
    })
    model = h.model("root_model", base.fc("nope", a=1), "ok")
    agent = adk.LlmAgent(name="root", model=model, tools=[lookup], **agent_callbacks(trace))
    await h.start(agent, plugins=[plugin])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p12_plugin_raises(adk: Any) -> Any:
    """Plugins: a plugin that raises fails the run (RuntimeError); later plugins are not called."""
    h = base.Harness(adk)
    trace = Trace(h)

    def explode(**_: Any) -> Any:
        raise KeyError("plugin bug")

    plugin = recorder(adk, trace, "buggy", {"before_model": explode})
    agent = adk.LlmAgent(name="root", model=h.model("root_model", "unused"),
                         **agent_callbacks(trace))
    await h.start(agent, plugins=[plugin, recorder(adk, trace, "after_buggy")])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)


@plugin_scenario
async def p13_global_instruction_and_context_filter(adk: Any) -> Any:
    """Shipped plugins: the global instruction leads the system instruction; old turns are cut."""
    h = base.Harness(adk)
    trace = Trace(h)
    seen: list[Any] = []

    def note_instruction(llm_request: Any, **_: Any) -> None:
        seen.append(base.jsonable(llm_request.config.system_instruction))

    plugins = [
        adk.GlobalInstructionPlugin("Be brief, {user_name}."),
        adk.ContextFilterPlugin(num_invocations_to_keep=1),
        recorder(adk, trace, "watcher", {"before_model": note_instruction}),
    ]
    model = h.model("root_model", "one", "two", "three")
    await h.start(adk.LlmAgent(name="root", model=model, instruction="Answer."),
                  state={"user_name": "Ada"}, plugins=plugins)
    for text in ("a", "b", "c"):
        await h.turn(base.user_text(text))
    h.extra["system_instructions"] = seen
    return await _finish(h, trace)


@plugin_scenario
async def p14_save_files_as_artifacts(adk: Any) -> Any:
    """Shipped plugins: an uploaded file becomes an artifact and a placeholder in the message."""
    h = base.Harness(adk)
    trace = Trace(h)
    plugins = [adk.SaveFilesAsArtifactsPlugin(), recorder(adk, trace, "watcher")]
    await h.start(adk.LlmAgent(name="root", model=h.model("root_model", "got it")),
                  plugins=plugins)
    upload = types.Content(role="user", parts=[
        types.Part(text="here is my file"),
        types.Part(inline_data=types.Blob(mime_type="text/plain", data=b"hello file",
                                          display_name="notes.txt")),
    ])
    await h.turn(upload)
    artifact = await h.runner.artifact_service.load_artifact(
        app_name=base.APP_NAME, user_id=base.USER_ID, session_id=h.session_id,
        filename="notes.txt")
    h.extra["artifact"] = base.jsonable(artifact)
    return await _finish(h, trace)


@plugin_scenario
async def p15_sse_partials_pass_callbacks(adk: Any) -> Any:
    """Plugins, SSE: after_model and on_event see every partial chunk, then the aggregate."""
    h = base.Harness(adk)
    trace = Trace(h)
    model = h.model("root_model", base.Chunks(["Hel", "lo", "Hello"]))
    await h.start(adk.LlmAgent(name="root", model=model), plugins=[recorder(adk, trace, "w")])
    await h.turn(base.user_text("x"),
                 run_config=adk.RunConfig(streaming_mode=adk.StreamingMode.SSE))
    return await _finish(h, trace)


@plugin_scenario
async def p16_long_running_answered_in_a_second_run(adk: Any) -> Any:
    """Plugins: the client's function response is a second run: on_user_message, before/after run."""
    h = base.Harness(adk)
    trace = Trace(h)

    def request_approval(amount: int) -> None:
        """Ask a human to approve a payment."""
        return None

    model = h.model("root_model", base.fc("request_approval", amount=9), "Approved.")
    agent = adk.LlmAgent(name="root", model=model,
                         tools=[adk.LongRunningFunctionTool(request_approval)])
    await h.start(agent, plugins=[recorder(adk, trace, "w")])
    first = await h.turn(base.user_text("pay 9"))
    call_id = base.first_call_id(first)
    await h.turn(base.function_response(call_id, "request_approval", {"approved": True}))
    return await _finish(h, trace)


@plugin_scenario
async def p17_agent_tool_runs_with_the_callers_plugins(adk: Any) -> Any:
    """Plugins: an AgentTool's child run has the caller's plugins (its own run callbacks too)."""
    h = base.Harness(adk)
    trace = Trace(h)
    child = adk.LlmAgent(name="helper", description="Helps.",
                         model=h.model("helper_model", "helped"))
    model = h.model("root_model", base.fc("helper", request="help me"), "thanks")
    agent = adk.LlmAgent(name="root", model=model, tools=[adk.AgentTool(child)])
    await h.start(agent, plugins=[recorder(adk, trace, "w")])
    await h.turn(base.user_text("x"))
    return await _finish(h, trace)
