"""Apps whose calls of one model turn write the same state containers; importable by workers.

``shop``: the model adds three items in one turn, each by a call of the long-running
``add_to_cart`` (remote in the Celery stack): each call appends to the list ``cart`` and
sets its own key in the dict ``basket``, both read from state and changed in place, and
counts in ``basket['count']`` (a number: not merged); ``shop_plain``: the same tool as a plain
tool (run in process: the calls share the state, the reference).
"""

from __future__ import annotations

from typing import Any

from orchestrator import App, FunctionTool, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import FunctionLlm
from tests.apps import _call, function_responses

ITEMS = ("apple", "pear", "plum")


def add_to_cart(item: str, tool_context: ToolContext) -> dict[str, Any]:
    """Add an item to the cart."""
    tool_context.state["cart"].append(item)  # a list read from state, changed in place
    basket = tool_context.state["basket"]
    basket[item] = 1
    basket["count"] = basket.get("count", 0) + 1
    return {"added": item}


def _shop_model(request: LlmRequest) -> Any:
    if not function_responses(request):
        return [_call("add_to_cart", item=item) for item in ITEMS]
    return "added"


def _shop(name: str, tool: Any) -> App:
    return App(name=name, root_agent=LlmAgent(
        name="shop", model=FunctionLlm(record_requests=False, fn=_shop_model), tools=[tool]))


shop_app = _shop("shop", LongRunningFunctionTool(add_to_cart))
shop_plain_app = _shop("shop_plain", FunctionTool(add_to_cart))

STATE_APPS = [shop_app, shop_plain_app]
STATE_APP_SPECS = "tests.apps_state:shop_app,tests.apps_state:shop_plain_app"
