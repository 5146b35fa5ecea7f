"""History building: which committed events an agent's model sees, and in what form.

Rules (ADK 2.x): rewound events are dropped; an agent sees events of its own branch and its
ancestors' branches, never a sibling's; other agents' turns become quoted user-role context;
the latest function response is moved right after its call (dropping what came between);
async responses in history are merged after their call, latest wins (the agent's text replies
between two updates of one call are dropped); orphaned calls and responses are dropped;
``adk-`` ids are stripped.

This module chooses the events and builds the history (incrementally, see
:mod:`orchestrator.flows.history_memo`); :mod:`orchestrator.flows.call_pairing` orders and
merges calls and responses, :mod:`orchestrator.flows.quoted_turns` quotes other agents' turns.
"""

from __future__ import annotations

from google.genai import types

from orchestrator.events.event import Event
from orchestrator.events.log_scans import LogScan
from orchestrator.flows.call_pairing import (
    drop_orphans,
    rearrange_async_function_responses,
    rearrange_latest_function_response,
    response_ids,
)
from orchestrator.flows.history_memo import HistoryEntry, HistoryMemo
from orchestrator.flows.quoted_turns import as_context, foreign_author, part_has_payload, quoted_ids

REQUEST_CONFIRMATION = "adk_request_confirmation"
REQUEST_CREDENTIAL = "adk_request_credential"
RUN_BRANCH = "adk_celery_run_branch"
"""The call a ParallelAgent makes to run a branch on a worker (hidden from models)."""
_HIDDEN_CALLS = {REQUEST_CONFIRMATION, REQUEST_CREDENTIAL, RUN_BRANCH}
_CLIENT_ID_PREFIX = "adk-"

HISTORY_MEMO = HistoryMemo()
"""This process's memo of built histories (see :mod:`orchestrator.flows.history_memo`)."""


def _note_rewind(rewound: list[bool], event: Event) -> None:
    if event.actions.rewind_before_invocation_id:
        rewound[0] = True


_REWINDS: LogScan[list[bool]] = LogScan(lambda: [False], _note_rewind)
"""Whether each session was ever rewound, read once per event."""


def apply_rewinds(events: list[Event], view: str | None = None) -> list[Event]:
    """Drop every event rewound by a later ``rewind_before_invocation_id`` event.

    ``view``: the branch ``events`` were selected for, if they are not the whole log.
    """
    if not _REWINDS.of(events, view)[0]:
        return events
    kept: list[Event] = []
    i = len(events) - 1
    while i >= 0:
        target = events[i].actions.rewind_before_invocation_id
        if target:
            j = next((k for k in range(i) if events[k].invocation_id == target), i)
            i = j - 1
            continue
        kept.append(events[i])
        i -= 1
    kept.reverse()
    return kept


def belongs_to_branch(event_branch: str | None, agent_branch: str | None) -> bool:
    """Visible if either side has no branch, or the agent's branch equals/descends from it."""
    if not event_branch or not agent_branch:
        return True
    return agent_branch == event_branch or agent_branch.startswith(event_branch + ".")


def on_or_below(event_branch: str | None, branch: str) -> bool:
    """True for an event of ``branch`` or of a branch below it (the other direction)."""
    return bool(event_branch) and (event_branch == branch or event_branch.startswith(branch + "."))


def build_contents(
    events: list[Event],
    *,
    agent_name: str,
    branch: str | None,
    include_contents: str = "default",
    include_thoughts_from_other_agents: bool = False,
    memo: HistoryMemo | None = HISTORY_MEMO,
) -> list[types.Content]:
    """Return the model history for ``agent_name`` on ``branch``.

    With a ``memo`` (the process's by default), a long session costs each model call only
    the events appended since the previous call of the same view: see :func:`_extended`.
    """
    if memo is None or include_contents == "none" or not events:
        return _build(events, agent_name, branch, include_contents,
                      include_thoughts_from_other_agents)[0]
    key = (events[0].id, agent_name, branch, include_thoughts_from_other_agents)
    entry = memo.take(key, events)
    if entry is not None and _extended(entry, events, agent_name, branch,
                                       include_thoughts_from_other_agents):
        memo.put(key, entry)
        return list(entry.contents)
    contents, entry = _build(events, agent_name, branch, include_contents,
                             include_thoughts_from_other_agents)
    if entry is not None:
        memo.put(key, entry)
    return contents


