"""``/run`` and ``/run_sse`` with a message of function responses: answers to paused calls.

google-adk resumes a paused invocation when a client's new message is made of function
responses to its long-running calls (the dev UI's answer box sends exactly that). Here the
responses go through the one checked answer path (as ``POST .../invocations/{id}/answer``),
stored together or not at all: pending calls of the session's invocation, each answered
once; the run then follows that invocation from where it paused. Any other function
response is refused, as before, and so is a part that holds text (or anything else) beside
its function response, rather than answering the call and dropping the text.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException

from orchestrator.distributed.intake import check_answer, check_confirmation
from orchestrator.distributed.models import InvocationRecord, InvocationStatus
from orchestrator.distributed.outside_answers import check_outside_answer, taken_already
from orchestrator.errors import AnswerRejectedError, RequestError
from orchestrator.flows.contents import REQUEST_CONFIRMATION
from workers.api.backend import Backend

_POSITION_SECONDS = 5.0
"""How long reading a paused invocation's stream up to its end may take."""


_RESPONSE_KEYS = frozenset({"functionResponse", "function_response"})
"""How a part names its function response (camelCase or snake_case, as ADK reads it)."""


def function_responses(message: Any) -> list[dict[str, Any]] | None:
    """The function responses of a message made only of them (None for any other).

    422 for a part that holds a function response and anything else (text, most often).
    """
    if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
        return None
    parts = message["parts"]
    _refuse_mixed_parts(parts)
    found = [p.get("functionResponse", p.get("function_response")) for p in parts
             if isinstance(p, dict)]
    if not parts or len(found) != len(parts) or not all(isinstance(r, dict) for r in found):
        return None
    return found


def _refuse_mixed_parts(parts: list[Any]) -> None:
    """422 naming the first part that holds a function response beside other data.

    Only the response is an answer: the rest would have been dropped without a word.
    google-adk 2.13 refuses a message with both function responses and text (a ValueError,
    its api_server's 500): the responses resume the paused invocation while text starts a
    new one. Here it is a 422 before anything is answered. An empty or null field is nothing
    dropped, and is let through.
    """
    for index, part in enumerate(parts):
        if not isinstance(part, dict) or not _RESPONSE_KEYS & part.keys():
            continue
        others = sorted(key for key, value in part.items()
                        if key not in _RESPONSE_KEYS and value not in (None, ""))
        if len(_RESPONSE_KEYS & part.keys()) > 1:
            others.append("function_response")  # both spellings: one of the two would be lost
        if others:
            raise HTTPException(
                422, f"new_message.parts[{index}]: a part with a function response holds "
                     f"nothing else, and this one also has {', '.join(map(repr, others))}. "
                     "A function response answers the paused invocation, while text starts a "
                     "new one: send the text in a message of its own.")


def _refused(index: int, problem: str) -> HTTPException:
    return HTTPException(422, f"new_message.parts[{index}].function_response: {problem}")


