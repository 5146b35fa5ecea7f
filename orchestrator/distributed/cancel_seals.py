"""What a cancelled invocation leaves in its session: an answer for each call it left open.

A cancel ends an invocation where it stands. Its open calls (a long-running tool's, a job on
a worker, a branch, a confirmation) would otherwise stay in the history without an answer,
and the next model call of the session would see a call with no response after it (which
Gemini refuses). As google-adk seals an aborted run's calls, each open call gets an error
answer, committed by the agent that made it on its branch; these seals are the only events
a cancelled invocation still gets (appends are refused once its cancel flag is set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from orchestrator import failpoints
from orchestrator.events.event import Event
from orchestrator.sessions.base_session_service import SessionWriter
from orchestrator.sessions.session import Session

if TYPE_CHECKING:  # the ledger (and the flows it reads) come with the runner, not with is_seal
    from orchestrator.distributed.ledger import CallLedger

CANCELLED_CODE = "INVOCATION_CANCELLED"
"""The ``error_code`` of a seal: the event is let through a cancelled invocation's fence."""

CANCELLED_ANSWER = {"error": "Invocation was cancelled."}


def seal_events(ledger: CallLedger) -> list[Event]:
    """One error answer event per event that made calls still open, in commit order."""
    by_event: dict[str, tuple[Event, list[types.Part]]] = {}
    for entry in ledger.open_calls():
        _, parts = by_event.setdefault(entry.event.id, (entry.event, []))
        parts.append(types.Part(function_response=types.FunctionResponse(
            id=entry.id, name=entry.name, response=dict(CANCELLED_ANSWER))))
    return [
        Event(invocation_id=ledger.invocation_id, author=event.author, branch=event.branch,
              content=types.Content(role="user", parts=parts), error_code=CANCELLED_CODE,
              error_message="Invocation was cancelled.")
        for event, parts in by_event.values()
    ]


async def seal(ledger: CallLedger, session: Session, writer: SessionWriter) -> None:
    """Commit the seals of the calls ``ledger`` leaves open (none: nothing is written)."""
    for event in seal_events(ledger):
        await writer.append_event(session, event)
        ledger.record(event)
        failpoints.hit("cancel.sealed")


def is_seal(event: Event) -> bool:
    """True for an event of :func:`seal_events`."""
    return event.error_code == CANCELLED_CODE
