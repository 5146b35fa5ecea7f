"""A resumable app whose ParallelAgent's branches run in the orchestrator, with counting callbacks.

``fan``: ``pipeline`` (SequentialAgent) runs ``fan`` (ParallelAgent: ``left`` calls ``plain``
on workers, ``mid`` calls ``local`` in process, ``right`` answers at once), then ``last``,
which says what it saw. Each agent callback and the ``counting`` plugin's add one to
``b_<agent>``, ``a_<agent>``, ``pb_<agent>``, ``pa_<agent>``; each after_agent callback first
meets the failpoint ``after_agent.<agent>``. Run with ``ADK_CELERY_AGENTS_QUEUE`` empty, the
branches run in process: an orchestrator killed mid-way leaves them all under way.
Importable by orchestrator and worker processes; the models are stateless functions of
the request.
"""

from __future__ import annotations

from typing import Any

from orchestrator import (
    App,
    CallbackContext,
    FunctionTool,
    LlmAgent,
    LlmRequest,
    ParallelAgent,
    ResumabilityConfig,
    SequentialAgent,
    failpoints,
)
from orchestrator.distributed.transport import QUEUE_METADATA_KEY
from orchestrator.models.fake import FunctionLlm
from tests.apps_transfers import CountingPlugin, _answered, _call, count_after, count_before


def plain() -> dict[str, Any]:
    """A plain tool (sent to workers)."""
    return {"plain": 1}


def local() -> dict[str, Any]:
    """A plain tool that runs in the orchestrator."""
    return {"local": 1}


def _stopping(callback_context: CallbackContext) -> None:
    failpoints.hit(f"after_agent.{callback_context.agent_name}")


def _caller(name: str, tool: str) -> FunctionLlm:
    def model(request: LlmRequest) -> Any:
        return f"{name.upper()} DONE" if tool in _answered(request) else _call(tool)
    return FunctionLlm(record_requests=False, fn=model)


def _saying(text: str) -> FunctionLlm:
    return FunctionLlm(record_requests=False, fn=lambda request: text)


def _agent(name: str, model: FunctionLlm, *tools: FunctionTool) -> LlmAgent:
    return LlmAgent(name=name, model=model, tools=list(tools), before_agent_callback=count_before,
                    after_agent_callback=[_stopping, count_after])


def _fan_root() -> SequentialAgent:
    on_workers = FunctionTool(plain)
    on_workers.custom_metadata = {QUEUE_METADATA_KEY: "adk.tools"}
    fan = ParallelAgent(name="fan", sub_agents=[
        _agent("left", _caller("left", "plain"), on_workers),
        _agent("mid", _caller("mid", "local"), FunctionTool(local)),
        _agent("right", _saying("RIGHT DONE")),
    ], before_agent_callback=count_before, after_agent_callback=[_stopping, count_after])
    return SequentialAgent(name="pipeline", sub_agents=[fan, _agent("last", _saying("LAST DONE"))],
                           before_agent_callback=count_before,
                           after_agent_callback=[_stopping, count_after])


fan_app = App(name="fan", root_agent=_fan_root(), plugins=[CountingPlugin()],
              resumability_config=ResumabilityConfig(is_resumable=True))

FAN_APP_SPECS = "tests.apps_fan:fan_app"
