"""Apps whose LlmAgents transfer, with agent callbacks and a plugin that count into state.

``relay`` (and ``relay_resumable``): root transfers to child; child calls ``plain``, then
``to_peer`` (both on workers), whose answer transfers to peer; peer asks a human
(long-running ``ask``) and, answered, says "PEER DONE". Each agent callback and the
``counting`` plugin's add one to ``b_<agent>``, ``a_<agent>``, ``pb_<agent>``,
``pa_<agent>``. Importable by orchestrator and worker processes; the models are stateless
functions of the request.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from orchestrator import (
    App,
    CallbackContext,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    LongRunningFunctionTool,
    ResumabilityConfig,
    ToolContext,
)
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.models.fake import FunctionLlm
from orchestrator.plugins import BasePlugin


def _call(name: str, **args: Any) -> types.Part:
    return types.Part(function_call=types.FunctionCall(name=name, args=args))


def _answered(request: LlmRequest) -> set[str]:
    """The names of the calls the request's history answers (the agent's own calls)."""
    return {p.function_response.name for c in request.contents for p in c.parts or []
            if p.function_response and p.function_response.name}


def _count(context: CallbackContext, key: str) -> None:
    context.state[key] = context.state.get(key, 0) + 1


def count_before(callback_context: CallbackContext) -> None:
    """An agent's before_agent callback: one more ``b_<agent>``."""
    _count(callback_context, f"b_{callback_context.agent_name}")


def count_after(callback_context: CallbackContext) -> None:
    """An agent's after_agent callback: one more ``a_<agent>``."""
    _count(callback_context, f"a_{callback_context.agent_name}")


class CountingPlugin(BasePlugin):
    """Counts its agent callbacks into state (``pb_<agent>``, ``pa_<agent>``)."""

    def __init__(self) -> None:
        super().__init__(name="counting")

    async def before_agent_callback(self, *, agent: Any, callback_context: Any) -> None:
        _count(callback_context, f"pb_{agent.name}")

    async def after_agent_callback(self, *, agent: Any, callback_context: Any) -> None:
        _count(callback_context, f"pa_{agent.name}")


def plain() -> dict[str, Any]:
    """A plain tool (sent to workers)."""
    return {"plain": 1}


def to_peer(tool_context: ToolContext) -> dict[str, Any]:
    """Its answer hands the turn to the agent named ``peer`` (sent to workers)."""
    tool_context.actions.transfer_to_agent = "peer"
    return {"routed": True}


def ask(what: str) -> None:
    """Ask a human (the answer comes from outside)."""
    return None


def _on_workers(func: Any) -> FunctionTool:
    tool = FunctionTool(func)
    tool.custom_metadata = {QUEUE_METADATA_KEY: "adk.tools"}
    return tool


def _root_model(request: LlmRequest) -> Any:
    # Asked again only if its transfer did not end its turn: then it says so.
    return "ROOT AGAIN" if _answered(request) else _call("transfer_to_agent", agent_name="child")


def _child_model(request: LlmRequest) -> Any:
    answered = _answered(request)
    if "plain" not in answered:
        return _call("plain")
    return _call("to_peer") if "to_peer" not in answered else "CHILD AGAIN"


def _peer_model(request: LlmRequest) -> Any:
    return "PEER DONE" if "ask" in _answered(request) else _call("ask", what="p")


def relay_root() -> LlmAgent:
    """root -> child (plain, to_peer on workers) -> peer (asks a human)."""
    def agent(name: str, fn: Any, tools: list[Any], **fields: Any) -> LlmAgent:
        return LlmAgent(name=name, model=FunctionLlm(record_requests=False, fn=fn), tools=tools,
                        before_agent_callback=count_before, after_agent_callback=count_after, **fields)

    child = agent("child", _child_model, [_on_workers(plain), _on_workers(to_peer)])
    peer = agent("peer", _peer_model, [LongRunningFunctionTool(ask)])
    return agent("root", _root_model, [], sub_agents=[child, peer])


relay_app = App(name="relay", root_agent=relay_root(), plugins=[CountingPlugin()])
relay_resumable_app = App(name="relay_resumable", root_agent=relay_root(),
                          plugins=[CountingPlugin()],
                          resumability_config=ResumabilityConfig(is_resumable=True))

TRANSFER_APPS = [relay_app, relay_resumable_app]
TRANSFER_APP_SPECS = ",".join(
    f"tests.apps_transfers:{name}" for name in ("relay_app", "relay_resumable_app"))
