"""The LLM loop: request -> model -> response -> tools, until the step's last event is final.

The model call itself, with the model callbacks around it, is in
:mod:`orchestrator.flows.llm_calls`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from google.genai import types

from orchestrator import failpoints, platform
from orchestrator.agents.context import ReadonlyContext, ToolContext
from orchestrator.events.event import Event
from orchestrator.flows import (
    answers_in,
    functions,
    output_schema,
    remote_calls,
    step_resume,
    transfer,
)
from orchestrator.flows.contents import build_contents
from orchestrator.flows.instructions import (
    agent_instructions,
    static_instruction_contents,
    turn_instruction,
)
from orchestrator.flows.llm_calls import AGENT_NAME_LABEL, call_llm
from orchestrator.flows.retried_answers import answer_id_for
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.base_toolset import BaseToolset

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent

__all__ = ["AGENT_NAME_LABEL", "LlmFlow"]  # AGENT_NAME_LABEL moved to llm_calls; still here

_RESPONSE_FIELDS = tuple(LlmResponse.model_fields)


class _Step:
    """Per-step bookkeeping."""

    __slots__ = ("stop", "before_model")

    def __init__(self) -> None:
        self.stop = False
        """The agent's turn ends with this step."""
        self.before_model = False
        """The step's work was owed from earlier (answers, a recovery): no model call."""


