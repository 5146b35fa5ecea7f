"""``celery -A workers worker`` loads the apps as ``adk-celery worker`` does: from the
directory it runs in, at start-up (a bad app stops it with one line, not every job later)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.processes import ROOT, ManagedProcess


def plain_env(redis_url: str, apps: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ADK_CELERY_") and k != "PYTHONPATH"}
    return {**env, "ADK_CELERY_REDIS_URL": redis_url.rsplit("/", 1)[0] + "/12",
            "ADK_CELERY_APPS": apps}


CELERY = [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", "adk.tools",
          "--pool", "solo", "--loglevel", "INFO", "--without-mingle", "--without-gossip", "--without-heartbeat"]


def test_the_examples_load_from_the_repository_root(redis_url):
    worker = ManagedProcess("plain", CELERY, plain_env(redis_url, "examples.trip_planner:app"))
    try:
        loaded = worker.wait_for_line(lambda line: "Apps:" in line or "ready." in line)
        assert loaded.rstrip().endswith("Apps: trip_planner"), worker.output()
        worker.wait_for_line(lambda line: "ready." in line)
    finally:
        worker.stop()


def test_an_app_that_cannot_load_stops_the_worker_at_start_up(redis_url):
    done = subprocess.run(CELERY, cwd=ROOT, env=plain_env(redis_url, "examples.missing:app"),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    assert ("adk-celery: cannot load ADK_CELERY_APPS ('examples.missing:app'): ValueError: "
            "App spec 'examples.missing:app': cannot import module 'examples.missing'") in done.stderr
    assert "ready." not in done.stdout + done.stderr
