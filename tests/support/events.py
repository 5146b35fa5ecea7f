"""Helpers that make event sequences readable in assertions."""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import Event


def user_text(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def function_response(call_id: str, name: str, response: dict[str, Any]) -> types.Content:
    return types.Content(
        role="user",
        parts=[types.Part(function_response=types.FunctionResponse(
            id=call_id, name=name, response=response))],
    )


def call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def simplify(event: Event) -> tuple[str, Any]:
    """(author, payload): text, ('call', name, args), ('response', name, response) or a list."""
    if event.content is None or not event.content.parts:
        if event.error_code:
            return event.author, ("error", event.error_code)
        return event.author, ("actions", event.actions.model_dump(exclude_defaults=True))
    items = []
    for part in event.content.parts:
        if part.text is not None:
            items.append(part.text)
        elif part.function_call:
            items.append(("call", part.function_call.name, part.function_call.args))
        elif part.function_response:
            items.append(
                ("response", part.function_response.name, part.function_response.response)
            )
    return event.author, items[0] if len(items) == 1 else items


def simplify_all(events: list[Event]) -> list[tuple[str, Any]]:
    return [simplify(e) for e in events]


def request_summary(contents: list[types.Content]) -> list[str]:
    """One string per content: role and a short payload description."""
    out = []
    for content in contents:
        bits = []
        for part in content.parts or []:
            if part.text is not None:
                bits.append(f"text:{part.text}")
            elif part.function_call:
                bits.append(f"call:{part.function_call.name}:{part.function_call.id}")
            elif part.function_response:
                bits.append(
                    f"resp:{part.function_response.name}:{part.function_response.id}:"
                    f"{part.function_response.response}"
                )
        out.append(f"{content.role}|" + "|".join(bits))
    return out
