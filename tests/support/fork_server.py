"""A process that has the heavy imports done and forks ``adk-celery`` commands for tests.

Run as ``python -m tests.support.fork_server SOCKET_PATH`` by ``tests/support/forked.py``.
It imports :data:`PRELOAD` once, then serves requests on a Unix socket: each request names
an argument list, an environment and a working directory, and carries the command's
standard input, output and error (three file descriptors). For each it forks; the child
closes what is the server's, takes the request's environment, directory and standard
streams, and runs ``workers.cli`` as
``python -m workers.cli`` does (``runpy``, as ``__main__``), exiting as that interpreter
would (its threads joined, its exit handlers run, its status its own). The server answers
each request with the child's pid, and later with its exit status (a negative signal
number when a signal ended it), then closes that connection. It exits when its standard
input closes (the test process went away).
"""

from __future__ import annotations

import importlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
from typing import Any

PRELOAD = (
    "google.genai.types",
    "pydantic_settings",
    "redis.asyncio",
    "kombu.transport.redis",
    "celery.worker",
    "celery.apps.worker",
    "fastapi",
    "uvicorn",
    "config",
    "orchestrator",
    "orchestrator.backends.redis",
)
"""Imported once here. None of them reads the environment or a setting at import: the
``workers`` package (whose Celery app is built from the environment at import) is imported
by each child after its environment is in place."""

STATUS = struct.Struct("!q")
"""One answer: a pid, then the exit status (both as signed 64-bit integers)."""


def _serve(path: str) -> tuple[dict[str, Any], list[int]] | None:
    """Serve until standard input closes (None), or return a request in a forked child."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the selector through wake_w
    children: dict[int, socket.socket] = {}
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "request")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(sys.stdin, selectors.EVENT_READ, "parent")
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "parent":
                if not sys.stdin.readline():
                    return None
            elif key.data == "child":
                os.read(wake_r, 4096)
                _reap(children)
            else:
                conn, _ = listener.accept()
                raw, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    for closing in (listener, conn, *children.values()):
                        closing.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    selector.close()
                    return json.loads(raw), fds
                for fd in fds:
                    os.close(fd)
                try:
                    conn.send(STATUS.pack(pid))
                except OSError:  # the test that asked is gone: nobody would stop its child
                    os.kill(pid, signal.SIGKILL)
                    conn.close()
                else:
                    children[pid] = conn
                _reap(children)


def _reap(children: dict[int, socket.socket]) -> None:
    """Send each ended child's exit status to the test that asked for it."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.send(STATUS.pack(os.waitstatus_to_exitcode(status)))
            except OSError:
                pass  # the test process is gone
            conn.close()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: the request's environment, directory, stdin, stdout and stderr (the
    three descriptors it carried), then the command."""
    import runpy

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        os.close(fd)
    # New standard streams over the new descriptors, buffered as a fresh interpreter's are.
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's, for its whole life
    sys.stdout = open(1, "w", buffering=1 if unbuffered else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.argv = ["workers.cli", *request["args"]]
    # ``python -m`` puts the working directory first on the path.
    sys.path.insert(0, request["cwd"])
    runpy.run_module("workers.cli", run_name="__main__", alter_sys=True)


def main() -> None:
    """Preload, serve, and in each forked child run its command (see the module's text)."""
    for name in PRELOAD:
        importlib.import_module(name)
    request = _serve(sys.argv[1])
    if request is None:
        return
    _become(*request)


if __name__ == "__main__":
    main()