def request_copy(contents: list[types.Content]) -> list[types.Content]:
    """Copies of each Content and its Parts, for code that may edit a request in place.

    :func:`build_contents` hands out the session's events' own contents (and keeps them in
    its memo for the next call): cheap, and safe while nothing edits them. google-adk copies
    every Content and Part of every request; this is that copy, made only when a callback
    that may edit the request gets it (:mod:`orchestrator.flows.llm_calls`).
    """
    return [
        content.model_copy(update={"parts": [part.model_copy() for part in content.parts]})
        if content.parts else content.model_copy()
        for content in contents
    ]


def _build(
    events: list[Event], agent_name: str, branch: str | None, include_contents: str,
    include_thoughts: bool,
) -> tuple[list[types.Content], HistoryEntry | None]:
    """The history built from every event, and a memo entry for it if any.

    An entry only when the history can be extended later: the whole log shown (not
    ``include_contents="none"``), no rewinds, no response left to move after its call.
    """
    if not events:  # a run with no message on a new session: the model sees no history
        return [], None
    call_authors = _call_authors(events)
    rewound = apply_rewinds(events, branch)
    visible = [e for e in rewound if _is_visible(e, branch)]
    if include_contents == "none":
        visible = visible[_current_turn_start(visible, agent_name):]
    # Other agents' calls and answers are quoted as they happened (google-adk quotes them
    # before it pairs calls with answers): only this agent's own are paired.
    quoted = quoted_ids(visible, agent_name, call_authors)
    arranged = rearrange_latest_function_response(visible, quoted)
    paired = rearrange_async_function_responses(arranged, agent_name, quoted)
    contents = _convert(drop_orphans(paired), agent_name, call_authors, include_thoughts)
    if include_contents == "none" or rewound is not events or arranged is not visible:
        return contents, None
    return contents, HistoryEntry(
        count=len(events), last_id=events[-1].id, contents=list(contents),
        call_authors=call_authors,
        response_ids={r.id for e in events for r in e.get_function_responses() if r.id},
        # Nothing answered: response events were left where they are (see the function).
        loose_responses=paired is arranged and any(response_ids(e) for e in arranged),
    )


def _extended(
    entry: HistoryEntry, events: list[Event], agent_name: str, branch: str | None,
    include_thoughts: bool,
) -> bool:
    """Extend ``entry`` to every one of ``events`` if the new ones leave its history as it is.

    They do when none of them rewinds, and their calls and answers stay among themselves:
    each new call has an id no earlier event used, and each new response answers calls
    of the event shown right before it (the usual call-then-answer of one model step, a
    long-running call's answer included when its call is new too). Then no earlier event
    moves, gains or loses a part, and the new events' part of the history depends only on
    themselves. False (``entry`` untouched) otherwise: the caller builds the whole history
    again (e.g. for the answer to a call made before the entry's last event).
    """
    new = events[entry.count:]
    new_calls: set[str] = set()
    answered: set[str] = set()
    for event in new:
        if event.actions.rewind_before_invocation_id:
            return False
        for response in event.get_function_responses():
            rid = response.id
            if rid is None or rid not in new_calls:
                return False
            answered.add(rid)
        for call in event.get_function_calls():
            cid = call.id
            if cid is None or cid in entry.response_ids or cid in entry.call_authors:
                return False
            new_calls.add(cid)
    visible = [e for e in new if _is_visible(e, branch)]
    if entry.loose_responses and any(response_ids(e) for e in visible):
        return False  # the first answer shown makes earlier responses to no call go
    for i, event in enumerate(visible):
        ids = response_ids(event)
        if ids and (i == 0 or not ids <= {c.id for c in visible[i - 1].get_function_calls()}):
            return False  # shown apart from its call: moving it would drop what is between
    for event in new:
        for call in event.get_function_calls():
            entry.call_authors[call.id or ""] = event.author
    # With every answer right after its call, arranging the new events alone gives what
    # arranging the whole log gives them; no earlier call is answered among them.
    quoted = quoted_ids(visible, agent_name, entry.call_authors)
    kept = drop_orphans(rearrange_async_function_responses(visible, agent_name, quoted))
    entry.contents.extend(_convert(kept, agent_name, entry.call_authors, include_thoughts))
    entry.response_ids |= answered
    entry.count, entry.last_id = len(events), events[-1].id
    return True


