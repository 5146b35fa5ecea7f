"""What a run continuing an invocation reads from its log and commits before its agent goes on.

``Runner.continue_async`` commits answers (function responses) to open calls of an
invocation and continues it; ``Runner.recover_async`` continues one whose runner stopped
mid-run. Both read the log before they commit anything: which call each answer answers,
which agents' runs they take up (:mod:`orchestrator.agents.agent_runs`), and the answers a
stopped run committed last without acting on them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from orchestrator import failpoints
from orchestrator.agents.agent_runs import RunsGoingOn, runs_going_on
from orchestrator.agents.llm_agent import LlmAgent
from orchestrator.events.event import Event
from orchestrator.runner_messages import apply_run_metadata
from orchestrator.runner_plugins import commit_answers
from orchestrator.runner_routing import calls_of_invocation, find_agent_to_run

if TYPE_CHECKING:
    from orchestrator.agents.base_agent import BaseAgent
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.run_config import RunConfig
    from orchestrator.plugins.plugin_manager import PluginManager
    from orchestrator.sessions.base_session_service import SessionWriter
    from orchestrator.sessions.session import Session


def calls_answered(
    session: Session, invocation_id: str, answers: list[Event]
) -> tuple[Event | None, list[Event | None]]:
    """The call event the run continues from, and per answer the event of the call it answers.

    Every response of ``answers`` must answer a call of ``invocation_id`` (ValueError
    otherwise): one in its log, or one of a parallel branch's events that come with the
    answers. The run continues from the first logged call answered (else the first answered).
    """
    calls = calls_of_invocation(session, invocation_id)
    logged = set(calls)
    call_event: Event | None = None
    calling: list[Event | None] = []  # per answer, the event of the call it answers
    for answer in answers:
        # A parallel branch's events come with the answers: their calls count too.
        calls.update({c.id: answer for c in answer.get_function_calls() if c.id})
        own: Event | None = None
        for response in answer.get_function_responses():
            found = calls.get(response.id or "")
            if found is None:
                raise ValueError(
                    f"Function response {response.id!r} answers no call of invocation "
                    f"{invocation_id!r}."
                )
            own = own or found
            if response.id in logged:  # not a branch's own call that came with it
                call_event = call_event or found
        calling.append(own)
    call_event = call_event or next((event for event in calling if event is not None), None)
    return call_event, calling


async def commit_answers_to_calls(
    ctx: InvocationContext,
    session: Session,
    writer: SessionWriter,
    invocation_id: str,
    answers: list[Event],
    calling: list[Event | None],
    run_config: RunConfig,
    yield_answers: bool,
) -> AsyncGenerator[Event, None]:
    """Commit ``answers`` to the invocation (each on its call's branch); hand them to ``ctx``.

    With ``yield_answers`` each is yielded once committed, like every event the Runner yields.
    """
    for answer, own in zip(answers, calling, strict=True):
        answer.invocation_id = invocation_id
        if answer.branch is None and own is not None:
            answer.branch = own.branch  # its own call's, not another answer's
        apply_run_metadata(answer, run_config)
    committed = []
    async for answer in commit_answers(ctx, session, writer, answers):
        committed.append(answer)
        if yield_answers:  # after the commit, like every event the Runner yields
            yield answer
    ctx.hand_answers_in(committed)  # their actions are the calling agent's to act on
    failpoints.hit("runner.answers_committed")


def take_up_runs(
    ctx: InvocationContext,
    session: Session,
    root: BaseAgent,
    plugin_manager: PluginManager,
    resumable: bool,
    *,
    recovering: bool = False,
) -> RunsGoingOn | None:
    """Tell ``ctx`` which agents' runs, under way before this run, it takes up; return them.

    Read from the log before the run commits anything; see
    ``orchestrator.agents.agent_runs``. A recovered run also goes down to the agents it
    takes up; a continued one goes down to the agent its answers are for, so there only
    agent callbacks care: without any, nothing is read (None).
    """
    if not recovering and not (plugin_manager.plugins or _has_agent_callbacks(root)):
        return None
    runs = runs_going_on(root, session.events, ctx.invocation_id, resumable, recovering=recovering)
    ctx.take_up_runs(runs)
    return runs


def check_recoverable(
    session: Session, root: BaseAgent, invocation_id: str, app_name: str, resumable: bool
) -> None:
    """Raise RuntimeError if the run that stopped cannot be continued from its log.

    A non-resumable app's run is rebuilt only in an LlmAgent reached by transfers: a
    workflow agent without checkpoints cannot tell where it was. A run that stopped before
    any agent committed an event (only the user's are in the log) had not begun as far as
    the log knows: it starts again from its root, whatever that agent is.
    """
    if not resumable and not isinstance(find_agent_to_run(session, root), LlmAgent) \
            and _agents_committed(session, invocation_id):
        raise RuntimeError(
            f"Invocation {invocation_id!r} stopped mid-run inside a workflow agent and app "
            f"{app_name!r} is not resumable: make it resumable "
            "(App(resumability_config=ResumabilityConfig(is_resumable=True))) to continue "
            "such invocations."
        )


def _agents_committed(session: Session, invocation_id: str) -> bool:
    """True if an agent (anyone but the user) committed an event of the invocation."""
    return any(event.invocation_id == invocation_id and event.author != "user"
               for event in session.events)


def last_answers(session: Session, invocation_id: str) -> list[Event]:
    """The answer events the invocation's log ends with (none if it goes on after them).

    An answer that asks the user something (a confirmation gate's) is not one: what it
    owes is rebuilt by the recovery itself (``step_resume.requests_owed``).
    """
    answers: list[Event] = []
    for event in reversed(session.events):
        if event.invocation_id != invocation_id or event.partial:
            continue
        if not event.get_function_responses() or event.get_function_calls() or \
                event.actions.requested_tool_confirmations or event.actions.requested_auth_configs:
            break
        answers.append(event)
    return answers[::-1]


def _has_agent_callbacks(agent: BaseAgent) -> bool:
    """True if ``agent`` or an agent below it has before- or after-agent callbacks."""
    return bool(agent.before_agent_callback or agent.after_agent_callback) or any(
        _has_agent_callbacks(sub) for sub in agent.sub_agents)
