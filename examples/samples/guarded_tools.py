"""Callbacks that guard an agent: one screens what reaches the model, one screens tool calls.

The shape of ADK's guardrail samples: ``before_model_callback`` answers in the model's
place when the user's message holds a blocked word (the model is never called), and
``before_tool_callback`` refuses a tool call whose arguments are off limits (the tool never
runs; the model reads the refusal as the tool's result). Both record what they blocked in
the session state.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from examples.samples._offline import answers, call, last_user_text, model_or_offline
from orchestrator.agents import Agent, CallbackContext
from orchestrator.apps import App
from orchestrator.models.llm_request import LlmRequest
from orchestrator.models.llm_response import LlmResponse
from orchestrator.tools.base_tool import BaseTool
from orchestrator.tools.tool_context import ToolContext

BLOCKED_WORD = "password"
PROTECTED_ACCOUNTS = frozenset({"root", "admin"})
BALANCES = {"alice": 120, "bob": 75, "root": 10_000}


def get_balance(account: str) -> dict[str, Any]:
    """Return the balance of an account, in euros."""
    return {"account": account, "balance_eur": BALANCES.get(account.lower())}


def screen_message(callback_context: CallbackContext,
                   llm_request: LlmRequest) -> LlmResponse | None:
    """Answer in the model's place when the user's message holds the blocked word."""
    if BLOCKED_WORD not in last_user_text(llm_request).lower():
        return None
    callback_context.state["blocked_messages"] = callback_context.state.get(
        "blocked_messages", 0) + 1
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(
        text="I cannot help with passwords.")]))


def screen_tool(tool: BaseTool, args: dict[str, Any],
                tool_context: ToolContext) -> dict[str, Any] | None:
    """Refuse balance look-ups of protected accounts; the tool does not run."""
    if tool.name == "get_balance" and str(args.get("account", "")).lower() in PROTECTED_ACCOUNTS:
        tool_context.state["blocked_tool_calls"] = tool_context.state.get(
            "blocked_tool_calls", 0) + 1
        return {"error": f"the account {args['account']!r} is protected"}
    return None


def _model(request: LlmRequest) -> Any:
    text, done = last_user_text(request), answers(request)
    if "get_balance" not in done:
        return call("get_balance", account=text.split()[-1].strip("?.!"))
    result = done["get_balance"]
    if "error" in result:
        return f"Sorry: {result['error']}."
    return f"{result['account']} has {result['balance_eur']} EUR."


root_agent = Agent(
    name="bank_assistant",
    model=model_or_offline(_model),
    description="Answers balance questions, within limits.",
    instruction="Answer balance questions with get_balance; never reveal passwords.",
    tools=[get_balance],
    before_model_callback=screen_message,
    before_tool_callback=screen_tool,
)

app = App(name="bank_assistant", root_agent=root_agent)