def _convert(
    events: list[Event], agent_name: str, call_authors: dict[str, str], include_thoughts: bool
) -> list[types.Content]:
    """Each event as the model sees it: its own content, or another agent's turn quoted."""
    contents: list[types.Content] = []
    for event in events:
        author = foreign_author(event, agent_name, call_authors)
        if author:
            content = as_context(event, author, include_thoughts)
        else:
            content = _strip_client_ids(event.content)
        if content is not None and content.parts:
            contents.append(content)
    return contents


def _call_authors(events: list[Event]) -> dict[str, str]:
    return {fc.id: e.author for e in events for fc in e.get_function_calls() if fc.id}


def _is_visible(event: Event, branch: str | None) -> bool:
    content = event.content
    if event.partial or content is None or not content.parts:
        return False
    if not any(part_has_payload(p) for p in content.parts):
        return False
    if not belongs_to_branch(event.branch, branch):
        return False
    for part in content.parts:
        call = part.function_call or part.function_response
        if call is not None and call.name in _HIDDEN_CALLS:
            return False
    return True


def _current_turn_start(events: list[Event], agent_name: str) -> int:
    """Where the agent's current turn starts among the shown ``events`` (no history shown).

    At the latest message of the user or of another agent, as google-adk 2.13 finds it.

    Neither a transfer hand-over (the turn goes on from what came before it, so an agent
    reached by a transfer sees the user's message) nor an answer the user sent to an earlier
    call starts a turn; such an answer also makes the turn reach back to the event holding
    its call, which would be dropped as an orphan otherwise. ``len(events)`` (nothing shown)
    when no event starts a turn.
    """
    call_ids = {c.id for e in events for c in e.get_function_calls() if c.id}
    awaiting: set[str] = set()  # calls answered by a sent answer further down, not reached yet
    for i in range(len(events) - 1, -1, -1):
        event = events[i]
        awaiting.difference_update(c.id for c in event.get_function_calls())
        sent_answer = event.author == "user" and bool(event.get_function_responses())
        if sent_answer:
            awaiting.update(r.id for r in event.get_function_responses() if r.id in call_ids)
        if (not awaiting and not sent_answer and event.author != agent_name
                and not _is_transfer(event)):
            return i
    return len(events)


def _is_transfer(event: Event) -> bool:
    """A transfer's call or its answer (the hand-over from one agent to another)."""
    return bool(event.actions.transfer_to_agent) or any(
        c.name == "transfer_to_agent" for c in event.get_function_calls()
    )


def _strip_client_ids(content: types.Content | None) -> types.Content | None:
    if content is None or not content.parts:
        return content
    changed = False
    parts = []
    for part in content.parts:
        call, response = part.function_call, part.function_response
        if call is not None and call.id and call.id.startswith(_CLIENT_ID_PREFIX):
            part = part.model_copy(update={"function_call": call.model_copy(update={"id": None})})
            changed = True
        elif response is not None and response.id and response.id.startswith(_CLIENT_ID_PREFIX):
            part = part.model_copy(
                update={"function_response": response.model_copy(update={"id": None})}
            )
            changed = True
        parts.append(part)
    if not changed:
        return content
    return content.model_copy(update={"parts": parts})
