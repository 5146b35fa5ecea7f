"""ADK 2.x public API on the classes we claim, compared live with google-adk 2.13.

Each test runs the same code against google-adk and orchestrator (``tests/support/adk_live``)
and compares what a user would see; the google-adk side is skipped without google-adk 2.13.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pydantic
import pytest
from google.genai import types

from orchestrator import Event
from tests.golden import scenarios
from tests.support.adk_live import RequestHarness, frameworks, ours


def both(summary) -> tuple[Any, Any]:
    """``summary(fw)`` for google-adk and for orchestrator."""
    adk, mine = frameworks()
    return summary(adk), summary(mine)


def run(coro_fn):
    """``coro_fn(fw)`` run to completion for each framework, in its own event loop."""
    return both(lambda fw: asyncio.run(coro_fn(fw)))


# --- Event(message=...), Event.message, Event.output -------------------------------------


@pytest.mark.parametrize("message", [
    "hello",
    types.Part(text="a part"),
    ["two", "texts"],
    {"role": "model", "parts": [{"text": "as a dict"}]},
    types.Content(role="model", parts=[types.Part(text="content")]),
])
def test_event_message_shorthand_fills_content_as_google_adk_does(message):
    def summary(fw):
        event = fw.Event(author="a", message=message, state={"k": 1})
        return (event.content.model_dump(exclude_none=True), event.message == event.content,
                event.actions.state_delta)

    adk, mine = both(summary)
    assert mine == adk


def test_event_message_setter_and_the_content_conflict_match_google_adk():
    def summary(fw):
        event = fw.Event(author="a")
        event.message = "set later"
        text = event.content.parts[0].text
        event.message = None
        try:
            fw.Event(author="a", message="x", content=types.Content(parts=[types.Part(text="y")]))
            conflict = None
        except pydantic.ValidationError as error:
            conflict = error.errors()[0]["type"]
        return text, event.content, conflict

    adk, mine = both(summary)
    assert mine == adk == ("set later", None, "value_error")


def test_event_output_is_kept_on_the_wire():
    def summary(fw):
        event = fw.Event(author="node", output={"score": 3})
        return event.output, event.model_dump(mode="json", by_alias=True, exclude_none=True)["output"]

    adk, mine = both(summary)
    assert mine == adk == ({"score": 3}, {"score": 3})
    # Ours crosses processes as JSON: the output survives the round trip.
    assert Event.from_wire(Event(author="node", output=[1, "two"]).to_json()).output == [1, "two"]


# --- BaseAgent.clone ----------------------------------------------------------------------


def _clone_summary(fw):
    class Counting(fw.LlmAgent):
        seen: list[str] = pydantic.Field(default_factory=list)

        def remember(self, callback_context):
            self.seen.append(self.name)

    def helper(x: int) -> int:
        """Helper."""
        return x

    child = Counting(name="child", tools=[helper])
    child.before_agent_callback = child.remember
    root = fw.SequentialAgent(name="root", sub_agents=[child])
    copy = root.clone({"name": "copy"})
    copied_child = copy.sub_agents[0]
    copied_child.tools.append(helper)
    errors = []
    for update in ({"parent_agent": None}, {"no_such_field": 1}):
        try:
            child.clone(update)
        except ValueError:
            errors.append(sorted(update))
    replacement = fw.LlmAgent(name="replacement")
    with_new_subs = root.clone({"sub_agents": [replacement]})
    return {
        "names": (copy.name, [s.name for s in copy.sub_agents]),
        "copy_has_parent": copy.parent_agent is not None,
        "child_is_a_copy": copied_child is not child,
        "child_parent_is_copy": copied_child.parent_agent is copy,
        "original_untouched": (child.parent_agent is root, len(child.tools)),
        "callback_rebound": copied_child.before_agent_callback.__self__ is copied_child,
        "refused": errors,
        "given_sub_agents_adopted": replacement.parent_agent is with_new_subs,
    }


def test_clone_matches_google_adk():
    adk, mine = both(_clone_summary)
    assert mine == adk
    assert mine["child_is_a_copy"] and mine["callback_rebound"] and not mine["copy_has_parent"]


# --- InMemorySessionService.*_sync -------------------------------------------------------


def _sessions_summary(fw, caplog):
    service = fw.InMemorySessionService()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        created = service.create_session_sync(
            app_name="app", user_id="u", state={"app:a": 1, "user:b": 2, "c": 3},
            session_id=" s1 ")
        service.create_session_sync(app_name="app", user_id="v", session_id="s2")
        try:
            service.create_session_sync(app_name="app", user_id="u", session_id="s1")
            duplicate = None
        except Exception as error:  # noqa: BLE001 - the type's name is compared
            duplicate = type(error).__name__
        got = service.get_session_sync(app_name="app", user_id="u", session_id="s1")
        listed = service.list_sessions_sync(app_name="app")
        mine = service.list_sessions_sync(app_name="app", user_id="u")
        service.delete_session_sync(app_name="app", user_id="u", session_id="s1")
        gone = service.get_session_sync(app_name="app", user_id="u", session_id="s1")
    warned = sum(1 for r in caplog.records
                 if r.name.startswith("orchestrator") and "_sync is deprecated" in r.getMessage())
    return {
        "created": (created.id, created.state),
        "duplicate": duplicate,
        "got": (got.id, got.state, got.events),
        "listed": sorted((s.user_id, s.id) for s in listed.sessions),
        "mine": [s.id for s in mine.sessions],
        "gone": gone,
    }, warned


def test_session_service_sync_methods_match_google_adk(caplog):
    (adk, _), (mine, warned) = both(lambda fw: _sessions_summary(fw, caplog))
    assert mine == adk
    assert mine["created"] == ("s1", {"c": 3, "app:a": 1, "user:b": 2})
    assert warned == 8  # each *_sync call says it is deprecated (google-adk logs it too)


# --- BaseToolset(tool_name_prefix=...) ----------------------------------------------------


def _files_toolset(fw, log: list[str], *, fail: bool = False):
    def read(path: str) -> str:
        """Read a file."""
        return f"contents of {path}"

    def write(path: str, text: str) -> str:
        """Write a file."""
        return "written"

    read_tool, write_tool = fw.FunctionTool(read), fw.FunctionTool(write)

    class Files(fw.BaseToolset):
        async def get_tools(self, readonly_context=None):
            log.append("listed")
            if fail:
                raise ConnectionError("the file server is down")
            return [t for t in (read_tool, write_tool) if self._is_tool_selected(t, readonly_context)]

        async def process_llm_request(self, *, tool_context, llm_request):
            log.append(f"toolset saw {sorted(llm_request.tools_dict)}")

    return Files(tool_name_prefix="files", tool_filter=["read"]), read_tool


async def _prefixed_toolset_scenario(fw):
    log: list[str] = []
    toolset, read_tool = _files_toolset(fw, log)
    h = RequestHarness(fw)
    agent = fw.LlmAgent(name="agent", model=h.model("gemini-2.5-flash", scenarios.fc("files_read", path="a.txt"), "done"),
                        tools=[toolset])
    await h.start(agent)
    await h.turn(scenarios.user_text("read a.txt"))
    prefixed = await toolset.get_tools_with_prefix()
    h.extra.update(
        log=log,
        prefixed=[(t.name, t._get_declaration().name) for t in prefixed],
        original_name=read_tool.name,
        copies=all(t is not read_tool for t in prefixed),
    )
    return await h.finish()


def test_a_prefixed_toolset_offers_and_runs_its_tools_under_the_prefix_as_google_adk_does():
    adk, mine = run(_prefixed_toolset_scenario)
    assert mine == adk
    assert mine["extra"]["prefixed"] == [["files_read", "files_read"]]
    assert mine["extra"]["original_name"] == "read"
    # Listed once per invocation, once more for the direct call; the toolset's own
    # process_llm_request runs on each model step, before its tools are declared.
    assert mine["extra"]["log"] == ["listed", "toolset saw []", "toolset saw []", "listed"]
    assert mine["turns"][0]["events"][1]["payload"] == [
        ["response", "files_read", {"result": "contents of a.txt"}, "adk-id#0"]]


async def _failing_toolset_scenario(fw):
    log: list[str] = []
    toolset, _ = _files_toolset(fw, log, fail=True)

    def ping() -> str:
        """Ping."""
        return "pong"

    h = RequestHarness(fw)
    agent = fw.LlmAgent(name="agent", model=h.model("gemini-2.5-flash", "no files today"),
                        tools=[toolset, ping])
    await h.start(agent)
    await h.turn(scenarios.user_text("hi"))
    return await h.finish()


def test_a_toolset_that_fails_to_list_is_left_out_as_google_adk_does(caplog):
    with caplog.at_level(logging.ERROR):
        adk, mine = run(_failing_toolset_scenario)
    assert mine == adk
    assert mine["requests"][0]["tools"] == ["ping"]
    assert any("Files" in r.getMessage() and r.exc_info for r in caplog.records
               if r.name.startswith("orchestrator"))


# --- add_events_to_memory / add_memory / delete_memory on the contexts -------------------


async def _memory_scenario(fw):
    async def remember(note: str, tool_context: fw.ToolContext) -> dict:
        """Remember a note."""
        event = fw.Event(author="agent", message=types.Content(role="model", parts=[types.Part(text=note)]))
        await tool_context.add_events_to_memory(events=[event], custom_metadata={"source": "tool"})
        found = await tool_context.search_memory("banana")
        outcome = {"found": [m.content.parts[0].text for m in found.memories]}
        for name, call in (
            ("add_memory", lambda: tool_context.add_memory(memories=[
                fw.MemoryEntry(content=types.Content(parts=[types.Part(text="x")]))])),
            ("delete_memory", lambda: tool_context.delete_memory(found.memories[0].id)),
        ):
            try:
                await call()
                outcome[name] = "ok"
            except Exception as error:  # noqa: BLE001 - the type's name is compared
                outcome[name] = type(error).__name__
        outcome["after_delete"] = len((await tool_context.search_memory("banana")).memories)
        return outcome

    h = RequestHarness(fw)
    agent = fw.LlmAgent(name="agent", model=h.model("gemini-2.5-flash", scenarios.fc("remember", note="a banana a day"), "ok"),
                        tools=[remember])
    await h.start(agent)
    await h.turn(scenarios.user_text("remember this"))
    return await h.finish()


def test_contexts_write_memory_as_google_adk_does():
    adk, mine = run(_memory_scenario)
    assert mine == adk
    answer = mine["turns"][0]["events"][1]["payload"][0][2]
    assert answer == {"found": ["a banana a day"], "add_memory": "NotImplementedError",
                      "delete_memory": "ok", "after_delete": 0}


async def test_context_memory_calls_without_a_memory_service_name_what_was_missing():
    from orchestrator.agents.context import ToolContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.sessions.in_memory_session_service import InMemorySessionService

    service = InMemorySessionService()
    session = await service.create_session(app_name="a", user_id="u")
    ctx = InvocationContext(session_service=service, invocation_id="e-1",
                            agent=LlmAgent(name="x"), session=session)
    with pytest.raises(ValueError, match="add events to memory: this runner has no memory service"):
        await ToolContext(ctx).add_events_to_memory(events=[])


# --- InvocationContext.reset_sub_agent_states ---------------------------------------------


async def _loop_of_branches_scenario(fw):
    h = RequestHarness(fw)
    branches = [fw.LlmAgent(name=f"b{i}", model=h.model(f"m{i}", f"b{i} once", f"b{i} twice"))
                for i in range(2)]
    loop = fw.LoopAgent(name="loop", max_iterations=2,
                        sub_agents=[fw.ParallelAgent(name="fan", sub_agents=branches)])
    app = fw.App(name=scenarios.APP_NAME, root_agent=loop,
                 resumability_config=fw.ResumabilityConfig(is_resumable=True))
    h.runner = fw.InMemoryRunner(app=app)
    session = await h.runner.session_service.create_session(app_name=scenarios.APP_NAME, user_id=scenarios.USER_ID)
    h.session_id = session.id
    events = await h.turn(scenarios.user_text("go"))
    return sorted(e.content.parts[0].text for e in events if e.content and e.content.parts)


def test_a_loop_restarts_agents_nested_below_its_children_as_google_adk_does():
    adk, mine = run(_loop_of_branches_scenario)
    assert mine == adk == ["b0 once", "b0 twice", "b1 once", "b1 twice"]


async def test_reset_sub_agent_states_forgets_every_descendant():
    fw = ours()
    leaf = fw.LlmAgent(name="leaf")
    middle = fw.SequentialAgent(name="middle", sub_agents=[leaf])
    top = fw.LoopAgent(name="top", sub_agents=[middle])
    service = fw.InMemorySessionService()
    session = await service.create_session(app_name="a", user_id="u")
    ctx = fw.InvocationContext(session_service=service, invocation_id="e-1", agent=top, session=session)
    ctx.set_agent_state("top", agent_state={"times_looped": 1})
    ctx.set_agent_state("middle", agent_state={"current_sub_agent": "leaf"})
    ctx.set_agent_state("leaf", end_of_agent=True)
    ctx.reset_sub_agent_states("top")
    ctx.reset_sub_agent_states("nobody")  # unknown: nothing happens
    assert ctx.agent_states == {"top": {"times_looped": 1}}
    assert ctx.end_of_agents == {"top": False}
