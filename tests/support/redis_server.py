"""Start a real, throw-away ``redis-server`` for the tests (never a fake).

Usage::

    with redis_server() as url:          # "redis://127.0.0.1:<port>/0"
        ...

or, when a test needs to stop/kill/restart the server (fault tests), the
:class:`RedisServer` handle directly. The server listens on a free loopback port, keeps
nothing on disk (``--save '' --appendonly no``, working directory in a temp dir) and its log
is kept to explain a failed start. ``RedisServer(aof=True)`` keeps every write on disk
instead, for a restart that must lose nothing, as a deployment's AOF Redis.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 15.0
"""Seconds to wait for a started server to answer."""
STOP_TIMEOUT = 10.0
"""Seconds to wait for a server to exit after SHUTDOWN / SIGTERM."""
_POLL = 0.02


class RedisServerError(RuntimeError):
    """The redis-server could not be started."""


def find_redis_server() -> str | None:
    """Return the path of the ``redis-server`` binary on PATH, or None."""
    return shutil.which("redis-server")


def free_port() -> int:
    """Return a TCP port that is free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _encode(*args: str) -> bytes:
    """Encode a command in RESP (array of bulk strings)."""
    out = [f"*{len(args)}\r\n".encode()]
    for arg in args:
        data = arg.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def send_command(port: int, *args: str, timeout: float = 1.0) -> bytes:
    """Send one command to the server on ``port`` and return the raw first reply line."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(_encode(*args))
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply


def _serving(port: int, pid: int) -> bool:
    """True if the server answering on ``port`` is the process ``pid``.

    A port chosen free can be taken by another test process's server (the suite runs in
    parallel) between the choice and the bind; then ours exits, and that one would answer.
    """
    try:
        return _server_pid(port) == pid
    except (OSError, ValueError):
        return False


def _server_pid(port: int) -> int:
    """The ``process_id`` that ``INFO server`` of the server on ``port`` names."""
    with socket.create_connection((HOST, port), timeout=0.5) as sock:
        sock.sendall(_encode("INFO", "server"))
        reply = b""
        while b"process_id:" not in reply or not reply.split(b"process_id:", 1)[1].count(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ValueError("the server closed the connection")
            reply += chunk
            if reply.startswith(b"-"):  # e.g. LOADING: not ready yet
                raise ValueError(reply.decode(errors="replace"))
    return int(reply.split(b"process_id:", 1)[1].split(b"\r\n", 1)[0])


class RedisServer:
    """A ``redis-server`` subprocess on a loopback port (start/stop/kill, restartable)."""

    def __init__(self, binary: str | None = None, port: int | None = None, *,
                 aof: bool = False) -> None:
        """``aof``: keep every write (``appendonly yes``, ``appendfsync always``) in its data
        directory, so a restart (:meth:`stop`, then :meth:`start`) loses nothing."""
        found = binary or find_redis_server()
        if found is None:
            raise RedisServerError("redis-server was not found on PATH.")
        self.binary = found
        self.port = port
        self.aof = aof
        self.process: subprocess.Popen[bytes] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="adk-redis-")
        self.log_path = Path(self._dir.name) / "redis.log"

    @property
    def url(self) -> str:
        """The ``redis://`` URL of the server (database 0)."""
        if self.port is None:
            raise RedisServerError("The server has not been started.")
        return f"redis://{HOST}:{self.port}/0"

    def start(self, attempts: int = 5) -> str:
        """Start the server (on a new free port unless one was fixed) and return its URL.

        Waits until the server answers PING, polling with a bounded deadline. A port taken
        between choosing and binding it is retried with another port.
        """
        fixed = self.port is not None
        last_error: RedisServerError | None = None
        for _ in range(1 if fixed else attempts):
            if not fixed:
                self.port = free_port()
            try:
                self._launch()
                return self.url
            except RedisServerError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    def _launch(self) -> None:
        assert self.port is not None
        command = [
            self.binary,
            "--port", str(self.port),
            "--bind", HOST,
            "--save", "",
            *(["--appendonly", "yes", "--appendfsync", "always"] if self.aof
              else ["--appendonly", "no"]),
            "--daemonize", "no",
            "--dir", self._dir.name,
            "--logfile", "",
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if _serving(self.port, self.process.pid):
                return
            try:
                # Doubles as the poll interval and as an early-exit check (port in use, ...).
                code = self.process.wait(timeout=_POLL)
            except subprocess.TimeoutExpired:
                continue
            raise RedisServerError(
                f"redis-server exited with code {code} on port {self.port}:\n{self.log()}"
            )
        self.kill()
        raise RedisServerError(
            f"redis-server did not answer PING within {START_TIMEOUT}s on port "
            f"{self.port}:\n{self.log()}"
        )

    def log(self) -> str:
        """Return the server's log so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the server: SHUTDOWN NOSAVE, then SIGTERM, then SIGKILL if it lingers."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(OSError):
            assert self.port is not None
            send_command(self.port, "SHUTDOWN", "NOSAVE")
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """Kill the server with SIGKILL (a crash, for fault tests) and reap it."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        """Stop the server and remove its temporary directory."""
        try:
            self.stop()
        finally:
            self._dir.cleanup()


@contextlib.contextmanager
def redis_server(binary: str | None = None) -> Iterator[str]:
    """Run a throw-away redis-server for the duration of the block; yield its URL."""
    server = RedisServer(binary)
    try:
        yield server.start()
    finally:
        server.close()
