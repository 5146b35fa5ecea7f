"""Long sessions: the model history built incrementally is the one built from every event.

The memo (orchestrator/flows/history_memo.py) and the log scans (orchestrator/events/
log_scans.py) let a model call read only the events appended since the previous call. These
tests grow random sessions event by event and, after each event, compare what every view
(agent, branch) gets with the memo against a build from scratch, so any shortcut that
changes what a model sees fails here.
"""

from __future__ import annotations

import random

import pytest
from google.genai import types

from orchestrator.agents.invocation_history import count_model_calls
from orchestrator.events.event import Event
from orchestrator.events.event_actions import EventActions
from orchestrator.events.log_scans import LogScan
from orchestrator.flows import call_pairing, contents
from orchestrator.flows.contents import build_contents
from orchestrator.flows.history_memo import HistoryMemo

AGENTS = ["root", "helper", "critic"]
BRANCHES = [None, "root", "root.helper", "root.critic"]


def _part(rng: random.Random, open_calls: list[tuple[str, str]], answered: set[str]) -> types.Part:
    kind = rng.random()
    if kind < 0.05:  # an answer that comes before its call, whose call may come later
        call_id = f"early-{rng.getrandbits(2)}"
        return types.Part(function_response=types.FunctionResponse(
            id=call_id, name="lookup", response={"early": True}))
    if kind < 0.1:
        call_id = f"early-{rng.getrandbits(2)}"
        open_calls.append((call_id, "lookup"))
        return types.Part(function_call=types.FunctionCall(id=call_id, name="lookup", args={}))
    if kind < 0.12:  # calls and answers without ids (matched by name)
        if rng.random() < 0.5:
            return types.Part(function_call=types.FunctionCall(name="lookup", args={}))
        return types.Part(function_response=types.FunctionResponse(name="lookup", response={}))
    if kind < 0.3 and open_calls:
        call_id, name = rng.choice(open_calls)
        if call_id not in answered or rng.random() < 0.3:  # sometimes a second answer
            answered.add(call_id)
        return types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name, response={"ok": rng.randint(0, 9)}))
    if kind < 0.5:
        call_id = rng.choice(["adk-", "call-"]) + str(rng.getrandbits(40))
        name = rng.choice(["lookup", "approve", "adk_request_confirmation"])
        open_calls.append((call_id, name))
        return types.Part(function_call=types.FunctionCall(id=call_id, name=name, args={"n": 1}))
    if kind < 0.55:
        return types.Part(text="   ")
    return types.Part(text=f"text {rng.getrandbits(16)}", thought=rng.random() < 0.1)


def random_log(rng: random.Random, length: int) -> list[Event]:
    """A session log with calls, answers (late, repeated), other agents, branches, rewinds."""
    events: list[Event] = []
    open_calls: list[tuple[str, str]] = []
    answered: set[str] = set()
    invocations = [f"e-{i}" for i in range(4)]
    for _ in range(length):
        author = rng.choice(["user", *AGENTS])
        actions = EventActions()
        if rng.random() < 0.02 and events:
            actions = EventActions(rewind_before_invocation_id=rng.choice(invocations))
        parts = [_part(rng, open_calls, answered) for _ in range(rng.randint(1, 2))]
        role = "user" if author == "user" or any(p.function_response for p in parts) else "model"
        content = types.Content(role=role, parts=parts) if rng.random() > 0.05 else None
        long_running = {p.function_call.id for p in parts
                        if p.function_call and p.function_call.id and rng.random() < 0.3}
        events.append(Event(
            invocation_id=rng.choice(invocations), author=author, content=content,
            branch=rng.choice(BRANCHES), actions=actions,
            long_running_tool_ids=long_running or None,
        ))
    return events


