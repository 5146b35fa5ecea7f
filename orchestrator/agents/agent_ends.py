"""The ``end_of_agent`` events whose ``after_agent`` callbacks a recovered run still owes.

Resumable apps: an agent commits its ``end_of_agent`` before its after-callbacks run (as
google-adk does), so a run recovered after a stop between the two runs those callbacks
first, then continues as its checkpoints say. Which ends are owed is read from the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.agents.transfer_hops import transfers_by_hop
from orchestrator.events.event import Event
from orchestrator.flows.contents import on_or_below

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent


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
