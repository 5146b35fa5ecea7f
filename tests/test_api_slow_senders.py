"""``adk-celery api`` against slow senders: a connection whose request line and headers have
not all arrived ``ADK_CELERY_API_HEADER_TIMEOUT_SECONDS`` after it opened (or after the
previous response on it) is closed, 408 if part of a request came; a body not all in
``ADK_CELERY_API_BODY_TIMEOUT_SECONDS`` after its headers is a 408; a response is never cut,
however long it streams, while its client reads it; one left unread
``ADK_CELERY_API_SEND_TIMEOUT_SECONDS`` is, and so is a connection with more than 16 requests
pipelined; 0 turns each timeout off; ``ADK_CELERY_API_MAX_CONNECTIONS`` caps the
connections served at once (503 past it).

Real ``adk-celery api`` processes (uvicorn with httptools) and an orchestrator over a real
redis-server, called on raw sockets: an HTTP client would not send a request this slowly.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from config import Settings
from config.settings import describe_settings_error
from tests.apps import APP_SPECS
from tests.support.processes import ManagedProcess, celery_argv, stack_env
from tests.test_api import start_api

TIMEOUT = 0.5
"""Both deadlines of the timed server, in seconds."""
GUARD = 3.0
"""Longest a test waits for the server to act: well past TIMEOUT, below uvicorn's own 5 s
keep-alive timeout (which would close an idle kept-alive connection without this change)."""
TRICKLE = 0.1
"""Seconds between two bytes of a slow sender: each well inside TIMEOUT."""


@pytest.fixture(scope="module")
def timed(redis_url) -> Iterator[tuple[str, str]]:
    """An api with its three deadlines at TIMEOUT, and an orchestrator: (address, base URL)."""
    url = redis_url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2",
                    api_header_timeout_seconds=str(TIMEOUT), api_body_timeout_seconds=str(TIMEOUT),
                    api_send_timeout_seconds=str(TIMEOUT))
    orchestrator = ManagedProcess("slow-orch", celery_argv("orchestrator", "slow-orch"), env)
    try:
        api, base = start_api(env)  # while the orchestrator starts
        try:
            orchestrator.wait_for_line(lambda line: "ready." in line)
            yield base.removeprefix("http://"), base
        finally:
            api.stop()
    finally:
        orchestrator.stop()


@pytest.fixture(scope="module")
def untimed(redis_url) -> Iterator[str]:
    """An api with both deadlines off and at most 2 connections served: its address."""
    api, base = start_api(stack_env(redis_url, APP_SPECS, api_header_timeout_seconds="0",
                                    api_body_timeout_seconds="0", api_max_connections="2"))
    yield base.removeprefix("http://")
    api.stop()


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=GUARD)


def _readable(sock: socket.socket, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``sock`` to have bytes, or its end, to read."""
    return bool(select.select([sock], [], [], seconds)[0])


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (fails after GUARD)."""
    received, deadline = b"", time.monotonic() + GUARD
    while True:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            pytest.fail(f"the connection still open after {GUARD} s; got {received!r}")
        except ConnectionResetError:
            return received
        if not piece:
            return received
        received += piece


def _response(sock: socket.socket) -> tuple[int, bytes, bytes]:
    """The next response on ``sock`` (with a content-length): status, head, body."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"closed without an answer after {data!r}"
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        piece = sock.recv(65536)
        assert piece, f"closed in the middle of {head!r}"
        body += piece
    return int(head.split(b" ")[1]), head.lower(), body


def _trickle(sock: socket.socket, byte: bytes = b"a") -> float:
    """Send ``byte`` every TRICKLE s until the server answers or closes; how long that took."""
    start = time.monotonic()
    while not _readable(sock, TRICKLE):
        assert time.monotonic() - start < GUARD, f"no answer after trickling for {GUARD} s"
        try:
            sock.sendall(byte)
        except (BrokenPipeError, ConnectionResetError):
            break
    return time.monotonic() - start


def _timed_out(received: bytes) -> bool:
    """A 408 that closes the connection."""
    head = received.partition(b"\r\n\r\n")[0].lower()
    return head.startswith(b"http/1.1 408 ") and b"\r\nconnection: close" in head


GET = b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
POST_HEAD = (b"POST /apps/chat/users/u/sessions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
             b"content-type: application/json\r\ncontent-length: 40\r\n\r\n")
"""A request whose 40 bytes of body are to come."""


