"""Function calls and responses in a history: each response after its call, orphans dropped.

How :mod:`orchestrator.flows.contents` orders them (ADK 2.x): the latest function response
is moved right after its call (dropping what came between); async responses are merged
after their call, latest wins (the agent's text replies between two updates of one call
are dropped); calls nobody answered (unless long-running) and responses to no call are
dropped. Events quoted as other agents' turns stay where they are.
"""

from __future__ import annotations

import bisect
from collections.abc import Set as AbstractSet

from google.genai import types

from orchestrator.events.event import Event


def response_ids(event: Event) -> set[str]:
    """The ids of the function responses ``event`` carries (id-less ones left out)."""
    return {r.id for r in event.get_function_responses() if r.id}


def _merge_responses(events: list[Event]) -> Event:
    """The first event, each later response replacing the one of its call id (or appended).

    Other parts of the later events are appended, as google-adk merges them.
    """
    if len(events) == 1:
        return events[0]
    base = events[0]
    assert base.content is not None and base.content.parts is not None
    parts = list(base.content.parts)
    index = {p.function_response.id: i for i, p in enumerate(parts) if p.function_response}
    for event in events[1:]:
        assert event.content is not None and event.content.parts is not None
        for part in event.content.parts:
            response = part.function_response
            if response is not None and response.id in index:
                parts[index[response.id]] = part
                continue
            if response is not None:
                index[response.id] = len(parts)
            parts.append(part)
    return base.model_copy(
        update={"content": types.Content(role="user", parts=parts)}
    )


def rearrange_latest_function_response(
    events: list[Event], quoted: AbstractSet[int] = frozenset()
) -> list[Event]:
    """Move the last event's function responses right after their call; drop what is between.

    The responses after that call event to any of its calls are merged into one event.
    ``events`` are returned as they are when the last event answers no call, answers the
    event right before it, or is in ``quoted`` (other agents' turns, by ``id()``, which
    are never paired).
    """
    if len(events) < 2 or id(events[-1]) in quoted:
        return events
    ids = response_ids(events[-1])
    if not ids:
        return events
    if ids & {c.id for c in events[-2].get_function_calls()}:
        return events
    call_index = next(
        (i for i in range(len(events) - 2, -1, -1)
         if id(events[i]) not in quoted and ids & {c.id for c in events[i].get_function_calls()}),
        None,
    )
    if call_index is None:
        return events
    call_ids = {c.id for c in events[call_index].get_function_calls()}
    responses = [e for e in events[call_index + 1:] if response_ids(e) & call_ids]
    return events[:call_index + 1] + [_merge_responses(responses)]


def rearrange_async_function_responses(
    events: list[Event], agent_name: str,
    quoted: AbstractSet[int] = frozenset(),
) -> list[Event]:
    """Put after each call the last response event of each of its calls, merged.

    Events in ``quoted`` (other agents' turns, by ``id()``) stay where they are.

    A response belongs to the newest call before it with its id (ids can repeat in a
    session), so a later response to a long-running call replaces the earlier (pending) one.
    The agent's own text replies between two responses to one call, sent by the same author
    in the same invocation, were about the earlier one and are dropped.
    """
    call_indices: dict[str, list[int]] = {}
    for i, event in enumerate(events):
        if not event.get_function_responses() and id(event) not in quoted:
            for call in event.get_function_calls():
                call_indices.setdefault(call.id or "", []).append(i)
    responses_by_call: dict[tuple[str, int], list[int]] = {}
    for i, event in enumerate(events):
        if id(event) in quoted:
            continue
        for rid in response_ids(event):
            indices = call_indices.get(rid)
            if indices:
                owner = indices[max(bisect.bisect_left(indices, i) - 1, 0)]
                responses_by_call.setdefault((rid, owner), []).append(i)
    if not responses_by_call:
        return events
    stale = _stale_replies(events, responses_by_call, agent_name)
    result: list[Event] = []
    for i, event in enumerate(events):
        if i in stale:
            continue
        if event.get_function_responses() and id(event) not in quoted:
            if any(r.id is None for r in event.get_function_responses()):
                result.append(event)  # id-less responses stay where they are
            continue
        result.append(event)
        latest = sorted({
            found[-1] for call in event.get_function_calls()
            if (found := responses_by_call.get((call.id or "", i)))
        })
        if latest:
            own = {call.id for call in event.get_function_calls()}
            result.append(_merge_responses([_only_answers_to(events[k], own) for k in latest]))
    return result


def _only_answers_to(event: Event, call_ids: set[str | None]) -> Event:
    """``event`` without its responses to other calls than ``call_ids``.

    One user message can answer calls of several model turns; each turn is shown only its
    own answers (google-adk shows the whole message after each: see the README).
    """
    assert event.content is not None and event.content.parts is not None
    parts = [p for p in event.content.parts
             if p.function_response is None or p.function_response.id in call_ids]
    if len(parts) == len(event.content.parts):
        return event
    return event.model_copy(update={"content": event.content.model_copy(update={"parts": parts})})


def _stale_replies(
    events: list[Event], responses_by_call: dict[tuple[str, int], list[int]], agent_name: str
) -> set[int]:
    """Indices of the agent's text replies between two updates of one call (see above)."""
    stale: set[int] = set()
    for indices in responses_by_call.values():
        for current, following in zip(indices, indices[1:], strict=False):
            first, second = events[current], events[following]
            if first.invocation_id != second.invocation_id or first.author != second.author:
                continue
            if first.actions.requested_tool_confirmations or first.actions.requested_auth_configs:
                continue  # the reply asked the user something: it is not stale
            between = range(current + 1, following)
            if between and all(
                _is_text_reply(events[k], agent_name, first.invocation_id) for k in between
            ):
                stale.update(between)
    return stale


def _is_text_reply(event: Event, agent_name: str, invocation_id: str) -> bool:
    content = event.content
    return bool(
        event.invocation_id == invocation_id
        and event.author == agent_name
        and content is not None
        and content.role == "model"
        and not event.get_function_calls()
        and any(p.text for p in content.parts or [])
    )


def drop_orphans(events: list[Event], answered: set[str | None] | None = None) -> list[Event]:
    """Drop calls nobody answered (unless long-running) and responses to no call.

    ``answered``: the call ids to count as answered instead of those of the responses among
    ``events``.
    """
    call_ids: set[str | None] = set()
    call_names_without_id: set[str | None] = set()
    responses: set[str | None] = set()
    for event in events:
        for call in event.get_function_calls():
            call_ids.add(call.id)
            if call.id is None:
                call_names_without_id.add(call.name)
        responses.update(r.id for r in event.get_function_responses())
    if answered is None:
        answered = responses
    result = []
    for event in events:
        assert event.content is not None and event.content.parts is not None
        long_running = event.long_running_tool_ids or set()
        parts = []
        for part in event.content.parts:
            call, response = part.function_call, part.function_response
            if call is not None and call.id is not None and call.id not in answered \
                    and call.id not in long_running:
                continue
            if response is not None and (
                (response.id is not None and response.id not in call_ids)
                or (response.id is None and response.name not in call_names_without_id)
            ):
                continue
            parts.append(part)
        if len(parts) == len(event.content.parts):
            result.append(event)
        elif parts:
            content = event.content.model_copy(update={"parts": parts})
            result.append(event.model_copy(update={"content": content}))
    return result

