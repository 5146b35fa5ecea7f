"""The dependency rule (config <- orchestrator <- tools <- workers) and the public surface."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import orchestrator

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "config": {"orchestrator", "tools", "workers", "celery", "kombu", "redis", "prometheus_client"},
    "orchestrator": {"tools", "workers", "celery", "kombu", "prometheus_client"},
    "tools": {"workers", "celery", "kombu", "prometheus_client"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layers(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_public_names_are_exported_sorted_and_importable():
    assert orchestrator.__all__ == sorted(orchestrator.__all__)
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None
    required = {
        "Runner", "InMemoryRunner", "RunConfig", "StreamingMode", "Event", "EventActions",
        "BaseAgent", "LlmAgent", "Agent", "InvocationContext", "CallbackContext", "ToolContext",
        "BaseTool", "FunctionTool", "LongRunningFunctionTool", "BaseToolset", "BaseLlm",
        "LlmRequest", "LlmResponse", "Gemini", "Session", "InMemorySessionService",
        "InMemoryArtifactService", "InMemoryMemoryService", "SequentialAgent", "ParallelAgent",
        "LoopAgent", "AgentTool", "BaseAgentState", "App", "ResumabilityConfig", "exit_loop",
        "RedisSessionService", "RedisArtifactService",
    }
    assert required <= set(orchestrator.__all__)