def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(timed):
    address, _ = timed
    with _connect(address) as sock:
        start = time.monotonic()
        assert _until_closed(sock) == b""  # idle: closed without a word
        assert time.monotonic() - start >= TIMEOUT * 0.8
    # Kept alive after a response: the deadline runs again from the response's end.
    with _connect(address) as sock:
        sock.sendall(GET)
        assert _response(sock)[0] == 200
        start = time.monotonic()
        assert _until_closed(sock) == b""
        assert time.monotonic() - start >= TIMEOUT * 0.8


def test_headers_trickled_slower_than_the_timeout_are_a_408(timed):
    address, _ = timed
    with _connect(address) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        took = _trickle(sock)  # each byte in time, the whole head not
        assert _timed_out(_until_closed(sock))
        assert TIMEOUT * 0.8 <= took < GUARD
    # The same on a kept-alive connection, timed from the end of the previous response.
    with _connect(address) as sock:
        sock.sendall(GET)
        assert _response(sock)[0] == 200
        sock.sendall(b"GET /hea")
        _trickle(sock)
        assert _timed_out(_until_closed(sock))


def test_a_body_sent_too_slowly_is_a_408(timed):
    address, _ = timed
    with _connect(address) as sock:
        sock.sendall(POST_HEAD + b"{")
        took = _trickle(sock, b" ")  # the body would take 4 s
        assert _timed_out(_until_closed(sock))
        assert TIMEOUT * 0.8 <= took < GUARD
    with _connect(address) as sock:  # the server goes on serving
        sock.sendall(POST_HEAD[:-len(b"40\r\n\r\n")] + b"2\r\n\r\n{}")
        assert _response(sock)[0] == 200


def test_requests_and_a_stream_longer_than_the_timeouts_are_served(timed):
    address, base = timed
    # Requests on one kept-alive connection, a pipelined pair among them, bodies included.
    with _connect(address) as sock:
        body = b'{"state": {"k": "v"}}'
        post = POST_HEAD.replace(b"40", str(len(body)).encode()) + body
        for request in (GET, post, GET + post):
            sock.sendall(request)
            assert _response(sock)[0] == 200
        assert _response(sock)[0] == 200  # the pipelined one
    # A /run and a /run_sse whose tool waits in a queue no worker consumes: for several times
    # the deadlines the /run sends nothing and the /run_sse what it has; then cancelled, both end.
    runs = {}
    for route in ("/run", "/run_sse"):
        session = httpx.post(f"{base}/apps/parked_plain/users/slow/sessions").json()
        body = json.dumps({"appName": "parked_plain", "userId": "slow", "sessionId": session["id"],
                           "newMessage": {"role": "user", "parts": [{"text": "hold"}]}}).encode()
        sock = _connect(address)
        sock.sendall(f"POST {route} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json"
                     f"\r\ncontent-length: {len(body)}\r\n\r\n".encode() + body)
        runs[sock] = session["id"]
    received = dict.fromkeys(runs, b"")
    start = time.monotonic()
    while (left := 3 * TIMEOUT - (time.monotonic() - start)) > 0:
        for sock in select.select(list(runs), [], [], left)[0]:
            piece = sock.recv(65536)
            assert piece, f"cut after {time.monotonic() - start:.2f} s: {received[sock]!r}"
            received[sock] += piece
    run, run_sse = runs
    assert received[run] == b"" and received[run_sse].startswith(b"HTTP/1.1 200 "), received
    for session_id in runs.values():
        listed = httpx.get(f"{base}/apps/parked_plain/users/slow/sessions/{session_id}/invocations")
        invocation_id = listed.json()["invocations"][0]["invocationId"]
        cancelled = httpx.post(f"{base}/apps/parked_plain/invocations/{invocation_id}/cancel")
        assert cancelled.status_code == 202, cancelled.text
    status, _, answer = _response(run)
    assert status == 200 and b"Invocation was cancelled." in answer
    while not received[run_sse].endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end
        assert _readable(run_sse, GUARD), received[run_sse]
        piece = run_sse.recv(65536)
        assert piece, f"cut: {received[run_sse]!r}"
        received[run_sse] += piece
    assert b"Invocation was cancelled." in received[run_sse]
    for sock in runs:  # then idle: closed a deadline after its response
        assert _until_closed(sock) == b""
        sock.close()


