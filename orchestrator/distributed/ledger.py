"""CallLedger: which calls of an invocation are open or answered, read from its committed events.

The committed event log is the truth about an invocation's calls; the invocation record's
``pending_calls`` is only a cache of it. Every place that asks "is this call still waiting?"
(resuming, recovering after a crash, deciding to pause, the record's pending list, the
ParallelAgent collecting its branches) asks this module.

A call is *answered* once a final FunctionResponse with its id is in the log, whatever came
in later: a second final answer is never appended. The confirmation gate's answer to a call
that needs a confirmation is only *provisional* (see :mod:`orchestrator.events.answers`).

A call is *open* when its id is in the ``long_running_tool_ids`` of the event that made it
(a long-running tool, a tool routed to a worker, a confirmation request, a parallel branch)
and it has no final answer, unless the confirmation gate held it (answered it provisionally,
or asked for its confirmation): such a call waits for its ``adk_request_confirmation`` call
(the open one) and is open again only once that confirmation is answered with an approval
(its job goes out then, carrying the confirmation). A rejected call is answered with the
rejection error in process, by no job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from google.genai import types
from pydantic import ValidationError

from orchestrator.events.answers import final_answer_ids, provisional_answer_ids
from orchestrator.events.event import Event
from orchestrator.flows.contents import REQUEST_CONFIRMATION
from orchestrator.tools.tool_confirmation import ToolConfirmation


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
    """Ids with a final FunctionResponse in the log."""
    provisional: set[str] = field(default_factory=set)
    """Ids the confirmation gate answered provisionally (maybe answered for good since)."""
    confirmations: dict[str, ToolConfirmation] = field(default_factory=dict)
    """The answer to each call's confirmation request, by the id of the call confirmed."""
    _confirming: dict[str, str] = field(default_factory=dict)
    """Confirmation request id -> the id of the call it asks about."""
    asked: set[str] = field(default_factory=set)
    """Ids of the calls a confirmation request asks about."""

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
                if call.name == REQUEST_CONFIRMATION:
                    original = (call.args or {}).get("originalFunctionCall")
                    if isinstance(original, dict) and isinstance(original.get("id"), str):
                        self._confirming[call.id] = original["id"]
                        self.asked.add(original["id"])
        self.answered.update(final_answer_ids(event))
        self.provisional.update(provisional_answer_ids(event))
        for response in event.get_function_responses():
            confirmed_id = self._confirming.get(response.id or "")
            if confirmed_id is not None and response.name == REQUEST_CONFIRMATION:
                self.confirmations[confirmed_id] = _confirmation(response.response)

    @property
    def responded(self) -> set[str]:
        """Ids with any answer in the log, a provisional one included."""
        return self.answered | self.provisional

    def approved(self, call_id: str) -> ToolConfirmation | None:
        """The approving answer to the call's confirmation request, if it was approved."""
        confirmation = self.confirmations.get(call_id)
        return confirmation if confirmation is not None and confirmation.confirmed else None

    def gated(self, call_id: str) -> bool:
        """True if the gate held the call for a confirmation (its answer or request is in).

        Either half of the gate's step says so: an orchestrator that died between
        committing the two leaves only one of them.
        """
        return call_id in self.provisional or call_id in self.asked

    def unasked(self) -> set[str]:
        """Calls the gate answered provisionally whose confirmation request is not in."""
        return self.provisional - self.asked - self.answered

    def _waits(self, call_id: str, entry: CallEntry) -> bool:
        if not entry.long_running or call_id in self.answered:
            return False
        # Held by the gate: waits for its confirmation, then (approved) for its job.
        return not self.gated(call_id) or self.approved(call_id) is not None

    @property
    def open(self) -> set[str]:
        """Long-running calls without a final answer in the log: what the invocation waits for."""
        return {cid for cid, entry in self.calls.items() if self._waits(cid, entry)}

    def open_calls(self) -> list[CallEntry]:
        """The open calls, in commit order."""
        return [entry for cid, entry in self.calls.items() if self._waits(cid, entry)]

    def unanswered_in(self, event: Event) -> set[str]:
        """Ids of ``event``'s calls that have no final answer in the log yet."""
        return {c.id for c in event.get_function_calls() if c.id and c.id not in self.answered}


def _confirmation(response: dict[str, object] | None) -> ToolConfirmation:
    """The confirmation a response carries; one that does not read as one approves nothing."""
    try:
        return ToolConfirmation.from_response_dict(dict(response or {}))
    except (ValidationError, ValueError, TypeError):
        return ToolConfirmation(confirmed=False)