@pytest.mark.parametrize("seed", range(40))
def test_incremental_history_matches_a_build_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    log = random_log(rng, 60)
    memo = HistoryMemo()
    views = [(agent, branch, thoughts) for agent in AGENTS for branch in BRANCHES
             for thoughts in (False, True)]
    for n in range(1, len(log) + 1):
        prefix = log[:n]
        for agent, branch, thoughts in rng.sample(views, 6):
            with_memo = build_contents(prefix, agent_name=agent, branch=branch,
                                       include_thoughts_from_other_agents=thoughts, memo=memo)
            scratch = build_contents(prefix, agent_name=agent, branch=branch,
                                     include_thoughts_from_other_agents=thoughts, memo=None)
            assert with_memo == scratch, (seed, n, agent, branch)


def test_a_recreated_session_is_not_mistaken_for_the_old_one() -> None:
    memo = HistoryMemo()
    old = [Event(invocation_id="e-1", author="user",
                 content=types.Content(role="user", parts=[types.Part(text="old")]))]
    assert build_contents(old, agent_name="root", branch=None, memo=memo)[0].parts[0].text == "old"
    new = [Event(invocation_id="e-1", author="user",
                 content=types.Content(role="user", parts=[types.Part(text="new")]))]
    assert build_contents(new, agent_name="root", branch=None, memo=memo)[0].parts[0].text == "new"


def test_the_memo_stays_within_its_bounds() -> None:
    memo = HistoryMemo(max_contents=50, max_entries=3)
    for s in range(10):
        log = [Event(invocation_id="e", author="user",
                     content=types.Content(role="user", parts=[types.Part(text=f"{s}.{i}")]))
               for i in range(20)]
        build_contents(log, agent_name="root", branch=None, memo=memo)
    assert len(memo) <= 2  # 20 contents each, 50 at most in all


def test_model_calls_are_counted_per_invocation_and_per_view() -> None:
    def model_event(inv: str, branch: str | None) -> Event:
        return Event(invocation_id=inv, author="root", branch=branch,
                     content=types.Content(role="model", parts=[types.Part(text="x")]))

    user = Event(invocation_id="e-1", author="user",
                 content=types.Content(role="user", parts=[types.Part(text="hi")]))
    both = [user, model_event("e-1", "p.a"), model_event("e-1", None)]
    a_view = [user, model_event("e-1", "p.a"), both[2]]
    b_view = [user, model_event("e-1", "p.b"), both[2]]
    assert count_model_calls(both, "e-1") == 2
    assert count_model_calls(a_view, "e-1", "p.a") == 2
    b_view.append(model_event("e-1", "p.b"))
    assert count_model_calls(b_view, "e-1", "p.b") == 3
    assert count_model_calls(both + [model_event("e-2", None)], "e-2") == 1


def test_a_log_scan_reads_each_event_once() -> None:
    seen: list[str] = []
    scan: LogScan[list[str]] = LogScan(list, lambda state, event: seen.append(event.id))
    log = [Event(invocation_id="e", author="user") for _ in range(5)]
    scan.of(log[:3])
    scan.of(log)
    scan.of(log)
    assert seen == [e.id for e in log]


def count_full_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of events of each history built from scratch from now on."""
    full_builds: list[int] = []
    build = contents._build

    def counting(events, *args):  # noqa: ANN001, ANN002, ANN202
        full_builds.append(len(events))
        return build(events, *args)

    monkeypatch.setattr(contents, "_build", counting)
    return full_builds


def test_a_growing_chat_is_built_from_scratch_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model calls of a chat (no tool calls) read only their new events after the first."""
    full_builds = count_full_builds(monkeypatch)
    memo = HistoryMemo()
    log: list[Event] = []
    for i in range(200):
        log.append(Event(invocation_id=f"e-{i}", author="user",
                         content=types.Content(role="user", parts=[types.Part(text=f"q{i}")])))
        history = build_contents(log, agent_name="root", branch=None, memo=memo)
        assert [c.parts[0].text for c in history][-1] == f"q{i}"
        log.append(Event(invocation_id=f"e-{i}", author="root",
                         content=types.Content(role="model", parts=[types.Part(text=f"a{i}")])))
    assert full_builds == [1]


