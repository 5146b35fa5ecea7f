"""An agent's ``output_schema`` in its model requests, and its structured answer, as google-adk.

Without tools, or with a model that takes a response schema beside tools
(``model.capabilities.output_schema_and_tools``), the request carries the schema. Otherwise
the agent is offered ``set_model_response``, whose parameters are the schema's fields, and
the system instruction tells the model to give its final answer through it. A valid call's
answer is followed by the agent's final event: the answer as JSON text, which
``output_key`` stores parsed. The tool runs in the orchestrator, never on a worker.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, get_args, get_origin

from google.genai import types
from pydantic import BaseModel, TypeAdapter

from orchestrator.events.event import Event
from orchestrator.flows.contents import belongs_to_branch
from orchestrator.tools.set_model_response_tool import SetModelResponseTool

if TYPE_CHECKING:
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.llm_agent import LlmAgent
    from orchestrator.models.llm_request import LlmRequest

SET_MODEL_RESPONSE_INSTRUCTION = (
    "Your final answer must be given by calling set_model_response, its arguments following "
    "the answer's schema, and not as text. Use your other tools first if the task needs "
    "them; then call set_model_response once, with the answer."
)
"""Added to the system instruction with the tool."""


_FENCE_LANGUAGE = re.compile(r"^[A-Za-z0-9_]*[ \t]*\n?")


def output_value(schema: type[BaseModel], text: str) -> Any | None:
    """What ``output_key`` stores for a final answer ``text``: the schema's object, as a dict.

    None for a blank answer (the empty last chunk of a stream). JSON wrapped whole in a
    Markdown code fence (```json ... ```) is read inside it, as google-adk reads it; text
    that is not the schema's JSON raises pydantic's ``ValidationError``.
    """
    if not text.strip():
        return None
    return structured_output(schema, text)


def structured_output(schema: Any, text: str) -> Any:
    """``text`` (optionally in a ```json fence) read as the output ``schema``.

    A model's dict, a list of them (``list[Model]``), or, for another schema, the plain JSON
    value. Text that does not fit raises pydantic's ``ValidationError``, or ``ValueError`` for text
    that is not JSON at all.
    """
    text = json_in_fence(text)
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_validate_json(text).model_dump(exclude_none=True)
    item = get_args(schema)[0] if get_origin(schema) is list and get_args(schema) else None
    if isinstance(item, type) and issubclass(item, BaseModel):
        return [m.model_dump(exclude_none=True) for m in TypeAdapter(schema).validate_json(text)]
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"Invalid JSON in schema value: {error}") from error


def json_in_fence(text: str) -> str:
    """The JSON inside a Markdown code fence (```json ... ```) that wraps all of ``text``.

    ``text`` itself when it is not so wrapped. Models asked for JSON sometimes fence it
    (more so when tools make the schema best-effort); google-adk reads inside the fence.
    """
    stripped = text.strip()
    if len(stripped) >= 6 and stripped.startswith("```") and stripped.endswith("```"):
        return _FENCE_LANGUAGE.sub("", stripped[3:-3], count=1).strip()
    return text


def set_model_response_tool(agent: LlmAgent) -> SetModelResponseTool | None:
    """The ``set_model_response`` tool ``agent`` is offered, if any.

    Offered when the agent has an ``output_schema`` and tools (as listed on the agent, even a
    toolset that lists none), and its model cannot take a response schema beside them.
    """
    if agent.output_schema is None or not agent.tools:
        return None
    if agent.canonical_model.capabilities.output_schema_and_tools:
        return None
    return SetModelResponseTool(agent.output_schema)


def add_output_schema(agent: LlmAgent, llm_request: LlmRequest) -> None:
    """Ask for ``agent``'s output schema: as the response schema, or through the tool.

    Called before the transfer tool and the agent's own tools are declared, so that the
    tool and its instruction come where google-adk puts them (before those).
    """
    if agent.output_schema is None:
        return
    tool = set_model_response_tool(agent)
    if tool is None:
        llm_request.set_output_schema(agent.output_schema)
        return
    llm_request.append_tools([tool])
    llm_request.append_instructions([SET_MODEL_RESPONSE_INSTRUCTION])


def structured_response(answer: Event) -> str | None:
    """The JSON text of the valid ``set_model_response`` result ``answer`` carries, if any."""
    if answer.actions.set_model_response is None:
        return None
    if not any(r.name == SetModelResponseTool.NAME for r in answer.get_function_responses()):
        return None
    return json.dumps(answer.actions.set_model_response, ensure_ascii=False)


def final_response_event(ctx: InvocationContext, text: str) -> Event:
    """The agent's final answer: ``text`` (the structured response) as a model text event."""
    return Event(
        invocation_id=ctx.invocation_id,
        author=ctx.agent.name,
        branch=ctx.branch,
        content=types.Content(role="model", parts=[types.Part(text=text)]),
    )


def owed_final_response(ctx: InvocationContext, agent_name: str) -> Event | None:
    """The final event the agent's step owes, if its structured answer is in and it is not.

    That is: since the agent's latest event with calls (in this branch), the log holds only
    answers to those calls, all of them, one a valid ``set_model_response``. An
    orchestrator that stopped between committing that answer and the final event made from
    it leaves it so; and so does a step whose other calls went to workers (the final event
    waits for their answers). The step then ends with the final event, as the step that
    gave the answer would have, instead of calling the model again.
    """
    # Read back from the log's end, stopping at this step's first event that is not an
    # answer: called before every model step, so a long session costs no more than a short
    # one (another invocation may have run in a pause: its events are passed over).
    answers: list[Event] = []
    for event in reversed(ctx.session.events):
        if event.invocation_id != ctx.invocation_id or event.partial \
                or not belongs_to_branch(event.branch, ctx.branch):
            continue
        if event.get_function_calls():
            if event.author != agent_name:
                return None
            call_ids = {call.id for call in event.get_function_calls()}
            answered = {r.id for answer in answers for r in answer.get_function_responses()}
            if not call_ids <= answered:
                return None
            text = next((t for answer in answers
                         if (t := structured_response(answer)) is not None), None)
            return final_response_event(ctx, text) if text is not None else None
        if not event.get_function_responses() or event.content is None or any(
                p.text for p in event.content.parts or []):
            return None  # the step went on (a final answer, another agent, a state event)
        answers.append(event)
    return None
