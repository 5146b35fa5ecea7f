"""What the answers a run continues from ask of the agent that made the calls.

In process a tool's answer is handled where its call was made: a transfer it asks for runs
the target agent, ``skip_summarization`` ends the agent's turn without another model call.
An answer computed elsewhere (a worker) comes back with those actions after a pause, and the
run that commits it continues the calling agent: its flow acts on them here, before any
model call, the same way.
(``escalate`` needs nothing here: a LoopAgent reads it from the log. A confirmation asked
from inside a remote tool is refused on the worker: see ``executor.execute_tool_job``.)
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from orchestrator.events.event import Event
from orchestrator.flows import transfer

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent


class Outcome:
    """Whether the agent's turn ends with what the answers asked for."""

    __slots__ = ("ends_turn",)

    def __init__(self) -> None:
        self.ends_turn = False


async def act_on_answers(
    ctx: InvocationContext, agent: LlmAgent, outcome: Outcome
) -> AsyncGenerator[Event, None]:
    """Yield what ``agent``'s answers handed to this run ask for; set ``outcome``."""
    answers: list[Event] = ctx.take_answers_in(agent.name, ctx.branch)
    if not answers:
        return
    target_name = next((a.actions.transfer_to_agent for a in reversed(answers)
                        if a.actions.transfer_to_agent), None)
    if target_name:
        async for event in transfer.transfer_to(ctx, agent, target_name):
            yield event
        outcome.ends_turn = True
    elif answers[-1].is_final_response():  # skip_summarization: no model call after it
        outcome.ends_turn = True

