"""What ``adk-celery`` says about its defaults: ``--help`` and the start-up banner give the
figures of the settings the process runs with, not numbers written into the text."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor

from config import Settings
from tests.support import forked
from tests.support.processes import stack_env, start_celery_process

DEFAULTS = Settings.model_construct()
"""The settings with no ADK_CELERY_* variable set."""


def help_text(env: dict[str, str], command: str) -> str:
    done = forked.run([sys.executable, "-m", "workers.cli", command, "--help"], env=env,
                      timeout=60)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())  # argparse wraps lines


def test_help_gives_the_defaults_of_the_settings_in_force(redis_url):
    plain = stack_env(redis_url, "")
    changed = stack_env(redis_url, "", worker_concurrency="3", orchestrator_concurrency="17",
                        tools_queue="gpu", agent_queues='{"planner": "big"}', api_port="9123")
    asked = [(plain, "worker"), (plain, "orchestrator"), (changed, "worker"),
             (changed, "orchestrator"), (changed, "api")]
    with ThreadPoolExecutor(len(asked)) as pool:  # one process each, side by side
        plain_worker, plain_orchestrator, worker, orchestrator, api = pool.map(
            lambda pair: help_text(*pair), asked)
    assert f"ADK_CELERY_WORKER_CONCURRENCY: {DEFAULTS.worker_concurrency};" in plain_worker
    assert f"sessions at once ({DEFAULTS.orchestrator_concurrency})" in plain_orchestrator
    assert (f"ADK_CELERY_AGENT_QUEUES: {DEFAULTS.tools_queue},{DEFAULTS.agents_queue})"
            in plain_worker)
    assert "ADK_CELERY_WORKER_CONCURRENCY: 3;" in worker
    assert "ADK_CELERY_AGENT_QUEUES: gpu,agents,big)" in worker
    assert "sessions at once (17)" in orchestrator and "ADK_CELERY_WORKER_CONCURRENCY: 3;" in orchestrator
    assert "ADK_CELERY_API_PORT: 9123" in api


def banner_concurrency(lines: list[str]) -> str:
    [line] = [line for line in lines if ".> concurrency: " in line]
    return line.split(".> concurrency: ", 1)[1]


def test_the_banner_says_what_each_process_runs_at_once(redis_url):
    env = stack_env(redis_url, "", orchestrator_concurrency="17")
    orchestrator = start_celery_process("orchestrator", "banner-orch", env, concurrency=4)
    orchestrator.stop()
    # Celery's own line would say "4 (solo)": its pool, not the Runner loops it drains.
    assert banner_concurrency(orchestrator.lines) == (
        "17 sessions (ADK_CELERY_ORCHESTRATOR_CONCURRENCY); orchestrator tasks: solo pool, "
        "one at a time")
    worker = start_celery_process("worker", "banner-work", env, concurrency=3)
    worker.stop()
    assert banner_concurrency(worker.lines) == "3 (thread_pool)"