class LlmFlow:
    """Runs an LlmAgent: one model step after another until the turn is final."""

    async def run_async(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """Yield every event of the agent's turn."""
        while True:
            step = _Step()
            last: Event | None = None
            async for event in self._run_one_step(ctx, step):
                last = event
                yield event
            if step.stop or last is None or last.is_final_response() or last.partial:
                return
            if ctx.end_invocation or ctx.is_aborted:
                return

    async def _run_one_step(
        self, ctx: InvocationContext, step: _Step
    ) -> AsyncGenerator[Event, None]:
        agent: LlmAgent = ctx.agent  # type: ignore[assignment]
        llm_request = LlmRequest()
        readonly = ReadonlyContext(ctx)
        instruction = await self._build_request(ctx, agent, llm_request, readonly)
        if ctx.end_invocation:
            return
        groups = await agent.resolve_tool_unions(readonly)

        def callable_tools() -> dict[str, BaseTool]:
            return _callable_tools(agent, groups)

        if ctx.counters.answers_in:  # what the answers this run continues from ask for
            asked = answers_in.Outcome()
            async for event in answers_in.act_on_answers(ctx, agent, asked):
                yield event
            if asked.ends_turn:
                step.stop = True
                return
        async for event in self._work_owed(ctx, agent, step, callable_tools):
            yield event
        if step.stop or step.before_model:
            return
        if (final := output_schema.owed_final_response(ctx, agent.name)) is not None:
            yield final  # its set_model_response answer is in, with every call of its step
            step.stop = True
            return
        self._add_history(ctx, agent, llm_request, instruction)
        # After the history, as in google-adk: a tool may read it (load_artifacts does).
        await self._add_tools(ctx, agent, llm_request, groups)
        model_response_event = Event(
            invocation_id=ctx.invocation_id, author=agent.name, branch=ctx.branch
        )
        if (retried := answer_id_for(agent.name, ctx.branch)) is not None:
            model_response_event.id = retried  # the stopped run's chunks carried it
        async for llm_response in call_llm(ctx, agent, llm_request, model_response_event):
            async for event in self._postprocess(
                ctx, llm_request, llm_response, model_response_event, step
            ):
                yield event

    async def _work_owed(
        self,
        ctx: InvocationContext,
        agent: LlmAgent,
        step: _Step,
        callable_tools: Callable[[], dict[str, BaseTool]],
    ) -> AsyncGenerator[Event, None]:
        """Work owed from earlier in this invocation, which comes before the model call.

        Confirmation answers first (their tools run, or go to workers), then, on a resumable
        or recovered invocation, whatever its log leaves open (see ``step_resume``).
        """
        dispatched: list[str] = []
        ended = False
        async for event in step_resume.answer_confirmations(ctx, callable_tools, dispatched):
            yield event
            ended = ended or event.is_final_response()
        if dispatched:
            # Confirmed calls went to workers: the turn waits for their answers, even when
            # an answer given here ends it (the approvals of one turn's calls come together).
            _pause(ctx, agent, step)
            return
        if ended or ctx.end_invocation:  # ended: a confirmation sent again, nothing owed
            step.stop = True
            return
        recovering = ctx.take_recovery()
        if not (ctx.is_resumable or recovering):
            return
        if recovering:
            for request in step_resume.requests_owed(ctx, agent.name):
                yield request
            if (final := output_schema.owed_final_response(ctx, agent.name)) is not None:
                yield final
                step.stop = True
                return
        decision = step_resume.decide_step_resume(
            ctx, agent.name, recovering=recovering, tools=callable_tools)
        if decision.action is step_resume.ResumeAction.DONE:
            step.stop = True
        elif decision.action is step_resume.ResumeAction.PAUSE:
            _pause(ctx, agent, step)
        elif decision.action is step_resume.ResumeAction.REPLAY_CALLS:
            assert decision.call_event is not None
            step.before_model = True
            # The committed calls' answers, acted on as in an uninterrupted run: a transfer
            # among them goes to its target (a hop, or the target's run), not to the model.
            async for event in self._answer_calls(
                    ctx, decision.call_event, callable_tools(), step, dispatched,
                    only_ids=decision.call_ids):
                yield event
            if dispatched:
                _pause(ctx, agent, step)

    async def _build_request(
        self,
        ctx: InvocationContext,
        agent: LlmAgent,
        llm_request: LlmRequest,
        readonly: ReadonlyContext,
    ) -> types.Content | None:
        """Fill in the model, config and system instruction.

        Returns the turn's instruction content, if the agent's instruction travels in the
        contents (see ``turn_instruction``).
        """
        model = agent.canonical_model
        llm_request.model = model.model
        if agent.generate_content_config is not None:
            llm_request.config = agent.generate_content_config.model_copy(deep=True)
        if ctx.run_config.labels:  # merged over the agent's own labels, as in google-adk
            llm_request.config.labels = {
                **(llm_request.config.labels or {}), **ctx.run_config.labels
            }
        llm_request.append_instructions(await agent_instructions(agent, readonly))
        return await turn_instruction(agent, readonly)

    async def _add_tools(
        self,
        ctx: InvocationContext,
        agent: LlmAgent,
        llm_request: LlmRequest,
        groups: list[tuple[Any, list[BaseTool]]],
    ) -> None:
        """The output schema, transfer, then each toolset and its tools (google-adk's order)."""
        tool_context = ToolContext(ctx)
        output_schema.add_output_schema(agent, llm_request)
        # The built-in transfer tool first, as in google-adk: an agent's own tool of the same
        # name is declared after it and takes the name (with a warning), not the other way.
        await transfer.add_transfer_tool(agent, tool_context, llm_request)
        for tool_union, tools in groups:
            if isinstance(tool_union, BaseToolset):
                await tool_union.process_llm_request(
                    tool_context=tool_context, llm_request=llm_request
                )
            for tool in tools:
                await tool.process_llm_request(tool_context=tool_context, llm_request=llm_request)
        llm_request._finalize_dynamic_instructions()

    def _add_history(
        self, ctx: InvocationContext, agent: LlmAgent, llm_request: LlmRequest,
        instruction: types.Content | None = None,
    ) -> None:
        llm_request.contents = build_contents(
            ctx.session.events,
            agent_name=agent.name,
            branch=ctx.branch,
            include_contents=agent.include_contents,
            include_thoughts_from_other_agents=ctx.run_config.include_thoughts_from_other_agents,
        )
        _insert_model_input_context(llm_request, ctx)
        if instruction is not None:  # before the latest user turn, as google-adk puts it
            llm_request._insert_transient_user_content([instruction])
        # The data parts of a static instruction lead the contents, a prefix that never
        # changes (as google-adk places them; after the instruction's placing, which would
        # take them for part of the latest user turn).
        llm_request.contents[0:0] = static_instruction_contents(agent)

    async def _postprocess(
        self,
        ctx: InvocationContext,
        llm_request: LlmRequest,
        llm_response: LlmResponse,
        model_response_event: Event,
        step: _Step,
    ) -> AsyncGenerator[Event, None]:
        if (
            llm_response.content is None
            and not llm_response.error_code
            and not llm_response.interrupted
            and llm_response.grounding_metadata is None
        ):
            return
        _apply_empty_response_policy(llm_response)
        event = _finalize_event(ctx, model_response_event, llm_response, llm_request)
        yield event
        if event.partial:
            return
        # Every non-partial event gets its own id; partial chunks share the final one's.
        model_response_event.id = Event.new_id()
        model_response_event.timestamp = platform.get_time()
        if event.get_function_calls():
            async for answer in self._handle_calls(ctx, event, llm_request, step):
                yield answer

    async def _handle_calls(
        self, ctx: InvocationContext, call_event: Event, llm_request: LlmRequest, step: _Step
    ) -> AsyncGenerator[Event, None]:
        failpoints.hit("flow.calls_committed")  # the calls are in the log, none handled yet
        dispatched: list[str] = []
        async for event in self._answer_calls(
                ctx, call_event, llm_request.tools_dict, step, dispatched):
            yield event
        if dispatched:
            # Remote calls are out: the invocation pauses until their answers come back.
            step.stop = True

    async def _answer_calls(
        self,
        ctx: InvocationContext,
        call_event: Event,
        tools: dict[str, BaseTool],
        step: _Step,
        dispatched: list[str],
        only_ids: set[str] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run ``call_event``'s calls (those of ``only_ids`` if given); act on each answer.

        A valid ``set_model_response`` answer is followed by the agent's final event; a
        transfer an answer asks for ends the step and goes to its target.
        """
        async for answer in functions.handle_function_calls(
            ctx, call_event, tools, only_ids=only_ids, dispatched=dispatched
        ):
            for index, event in enumerate(
                    functions.with_confirmation_request(ctx, call_event, answer)):
                if index:  # the gate's answer or its request is in, not both
                    failpoints.hit("flow.confirmation_half_committed")
                yield event
            # With calls of the step still out on workers, the final event waits for their
            # answers (the step's next run gives it: see output_schema.owed_final_response).
            if (structured := output_schema.structured_response(answer)) is not None \
                    and not dispatched:
                failpoints.hit("flow.model_response_answered")  # its final event is not in
                yield output_schema.final_response_event(ctx, structured)
            target_name = answer.actions.transfer_to_agent
            if target_name:
                async for event in transfer.transfer_to(
                        ctx, ctx.agent, target_name):  # type: ignore[arg-type]
                    yield event
                step.stop = True


def _callable_tools(
    agent: LlmAgent, groups: list[tuple[Any, list[BaseTool]]]
) -> dict[str, BaseTool]:
    """Name -> tool for calls run before the request is built (confirmations, replays)."""
    tools = {tool.name: tool for _, members in groups for tool in members}
    transfer_tool = transfer.transfer_tool(agent)
    if transfer_tool is not None:
        tools[transfer_tool.name] = transfer_tool
    # Declared before the agent's tools, as in the request: a tool of the agent's own of
    # that name takes it.
    answer_tool = output_schema.set_model_response_tool(agent)
    if answer_tool is not None and answer_tool.name not in tools:
        tools[answer_tool.name] = answer_tool
    return tools


def _insert_model_input_context(llm_request: LlmRequest, ctx: InvocationContext) -> None:
    extra = ctx.run_config.model_input_context
    if not extra:
        return
    contents = llm_request.contents
    index = len(contents)
    for i in range(len(contents) - 1, -1, -1):
        if contents[i].role == "user" and any(p.text for p in contents[i].parts or []):
            index = i
            break
    llm_request.contents = contents[:index] + list(extra) + contents[index:]


def _apply_empty_response_policy(response: LlmResponse) -> None:
    if response.partial or response.error_code:
        return
    if response.finish_reason != types.FinishReason.STOP:
        return
    parts = response.content.parts if response.content else None
    if not parts or not any(p.text or p.function_call or p.inline_data for p in parts):
        response.error_code = "MODEL_RETURNED_NO_CONTENT"
        response.error_message = "The model returned a response with no content."


def _finalize_event(
    ctx: InvocationContext,
    model_response_event: Event,
    response: LlmResponse,
    llm_request: LlmRequest,
) -> Event:
    updates = {
        name: value for name in _RESPONSE_FIELDS
        if (value := getattr(response, name)) is not None
    }
    event = model_response_event.model_copy(update=updates)
    if event.get_function_calls():
        functions.populate_client_function_call_ids(event)
        event.long_running_tool_ids = functions.long_running_ids(
            ctx, event, llm_request.tools_dict
        )
        remote_calls.attach_remote_jobs(ctx, event, llm_request.tools_dict)
    return event


def _pause(ctx: InvocationContext, agent: LlmAgent, step: _Step) -> None:
    """End the step and the agent's turn for now: it waits for answers to open calls."""
    ctx.mark_paused(agent.name)
    step.stop = True