def _unread(address: str) -> socket.socket:
    """A connection whose client reads little at a time (a small receive buffer)."""
    host, port = address.rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(GUARD)
    sock.connect((host, int(port)))
    return sock


def test_requests_pipelined_without_reading_the_answers_close_the_connection(timed):
    # uvicorn queued every request of each read and read again after each response: one
    # connection sending requests and never reading made the server hold hundreds of MB.
    address, _ = timed
    sock = _unread(address)
    sock.setblocking(False)
    pending = GET * 200
    deadline = time.monotonic() + GUARD
    while pending and time.monotonic() < deadline:
        try:
            pending = pending[sock.send(pending):]
        except BlockingIOError:
            select.select([], [sock], [], 0.05)
        except (BrokenPipeError, ConnectionResetError):
            break
    sock.setblocking(True)
    received = _until_closed(sock)
    assert received.count(b"HTTP/1.1 200 ") < 200, "every pipelined request was answered"


def test_a_response_its_client_does_not_read_is_cut_after_the_send_timeout(timed):
    address, base = timed
    # 1.5 MB of state, in two writes (each under ADK_CELERY_MAX_PAYLOAD_BYTES).
    big = httpx.post(f"{base}/apps/chat/users/u/sessions",
                     json={"state": {"big": "x" * 750_000}}, timeout=GUARD)
    assert big.status_code == 200, big.text
    more = httpx.patch(f"{base}/apps/chat/users/u/sessions/{big.json()['id']}",
                       json={"stateDelta": {"more": "y" * 750_000}}, timeout=GUARD)
    assert more.status_code == 200, more.text
    sock = _unread(address)
    request = f"GET /apps/chat/users/u/sessions/{big.json()['id']} HTTP/1.1\r\n".encode()
    sock.sendall((request + b"host: 127.0.0.1\r\n\r\n") * 6)  # 9 MB: more than both buffers
    time.sleep(TIMEOUT * 4)  # not reading: the time under test
    received = _until_closed(sock)
    assert received.count(b"HTTP/1.1 200 ") < 6, "all the answers were kept for a client not reading"


def test_zero_turns_both_timeouts_off(untimed):
    with _connect(untimed) as head, _connect(untimed) as body:
        head.sendall(b"GET /health HTTP/1.1\r\nhost: 1")  # part of a head
        body.sendall(POST_HEAD + b"{")  # part of a body
        # Twice the timed server's deadlines: neither connection is answered or closed.
        assert not _readable(head, 2 * TIMEOUT) and not _readable(body, 0)
        head.sendall(b"27.0.0.1\r\n\r\n")
        body.sendall(b"}" + b" " * 38)
        assert _response(head)[0] == 200 and _response(body)[0] == 200


def _served(address: str) -> socket.socket:
    """A kept-alive connection whose GET was answered 200, once the server counts no
    connection closed before (it sees a close soon after, not at once): 503s are retried."""
    deadline = time.monotonic() + GUARD
    while True:
        sock = _connect(address)
        sock.sendall(GET)
        if _response(sock)[0] == 200:
            return sock
        sock.close()
        assert time.monotonic() < deadline, "still 503s"


def test_a_request_past_the_connection_cap_is_a_503(untimed):
    with _served(untimed) as first, _connect(untimed) as second:
        second.sendall(GET)  # two connections open: the cap, served
        assert _response(second)[0] == 200
        with _connect(untimed) as third:
            third.sendall(GET)
            status, head, _ = _response(third)
            assert status == 503 and b"\r\nconnection: close" in head
            assert _until_closed(third) == b""
        first.sendall(GET)  # the two served still are
        assert _response(first)[0] == 200
    _served(untimed).close()  # and once they are closed, others are


def test_malformed_values_are_refused_naming_their_variable():
    with pytest.raises(ValueError) as raised:
        Settings(redis_url="redis://127.0.0.1:1/0", api_header_timeout_seconds=-1,
                 api_body_timeout_seconds="soon", api_max_connections=-5)
    described = describe_settings_error(raised.value).split("; ")
    assert described == [
        "ADK_CELERY_API_HEADER_TIMEOUT_SECONDS: Input should be greater than or equal to 0",
        "ADK_CELERY_API_BODY_TIMEOUT_SECONDS: Input should be a valid number, unable to parse "
        "string as a number",
        "ADK_CELERY_API_MAX_CONNECTIONS: Input should be greater than or equal to 0"]
