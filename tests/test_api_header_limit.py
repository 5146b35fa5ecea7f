"""``adk-celery api`` refuses a request whose line and headers pass
``ADK_CELERY_API_MAX_HEADER_BYTES`` (431, or the connection closed) as they arrive, without
holding them; requests under it, their bodies and keep-alive connections are served as before.

Real ``adk-celery api`` processes (uvicorn with httptools) over a real redis-server, called
on raw sockets: an HTTP client would not send an unfinished header.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.apps import APP_SPECS
from tests.support.processes import ManagedProcess, stack_env
from tests.support.redis_server import free_port
from tests.test_api import start_api

HOLD = 32 * 1024 * 1024
"""How much of an unfinished header the client tries to send (uvicorn alone holds it all)."""


@pytest.fixture(scope="module")
def capped(redis_url):
    api, base = start_api(stack_env(redis_url, APP_SPECS))  # the default limit, 64 KiB
    yield api, base.removeprefix("http://")
    api.stop()


def _rss(pid: int) -> int:
    """The resident memory of process ``pid``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _header(size: int, name: str = "x-filler") -> bytes:
    """One header line of about ``size`` bytes."""
    return f"{name}: {'a' * size}\r\n".encode()


def _status(sock: socket.socket) -> int:
    """The status code of the next response on ``sock``, its whole body read."""
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(65536)
        assert piece, f"closed without an answer after {head!r}"
        head += piece
    head, _, body = head.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1])


def _ask(address: str, request: bytes) -> int:
    """Send ``request`` on a new connection; the answer's status code."""
    with _connect(address) as sock:
        sock.sendall(request)
        return _status(sock)


def _get(headers: bytes = b"") -> bytes:
    return b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n" + headers + b"\r\n"


def test_an_unfinished_oversized_header_is_refused_without_being_held(capped):
    api, address = capped
    before = _rss(api.pid)
    with _connect(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-filler: ")
        chunk, sent, cut_off = b"a" * 65536, 0, False
        try:
            while sent < HOLD:  # the header's line never ends
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            cut_off = True
        grown = _rss(api.pid) - before  # while the connection is still open on this side
        sock.settimeout(5)
        try:
            answer = sock.recv(65536)
        except ConnectionResetError:  # the 431 was lost to the reset of the unread bytes
            answer = b""
        except TimeoutError:
            pytest.fail(f"no answer and the connection open after {sent} bytes of header")
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert cut_off or answer, "the server read the whole header"
    assert grown < 8 * 1024 * 1024, f"the server grew by {grown} bytes"
    assert _ask(address, _get()) == 200  # it goes on serving


def test_requests_under_the_limit_are_served_and_one_over_it_is_a_431(capped):
    _, address = capped
    assert _ask(address, _get(_header(60_000))) == 200
    assert _ask(address, _get(_header(40_000, "x-one") + _header(30_000, "x-two"))) == 431
    assert _ask(address, b"GET /health?" + b"q" * 70_000 + b" HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n") == 431
    # A body written with its headers is not counted as headers, however large.
    body = json.dumps({"state": {"big": "b" * 900_000}}).encode()
    post = (b"POST /apps/chat/users/u/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            b"content-type: application/json\r\ncontent-length: " + str(len(body)).encode()
            + b"\r\n" + _header(30_000) + b"\r\n" + body)
    assert _ask(address, post) == 200
    # The limit is per request: a keep-alive connection's requests add up past it.
    with _connect(address) as sock:
        for _ in range(4):
            sock.sendall(_get(_header(40_000)))
            assert _status(sock) == 200


def test_zero_turns_the_limit_off_and_a_negative_limit_is_refused(redis_url):
    api, base = start_api(stack_env(redis_url, APP_SPECS, api_max_header_bytes="0"))
    try:
        assert _ask(base.removeprefix("http://"), _get(_header(1_000_000))) == 200
    finally:
        api.stop()
    refused = ManagedProcess("api", [sys.executable, "-m", "workers.cli", "api", "--port",
                                     str(free_port())],
                             stack_env(redis_url, APP_SPECS, api_max_header_bytes="-1"))
    try:
        refused.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"started with a negative limit:\n{refused.output()}")
    finally:
        refused.stop()
    lines = refused.all_lines()
    assert refused.proc.returncode == 2, lines
    assert any("ADK_CELERY_API_MAX_HEADER_BYTES" in line for line in lines), lines
