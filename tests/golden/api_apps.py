"""The apps served in the HTTP API's golden run, written once against a namespace.

``tests/golden/record_api.py`` builds them with google-adk's classes and serves them with
google-adk's own api_server; ``tests/apps_api_golden.py`` builds them with ours for the
orchestrators and workers behind ``adk-celery api``. Like ``scenarios.py``, this module
imports neither framework: only google-genai ``types``, present on both sides.

The fake model is a pure function of the request (``answer``), so any orchestrator process
answers the same way and google-adk's in-process run answers identically:

- ``weather in <city>``: calls the plain tool ``get_weather``;
- ``note <text>``: calls ``save_note``, which saves an artifact (an event with an
  ``artifactDelta``);
- ``boom``: calls ``explode``, a plain tool that raises;
- ``pay <amount>``: calls the long-running ``ask_approval``, which returns nothing: the
  invocation pauses until a function response answers it;
- after a function response: says what the tool answered;
- anything else: ``echo: <text>``, streamed as two partial chunks and their aggregate.
"""

import json
from collections.abc import Callable
from typing import Any

from google.genai import types

USAGE = types.GenerateContentResponseUsageMetadata(
    prompt_token_count=0, candidates_token_count=0, total_token_count=0)
"""The usage every answer reports (the same on both sides)."""

BUILT: dict[str, Any] = {}
"""The apps the recorder built, by name (its agents directory's modules read them here)."""


def _text(text: str) -> list[types.Part]:
    return [types.Part(text=text)]


def _call(name: str, **args: Any) -> list[types.Part]:
    return [types.Part(function_call=types.FunctionCall(name=name, args=args))]


def answer(contents: list[types.Content]) -> list[list[types.Part]]:
    """The model's answer: chunks of parts, the last one the aggregate of the others."""
    last = contents[-1] if contents else None
    parts = (last.parts or []) if last is not None else []
    responses = [p.function_response for p in parts if p.function_response]
    if responses:
        said = json.dumps(responses[-1].response, sort_keys=True)
        return [_text(f"{responses[-1].name} said {said}")]
    text = " ".join(p.text for p in parts if p.text)
    if text.startswith("weather in "):
        return [_call("get_weather", city=text.removeprefix("weather in "))]
    if text.startswith("note "):
        return [_call("save_note", text=text.removeprefix("note "))]
    if text == "boom":
        return [_call("explode")]
    if text.startswith("pay "):
        return [_call("ask_approval", amount=int(text.removeprefix("pay ")))]
    return [_text("echo: "), _text(text), _text(f"echo: {text}")]


def build_apps(ns: Any, model: Callable[[], Any]) -> dict[str, Any]:
    """The apps ``weather`` and ``approval`` built from ``ns`` (``App``, ``LlmAgent``,
    ``LongRunningFunctionTool``, ``ToolContext``) with models made by ``model()``."""

    def get_weather(city: str) -> dict[str, Any]:
        """Tell the weather in a city."""
        return {"city": city, "sky": "clear", "celsius": 21}

    async def save_note(text: str, tool_context: ns.ToolContext) -> dict[str, Any]:
        """Keep a note as an artifact of the session."""
        version = await tool_context.save_artifact("note.txt", types.Part(text=text))
        return {"saved": "note.txt", "version": version}

    def explode() -> dict[str, Any]:
        """Fail, always."""
        raise RuntimeError("the tool blew up")

    def ask_approval(amount: int) -> None:
        """Ask a human to approve a payment; the answer comes later."""
        return None

    helper = ns.LlmAgent(name="helper", model=model(), description="Helps with small talk.",
                         instruction="Be brief.")
    weather = ns.App(name="weather", root_agent=ns.LlmAgent(
        name="forecaster", model=model(), description="Tells the weather.",
        instruction="Answer with the weather.", tools=[get_weather, save_note, explode],
        sub_agents=[helper]))
    approval = ns.App(name="approval", root_agent=ns.LlmAgent(
        name="approver", model=model(), description="Pays after a human approves.",
        instruction="Ask before paying.", tools=[ns.LongRunningFunctionTool(ask_approval)]))
    return {"weather": weather, "approval": approval}
