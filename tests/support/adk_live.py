"""google-adk 2.13 and orchestrator side by side in one process, for differential tests.

``frameworks()`` gives one namespace per framework with the same attribute names; a test
writes its scenario once against a namespace ``fw`` and compares what both produce. The
google-adk side is skipped (with the reason) when google-adk 2.13 is not importable.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.flows.contents import CONTEXT_PREAMBLE
from tests.golden import scenarios
from tests.test_adk_golden import ADK_PREAMBLE_START, PREAMBLE_PLACEHOLDER

ADK_VERSION = "2.13.0"


def google_adk() -> SimpleNamespace:
    """google-adk's classes under the names the tests use (skips without google-adk 2.13)."""
    adk = pytest.importorskip("google.adk", reason="google-adk is not installed")
    if adk.__version__ != ADK_VERSION:
        pytest.skip(f"these tests compare with google-adk {ADK_VERSION}, found {adk.__version__}")
    # SequentialAgent & co. warn they are deprecated in 2.x; tool errors are logged.
    warnings.filterwarnings("ignore", module="google.adk")
    logging.getLogger("google_adk").setLevel(logging.CRITICAL)
    from google.adk import tools as t
    from google.adk.agents import (
        InvocationContext,
        LlmAgent,
        LoopAgent,
        ParallelAgent,
        RunConfig,
        SequentialAgent,
    )
    from google.adk.agents.invocation_context import LlmCallsLimitExceededError
    from google.adk.agents.run_config import StreamingMode
    from google.adk.apps import App, ResumabilityConfig
    from google.adk.events import Event, EventActions
    from google.adk.memory import InMemoryMemoryService
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.models import BaseLlm, LlmCapabilities, LlmRequest, LlmResponse
    from google.adk.plugins import BasePlugin
    from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
    from google.adk.plugins.global_instruction_plugin import GlobalInstructionPlugin
    from google.adk.plugins.save_files_as_artifacts_plugin import SaveFilesAsArtifactsPlugin
    from google.adk.runners import InMemoryRunner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.base_toolset import BaseToolset
    from google.adk.tools.enterprise_search_tool import EnterpriseWebSearchTool
    from google.adk.tools.google_maps_grounding_tool import GoogleMapsGroundingTool
    from google.adk.tools.google_search_tool import GoogleSearchTool
    from google.adk.tools.url_context_tool import UrlContextTool
    from google.adk.tools.vertex_ai_search_tool import VertexAiSearchTool

    return scenarios.namespace(
        name="google-adk",
        AgentTool=t.AgentTool, BasePlugin=BasePlugin, ContextFilterPlugin=ContextFilterPlugin,
        GlobalInstructionPlugin=GlobalInstructionPlugin,
        SaveFilesAsArtifactsPlugin=SaveFilesAsArtifactsPlugin,
        App=App, BaseLlm=BaseLlm, BaseToolset=BaseToolset, Event=Event,
        EventActions=EventActions, EnterpriseWebSearchTool=EnterpriseWebSearchTool,
        FunctionTool=t.FunctionTool, GoogleMapsGroundingTool=GoogleMapsGroundingTool,
        GoogleSearchTool=GoogleSearchTool, InMemoryMemoryService=InMemoryMemoryService,
        InMemoryRunner=InMemoryRunner, InMemorySessionService=InMemorySessionService,
        InvocationContext=InvocationContext, LlmAgent=LlmAgent,
        LlmCallsLimitExceededError=LlmCallsLimitExceededError, LlmCapabilities=LlmCapabilities,
        LlmRequest=LlmRequest, LlmResponse=LlmResponse,
        LongRunningFunctionTool=t.LongRunningFunctionTool, LoopAgent=LoopAgent,
        MemoryEntry=MemoryEntry, ParallelAgent=ParallelAgent,
        ResumabilityConfig=ResumabilityConfig, RunConfig=RunConfig,
        SequentialAgent=SequentialAgent, StreamingMode=StreamingMode,
        ToolContext=t.ToolContext, UrlContextTool=UrlContextTool,
        VertexAiSearchTool=VertexAiSearchTool,
        enterprise_web_search=t.enterprise_web_search, get_user_choice=t.get_user_choice,
        google_maps_grounding=t.google_maps_grounding, google_search=t.google_search,
        load_artifacts=t.load_artifacts, load_memory=t.load_memory,
        preload_memory=t.preload_memory, url_context=t.url_context,
    )