def long_running_log(rng: random.Random, turns: int) -> list[Event]:
    """A session of long-running calls: interim answers, text replies, later answers.

    Each answer to an open call comes in the call's invocation, sometimes from the agent
    (an interim "pending" result), mostly from the user; several answers to one call are
    common, with the agent's text replies in between.
    """
    events: list[Event] = []
    open_calls: list[tuple[str, str, str, str | None]] = []  # id, invocation, agent, branch
    for turn in range(turns):
        agent = rng.choice(AGENTS[:2])
        branch = rng.choice([None, "root"])
        if open_calls and rng.random() < 0.6:
            chosen = rng.sample(open_calls, rng.randint(1, min(2, len(open_calls))))
            invocation, agent, branch = chosen[0][1], chosen[0][2], chosen[0][3]
            author = "user" if rng.random() < 0.8 else agent
            events.append(Event(
                invocation_id=invocation, author=author, branch=branch,
                content=types.Content(role="user", parts=[
                    types.Part(function_response=types.FunctionResponse(
                        id=call_id, name="job", response={"v": rng.randint(0, 9)}))
                    for call_id, *_ in chosen
                ]),
            ))
            for call in chosen:
                if rng.random() < 0.4:
                    open_calls.remove(call)
        else:
            invocation = f"e-{turn}"
            events.append(Event(invocation_id=invocation, author="user", branch=branch,
                                content=types.Content(role="user", parts=[types.Part(text="q")])))
        if rng.random() < 0.5:
            ids = [f"adk-{turn}-{k}" for k in range(rng.randint(1, 2))]
            events.append(Event(
                invocation_id=invocation, author=agent, branch=branch,
                content=types.Content(role="model", parts=[
                    types.Part(function_call=types.FunctionCall(id=i, name="job", args={}))
                    for i in ids
                ]),
                long_running_tool_ids=set(ids),
            ))
            open_calls.extend((i, invocation, agent, branch) for i in ids)
        for _ in range(rng.randint(0, 2)):
            events.append(Event(invocation_id=invocation, author=agent, branch=branch,
                                content=types.Content(role="model", parts=[
                                    types.Part(text=f"reply {rng.getrandbits(16)}")])))
    return events


