"""``from orchestrator.X.Y import Z`` works wherever ``from google.adk.X.Y import Z`` does.

Walks google-adk 2.13's source (skipped without google-adk): every public name a google-adk
module defines (or aliases) that orchestrator also defines must import from the same module
path under ``orchestrator``; and every name of a google-adk package's ``__all__`` (the
packages we mirror) must import from ours or be listed in ``DELIBERATELY_ABSENT`` with the
reason.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

import orchestrator

adk = pytest.importorskip("google.adk", reason="google-adk is not installed")

ADK_ROOT = Path(adk.__file__).parent
OUR_ROOT = Path(orchestrator.__file__).parent
MIRRORED = (
    "agents", "apps", "artifacts", "errors", "events", "memory", "models", "plugins",
    "runners", "sessions", "tools",
)
"""google-adk's top-level packages (and modules) whose paths orchestrator mirrors."""

DELIBERATELY_ABSENT: dict[str, str] = {
    "google.adk.Workflow": "ADK 2.x graph workflows are not implemented",
    "google.adk.agents.ManagedAgent": "agents managed by Vertex AI Agent Engine",
    "google.adk.agents.McpInstructionProvider": "MCP is not a dependency (see MCP toolsets)",
    "google.adk.agents.LiveRequest": "live (bidirectional audio/video) streaming is not supported",
    "google.adk.agents.LiveRequestQueue": "live (bidirectional audio/video) streaming is not supported",
    "google.adk.agents.BaseAgentConfig": "agents from YAML config files are not supported",
    "google.adk.agents.LlmAgentConfig": "agents from YAML config files are not supported",
    "google.adk.agents.LoopAgentConfig": "agents from YAML config files are not supported",
    "google.adk.agents.ParallelAgentConfig": "agents from YAML config files are not supported",
    "google.adk.agents.SequentialAgentConfig": "agents from YAML config files are not supported",
    "google.adk.artifacts.FileArtifactService": "artifacts live in memory or in Redis here",
    "google.adk.artifacts.GcsArtifactService": "artifacts live in memory or in Redis here",
    "google.adk.events.RequestInput": "ADK 2.x workflow input requests are not implemented",
    "google.adk.memory.SqliteMemoryService": "memory is the in-memory keyword service only",
    "google.adk.memory.VertexAiMemoryBankService": "a Google Cloud client (Vertex AI)",
    "google.adk.memory.VertexAiRagMemoryService": "a Google Cloud client (Vertex AI)",
    "google.adk.models.AnthropicGenerateContentConfig": "other providers: subclass BaseLlm",
    "google.adk.models.ApigeeLlm": "other providers: subclass BaseLlm",
    "google.adk.models.Claude": "other providers: subclass BaseLlm",
    "google.adk.models.FallbackModel": "model fallback chains are not implemented",
    "google.adk.models.Gemma": "other providers: subclass BaseLlm",
    "google.adk.models.Gemma3Ollama": "other providers: subclass BaseLlm",
    "google.adk.models.LiteLlm": "other providers: subclass BaseLlm",
    "google.adk.models.ServiceTier": "the Gemini interactions API is not used",
    "google.adk.sessions.DatabaseSessionService": "sessions live in memory or in Redis here",
    "google.adk.sessions.VertexAiSessionService": "sessions live in memory or in Redis here",
    "google.adk.sessions.StateSchemaError": "ADK 2.x state schemas are not implemented",
    "google.adk.tools.AuthToolArguments": "the tool authentication flow is not implemented",
    "google.adk.tools.APIHubToolset": "a Google Cloud client (API Hub)",
    "google.adk.tools.ApiRegistry": "a Google Cloud client (API registry)",
    "google.adk.tools.DiscoveryEngineSearchTool": "a Google Cloud client (Discovery Engine)",
    "google.adk.tools.SearchResultMode": "belongs to DiscoveryEngineSearchTool",
    "google.adk.tools.ExampleTool": "few-shot example providers are not implemented",
    "google.adk.tools.ModelConsultContextConfig": "ADK 2.x model consultation is not implemented",
    "google.adk.tools.ModelConsultTool": "ADK 2.x model consultation is not implemented",
    "google.adk.tools.request_input": "ADK 2.x workflow input requests are not implemented",
    "google.adk.tools.RemoteMcpServer": "MCP is not a dependency (the mcp package)",
    "google.adk.tools.MCPToolset": "MCP is not a dependency (the mcp package)",
    "google.adk.tools.McpToolset": "MCP is not a dependency (the mcp package)",
    "google.adk.tools.VertexAiLoadProfilesTool": "a Google Cloud client (Vertex AI)",
    "google.adk.plugins.DebugLoggingPlugin": "not shipped: LoggingPlugin covers the logging",
    "google.adk.plugins.ForceEscalationPlugin": "ADK 2.x workflow escalation is not implemented",
    "google.adk.plugins.ModelConsultObservabilityPlugin":
        "ADK 2.x model consultation is not implemented",
    "google.adk.plugins.ReflectAndRetryModelPlugin": "not shipped (model retries: not yet)",
    "google.adk.plugins.ToolCallIntegrityError": "belongs to ToolCallIntegrityPlugin",
    "google.adk.plugins.ToolCallIntegrityPlugin": "not shipped (the flow pairs calls itself)",
    "google.adk.plugins.ToolResultClassification":
        "LoggingPlugin has no tool_result_classifier option",
    "google.adk.plugins.ToolResultClassifier": "LoggingPlugin has no tool_result_classifier option",
}
"""google-adk package exports orchestrator does not offer, and why."""


