"""Recovering a run whose agent had given its final answer (non-resumable apps).

A run recovered after its orchestrator stopped may find that the agent it was going down
to had given its final answer: its turn is over (its model must not be called again), and
what was left were the after-callbacks of the runs under way. They end innermost first,
each committing at most one event, so the events after the answer tell which runs ended;
the recovered run ends only the others.
"""

from __future__ import annotations

from orchestrator.agents.run_stack import RunStack
from orchestrator.events.event import Event


def unfinished_after_answer(runs: RunStack) -> list[str] | None:
    """If the current run's innermost agent gave its final answer: the runs not ended.

    Non-resumable apps. The runs under way (outermost first) whose ends the events
    after that answer do not show; None if there is no such answer, or the events after
    it are not ends of those runs (then the run is not over: nothing is claimed).
    """
    from orchestrator.agents.llm_agent import LlmAgent

    stack = runs.transfers()
    if not stack or not isinstance(runs.root.find_agent(stack[-1]), LlmAgent):
        return None  # only an LlmAgent's turn ends at its final answer
    answer = _final_answer_at(runs.since_start, stack[-1])
    if answer is None:
        return None
    under_way = runs.taken_up_with(stack[-1])
    # Each end commits at most one event (the plugins' and the agent's callbacks
    # together), innermost run first: each event is the end of the innermost run not
    # ended yet that is its author's. A run whose callbacks left nothing is passed over.
    ended_from = len(under_way)
    for event in runs.since_start[answer + 1:]:
        found = next((i for i in range(ended_from - 1, -1, -1)
                      if under_way[i] == event.author), None)
        if found is None:
            return None
        ended_from = found
    return under_way[:ended_from]


def _final_answer_at(events: list[Event], name: str) -> int | None:
    """Where in ``events`` agent ``name`` gave its final answer, if it did.

    Its first final text after its last call or answer: the model's (the agent's turn
    ended there). Its after-callback's content, which can follow it, reads the same, but
    comes later.
    """
    at = None
    for i, event in enumerate(events):
        if event.author != name:
            continue
        if event.get_function_calls() or event.get_function_responses():
            at = None
        elif at is None and event.content is not None and event.is_final_response():
            at = i
    return at