def test_repeated_answers_to_long_running_calls_are_built_incrementally_as_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The latest answer replaces earlier ones and stale replies go, with or without the memo."""
    dropped: list[int] = []
    stale_replies = call_pairing._stale_replies

    def counting(*args):  # noqa: ANN002, ANN202
        found = stale_replies(*args)
        dropped.append(len(found))
        return found

    monkeypatch.setattr(call_pairing, "_stale_replies", counting)
    for seed in range(60):
        rng = random.Random(seed)
        log = long_running_log(rng, 12)
        memo = HistoryMemo()
        for n in range(1, len(log) + 1):
            for agent, branch in [("root", None), ("root", "root"), ("helper", "root")]:
                with_memo = build_contents(log[:n], agent_name=agent, branch=branch, memo=memo)
                scratch = build_contents(log[:n], agent_name=agent, branch=branch, memo=None)
                assert with_memo == scratch, (seed, n, agent, branch)
    assert sum(1 for d in dropped if d) > 50  # the rule was exercised, not just present


def tool_rounds_log(rng: random.Random, rounds: int) -> list[Event]:
    """A session of model steps that call tools and get their answers, with noise.

    Mostly a call event right followed by its answer event (the shape of every tool round);
    sometimes something in between (a partial event, another branch's or agent's event, a
    text reply), an answer to only some of the calls, a long-running call answered later, a
    call id used again, an answer to no call, or id-less calls and answers.
    """
    events: list[Event] = []
    open_calls: list[tuple[str, str]] = []  # (id, invocation)
    used: list[str] = []
    for turn in range(rounds):
        invocation = f"e-{turn % 5}"
        agent = rng.choice(AGENTS)
        branch = rng.choice([None, "root", "root.helper"])
        roll = rng.random()
        if roll < 0.15:
            events.append(Event(invocation_id=invocation, author="user", content=types.Content(
                role="user", parts=[types.Part(text=f"q{turn}")])))
            continue
        if roll < 0.2 and open_calls:  # a long-running call answered later
            call_id, invocation = open_calls.pop(rng.randrange(len(open_calls)))
            events.append(Event(invocation_id=invocation, author="user", content=types.Content(
                role="user", parts=[types.Part(function_response=types.FunctionResponse(
                    id=call_id, name="job", response={"late": True}))])))
            continue
        if roll < 0.23:  # an answer to no call
            events.append(Event(invocation_id=invocation, author="user", content=types.Content(
                role="user", parts=[types.Part(text="stray"), types.Part(
                    function_response=types.FunctionResponse(id=f"none-{turn}", name="job",
                                                            response={}))])))
            continue
        if roll < 0.25:  # id-less
            events.append(Event(invocation_id=invocation, author=agent, content=types.Content(
                role="model", parts=[types.Part(function_call=types.FunctionCall(name="job"))])))
            continue
        ids = [rng.choice(used) if used and rng.random() < 0.05 else f"adk-{turn}-{k}"
               for k in range(rng.randint(1, 3))]
        ids = list(dict.fromkeys(ids))
        used.extend(ids)
        long_running = {i for i in ids if rng.random() < 0.2}
        events.append(Event(
            invocation_id=invocation, author=agent, branch=branch,
            content=types.Content(role="model", parts=[
                types.Part(function_call=types.FunctionCall(id=i, name="job", args={"n": 1}))
                for i in ids]),
            long_running_tool_ids=long_running or None))
        between = rng.random()
        if between < 0.05:
            events.append(Event(invocation_id=invocation, author=agent, branch=branch,
                                partial=True, content=types.Content(
                                    role="model", parts=[types.Part(text="...")])))
        elif between < 0.1:
            events.append(Event(invocation_id=invocation, author=rng.choice(AGENTS),
                                branch=rng.choice(BRANCHES), content=types.Content(
                                    role="model", parts=[types.Part(text="aside")])))
        answered = [i for i in ids if i not in long_running and rng.random() < 0.95]
        open_calls.extend((i, invocation) for i in ids if i not in answered)
        if answered:
            parts = [types.Part(function_response=types.FunctionResponse(
                id=i, name="job", response={"v": rng.randint(0, 9)})) for i in answered]
            if rng.random() < 0.1:
                parts.append(types.Part(text="note"))
            events.append(Event(invocation_id=invocation, author=agent, branch=branch,
                                content=types.Content(role="user", parts=parts)))
        if rng.random() < 0.4:
            events.append(Event(invocation_id=invocation, author=agent, branch=branch,
                                content=types.Content(role="model", parts=[
                                    types.Part(text=f"done {turn}")])))
    return events


def test_tool_rounds_are_built_incrementally_as_from_scratch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call answered right after it extends the memo; everything else is built again."""
    extended_with_answers: list[int] = []
    extend = contents._extended

    def counting(entry, events, *args):  # noqa: ANN001, ANN002, ANN202
        before = entry.count
        done = extend(entry, events, *args)
        if done and any(e.get_function_responses() for e in events[before:]):
            extended_with_answers.append(1)
        return done

    monkeypatch.setattr(contents, "_extended", counting)
    views = [(agent, branch, thoughts) for agent in AGENTS for branch in BRANCHES
             for thoughts in (False, True)]
    for seed in range(20):
        rng = random.Random(seed)
        log = tool_rounds_log(rng, 30)
        memo = HistoryMemo()
        for n in range(1, len(log) + 1):
            for agent, branch, thoughts in rng.sample(views, 5):
                kwargs = {"agent_name": agent, "branch": branch,
                          "include_thoughts_from_other_agents": thoughts}
                with_memo = build_contents(log[:n], memo=memo, **kwargs)
                assert with_memo == build_contents(log[:n], memo=None, **kwargs), (seed, n, agent)
    assert len(extended_with_answers) > 150  # the fast path was exercised, not just present


