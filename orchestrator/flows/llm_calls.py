"""One model call of an LlmAgent's step: the model callbacks around it, and its responses.

As google-adk's ``_call_llm_async``: ``before_model`` callbacks (the plugins' first) may
answer instead of the model; the model's responses each pass the ``after_model``
callbacks; a model error goes to the ``on_model_error`` callbacks, which may recover
with a response of their own.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from google.genai import types

from orchestrator import observe
from orchestrator.agents import callbacks as cb
from orchestrator.agents.context import CallbackContext, ReadonlyContext
from orchestrator.agents.run_config import StreamingMode
from orchestrator.events.event import Event
from orchestrator.flows.contents import request_copy
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.tools.agent_tool import GROUNDING_METADATA_KEY

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent

AGENT_NAME_LABEL = "adk_agent_name"
"""The label of a model request naming the agent that makes it (as google-adk sets it)."""


async def call_llm(
    ctx: InvocationContext,
    agent: LlmAgent,
    llm_request: LlmRequest,
    model_response_event: Event,
) -> AsyncGenerator[LlmResponse, None]:
    """The responses of one model call, as the model callbacks leave them."""
    callback_context = CallbackContext(ctx, event_actions=model_response_event.actions)
    if _may_edit_request(ctx, agent):
        llm_request.contents = request_copy(llm_request.contents)
    override = await ctx.plugin_manager.run_before_model_callback(
        callback_context=callback_context, llm_request=llm_request
    )
    if not override and agent.before_model_callback:
        override = await cb.run_until(
            agent.before_model_callback,
            {"callback_context": callback_context, "llm_request": llm_request},
            stop=cb.is_truthy,
        )
    # Reading the actions records what the callbacks wrote into containers read from
    # state (see State.record_nested_writes), into the response event's delta.
    _ = callback_context.actions
    if override:
        yield override
        return
    # Every model call names its agent (billing reports per agent), unless already labelled.
    llm_request.config.labels = llm_request.config.labels or {}
    llm_request.config.labels.setdefault(AGENT_NAME_LABEL, agent.name)
    ctx.increment_llm_call_count()
    # After-model callbacks see every response, a recovered error's too; an exception
    # they raise is theirs, not the model's (no error callback for it).
    async for response in _model_responses(ctx, agent, llm_request, callback_context):
        yield await _after_model(ctx, agent, callback_context, response)


async def _model_responses(
    ctx: InvocationContext,
    agent: LlmAgent,
    llm_request: LlmRequest,
    callback_context: CallbackContext,
) -> AsyncGenerator[LlmResponse, None]:
    """The model's responses; if it raises, what an error callback recovers with."""
    llm = agent.canonical_model
    stream = ctx.run_config.streaming_mode == StreamingMode.SSE
    try:
        async for response in observe.timed_model_stream(
                agent.name, llm.generate_content_async(llm_request, stream=stream)):
            yield response
    except Exception as error:
        recovered = await ctx.plugin_manager.run_on_model_error_callback(
            callback_context=callback_context, llm_request=llm_request, error=error
        )
        if recovered is None and agent.on_model_error_callback:
            recovered = await cb.run_until(
                agent.on_model_error_callback,
                {"callback_context": callback_context, "llm_request": llm_request,
                 "error": error},
                stop=cb.is_not_none,
            )
        _ = callback_context.actions  # the error callbacks' nested state writes
        if recovered is None:
            raise
        yield recovered


async def _after_model(
    ctx: InvocationContext,
    agent: LlmAgent,
    callback_context: CallbackContext,
    response: LlmResponse,
) -> LlmResponse:
    """``response`` as the after-model callbacks leave it (a replacement keeps its stream fields)."""
    replacement = await ctx.plugin_manager.run_after_model_callback(
        callback_context=callback_context, llm_response=response
    )
    if not replacement and agent.after_model_callback:
        replacement = await cb.run_until(
            agent.after_model_callback,
            {"callback_context": callback_context, "llm_response": response},
            stop=cb.is_truthy,
        )
    _ = callback_context.actions  # the callbacks' nested state writes
    if not replacement:
        await _add_tool_grounding(ctx, agent, response)
        return response
    await _add_tool_grounding(ctx, agent, replacement)
    updates = {}
    for name in ("partial", "turn_complete", "usage_metadata"):
        if getattr(replacement, name) is None and getattr(response, name) is not None:
            updates[name] = getattr(response, name)
    return replacement.model_copy(update=updates) if updates else replacement


async def _add_tool_grounding(
    ctx: InvocationContext, agent: LlmAgent, response: LlmResponse
) -> None:
    """Put on ``response`` the grounding a tool of the agent left for it, as google-adk.

    An AgentTool with ``propagate_grounding_metadata`` leaves its child's grounding in the
    ``temp:`` state (so, for the rest of the invocation); it goes on every later response
    of an agent that has such a tool.
    """
    grounding = ctx.session.state.get(GROUNDING_METADATA_KEY)
    if not grounding:  # most responses: the agent's tools are not resolved for nothing
        return
    tools = await agent.canonical_tools(ReadonlyContext(ctx))
    if any(getattr(tool, "propagate_grounding_metadata", False) for tool in tools):
        response.grounding_metadata = types.GroundingMetadata.model_validate(grounding)


def _may_edit_request(ctx: InvocationContext, agent: LlmAgent) -> bool:
    """True if a callback that may edit the request's contents in place gets it.

    Callbacks then get copies, never the session's events or the history memo's. Models are
    handed the shared contents: copying a long session's history for every model call is
    what the memo saves (a model reads its request; see :class:`BaseLlm`).
    """
    return bool(
        agent.before_model_callback or agent.on_model_error_callback
        or ctx.plugin_manager.gets_model_requests()
    )
