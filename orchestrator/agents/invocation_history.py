"""An invocation's history read from its log: its model calls, its agents' checkpoints and ends.

Both are rebuilt from the committed events alone, so whoever continues an invocation (after
a pause, a resume or a crash) reads them the same way; see
:class:`~orchestrator.agents.invocation_context.InvocationContext` for their use.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from orchestrator.events.event import Event
from orchestrator.events.log_scans import LogScan

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent


def count_model_calls(events: list[Event], invocation_id: str, view: str | None = None) -> int:
    """How many model calls this invocation's committed events record.

    One model call commits one event authored by an agent: the model's content (role
    ``model``) or its error. So the count survives pauses, resumes and crashes: whoever
    continues the invocation reads it from the log. It can only err high (an agent that
    writes model-role content without a model call counts as one), never low. Each event
    of a session is read once per process, not once per new context (long sessions);
    ``view``: the branch ``events`` were selected for, if they are not the whole log.
    """
    return _MODEL_CALLS.of(events, view)[invocation_id]


def _count_model_call(counts: Counter[str], event: Event) -> None:
    if event.author != "user" and not event.partial and (
        (event.content is not None and event.content.role == "model") or event.error_code
    ):
        counts[event.invocation_id] += 1


_MODEL_CALLS: LogScan[Counter[str]] = LogScan(Counter, _count_model_call)
"""Model calls per invocation of each session."""


def invocation_agent_states(
    events: list[Event], invocation_id: str, root: BaseAgent
) -> tuple[dict[str, dict[str, Any]], dict[str, bool]]:
    """The agents' checkpoints and end flags an invocation's events leave (resumable apps).

    ``(states, ends)``: ``states`` holds each agent under way (its last checkpoint, ``{}``
    for an agent that said something and keeps none), ``ends`` is True for each agent
    that ended; as google-adk rebuilds them when it resumes an invocation. An agent that
    ended and is then transferred to again is re-entered: its end no longer counts (its
    own events after its end, its after-callbacks', do not re-enter it).

    The agents below a LoopAgent start afresh on each of its iterations, as the running
    loop resets them (``reset_sub_agent_states``): from its checkpoint for a new iteration
    (and its end) on, their ends and checkpoints of earlier iterations no longer count.
    Likewise a SequentialAgent's or LoopAgent's checkpoint naming the sub-agent it is about
    to run starts that sub-agent's run, and its own sub-agents', afresh. ``root``: the
    agent tree the events were made by.
    """
    states: dict[str, dict[str, Any]] = {}
    ends: dict[str, bool] = {}
    for event in events:
        if event.invocation_id != invocation_id or event.author == "user":
            continue
        target = event.actions.transfer_to_agent
        if target and target != event.author and ends.get(target):
            ends.pop(target)
        if event.actions.end_of_agent or event.actions.agent_state is not None:
            for name in _started_afresh(root, event, states.get(event.author)):
                states.pop(name, None)
                ends.pop(name, None)
        if event.actions.end_of_agent:
            ends[event.author] = True
            states.pop(event.author, None)
        elif event.actions.agent_state is not None:
            states[event.author] = dict(event.actions.agent_state)
            ends[event.author] = False
        elif event.content is not None and event.author not in states:
            if not ends.get(event.author):
                states[event.author] = {}
                ends[event.author] = False
    return states, ends


def _started_afresh(
    root: BaseAgent, event: Event, before: dict[str, Any] | None
) -> list[str]:
    """The agents whose runs start afresh at ``event``, a checkpoint or end of its author.

    ``before``: the author's checkpoint until then. A LoopAgent that ends, or checkpoints a
    new iteration (``times_looped`` advanced), has reset every agent below it; a
    SequentialAgent or LoopAgent checkpointing the sub-agent it is about to run starts
    that sub-agent, and the agents below it, afresh (a run of theirs that ended before
    is not this one).
    """
    from orchestrator.agents.loop_agent import LoopAgent
    from orchestrator.agents.sequential_agent import SequentialAgent

    agent = root.find_agent(event.author)
    if not isinstance(agent, LoopAgent | SequentialAgent):
        return []
    state = event.actions.agent_state
    if isinstance(agent, LoopAgent) and (event.actions.end_of_agent or (
            state is not None and before is not None
            and state.get("times_looped") != before.get("times_looped"))):
        return _below(agent)
    if state is None:
        return []
    sub = next((s for s in agent.sub_agents if s.name == state.get("current_sub_agent")), None)
    return [sub.name, *_below(sub)] if sub is not None else []


def _below(agent: BaseAgent) -> list[str]:
    """The names of every agent below ``agent``."""
    names: list[str] = []
    for sub in agent.sub_agents:
        names += [sub.name, *_below(sub)]
    return names