async def answer(backend: Backend, app_name: str, user_id: str, session_id: str,
                 responses: list[dict[str, Any]],
                 invocation_id: str | None) -> tuple[InvocationRecord, str | None]:
    """Answer the calls; the invocation they belong to and its stream position before.

    422 for a response that answers no call of this session, or responses to calls of
    several invocations (or of another one than ``invocation_id``); 409 for a call that
    is not pending (answered already, or its invocation is not paused on it) or that only
    what runs it may answer (a branch's, a plain tool's on a worker). The very message taken
    before (sent again after its reply was lost) is no second answer: the run is followed
    from the pause it ended, as the first time.
    """
    session = await backend.session(app_name, user_id, session_id)
    issued = {call.id: (event.invocation_id, call.name) for event in session.events
              for call in event.get_function_calls() if call.id}
    owners = set()
    answered: set[str] = set()
    # Every response is checked before any is stored: a refused message answers nothing.
    for index, response in enumerate(responses):
        call_id = response.get("id")
        if not isinstance(call_id, str) or call_id not in issued:
            raise _refused(index, f"{call_id!r} answers no call of this session")
        if call_id in answered:
            raise _refused(index, f"{call_id!r} is answered twice in this message")
        answered.add(call_id)
        if not isinstance(response.get("response"), dict):
            raise _refused(index, "response must be a JSON object")
        owner, name = issued[call_id]
        try:
            check_answer(owner, call_id, response["response"], backend.runtime.limits)
            if name == REQUEST_CONFIRMATION:
                check_confirmation(response["response"])
        except RequestError as error:
            raise _refused(index, str(error)) from None
        owners.add(owner)
    if len(owners) != 1 or (invocation_id is not None and owners != {invocation_id}):
        raise HTTPException(422, "new_message: function responses must answer calls of one "
                                 "invocation (the request's invocation_id, if given)")
    record = await backend.record(app_name, owners.pop())
    if await _taken_already(backend, record, responses):
        # This very message was taken before (a request sent again after its reply was
        # lost; its resume may be running, the record still saying paused): the run is
        # followed on from the pause it ended, as the first time.
        return record, await _pause_answered(backend, record, answered)
    if record.status.is_finished:
        raise HTTPException(409, f"Invocation {record.invocation_id!r} is {record.status.value}; "
                                 "it takes no answers.")
    waiting = [call_id for call_id in answered if call_id not in record.pending_calls]
    if waiting:
        raise HTTPException(409, f"Invocation {record.invocation_id!r} has no pending call "
                                 f"{waiting[0]!r} (pending: {record.pending_calls or 'none'}).")
    for call_id in answered:
        try:
            check_outside_answer(record, call_id)
        except AnswerRejectedError as error:
            raise HTTPException(409, str(error)) from None
    after = await _stream_end(backend, record) if record.status is InvocationStatus.PAUSED else None
    # Stored together, with one resume: a concurrent answer to one of these calls (or a
    # crash) leaves none of them stored rather than some, and the message can be sent again.
    await backend.answer_all(app_name, record.invocation_id,
                             [(response["id"], response["response"]) for response in responses])
    return record, after


async def _taken_already(backend: Backend, record: InvocationRecord,
                         responses: list[dict[str, Any]]) -> bool:
    """True if every response is stored already as this message's.

    That is: answered from outside with the very same response (the store took it once;
    see ``take_answers``).
    """
    stored = await (await backend.services()).store.results(record.app_name, record.invocation_id)
    return taken_already(stored, ((r["id"], r["response"]) for r in responses))


async def _pause_answered(backend: Backend, record: InvocationRecord,
                          call_ids: set[str]) -> str | None:
    """The stream entry of the pause that the answers to ``call_ids`` ended.

    Read from the stream's start: the last ``paused`` status before the event that commits
    one of those answers (or before the stream's end, if none commits them: the invocation
    was cancelled before its resume ran).
    """
    pause = None
    try:
        async for item in backend.follow(record, until=InvocationStatus.FINISHED,
                                         timeout=_POSITION_SECONDS):
            if item.kind == "status" and item.status is InvocationStatus.PAUSED:
                pause = item.entry_id
            elif item.kind == "event" and not item.partial and item.event is not None and any(
                    answer.id in call_ids for answer in item.event.get_function_responses()):
                return pause
    except TimeoutError:
        pass  # paused again, on a later call: the pause before it is the one answered
    return pause


async def _stream_end(backend: Backend, record: InvocationRecord) -> str | None:
    """The id of the last entry of a paused invocation's stream (its pause).

    Its end as it stands, even if another client's answers just ended the pause: this
    message's answers are then refused (409), and the position not used.
    """
    last = None
    try:
        async for item in backend.follow(record, timeout=_POSITION_SECONDS, answered_pauses=True):
            last = item.entry_id or last
    except TimeoutError:
        pass  # resumed meanwhile: the answer is refused (409), the position is not used
    return last
