"""``adk-celery``'s help and refusals import only what they need; the lazy packages still work.

Each check runs in a fresh interpreter (this one has imported everything already) and looks
at ``sys.modules``: nothing here times anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEAVY = ("celery", "kombu", "redis", "google.genai", "fastapi", "uvicorn", "httpx",
         "prometheus_client", "orchestrator.agents", "orchestrator.runners", "workers.client",
         "workers.celery_app")
"""Modules (and their submodules) that ``--help`` and the usage errors must not import."""

COMMANDS = ("orchestrator", "worker", "flower", "api", "enqueue", "follow", "status", "answer",
            "cancel", "sessions", "invocations")

REFUSALS = [
    ["--help"],
    *([command, "--help"] for command in COMMANDS),
    [],  # no command
    ["bogus"],  # unknown command
    ["status", "--bogus", "chat", "e-1"],  # unknown option
    ["status", "chat"],  # missing argument
    ["follow", "chat", "e-1", "--timeout", "-1"],  # malformed value
    ["enqueue", "chat", "u", "hi", "--wait", "--follow"],
    ["status", "chat", "e-1"],  # ADK_CELERY_REDIS_URL is not set
    ["sessions", "chat"],  # the same
]

SCRIPT = """
import contextlib, io, json, sys
from workers.cli import main

heavy = json.loads(sys.argv[2])
steps = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit as done:
            code = done.code
        else:
            code = None
    steps.append([code, sorted(name for name in sys.modules
                               if any(name == h or name.startswith(h + ".") for h in heavy))])
print(json.dumps(steps))
"""
"""Runs each command line of argv[1] in turn; prints, per command, its exit code and the
modules of argv[2] imported so far."""


def fresh_python(*args: str, cwd: Path, **settings: str) -> subprocess.CompletedProcess[str]:
    """``python`` with only the project on its path and no ADK_CELERY_* setting but ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADK_CELERY_")}
    env.update(PYTHONPATH=str(ROOT), **settings)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_help_and_usage_errors_import_no_heavy_module(tmp_path):
    done = fresh_python("-c", SCRIPT, json.dumps(REFUSALS), json.dumps(HEAVY), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)
    # Each ran to its end: the help (0) or the refusal (2), not a crash on the way.
    assert [code for code, _ in steps] == (
        [0] * (1 + len(COMMANDS)) + [2] * (len(REFUSALS) - 1 - len(COMMANDS)))
    assert steps[-1][1] == []


def test_the_lazy_packages_give_what_they_export(tmp_path):
    script = """
import sys
import orchestrator, workers
assert not any(m.startswith(("celery", "google.genai")) for m in sys.modules), "eager import"
from workers import app
assert "adk_celery.invoke" in app.tasks and "adk_celery.run_tool" in app.tasks
assert "workers.lifecycle" in sys.modules and "workers.metrics" in sys.modules
for name in orchestrator.__all__:
    assert getattr(orchestrator, name) is not None, name
from orchestrator import Agent, RedisSessionService, exit_loop
"""
    done = fresh_python("-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_core_module_imported_first_finds_what_the_package_used_to_load(tmp_path):
    # ``import orchestrator`` no longer loads the whole core: a module imported first must
    # still import (no cycle it used to hide) and a model name must still find Gemini.
    script = """
from orchestrator.tools.function_tool import FunctionTool
from orchestrator.agents import LlmAgent
llm = LlmAgent(name="a", model="gemini-2.5-flash").canonical_model  # Gemini not imported yet
assert type(llm).__module__ == "orchestrator.models.gemini", type(llm)
"""
    done = fresh_python("-c", script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


CORE_RUN = ("celery", "kombu", "workers.celery_app", "workers.transport", "workers.watchdog",
            "orchestrator.runners", "orchestrator.agents", "orchestrator.plugins",
            "orchestrator.apps", "orchestrator.distributed.service", "orchestrator.flows")
"""What runs invocations (Celery, the ADK core's runner, agents, flows): the one-shot commands
import none of it (``answer`` reads the names of flows' calls: ``orchestrator.flows.contents``)."""

ONE_SHOT = [
    ["status", "chat", "e-1"],  # unknown: exit 2
    ["sessions", "chat"],
    ["invocations", "--app", "chat"],
    ["follow", "chat", "e-1"],  # unknown: exit 2
    ["cancel", "chat", "e-1"],  # unknown: exit 2, nothing sent
    ["answer", "chat", "e-1", "call-1", "{}"],  # unknown: exit 2
]

def test_one_shot_commands_import_no_celery_and_no_runner(tmp_path, redis_url):
    done = fresh_python("-c", SCRIPT, json.dumps(ONE_SHOT), json.dumps(CORE_RUN), cwd=tmp_path,
                        ADK_CELERY_REDIS_URL=redis_url)
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)
    # Each talked to Redis and ended as it should (0 listed, 2 unknown invocation).
    assert [code for code, _ in steps] == [2, None, None, 2, 2, 2]
    assert [heavy for _, heavy in steps[:-1]] == [[]] * (len(ONE_SHOT) - 1)
    # ``answer``: at most the names of flows' calls (orchestrator.flows.contents and its
    # helpers), read to tell who may answer a call (none for an unknown invocation).
    assert all(name.startswith("orchestrator.flows") for name in steps[-1][1])
