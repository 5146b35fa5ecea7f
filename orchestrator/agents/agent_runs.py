"""Where an agent's run ends: at a pause for an answer from outside, not at a wait for workers.

In process, a plain tool runs inside the run of the agent that calls it, and so do a
ParallelAgent's branches. Distributed, such work may go to workers (a plain tool routed to a
queue, branches sent to an agents queue): the invocation pauses until the answers are in,
and a later run, often on another orchestrator, continues it. That pause is not the end of
the agents waiting for the answers: their ``after_agent`` callbacks (the plugins' too) do
not run at it, and their ``before_agent`` callbacks do not run again when the answers
continue them. Each runs once, as in process.

A pause for an answer from outside (a long-running tool's, a confirmation or credential
request) does end the run of the agents waiting for it, as in google-adk, where that answer
comes with a new ``run_async``: their after-callbacks run at the pause and their
before-callbacks again when the answer continues them. An agent waiting for both kinds
waits for an answer from outside.

Both sides of a pause read the same committed log, so they agree without storing anything:
:func:`waiting_for_workers` says which agents wait for workers only, as they stop and again
when a run continues the invocation; :func:`runs_going_on` turns that into the agents the
continued run re-enters without their before-callbacks, and those it does not re-enter
whose after-callbacks run when it ends.

Which agents count is what a continued run does: it re-enters the agent that made the
calls and, in a resumable app, its ancestors up to the root when each is checkpointed (a
resumed root goes down to the calling agent through them). Under a root LlmAgent a
transfer is a hop, as in google-adk 2.13's node runtime: the agent that transfers ends its
run there, so the way down starts at the outermost checkpointed agent above the calling
one (:func:`agent_to_continue`), and no agent that transferred is under way. Under another
root a transfer runs its target inside the run of the agent that made it: in a
non-resumable app a continued run re-enters the calling agent alone; the agents that
transferred to it in this run are still under way in process, so they wait too and the
continued run ends them after the calling agent. Any other agent stopping at the pause
ends its run there (after a transfer to a peer in a resumable app, the agent that
transferred is not re-entered).

A tool's calls count as work for workers when the calling agent declares the tool itself
and it is not long-running: a toolset's tools are listed per invocation, so the pause for
one of them ends the runs of the agents waiting, as a long-running one does.

A run recovered after its orchestrator stopped may find, in a non-resumable app, that the
agent it was going down to had given its final answer: its turn is over (its model must
not be called again), and what was left were the after-callbacks of the runs under way.
They end innermost first, each committing at most one event, so the events after the
answer tell which runs ended; the recovered run ends only the others.

In a resumable app an agent commits its ``end_of_agent`` before its after-callbacks run (as
google-adk does): a run recovered after a stop between the two runs those callbacks first
(:func:`ends_owed` reads which from the log), then continues as its checkpoints say.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from orchestrator.distributed.ledger import CallEntry, CallLedger
from orchestrator.events.event import Event, call_author
from orchestrator.flows.contents import (
    REQUEST_CONFIRMATION,
    REQUEST_CREDENTIAL,
    RUN_BRANCH,
    on_or_below,
)
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent


@dataclass
class RunsGoingOn:
    """The agents whose runs a continued (or recovered) run takes up where they stopped."""

    resumed: set[str] = field(default_factory=set)
    """Re-entered without their before-callbacks (each name once, on its first entry)."""
    unfinished: list[str] = field(default_factory=list)
    """Not re-entered (outermost first): their after-callbacks run when the run ends,
    unless they still wait for workers then."""
    answered: bool = False
    """Recovering a non-resumable app: the log holds the final answer of the agent the run
    was going down to. No agent is re-entered; ``unfinished`` are the runs under way whose
    after-callbacks the log does not show committed after that answer."""


def answered_by_workers(root: BaseAgent, entry: CallEntry) -> bool:
    """True if the call waits for work a worker does for the agent, not for an outside answer.

    A branch sent to a worker, or a call of a tool the calling agent declares itself that
    is not long-running (its call waits only because it was routed to a worker).
    """
    if entry.name == RUN_BRANCH:
        return True
    if entry.name in (REQUEST_CONFIRMATION, REQUEST_CREDENTIAL):
        return False
    agent = root.find_agent(entry.event.author)
    for tool in getattr(agent, "tools", None) or []:
        if isinstance(tool, BaseToolset):
            continue
        if isinstance(tool, BaseTool):
            if tool.name == entry.name:
                return not tool.is_long_running
        elif getattr(tool, "__name__", None) == entry.name:
            return True  # a function: a FunctionTool, never long-running
    return False


def waiting_for_workers(
    root: BaseAgent, events: list[Event], invocation_id: str, resumable: bool
) -> list[str]:
    """The agents (outermost first) whose open calls all wait for workers.

    Read from the invocation's committed ``events``: its open calls, and for each the agents
    a continued run takes up (see the module's doc). An agent with no open call, or with
    one that waits for an outside answer, is not listed.
    """
    return _waiting(root, events, invocation_id, _RunStack(root, events, invocation_id, resumable))


def runs_going_on(
    root: BaseAgent, events: list[Event], invocation_id: str, resumable: bool,
    *, recovering: bool = False,
) -> RunsGoingOn:
    """The runs that a run continuing the invocation takes up.

    ``events``: the log before that run commits anything. The agents waiting for workers
    only; when ``recovering`` (the run that was going on stopped mid-way), also the agents
    under way in it: the author of its last event other than an answer, and the agents a
    continued run takes up with it.
    """
    runs = _RunStack(root, events, invocation_id, resumable)
    if recovering and not resumable and (unfinished := runs.unfinished_after_answer()) is not None:
        return RunsGoingOn(unfinished=unfinished, answered=True)
    names = _waiting(root, events, invocation_id, runs)
    if recovering and resumable:
        # Every branch under way: a ParallelAgent's branches in process went on side by side.
        under_way = [n for current in runs.currents() for n in runs.taken_up_with(current)]
        under_way = list(dict.fromkeys(under_way))
        names = under_way + [n for n in names if n not in under_way]
    elif recovering and (current := runs.current()) is not None:
        # Non-resumable: one chain of transfers, the one the current run was going down.
        names = runs.taken_up_with(current)
    if not names:
        return RunsGoingOn()
    if resumable:
        return RunsGoingOn(resumed=set(names))
    # One chain of transfers: the continued run re-enters its innermost agent alone.
    return RunsGoingOn(resumed={names[-1]}, unfinished=names[:-1])


def transfers_by_hop(root: BaseAgent, name: str) -> bool:
    """True if a transfer made by agent ``name`` is a hop: its run ends at the transfer.

    As in google-adk 2.13, whose node runtime (a root LlmAgent) schedules the root and
    each transfer target itself: an LlmAgent with only LlmAgents above it up to ``root``
    runs at the top of the invocation. One under a workflow agent runs inside it, and its
    transfer runs the target inside its own run (google-adk's legacy path).
    """
    from orchestrator.agents.llm_agent import LlmAgent

    agent = root.find_agent(name)
    if agent is None or not isinstance(root, LlmAgent):
        return False
    while agent is not None and agent is not root:
        if not isinstance(agent, LlmAgent):
            return False
        agent = agent.parent_agent
    return agent is root


def unfinished_hop(
    root: BaseAgent, events: list[Event], invocation_id: str
) -> tuple[str, str] | None:
    """``(agent, target)`` if the invocation's log ends with a transfer hop not taken yet.

    Its last events are ``agent``'s transfer (and, in a resumable app, its
    ``end_of_agent``): the run that committed them stopped before running ``target``.
    """
    ended: str | None = None
    for event in reversed(events):  # from the end: read as every continued run starts
        if event.invocation_id != invocation_id or event.partial:
            continue
        if ended is None and event.actions.end_of_agent and not event.content:
            ended = event.author
            continue
        target = event.actions.transfer_to_agent
        if (not target or event.author == "user" or ended not in (None, event.author)
                or not transfers_by_hop(root, event.author)):
            return None
        return event.author, target
    return None


def agent_to_continue(
    root: BaseAgent, events: list[Event], invocation_id: str, routed: Callable[[], BaseAgent]
) -> BaseAgent | None:
    """The agent a run continuing a resumable invocation runs, when transfers are hops.

    The agents that transferred ended their runs (their ``end_of_agent`` is logged), so the
    root is not the way down, as it is under a workflow agent: the run goes on in the agent
    its log leaves under way (google-adk's node runtime runs the author of the answered
    call), or its outermost checkpointed agent above. A hop not taken yet is finished by
    the agent that made it, if it has not ended, else the target runs. Before any agent
    said anything, the ``routed`` agent (the turn's). None: nothing is left to do.
    """
    from orchestrator.agents.invocation_context import invocation_agent_states

    mine = [e for e in events if e.invocation_id == invocation_id and not e.partial]
    states, ends = invocation_agent_states(mine, invocation_id, root)
    if (hop := unfinished_hop(root, mine, invocation_id)) is not None:
        return root.find_agent(hop[1] if ends.get(hop[0]) else hop[0])
    last = mine[-1] if mine else None
    agent: BaseAgent | None
    if last is None or (last.author == "user" and not last.get_function_responses()):
        return routed()
    if responses := last.get_function_responses():
        # An answer (the user's, or a worker's committed in the calling agent's name): the
        # agent that made the call goes on, even one that ended before (as google-adk).
        agent = root.find_agent(call_author(mine, responses[0].id) or last.author)
    else:
        agent = root.find_agent(last.author)
        while agent is not None and ends.get(agent.name):
            agent = agent.parent_agent
    if agent is None:
        return None
    return _outermost_checkpointed(agent, states)


def ends_owed(root: BaseAgent, events: list[Event], invocation_id: str) -> list[Event]:
    """The ``end_of_agent`` events (log order) whose agents' after-callbacks did not finish.

    Resumable apps. As in google-adk, an agent commits its ``end_of_agent`` and only then
    runs its after-callbacks (the plugins' and its own, one event at most): an orchestrator
    that stops between the two leaves an ended agent whose callbacks' effect is not in the
    log, and no continued run re-enters an ended agent. Joining them into one event would
    change google-adk's events, so the log is read instead: the callbacks finished if the
    agent committed anything after its end (their event, or a later run of it), or if an
    event followed on its branch or a branch above it (its parent's or a later sibling's
    go on only after them; a parallel sibling's events tell nothing). An end that a
    transfer hop made runs no after-callbacks (google-adk 2.13): nothing is owed for it.
    A callback that committed nothing is not seen: it runs again in the recovered run.
    """
    mine = [e for e in events if e.invocation_id == invocation_id and not e.partial]
    owed: list[Event] = []
    for i, end in enumerate(mine):
        if not end.actions.end_of_agent or end.author == "user" or end.content is not None:
            continue
        if _ended_by_hop(root, mine[:i], end.author):
            continue
        # Another event of its agent, or one on its branch or a branch above it (None: the
        # top), came after the end: its after-callbacks ran (or had nothing to run).
        if not any(e.author == end.author or e.branch is None or on_or_below(end.branch, e.branch)
                   for e in mine[i + 1:]):
            owed.append(end)
    return owed


def _ended_by_hop(root: BaseAgent, before: list[Event], name: str) -> bool:
    """True if agent ``name``'s event before its end is a transfer that is a hop."""
    last = next((e for e in reversed(before) if e.author == name), None)
    return (last is not None and bool(last.actions.transfer_to_agent)
            and transfers_by_hop(root, name))


def _outermost_checkpointed(agent: BaseAgent, states: dict[str, dict[str, Any]]) -> BaseAgent:
    """``agent``, or its outermost ancestor reached through agents under way (checkpointed)."""
    while agent.parent_agent is not None and agent.parent_agent.name in states:
        agent = agent.parent_agent
    return agent


def _waiting(root: BaseAgent, events: list[Event], invocation_id: str, runs: _RunStack) -> list[str]:
    verdicts: dict[str, bool] = {}
    for entry in CallLedger.of(events, invocation_id).open_calls():
        by_workers = answered_by_workers(root, entry)
        for name in runs.taken_up_with(entry.event.author):
            verdicts[name] = verdicts.get(name, True) and by_workers
    return [name for name, by_workers in verdicts.items() if by_workers]


class _RunStack:
    """The agents under way in an invocation's current run, read from its log."""

    def __init__(
        self, root: BaseAgent, events: list[Event], invocation_id: str, resumable: bool
    ) -> None:
        from orchestrator.agents.invocation_context import invocation_agent_states

        self._root = root
        self._resumable = resumable
        mine = [e for e in events if e.invocation_id == invocation_id and not e.partial]
        # The current run of the invocation started at its latest event from outside (the
        # user's message, an answer from outside): a continuation for workers starts none.
        start = max((i for i, e in enumerate(mine) if e.author == "user"), default=-1)
        self._since_start = mine[start + 1:]
        if resumable:
            self._states, self._ends = invocation_agent_states(mine, invocation_id, root)

    def taken_up_with(self, name: str) -> list[str]:
        """Outermost first, the agents a continued run takes up to continue agent ``name``."""
        if self._resumable:
            return self._descent(name)
        stack = self._transfers()
        return stack if stack and stack[-1] == name else [name]

    def _descent(self, name: str) -> list[str]:
        """The agents a resumed root goes down through to ``name``, ``name`` included.

        As the agents resume: a SequentialAgent or LoopAgent its checkpoint's sub-agent, a
        ParallelAgent each sub-agent not ended, an LlmAgent the outermost agent above
        ``name`` below it whose ancestors up to it are all checkpointed. A root that is not
        checkpointed is not resumed (the answer goes to ``name`` directly): ``[name]``, as
        for any way down this cannot tell. Under a root LlmAgent the way down starts at
        the outermost checkpointed agent above ``name`` (an agent that transferred ended).
        """
        from orchestrator.agents.llm_agent import LlmAgent
        from orchestrator.agents.loop_agent import LoopAgent
        from orchestrator.agents.parallel_agent import ParallelAgent
        from orchestrator.agents.sequential_agent import SequentialAgent

        target = self._root.find_agent(name)
        path: list[BaseAgent] = []
        agent = target
        while agent is not None:
            path.insert(0, agent)
            agent = agent.parent_agent
        if target is None:
            return [name]
        if isinstance(self._root, LlmAgent):
            # Transfers are hops: the run starts at the outermost checkpointed agent above
            # ``name`` (see agent_to_continue), not at the root, whose run ended.
            at = path.index(_outermost_checkpointed(target, self._states))
        elif path[0].name in self._states:
            at = 0
        else:
            return [name]
        taken = [path[at].name]
        while at < len(path) - 1:
            current, child = path[at], path[at + 1]
            if isinstance(current, LlmAgent):
                below = len(path) - 1
                while below - 1 > at and path[below - 1].name in self._states:
                    below -= 1
                at = below
            elif isinstance(current, LoopAgent) or (
                    isinstance(current, SequentialAgent | ParallelAgent)
                    and not self._ends.get(child.name)):
                at += 1
            else:  # an agent that ended is passed over; other agents: cannot tell
                return [name]
            taken.append(path[at].name)
        return taken

    def currents(self) -> list[str]:
        """The agents under way when the current run stopped: one per branch, if any.

        Resumable apps. As :meth:`current`, read on each branch's own events: a
        ParallelAgent's branches in process were each under way where their events stop.
        """
        found: list[str] = []
        for branch in dict.fromkeys(e.branch for e in self._since_start):
            name = self.current([e for e in self._since_start if e.branch == branch])
            if name is not None and name not in found:
                found.append(name)
        return found

    def current(self, events: list[Event] | None = None) -> str | None:
        """The agent under way when the current run stopped, if any.

        The author of its last event that is not an answer (in a resumable app, the nearest
        agent above it that has not ended). ``events``: those to read (the run's by default).
        """
        for event in reversed(self._since_start if events is None else events):
            if event.author == "user" or _only_answers(event):
                continue
            agent: BaseAgent | None = self._root.find_agent(event.author)
            if self._resumable:
                while agent is not None and self._ends.get(agent.name):
                    if transfers_by_hop(self._root, agent.name) and (
                            agent.parent_agent is None
                            or agent.parent_agent.name not in self._states):
                        return None  # its run, at the top of the invocation, is over
                    agent = agent.parent_agent
            return agent.name if agent is not None else None
        return None

    def unfinished_after_answer(self) -> list[str] | None:
        """If the current run's innermost agent gave its final answer: the runs not ended.

        Non-resumable apps. The runs under way (outermost first) whose ends the events
        after that answer do not show; None if there is no such answer, or the events after
        it are not ends of those runs (then the run is not over: nothing is claimed).
        """
        from orchestrator.agents.llm_agent import LlmAgent

        stack = self._transfers()
        if not stack or not isinstance(self._root.find_agent(stack[-1]), LlmAgent):
            return None  # only an LlmAgent's turn ends at its final answer
        answer = _final_answer_at(self._since_start, stack[-1])
        if answer is None:
            return None
        under_way = self.taken_up_with(stack[-1])
        # Each end commits at most one event (the plugins' and the agent's callbacks
        # together), innermost run first: each event is the end of the innermost run not
        # ended yet that is its author's. A run whose callbacks left nothing is passed over.
        ended_from = len(under_way)
        for event in self._since_start[answer + 1:]:
            found = next((i for i in range(ended_from - 1, -1, -1)
                          if under_way[i] == event.author), None)
            if found is None:
                return None
            ended_from = found
        return under_way[:ended_from]

    def _transfers(self) -> list[str]:
        """The agents of the current run, outermost first.

        Its first agent, then each transfer's target: a target runs inside the agent that
        transferred to it.
        """
        stack: list[str] = []
        for event in self._since_start:
            if not stack:
                stack.append(event.author)
            target = event.actions.transfer_to_agent
            if target and event.author == stack[-1] and target != stack[-1]:
                if transfers_by_hop(self._root, event.author):
                    stack = []  # a hop: the run of the agent that transferred is over
                stack.append(target)
        return stack


def _final_answer_at(events: list[Event], name: str) -> int | None:
    """Where in ``events`` agent ``name`` gave its final answer, if it did.

    Its first final text after its last call or answer: the model's (the agent's turn
    ended there). Its after-callback's content, which can follow it, reads the same, but
    comes later.
    """
    at = None
    for i, event in enumerate(events):
        if event.author != name:
            continue
        if event.get_function_calls() or event.get_function_responses():
            at = None
        elif at is None and event.content is not None and event.is_final_response():
            at = i
    return at


def _only_answers(event: Event) -> bool:
    """True for an event that carries function responses and nothing else an agent said."""
    return bool(event.get_function_responses()) and not event.get_function_calls() and not any(
        p.text for p in (event.content.parts if event.content and event.content.parts else [])
    )

