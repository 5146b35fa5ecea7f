"""The dependency rule (config <- orchestrator <- tools <- workers), the back-ends, the public surface."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import orchestrator

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "config": {"orchestrator", "tools", "workers", "celery", "kombu", "redis", "prometheus_client"},
    "orchestrator": {"tools", "workers", "celery", "kombu", "prometheus_client"},
    "tools": {"workers", "celery", "kombu", "prometheus_client", "redis"},
}
BACKENDS = ROOT / "orchestrator" / "backends"
REDIS_BACKEND = "orchestrator.backends.redis"


def imported_modules(nodes) -> set[str]:
    """Absolute module names imported by the import statements among ``nodes``."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imported_modules(ast.walk(ast.parse(path.read_text())))}


def imported_on_load(path: Path) -> set[str]:
    """Modules imported when ``path`` loads: its top-level imports, not the ones inside
    functions (imported on first use) or under ``if TYPE_CHECKING:``."""
    def top_level(body):
        for node in body:
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    yield from top_level(node.body + node.orelse)
            elif isinstance(node, ast.Try):
                yield from top_level(node.body + node.orelse + node.finalbody)
            else:
                yield node
    return imported_modules(top_level(ast.parse(path.read_text()).body))


def is_redis_backend(name: str) -> bool:
    return name == REDIS_BACKEND or name.startswith(REDIS_BACKEND + ".")


def core_modules() -> list[Path]:
    """Every module of orchestrator/ outside the Redis back-end."""
    return [path for path in (ROOT / "orchestrator").rglob("*.py")
            if not path.is_relative_to(BACKENDS / "redis")]


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layers(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_redis_backend_imports_redis_py():
    offenders = {str(path.relative_to(ROOT)) for path in core_modules() if "redis" in imported_roots(path)}
    assert offenders == set()


def test_the_core_imports_the_redis_backend_only_on_first_use():
    # Lazy exports (RedisSessionService from orchestrator, ...) import it inside a function.
    offenders = {
        str(path.relative_to(ROOT)): sorted(filter(is_redis_backend, imported_on_load(path)))
        for path in core_modules()
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_memory_backend_never_imports_the_redis_one():
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imported_modules(ast.walk(ast.parse(path.read_text())))
            if is_redis_backend(name) or name.split(".")[0] == "redis")
        for path in (BACKENDS / "memory").rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_the_core_does_not_import_redis_py():
    # A fresh interpreter: this one has imported redis already (other tests, conftest).
    modules = sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in core_modules())
    script = (
        "import importlib, sys\n"
        "import orchestrator\n"
        "assert 'redis' not in sys.modules, 'import orchestrator imported redis'\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "    assert 'redis' not in sys.modules, f'importing {name} imported redis'\n"
        "from orchestrator import RedisSessionService\n"
        "assert 'redis' in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr


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


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def test_core_modules_import_each_other_without_cycles():
    # Files split by role stay layered: a module imports on load only modules that do not
    # import it back, however indirectly (a late import inside a function is how a module
    # reaches one above it). Packages' __init__ files, which re-export, are left out.
    modules = {module_name(path): path for path in (ROOT / "orchestrator").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        graph[name] = set()
        for imported in imported_on_load(path):
            while imported and imported not in modules:  # a name imported from a module
                imported = imported.rpartition(".")[0]
            if imported and imported != name and modules[imported].name != "__init__.py":
                graph[name].add(imported)
    cycles = []
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            cycles.append(trail[trail.index(name):] + [name])
            return
        if name in done:
            return
        for imported in sorted(graph.get(name, ())):
            visit(imported, trail + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
    assert cycles == []


def test_nothing_below_the_runner_imports_it_on_load():
    # The Runner (orchestrator.runners) sits above the agents, the flows and its own helper
    # modules (runner_*.py): they name it for typing or import it on first use only. The
    # agents and flows do not import the Runner's helpers on load either.
    core = ROOT / "orchestrator"
    below = [*(core / "agents").rglob("*.py"), *(core / "flows").rglob("*.py")]
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in imported_on_load(path)
            if name == "orchestrator.runners" or name.startswith("orchestrator.runner"))
        for path in below
    }
    offenders |= {
        str(path.relative_to(ROOT)): sorted(
            name for name in imported_on_load(path)
            if name == "orchestrator.runners" or name.startswith("orchestrator.runners."))
        for path in core.glob("runner_*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
