"""Start ``adk-celery`` processes for tests without paying their imports each time.

A process started with ``python -m workers.cli ...`` spends 2–2.5 s on this machine
importing google-genai, Celery, redis-py and the project before it serves anything, and the
suite starts hundreds of them. A fork server (``tests/support/fork_server.py``) does the
imports that read nothing from the environment once; each ``adk-celery`` process a test
asks for is forked from it and then runs ``workers.cli`` as ``python -m`` would, with the
test's arguments, environment and working directory: its own pid, output and exit status,
killable with SIGKILL like any other process.

``ADK_CELERY_TEST_EXEC=1`` turns this off: each process then starts a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.fork_server import STATUS

ROOT = Path(__file__).resolve().parents[2]
_CLI = ("-m", "workers.cli")
_lock = threading.Lock()
_server: _Server | None = None


def enabled() -> bool:
    """Whether ``adk-celery`` processes are forked (the default) rather than started afresh."""
    return os.environ.get("ADK_CELERY_TEST_EXEC", "").lower() not in ("1", "true", "yes")


def _server_env() -> dict[str, str]:
    """The environment the fork server starts with."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _startup(env: dict[str, str]) -> dict[str, str]:
    """What of ``env`` shapes an interpreter's start (its PYTHON* variables), but for
    PYTHONUNBUFFERED (a forked child buffers as it says) and a PYTHONPATH of the project
    alone (the working directory a child runs in puts it first on the path too)."""
    shaping = {k: v for k, v in env.items()
               if k.startswith("PYTHON") and k != "PYTHONUNBUFFERED"}
    if shaping.get("PYTHONPATH", "") in ("", str(ROOT)):
        shaping.pop("PYTHONPATH", None)
    return shaping


def forkable(argv: list[str], env: dict[str, str]) -> bool:
    """``argv`` runs the ``adk-celery`` command with this interpreter, and ``env`` would
    start it as the fork server started (a PYTHONPATH of its own, e.g. one with a
    ``sitecustomize``, needs an interpreter of its own)."""
    return (len(argv) >= 3 and argv[0] == sys.executable and tuple(argv[1:3]) == _CLI
            and _startup(env) == _startup(_server_env()))


class _Server:
    """The fork server process, started at the first request and stopped at exit."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="adk-celery-forks-")
        self.path = str(Path(self._dir.name) / "server.sock")
        env = _server_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.fork_server", self.path], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the fork server did not start ({self.proc.wait(10)})")

    def close(self) -> None:
        """Close its standard input (it exits) and remove its socket."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._dir.cleanup()


def _the_server() -> _Server:
    global _server
    with _lock:
        if _server is None or _server.proc.poll() is not None:
            _server = _Server()
            atexit.register(_server.close)
        return _server


class ForkedProcess:
    """The part of ``subprocess.Popen`` the tests use, for a process of the fork server.

    ``stdin``, ``stdout`` and ``stderr`` are the descriptors the process gets (duplicated;
    the caller keeps and closes its own).
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, *,
                 stdin: int, stdout: int, stderr: int) -> None:
        self.args = argv
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._conn.connect(_the_server().path)
        request = {"args": argv[3:], "env": env, "cwd": cwd}
        socket.send_fds(self._conn, [json.dumps(request).encode()], [stdin, stdout, stderr])
        (self.pid,) = STATUS.unpack(self._conn.recv(STATUS.size))
        self._signalled = 0
        threading.Thread(target=self._await_end, daemon=True).start()

    def _await_end(self) -> None:
        raw = self._conn.recv(STATUS.size)
        self._conn.close()
        if raw:
            self.returncode = STATUS.unpack(raw)[0]
        else:
            # The server is gone (nobody can tell this child's status any more): watch the
            # process itself; it ended as the last signal sent to it says, if any.
            while _running(self.pid):
                time.sleep(0.05)
            self.returncode = -self._signalled
        self._ended.set()

    def poll(self) -> int | None:
        """The exit status if the process has ended, else None."""
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the end; ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the process (nothing once it has ended)."""
        if self.returncode is None:
            try:
                os.kill(self.pid, signum)
                self._signalled = signum
            except ProcessLookupError:
                pass  # ended; the status is on its way

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def popen(argv: list[str], env: dict[str, str], cwd: str) -> Any:
    """``argv`` started (forked if it runs ``adk-celery``); its output, stdout and stderr
    together, readable line by line from ``.stdout``; its stdin empty."""
    if not (enabled() and forkable(argv, env)):
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
    ours, theirs = socket.socketpair()
    with open(os.devnull) as nothing:
        process = ForkedProcess(argv, env, cwd, stdin=nothing.fileno(), stdout=theirs.fileno(),
                                stderr=theirs.fileno())
    theirs.close()  # the child has its own copy: the output ends when the child exits
    process.stdout = ours.makefile("r", encoding="utf-8", errors="replace")  # type: ignore[attr-defined]
    ours.close()  # the file object keeps the socket open
    return process


def run(argv: list[str], *, env: dict[str, str] | None = None, cwd: str | Path = ROOT,
        timeout: float | None = None, input: str | None = None,
        stdout: int | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, ...)``, forked when ``argv``
    runs ``adk-celery``. stdin is ``input`` (empty if None); ``stdout``, a descriptor the
    output goes to instead of being captured."""
    env = dict(os.environ) if env is None else env
    if not (enabled() and forkable(argv, env)):
        return subprocess.run(argv, cwd=cwd, env=env, text=True, timeout=timeout,
                              input=input, stdin=subprocess.DEVNULL if input is None else None,
                              stdout=stdout if stdout is not None else subprocess.PIPE,
                              stderr=subprocess.PIPE)
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe() if stdout is None else (None, stdout)
    err_r, err_w = os.pipe()
    try:
        process = ForkedProcess(argv, env, str(cwd), stdin=in_r, stdout=out_w, stderr=err_w)
    finally:
        for fd in (in_r, err_w, *(() if stdout is not None else (out_w,))):
            os.close(fd)
    read: dict[str, str] = {}

    def drain(name: str, fd: int | None) -> None:
        if fd is not None:
            with open(fd, encoding="utf-8", errors="replace") as stream:
                read[name] = stream.read()

    def feed() -> None:
        # From a thread, as subprocess.run does: a command that does not read all of it
        # neither blocks the caller past its timeout nor fails it.
        with contextlib.suppress(BrokenPipeError), open(in_w, "w") as stream:
            if input:
                stream.write(input)

    helpers = [threading.Thread(target=drain, args=pair, daemon=True)
               for pair in (("stdout", out_r), ("stderr", err_r))]
    helpers.append(threading.Thread(target=feed, daemon=True))
    for helper in helpers:
        helper.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        code = process.wait(timeout)
        for helper in helpers:
            helper.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if any(helper.is_alive() for helper in helpers):
            raise subprocess.TimeoutExpired(argv, timeout or 0.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
        raise
    return subprocess.CompletedProcess(argv, code, read.get("stdout"), read.get("stderr", ""))