def _module_name(root: str, path: Path, base: Path) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((root, *parts))


def _is_private(path: Path, base: Path) -> bool:
    return any(
        part.startswith("_") and part != "__init__"
        for part in path.relative_to(base).with_suffix("").parts
    )


def _is_typevar(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in {"TypeVar", "ParamSpec"})


def defined_names(path: Path) -> set[str]:
    """Public names a module defines: classes, functions, aliases, ``import X as X``."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign) and not _is_typevar(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is not None and not _is_typevar(node.value):
                names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.name for a in node.names if a.asname == a.name)
    return {n for n in names if not n.startswith("_") and n != "logger"}


def claimed_names() -> set[str]:
    """What orchestrator offers: every public name its public modules define or export."""
    claimed: set[str] = set()
    for path in OUR_ROOT.rglob("*.py"):
        if _is_private(path, OUR_ROOT):
            continue
        claimed |= defined_names(path)
        module = importlib.import_module(_module_name("orchestrator", path, OUR_ROOT))
        claimed |= set(getattr(module, "__all__", ()))
    return claimed


def _adk_modules() -> list[Path]:
    return [
        path for path in sorted(ADK_ROOT.rglob("*.py"))
        if path.relative_to(ADK_ROOT).parts[0].removesuffix(".py") in MIRRORED
        and not _is_private(path, ADK_ROOT)
    ]


def _importable(module: str, name: str) -> bool:
    try:
        return hasattr(importlib.import_module(module), name)
    except ImportError:
        return False


def test_names_we_claim_import_from_google_adk_module_paths():
    claimed = claimed_names()
    missing = []
    for path in _adk_modules():
        adk_module = _module_name("google.adk", path, ADK_ROOT)
        ours = adk_module.replace("google.adk", "orchestrator", 1)
        for name in sorted(defined_names(path) & claimed):
            if f"{adk_module}.{name}" not in DELIBERATELY_ABSENT and not _importable(ours, name):
                missing.append(f"from {ours} import {name}  (google-adk: {adk_module})")
    assert missing == []


def _adk_packages() -> list[str]:
    return ["google.adk"] + [f"google.adk.{name}" for name in MIRRORED
                             if (ADK_ROOT / name / "__init__.py").exists()]


@pytest.mark.parametrize("package", _adk_packages())
def test_every_export_of_a_google_adk_package_is_ours_or_listed_absent(package):
    exported = getattr(importlib.import_module(package), "__all__", [])
    ours = package.replace("google.adk", "orchestrator", 1)
    if package == "google.adk.plugins" and importlib.util.find_spec(ours) is None:
        pytest.skip("orchestrator.plugins is built separately (issue 15, part 1)")
    unaccounted = [
        name for name in exported
        if f"{package}.{name}" not in DELIBERATELY_ABSENT and not _importable(ours, name)
    ]
    assert unaccounted == []


def test_names_listed_absent_are_really_absent_and_really_exported():
    stale = []
    for dotted in DELIBERATELY_ABSENT:
        package, name = dotted.rsplit(".", 1)
        if name not in getattr(importlib.import_module(package), "__all__", []):
            stale.append(f"{dotted}: google-adk does not export it")
        elif _importable(package.replace("google.adk", "orchestrator", 1), name):
            stale.append(f"{dotted}: orchestrator has it now")
    assert stale == []


def test_common_adk_imports_work_under_orchestrator():
    # The imports published samples and tests use most, spelled out.
    from orchestrator.agents.callback_context import CallbackContext
    from orchestrator.agents.invocation_context import InvocationContext
    from orchestrator.agents.readonly_context import ReadonlyContext
    from orchestrator.models import LlmRequest, LlmResponse
    from orchestrator.models.google_llm import Gemini
    from orchestrator.tools import FunctionTool, ToolContext, google_search, load_artifacts
    from orchestrator.tools.tool_context import ToolContext as ToolContextAgain

    assert ToolContext is ToolContextAgain is CallbackContext
    assert issubclass(ToolContext, ReadonlyContext)
    assert {c.__name__ for c in (InvocationContext, LlmRequest, LlmResponse, Gemini, FunctionTool)}
    assert google_search.name == "google_search" and load_artifacts.name == "load_artifacts"