def ours() -> SimpleNamespace:
    """orchestrator's classes, imported from google-adk's module paths."""
    from orchestrator import tools as t
    from orchestrator.agents import (
        InvocationContext,
        LlmAgent,
        LoopAgent,
        ParallelAgent,
        RunConfig,
        SequentialAgent,
    )
    from orchestrator.agents.invocation_context import LlmCallsLimitExceededError
    from orchestrator.agents.run_config import StreamingMode
    from orchestrator.apps import App, ResumabilityConfig
    from orchestrator.events import Event, EventActions
    from orchestrator.memory import InMemoryMemoryService
    from orchestrator.memory.memory_entry import MemoryEntry
    from orchestrator.models import BaseLlm, LlmRequest, LlmResponse
    from orchestrator.plugins import BasePlugin
    from orchestrator.plugins.context_filter_plugin import ContextFilterPlugin
    from orchestrator.plugins.global_instruction_plugin import GlobalInstructionPlugin
    from orchestrator.plugins.save_files_as_artifacts_plugin import SaveFilesAsArtifactsPlugin
    from orchestrator.runners import InMemoryRunner
    from orchestrator.sessions import InMemorySessionService
    from orchestrator.tools.base_toolset import BaseToolset
    from orchestrator.tools.enterprise_search_tool import EnterpriseWebSearchTool
    from orchestrator.tools.google_maps_grounding_tool import GoogleMapsGroundingTool
    from orchestrator.tools.google_search_tool import GoogleSearchTool
    from orchestrator.tools.url_context_tool import UrlContextTool
    from orchestrator.tools.vertex_ai_search_tool import VertexAiSearchTool

    return scenarios.namespace(
        name="orchestrator",
        AgentTool=t.AgentTool, BasePlugin=BasePlugin, ContextFilterPlugin=ContextFilterPlugin,
        GlobalInstructionPlugin=GlobalInstructionPlugin,
        SaveFilesAsArtifactsPlugin=SaveFilesAsArtifactsPlugin,
        App=App, BaseLlm=BaseLlm, BaseToolset=BaseToolset, Event=Event,
        EventActions=EventActions, EnterpriseWebSearchTool=EnterpriseWebSearchTool,
        FunctionTool=t.FunctionTool, GoogleMapsGroundingTool=GoogleMapsGroundingTool,
        GoogleSearchTool=GoogleSearchTool, InMemoryMemoryService=InMemoryMemoryService,
        InMemoryRunner=InMemoryRunner, InMemorySessionService=InMemorySessionService,
        InvocationContext=InvocationContext, LlmAgent=LlmAgent,
        LlmCallsLimitExceededError=LlmCallsLimitExceededError, LlmCapabilities=None,
        LlmRequest=LlmRequest, LlmResponse=LlmResponse,
        LongRunningFunctionTool=t.LongRunningFunctionTool, LoopAgent=LoopAgent,
        MemoryEntry=MemoryEntry, ParallelAgent=ParallelAgent,
        ResumabilityConfig=ResumabilityConfig, RunConfig=RunConfig,
        SequentialAgent=SequentialAgent, StreamingMode=StreamingMode,
        ToolContext=t.ToolContext, UrlContextTool=UrlContextTool,
        VertexAiSearchTool=VertexAiSearchTool,
        enterprise_web_search=t.enterprise_web_search, get_user_choice=t.get_user_choice,
        google_maps_grounding=t.google_maps_grounding, google_search=t.google_search,
        load_artifacts=t.load_artifacts, load_memory=t.load_memory,
        preload_memory=t.preload_memory, url_context=t.url_context,
    )


def frameworks() -> list[SimpleNamespace]:
    """[google-adk, orchestrator]: run a scenario on each and compare."""
    return [google_adk(), ours()]


class RequestHarness(scenarios.Harness):
    """The golden harness, also recording each request's built-in tools and system text."""

    def record_request(self, model: str, llm_request: Any, stream: bool) -> None:
        """Record what the golden harness does, plus ``builtin_tools`` and ``instruction``."""
        super().record_request(model, llm_request, stream)
        builtins = [
            scenarios.jsonable(tool) for tool in llm_request.config.tools or []
            if not getattr(tool, "function_declarations", None)
        ]
        self.requests[-1]["builtin_tools"] = builtins
        self.requests[-1]["instruction"] = llm_request.config.system_instruction
        self.requests[-1]["model_name"] = llm_request.model


def rewrite(node: Any, change: Callable[[Any], Any]) -> Any:
    """``node`` with ``change`` applied to every value, innermost first."""
    if isinstance(node, dict):
        node = {key: rewrite(value, change) for key, value in node.items()}
    elif isinstance(node, list):
        node = [rewrite(value, change) for value in node]
    return change(node)


def _preamble(value: Any) -> Any:
    if isinstance(value, str) and (value == CONTEXT_PREAMBLE or value.startswith(ADK_PREAMBLE_START)):
        return PREAMBLE_PLACEHOLDER
    return value


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    """A harness record without what each framework words its own way: the system
    instructions and the preamble introducing another agent's turn."""
    record = rewrite(record, _preamble)
    for request in record.get("requests", []):
        request.pop("instruction", None)
    return record
