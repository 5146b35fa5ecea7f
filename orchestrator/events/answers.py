"""Which function responses of an event answer their calls for good.

A tool call that needs a confirmation is first answered by the confirmation gate with an
error ("This tool call requires confirmation..."), and the event carrying that answer asks
for the confirmation in ``actions.requested_tool_confirmations``. That answer is
*provisional*: once the confirmation is answered, the call gets its real answer (the tool's
result, or the rejection error), which is *final*. A call has at most one final answer; the
append paths that guard against a second one (the Redis leased writer, the in-memory
answer-once writer) and the call ledger all ask this module which is which.
"""

from __future__ import annotations

from orchestrator.events.event import Event


def provisional_answer_ids(event: Event) -> list[str]:
    """Ids of the calls ``event`` answers only until their confirmation is answered."""
    asked = event.actions.requested_tool_confirmations or {}
    return [r.id for r in event.get_function_responses() if r.id and r.id in asked]


def final_answer_ids(event: Event) -> list[str]:
    """Ids of the calls ``event`` answers for good (every answer not provisional)."""
    asked = event.actions.requested_tool_confirmations or {}
    return [r.id for r in event.get_function_responses() if r.id and r.id not in asked]
