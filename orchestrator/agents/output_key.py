"""What an LlmAgent writes to its ``output_key``: its answers' text, as google-adk 2.13 does."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.events.event import Event

if TYPE_CHECKING:
    from orchestrator.agents.llm_agent import LlmAgent


def save_final_output(agent: LlmAgent, event: Event) -> None:
    """Write the text of ``agent``'s final response ``event`` to its ``output_key``.

    Through its ``output_schema`` when it has one (nothing written if the text does not
    validate); nothing for an event of another agent, one that is not final, or no text.
    """
    if not agent.output_key or event.author != agent.name or not event.is_final_response():
        return
    parts = event.content.parts if event.content else None
    if not parts or not any(p.text is not None and not p.thought for p in parts):
        return  # no text at all (an empty one is written, as google-adk writes it)
    text = said(event)
    value: Any = text
    if agent.output_schema is not None:
        if not text.strip():
            return  # the empty last chunk of a stream: nothing to validate
        from orchestrator.flows.output_schema import output_value

        value = output_value(agent.output_schema, text)
        if value is None:
            return
    event.actions.state_delta[agent.output_key] = value


def accumulate_output(agent: LlmAgent, event: Event, so_far: str) -> str:
    """Add the text of each whole event of the turn to ``output_key``; the text so far.

    Text sent beside a function call is no final response, yet it is part of what the
    agent said: each text-bearing event of the agent writes the turn's text so far
    (without an ``output_schema``, whose value is the final response's alone).
    """
    if (not agent.output_key or agent.output_schema is not None or event.author != agent.name
            or event.partial):
        return so_far
    text = said(event)
    if not text:
        return so_far
    so_far += text
    event.actions.state_delta[agent.output_key] = so_far
    return so_far


def said(event: Event) -> str:
    """The text of an event's parts, thoughts left out ('' for none)."""
    parts = event.content.parts if event.content else None
    return "".join(p.text for p in parts if p.text and not p.thought) if parts else ""
