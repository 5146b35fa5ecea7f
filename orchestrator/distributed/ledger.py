"""CallLedger: which calls of an invocation are open or answered, read from its committed events.

The committed event log is the truth about an invocation's calls; the invocation record's
``pending_calls`` is only a cache of it. Every place that asks "is this call still waiting?"
(resuming, recovering after a crash, deciding to pause, the record's pending list, the
ParallelAgent collecting its branches) asks this module.

A call is *open* when its id is in the ``long_running_tool_ids`` of the event that made it
(a long-running tool, a tool routed to a worker, a confirmation request, a parallel branch)
and no FunctionResponse with that id was committed after it. A call is *answered* once such
a response is in the log, whatever came in later: a second answer is never appended.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from google.genai import types

from orchestrator.events.event import Event


@dataclass(frozen=True)
class CallEntry:
    """One call of the invocation, and the committed event that made it."""

    call: types.FunctionCall
    event: Event
    long_running: bool
    """True if the call waits for an answer that arrives later (it pauses the invocation)."""

    @property
    def id(self) -> str:
        """The function-call id."""
        return self.call.id or ""

    @property
    def name(self) -> str:
        """The tool (or ``adk_celery_run_branch``) called."""
        return self.call.name or ""


@dataclass
class CallLedger:
    """The calls of one invocation, as its committed events tell them."""

    invocation_id: str
    calls: dict[str, CallEntry] = field(default_factory=dict)
    """Every call with an id, by id, in commit order."""
    answered: set[str] = field(default_factory=set)
    """Ids with a FunctionResponse in the log."""

    @classmethod
    def of(cls, events: Iterable[Event], invocation_id: str) -> CallLedger:
        """Read the ledger of ``invocation_id`` from a session's committed events."""
        ledger = cls(invocation_id)
        for event in events:
            ledger.record(event)
        return ledger

    def record(self, event: Event) -> None:
        """Take a committed event into account (events of other invocations are ignored)."""
        if event.invocation_id != self.invocation_id or event.partial:
            return
        waiting = event.long_running_tool_ids or set()
        for call in event.get_function_calls():
            if call.id:
                self.calls[call.id] = CallEntry(call, event, call.id in waiting)
        for response in event.get_function_responses():
            if response.id:
                self.answered.add(response.id)

    @property
    def open(self) -> set[str]:
        """Long-running calls without an answer in the log: what the invocation waits for."""
        return {cid for cid, entry in self.calls.items()
                if entry.long_running and cid not in self.answered}

    def open_calls(self) -> list[CallEntry]:
        """The open calls, in commit order."""
        waiting = self.open
        return [entry for cid, entry in self.calls.items() if cid in waiting]

    def unanswered_in(self, event: Event) -> set[str]:
        """Ids of ``event``'s calls that have no answer in the log yet."""
        return {c.id for c in event.get_function_calls() if c.id and c.id not in self.answered}
