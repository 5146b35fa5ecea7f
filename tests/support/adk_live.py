"""google-adk 2.13 and orchestrator side by side in one process, for differential tests.

``frameworks()`` gives one namespace per framework with the same attribute names; a test
writes its scenario once against a namespace ``fw`` and compares what both produce. The
google-adk side is skipped (with the reason) when google-adk 2.13 is not importable.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.flows.quoted_turns import CONTEXT_PREAMBLE
from tests.golden import scenarios
from tests.test_adk_golden import ADK_PREAMBLE_START, PREAMBLE_PLACEHOLDER

ADK_VERSION = "2.13.0"


_NAMES: dict[str, list[str]] = {
    # google-adk's module paths; orchestrator mirrors them (tests/test_adk_module_paths.py).
    "agents": ["InvocationContext", "LlmAgent", "LoopAgent", "ParallelAgent", "RunConfig",
               "SequentialAgent"],
    "agents.invocation_context": ["LlmCallsLimitExceededError"],
    "agents.run_config": ["StreamingMode"],
    "apps": ["App", "ResumabilityConfig"],
    "events": ["Event", "EventActions"],
    "memory": ["InMemoryMemoryService"],
    "memory.memory_entry": ["MemoryEntry"],
    "models": ["BaseLlm", "LlmRequest", "LlmResponse"],
    "plugins": ["BasePlugin"],
    "plugins.context_filter_plugin": ["ContextFilterPlugin"],
    "plugins.global_instruction_plugin": ["GlobalInstructionPlugin"],
    "plugins.save_files_as_artifacts_plugin": ["SaveFilesAsArtifactsPlugin"],
    "runners": ["InMemoryRunner"],
    "sessions": ["InMemorySessionService"],
    "tools": ["AgentTool", "FunctionTool", "LongRunningFunctionTool", "ToolContext",
              "enterprise_web_search", "get_user_choice", "google_maps_grounding",
              "google_search", "load_artifacts", "load_memory", "preload_memory",
              "url_context"],
    "tools.base_toolset": ["BaseToolset"],
    "tools.enterprise_search_tool": ["EnterpriseWebSearchTool"],
    "tools.google_maps_grounding_tool": ["GoogleMapsGroundingTool"],
    "tools.google_search_tool": ["GoogleSearchTool"],
    "tools.url_context_tool": ["UrlContextTool"],
    "tools.vertex_ai_search_tool": ["VertexAiSearchTool"],
}
"""What the scenarios use, by module, imported from the same paths on both sides."""


def _namespace(name: str, root: str, **extra: Any) -> SimpleNamespace:
    """The scenario namespace of the framework whose package is ``root``."""
    names: dict[str, Any] = {}
    for module, attributes in _NAMES.items():
        imported = importlib.import_module(f"{root}.{module}")
        names.update({attribute: getattr(imported, attribute) for attribute in attributes})
    return scenarios.namespace(name=name, **names, **extra)


def google_adk() -> SimpleNamespace:
    """google-adk's classes under the names the tests use (skips without google-adk 2.13)."""
    adk = pytest.importorskip("google.adk", reason="google-adk is not installed")
    if adk.__version__ != ADK_VERSION:
        pytest.skip(f"these tests compare with google-adk {ADK_VERSION}, found {adk.__version__}")
    # SequentialAgent & co. warn they are deprecated in 2.x; tool errors are logged.
    warnings.filterwarnings("ignore", module="google.adk")
    logging.getLogger("google_adk").setLevel(logging.CRITICAL)
    from google.adk.models import LlmCapabilities

    return _namespace("google-adk", "google.adk", LlmCapabilities=LlmCapabilities)


def ours() -> SimpleNamespace:
    """orchestrator's classes, imported from google-adk's module paths."""
    return _namespace("orchestrator", "orchestrator", LlmCapabilities=None)


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