def test_a_tool_using_chat_is_built_from_scratch_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each model call of a session of tool rounds reads only its new events after the first."""
    full_builds = count_full_builds(monkeypatch)
    memo = HistoryMemo()
    log: list[Event] = []
    for i in range(100):
        log.append(Event(invocation_id=f"e-{i}", author="user",
                         content=types.Content(role="user", parts=[types.Part(text=f"q{i}")])))
        build_contents(log, agent_name="root", branch=None, memo=memo)
        log.append(Event(invocation_id=f"e-{i}", author="root", content=types.Content(
            role="model", parts=[types.Part(function_call=types.FunctionCall(
                id=f"adk-{i}", name="job", args={}))])))
        log.append(Event(invocation_id=f"e-{i}", author="root", content=types.Content(
            role="user", parts=[types.Part(function_response=types.FunctionResponse(
                id=f"adk-{i}", name="job", response={"v": i}))])))
        history = build_contents(log, agent_name="root", branch=None, memo=memo)
        assert history[-1].parts[0].function_response.response == {"v": i}
        log.append(Event(invocation_id=f"e-{i}", author="root",
                         content=types.Content(role="model", parts=[types.Part(text=f"a{i}")])))
    assert full_builds == [1]


class _Annotator:
    """Edits the newest message of each request in place, as google-adk lets callbacks do."""

    def __call__(self, callback_context, llm_request):  # noqa: ANN001
        part = llm_request.contents[-1].parts[0]
        part.text = f"{part.text} [note]"


def _note_plugin():
    from orchestrator.plugins.base_plugin import BasePlugin

    class NotePlugin(BasePlugin):
        async def before_model_callback(self, *, callback_context, llm_request):  # noqa: ANN001
            _Annotator()(callback_context, llm_request)

    return NotePlugin(name="note")


@pytest.mark.parametrize("editor", ["agent callback", "plugin"])
async def test_a_request_edited_in_place_changes_neither_the_session_nor_later_requests(
        editor: str) -> None:
    from orchestrator import App, InMemoryRunner, LlmAgent
    from orchestrator.models.fake import FunctionLlm

    seen: list[list[str]] = []

    def record(request):  # noqa: ANN001
        seen.append([p.text for c in request.contents for p in c.parts or [] if p.text])
        return "ok"

    agent = LlmAgent(name="root", model=FunctionLlm(fn=record),
                     before_model_callback=_Annotator() if editor == "agent callback" else None)
    runner = InMemoryRunner(app=App(name="notes", root_agent=agent,
                                    plugins=[_note_plugin()] if editor == "plugin" else []))
    session = await runner.session_service.create_session(app_name="notes", user_id="u")
    for text in ("first", "second"):
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    # The second request shows the first message as it was sent, as google-adk does.
    assert seen == [["first [note]"], ["first", "ok", "second [note]"]]
    stored = await runner.session_service.get_session(app_name="notes", user_id="u",
                                                      session_id=session.id)
    assert [p.text for e in stored.events for p in e.content.parts] == ["first", "ok", "second", "ok"]


def test_other_agents_calls_and_answers_are_quoted_in_the_order_they_happened() -> None:
    # google-adk quotes other agents' turns before it pairs calls with answers: two branches'
    # calls, then their answers, stay in that order. Pairing first moved each answer after
    # its own call ([a] called, [a] returned, [b] called, [b] returned).
    def ev(author: str, part: types.Part) -> Event:
        return Event(invocation_id="e-1", author=author, branch=f"fan.{author}",
                     content=types.Content(role="model" if part.function_call else "user",
                                           parts=[part]))

    def called(author: str) -> Event:
        return ev(author, types.Part(function_call=types.FunctionCall(
            id=f"c-{author}", name="tool", args={})))

    def returned(author: str) -> Event:
        return ev(author, types.Part(function_response=types.FunctionResponse(
            id=f"c-{author}", name="tool", response={"by": author})))

    log = [Event(invocation_id="e-1", author="user",
                 content=types.Content(role="user", parts=[types.Part(text="go")])),
           called("a"), called("b"), returned("a"), returned("b")]
    shown = [part.text for content in build_contents(log, agent_name="after", branch=None)
             for part in content.parts if part.text and part.text.startswith("[")]
    assert [text.split(" ", 2)[:2] for text in shown] == [
        ["[a]", "called"], ["[b]", "called"], ["[a]", "`tool`"], ["[b]", "`tool`"]]
