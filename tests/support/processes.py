"""Real orchestrator, worker and Flower processes for integration tests (start, use, stop).

A process counts as started when its own output says so (Celery's "ready." line); there are
no fixed sleeps. Output is kept so a failing test can show it.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import forked

ROOT = Path(__file__).resolve().parents[2]
FAST_WORKER_FLAGS = ["--without-mingle", "--without-gossip", "--without-heartbeat"]


class _Child:
    """A process a test or benchmark started: its pid, and how it is stopped."""

    proc: subprocess.Popen[Any]

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def stop(self, timeout: float = 20.0) -> None:
        """Warm shutdown (SIGTERM), then SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def kill(self) -> None:
        """SIGKILL: the process dies without cleaning anything up."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


class ManagedProcess(_Child):
    """A subprocess whose combined output is collected line by line.

    An ``adk-celery`` command is forked from a server that has its imports done
    (``tests/support/forked.py``); anything else is started afresh.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        self.name = name
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc = forked.popen(argv, env, str(ROOT))  # type: ignore[assignment]
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            self._queue.put(line)
        self._queue.put(None)

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """Block until an output line satisfies ``predicate``; fail with the output if not."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.name}: expected line not seen.\n{self.output()}")
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{self.name} exited ({self.proc.poll()}).\n{self.output()}")
            if predicate(line):
                return line

    def output(self) -> str:
        """The last lines of output."""
        return "\n".join(self.lines[-80:])

    def all_lines(self, timeout: float = 10.0) -> list[str]:
        """Every line of output, once the process has exited and all of it is read."""
        self.proc.wait(timeout)
        self._reader.join(timeout)
        return list(self.lines)


def stack_env(redis_url: str, apps: str, **settings: str) -> dict[str, str]:
    """Environment for adk-celery processes: Redis, apps, and any ``ADK_CELERY_*`` overrides."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADK_CELERY_")}
    env.update({
        "ADK_CELERY_REDIS_URL": redis_url,
        "ADK_CELERY_APPS": apps,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
    })
    env.update({f"ADK_CELERY_{k.upper()}": v for k, v in settings.items()})
    return env


class FileLoggedProcess(_Child):
    """A process whose output goes to a file, not to a pipe that this process reads.

    For benchmarks: read from a pipe by a thread of the measuring process (as
    :class:`ManagedProcess` does), each line a process logs (Celery's two per task, an
    access line per request) wakes that thread just as the work it logs completes, and the
    thread competes with the measuring process's own timing. The process still writes every
    line.
    """

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.log = name, log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out,
                                         stderr=subprocess.STDOUT)

    def output(self) -> str:
        """The last lines of its output."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-80:])

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float = 30.0) -> str:
        """Wait until the file has a line matching ``predicate`` (polled: start-up only)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log.read_text(errors="replace").splitlines():
                if predicate(line):
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: no expected line within {timeout} s\n{self.output()}")


def celery_argv(kind: str, name: str, *extra: str, concurrency: int = 4) -> list[str]:
    """The command line of ``adk-celery orchestrator|worker`` as the tests start it."""
    return [
        sys.executable, "-m", "workers.cli", kind,
        "--hostname", f"{name}@%h", "--concurrency", str(concurrency), "--loglevel", "INFO",
        *FAST_WORKER_FLAGS, *extra,
    ]


def start_celery_process(
    kind: str, name: str, env: dict[str, str], *extra: str, concurrency: int = 4
) -> ManagedProcess:
    """Start ``adk-celery orchestrator|worker`` and wait until Celery reports it ready."""
    process = ManagedProcess(name, celery_argv(kind, name, *extra, concurrency=concurrency), env)
    process.wait_for_line(lambda line: "ready." in line)
    return process


def start_file_logged(name: str, argv: list[str], env: dict[str, str], log: Path,
                      ready: str = "ready.") -> FileLoggedProcess:
    """Start ``argv`` logging to ``log`` and wait for a line containing ``ready``."""
    process = FileLoggedProcess(name, argv, env, log)
    process.wait_for_line(lambda line: ready in line)
    return process
