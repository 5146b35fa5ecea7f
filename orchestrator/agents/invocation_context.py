"""InvocationContext: everything an agent needs while it runs one invocation."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from google.genai import types
from pydantic import BaseModel

from orchestrator.agents.invocation_history import count_model_calls, invocation_agent_states
from orchestrator.agents.run_config import RunConfig
from orchestrator.errors import LlmCallsLimitExceededError
from orchestrator.events.event import Event
from orchestrator.flows.contents import on_or_below
from orchestrator.plugins.plugin_manager import PluginManager

if TYPE_CHECKING:
    from orchestrator.agents.agent_runs import RunsGoingOn
    from orchestrator.agents.base_agent import BaseAgent, BaseAgentState
    from orchestrator.apps.app import ResumabilityConfig
    from orchestrator.artifacts.base_artifact_service import BaseArtifactService
    from orchestrator.distributed.intake import Limits
    from orchestrator.distributed.transport import Transport
    from orchestrator.memory.base_memory_service import BaseMemoryService
    from orchestrator.sessions.base_session_service import BaseSessionService
    from orchestrator.sessions.session import Session


@dataclass
class _Counters:
    """Mutable per-invocation counters shared by every copy of a context."""

    llm_calls: int = 0
    """Model calls of the invocation so far, across every run that continued it."""
    paused_agents: set[str] = field(default_factory=set)
    recovering: bool = False
    """Set when a run continues an invocation whose orchestrator stopped mid-run; the first
    model step of each branch reads it (once) to find out where the log stands."""
    recovered_branches: set[str | None] = field(default_factory=set)
    """The branches whose first model step read ``recovering`` already."""
    answers_in: list[Any] = field(default_factory=list)
    """The answers (events) a run that continues an invocation starts from; the flow of the
    agent that made the calls takes its own (once) and acts on their actions."""
    resumed: set[str] = field(default_factory=set)
    """Agents whose run, under way before the pause, this run takes up: each is re-entered
    once without its before-callbacks (see ``orchestrator.agents.agent_runs``)."""
    unfinished: list[str] = field(default_factory=list)
    """Agents under way before the pause that this run does not re-enter (outermost first):
    their after-callbacks run when it ends."""
    waiting_for_workers: tuple[int, list[str]] | None = None
    """The agents waiting for workers only, and the length of the log they were read from."""
    scheduled: BaseAgent | None = None
    """The agent the Runner runs at the top of the invocation when transfers are hops (the
    root is an LlmAgent: google-adk's node runtime, whose scheduler drives transfers)."""
    transfer_hop: BaseAgent | None = None
    """The agent ``scheduled`` transferred to: the Runner runs it next, once that run ended."""


@dataclass
class InvocationContext:
    """The state of one invocation; agents get a shallow copy with their own ``agent``/``branch``.

    Copies share the session, services, agent states and counters; ``branch`` and
    ``end_invocation`` are local to each copy, as in ADK.
    """

    session_service: BaseSessionService
    invocation_id: str
    agent: BaseAgent
    session: Session
    artifact_service: BaseArtifactService | None = None
    memory_service: BaseMemoryService | None = None
    credential_service: Any = None
    branch: str | None = None
    user_content: types.Content | None = None
    end_invocation: bool = False
    run_config: RunConfig = field(default_factory=RunConfig)
    resumability_config: ResumabilityConfig | None = None
    agent_states: dict[str, dict[str, Any]] = field(default_factory=dict)
    end_of_agents: dict[str, bool] = field(default_factory=dict)
    abort_signal: asyncio.Event | None = None
    transport: Transport | None = None
    """Where remote tool calls go; None runs every tool in this process."""
    progress_reporter: Callable[[dict[str, Any]], None] | None = None
    """Set on workers: receives ``tool_context.report_progress`` payloads."""
    tool_timeout_seconds: float | None = None
    """Set in a ParallelAgent branch's job on a worker (the worker's ``tool_timeout_seconds``):
    each tool call gets the deadline a tool job of that tool would get, its
    ``adk_celery_timeout`` metadata else this (0: none). None, elsewhere: no deadlines."""
    json_limits: Limits | None = None
    """Set in a ParallelAgent branch's job (whose answers go back as JSON): a tool call
    whose result or writes are not JSON within these limits is answered with the error a
    tool job gets (see :func:`~orchestrator.distributed.intake.not_json_answer`), its writes
    dropped. None, elsewhere: results are taken as they are (google-adk's in-process way)."""
    plugin_manager: PluginManager = field(default_factory=PluginManager)
    """The app's plugins (shared by every copy of the context)."""
    _counters: _Counters | None = None
    """Shared by every copy; a new context counts the model calls its log already holds."""

    def __post_init__(self) -> None:
        if self._counters is None:
            # ``max_llm_calls`` is per invocation, not per run: a resumed or recovered run
            # starts from the calls the invocation already made.
            self._counters = _Counters(
                llm_calls=count_model_calls(self.session.events, self.invocation_id, self.branch))

    @property
    def counters(self) -> _Counters:
        """The counters shared by every copy of this context."""
        assert self._counters is not None
        return self._counters

    @property
    def app_name(self) -> str:
        """The session's app name."""
        return self.session.app_name

    @property
    def user_id(self) -> str:
        """The session's user id."""
        return self.session.user_id

    @property
    def is_resumable(self) -> bool:
        """True when the app was configured resumable."""
        return bool(self.resumability_config and self.resumability_config.is_resumable)

    def model_copy(self, *, update: dict[str, Any] | None = None) -> InvocationContext:
        """Return a shallow copy with ``update`` applied (ADK's spelling)."""
        return dataclasses.replace(self, **(update or {}))

    def increment_llm_call_count(self) -> None:
        """Count a model call; raise LlmCallsLimitExceededError past ``max_llm_calls``."""
        self.counters.llm_calls += 1
        limit = self.run_config.max_llm_calls
        if limit > 0 and self.counters.llm_calls > limit:
            raise LlmCallsLimitExceededError(
                f"Max number of llm calls limit of `{limit}` exceeded"
            )

    def set_agent_state(
        self,
        agent_name: str,
        *,
        agent_state: BaseAgentState | dict[str, Any] | None = None,
        end_of_agent: bool = False,
    ) -> None:
        """Record an agent checkpoint or its end (resumable apps).

        A checkpoint is kept as JSON (``model_dump(mode="json")``), as google-adk keeps it:
        ``agent_states`` and the events made from it hold dicts, never model objects.
        """
        if end_of_agent:
            self.end_of_agents[agent_name] = True
            self.agent_states.pop(agent_name, None)
        elif agent_state is not None:
            self.agent_states[agent_name] = (
                agent_state.model_dump(mode="json")
                if isinstance(agent_state, BaseModel) else dict(agent_state)
            )
            self.end_of_agents[agent_name] = False
        else:
            self.end_of_agents.pop(agent_name, None)
            self.agent_states.pop(agent_name, None)

    def reset_sub_agent_states(self, agent_name: str) -> None:
        """Forget the checkpoints of every agent below ``agent_name`` (so they start afresh).

        A LoopAgent does this before each new iteration. The agent is looked up in the tree
        of the running agent; an unknown name does nothing.
        """
        agent = self.agent.find_agent(agent_name)
        if agent is None:
            return
        for sub in agent.sub_agents:
            self.set_agent_state(sub.name)
            self.reset_sub_agent_states(sub.name)

    def branch_view(self) -> list[Event]:
        """The invocation's events as seen from this branch (google-adk's current branch).

        Other authors' events on exactly this branch; the user's events on it, below it or on
        none, and of those carrying answers only the ones answering a call made on this
        branch or below it, so an answer to a parallel sibling's call is not seen here.
        """
        events = [e for e in self.session.events if e.invocation_id == self.invocation_id]
        branch = self.branch
        if branch is None:
            return [e for e in events if e.author == "user" or e.branch is None]
        calls = {c.id for e in events if on_or_below(e.branch, branch)
                 for c in e.get_function_calls() if c.id}
        seen = []
        for event in events:
            if event.author != "user":
                if event.branch == branch:
                    seen.append(event)
                continue
            if event.branch is not None and not on_or_below(event.branch, branch):
                continue
            answered = {r.id for r in event.get_function_responses() if r.id}
            if not answered or answered & calls:
                seen.append(event)
        return seen

    def should_pause_invocation(self, event: Event) -> bool:
        """True if the event carries long-running (interrupt) calls that pause the run."""
        if not event.long_running_tool_ids:
            return False
        return any(fc.id in event.long_running_tool_ids for fc in event.get_function_calls())

    def mark_paused(self, agent_name: str) -> None:
        """Record that ``agent_name`` stopped waiting for an answer (visible to all copies)."""
        self.counters.paused_agents.add(agent_name)

    def is_paused(self, agent_name: str) -> bool:
        """True if ``agent_name`` paused in this run."""
        return agent_name in self.counters.paused_agents

    def start_recovery(self) -> None:
        """Mark this run as continuing, from its log, an invocation interrupted mid-run."""
        self.counters.recovering = True

    def hand_answers_in(self, answers: list[Any]) -> None:
        """The answers this run continues from, just committed (see ``take_answers_in``)."""
        self.counters.answers_in = list(answers)

    def take_answers_in(self, author: str, branch: str | None) -> list[Any]:
        """The answers handed in that ``author`` made in ``branch`` (each taken once)."""
        mine: list[Any] = []
        rest: list[Any] = []
        for answer in self.counters.answers_in:
            (mine if answer.author == author and answer.branch == branch else rest).append(answer)
        self.counters.answers_in = rest
        return mine

    def take_up_runs(self, runs: RunsGoingOn) -> None:
        """Mark this run as taking up the runs of agents under way (see ``take_resumed``)."""
        self.counters.resumed = set(runs.resumed)
        self.counters.unfinished = list(runs.unfinished)

    def take_resumed(self, agent_name: str) -> bool:
        """True (once) if ``agent_name``'s run goes on here: it started before the pause.

        Its before-callbacks ran then; a later run of it in this run is a new one.
        """
        if agent_name not in self.counters.resumed:
            return False
        self.counters.resumed.discard(agent_name)
        return True

    def takes_up(self, agent_name: str) -> bool:
        """True if this run takes up ``agent_name``'s run and has not re-entered it yet."""
        return agent_name in self.counters.resumed

    def schedule(self, agent: BaseAgent, *, hops: bool) -> None:
        """The Runner runs ``agent`` at the top of the invocation; ``hops``: transfers are hops.

        With hops (the root is an LlmAgent), a transfer made by ``agent`` ends its run there,
        as google-adk 2.13's scheduler ends it: no after-agent callbacks, and in a resumable
        app its ``end_of_agent`` right after the transfer. The target is run next by the
        Runner, not inside ``agent``'s run. Without hops every transfer runs its target
        inside the run of the agent that transferred (google-adk's workflow-agent roots).
        """
        self.counters.scheduled = agent if hops else None
        self.counters.transfer_hop = None

    def transfers_by_hop(self, agent: BaseAgent) -> bool:
        """True if a transfer made by ``agent`` in this run ends its run (see ``schedule``)."""
        return self.counters.scheduled is agent

    def hop_to(self, target: BaseAgent) -> None:
        """Record that the scheduled agent transferred to ``target``: its run ends here."""
        self.counters.transfer_hop = target

    def hopped(self, agent: BaseAgent) -> bool:
        """True if ``agent``'s run ended with a transfer hop (its after-callbacks do not run)."""
        return self.counters.scheduled is agent and self.counters.transfer_hop is not None

    def take_hop(self) -> BaseAgent | None:
        """The agent the scheduled agent transferred to, if it did (once)."""
        target, self.counters.transfer_hop = self.counters.transfer_hop, None
        return target

    def waits_for_workers(self, agent_name: str) -> bool:
        """True if ``agent_name`` stopped waiting for workers only: its run is not over.

        Only work sent to workers waits so (see ``orchestrator.agents.agent_runs``): the
        run of an agent that waits for an answer from outside ends at the pause.
        """
        if self.transport is None or not self.counters.paused_agents:
            return False
        events = self.session.events
        memo = self.counters.waiting_for_workers
        if memo is None or memo[0] != len(events):
            from orchestrator.agents.agent_runs import waiting_for_workers

            memo = (len(events), waiting_for_workers(
                self.agent.root_agent, events, self.invocation_id, self.is_resumable))
            self.counters.waiting_for_workers = memo
        return agent_name in memo[1]

    def take_recovery(self) -> bool:
        """True (once per branch) if this run recovers an interrupted invocation.

        Once per branch: a ParallelAgent's branches in process were all under way when the
        run stopped, and each of them finds its own step where the log left it.
        """
        if not self.counters.recovering or self.branch in self.counters.recovered_branches:
            return False
        self.counters.recovered_branches.add(self.branch)
        return True

    def populate_invocation_agent_states(self) -> None:
        """Rebuild agent checkpoints and end flags from this invocation's events (resumable apps).

        Nothing is rebuilt when the app is not resumable, as in google-adk.
        """
        if not self.is_resumable:
            return
        states, ends = invocation_agent_states(
            self.session.events, self.invocation_id, self.agent.root_agent)
        for name, ended in ends.items():
            if ended:
                self.set_agent_state(name, end_of_agent=True)
        for name, state in states.items():
            self.set_agent_state(name, agent_state=state)

    @property
    def is_aborted(self) -> bool:
        """True once the caller set the abort signal."""
        return bool(self.abort_signal and self.abort_signal.is_set())
