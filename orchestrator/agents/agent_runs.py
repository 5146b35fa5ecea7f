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
one (:func:`~orchestrator.agents.transfer_hops.agent_to_continue`), and no agent that
transferred is under way. Under another root a transfer runs its target inside the run of
the agent that made it: in a non-resumable app a continued run re-enters the calling agent
alone; the agents that transferred to it in this run are still under way in process, so
they wait too and the continued run ends them after the calling agent. Any other agent
stopping at the pause ends its run there (after a transfer to a peer in a resumable app,
the agent that transferred is not re-entered).

A tool's calls count as work for workers when the calling agent declares the tool itself
and it is not long-running: a toolset's tools are listed per invocation, so the pause for
one of them ends the runs of the agents waiting, as a long-running one does.

A run recovered after its orchestrator stopped may find, in a non-resumable app, that the
agent it was going down to had given its final answer: its turn is over, and only the
after-callbacks of the runs under way are left (:mod:`orchestrator.agents.answered_runs`).

In a resumable app an agent commits its ``end_of_agent`` before its after-callbacks run (as
google-adk does): a run recovered after a stop between the two runs those callbacks first
(:mod:`orchestrator.agents.agent_ends` reads which from the log), then continues as its
checkpoints say.

The roles live in their own modules: this one (what the Runner takes up, what waits for
workers), :mod:`~orchestrator.agents.run_stack` (the agents under way in the current run),
:mod:`~orchestrator.agents.transfer_hops` (transfers that end the run of the agent that
made them), :mod:`~orchestrator.agents.answered_runs` and
:mod:`~orchestrator.agents.agent_ends` (what a recovered run still owes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator.agents.agent_ends import ends_owed
from orchestrator.agents.answered_runs import unfinished_after_answer
from orchestrator.agents.run_stack import RunStack
from orchestrator.agents.transfer_hops import agent_to_continue, transfers_by_hop, unfinished_hop
from orchestrator.distributed.ledger import CallEntry, CallLedger
from orchestrator.events.event import Event
from orchestrator.flows.contents import REQUEST_CONFIRMATION, REQUEST_CREDENTIAL, RUN_BRANCH
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset
from orchestrator.tools.function_tool import callable_name

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent

__all__ = [
    "RunsGoingOn",
    "answered_by_workers",
    "runs_going_on",
    "waiting_for_workers",
    # Moved to their own modules; still importable from here, where they were defined.
    "agent_to_continue",
    "ends_owed",
    "transfers_by_hop",
    "unfinished_hop",
]


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
        elif callable_name(tool) == entry.name:
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
    return _waiting(root, events, invocation_id, RunStack(root, events, invocation_id, resumable))


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
    runs = RunStack(root, events, invocation_id, resumable)
    if recovering and not resumable and (unfinished := unfinished_after_answer(runs)) is not None:
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


def _waiting(root: BaseAgent, events: list[Event], invocation_id: str, runs: RunStack) -> list[str]:
    """The agents (outermost first) taken up with open calls that all wait for workers."""
    verdicts: dict[str, bool] = {}
    for entry in CallLedger.of(events, invocation_id).open_calls():
        by_workers = answered_by_workers(root, entry)
        for name in runs.taken_up_with(entry.event.author):
            verdicts[name] = verdicts.get(name, True) and by_workers
    return [name for name, by_workers in verdicts.items() if by_workers]
