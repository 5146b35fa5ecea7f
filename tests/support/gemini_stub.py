"""A scripted local HTTP server that speaks the Gemini REST protocol to google-genai.

The real ``google.genai.Client`` (configured with ``http_options.base_url = stub.base_url``)
sends:

- ``POST {base}/v1beta/models/{model}:generateContent`` -> one JSON GenerateContentResponse;
- ``POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`` -> SSE frames
  ``data: <json chunk>\\r\\n\\r\\n``;

with the API key in the ``x-goog-api-key`` header and a camelCase JSON body
(``contents``, ``systemInstruction``, ``tools``, ``generationConfig``, ...).

Usage::

    with GeminiStub() as stub:
        stub.enqueue(text_response("hi"))            # answers the next call
        stub.enqueue([text_chunk("a"), text_chunk("b", finish_reason="STOP")])  # a stream
        stub.enqueue(StubError(400, "bad request"))  # an HTTP error
        ...
        assert stub.requests[0].headers["x-goog-api-key"] == "test-key"
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

_PATH = re.compile(
    r"^/(?P<version>v1(?:alpha|beta)?)/(?P<resource>.+):(?P<method>generateContent|streamGenerateContent)$"
)

_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass
class StubError:
    """A scripted HTTP error, sent as a Google API error body ``{"error": {...}}``."""

    code: int
    message: str
    status: str | None = None

    def body(self) -> dict[str, Any]:
        """Return the JSON error body."""
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "status": self.status or _STATUS_NAMES.get(self.code, "UNKNOWN"),
            }
        }


ScriptedResponse = dict[str, Any] | list[dict[str, Any]] | StubError
"""A response dict, a list of stream chunk dicts, or an error."""


@dataclass
class RecordedRequest:
    """One request the stub received."""

    method: str
    path: str
    """The URL path, e.g. ``/v1beta/models/gemini-2.5-flash:generateContent``."""
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Header names lower-cased."""
    body: Any
    """The parsed JSON body (None if empty)."""
    model: str | None = None
    """Model id from the path (``models/`` prefix removed)."""
    stream: bool = False
    """True for ``streamGenerateContent``."""


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    script: deque[ScriptedResponse] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    expected_api_key: str | None = None


class GeminiStub:
    """A Gemini REST server on 127.0.0.1 answering from a script; a context manager."""

    def __init__(self, expected_api_key: str | None = None) -> None:
        self._state = _State(expected_api_key=expected_api_key)
        handler = type("_BoundHandler", (_Handler,), {"state": self._state})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        host, port = self._server.server_address[:2]
        self.base_url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            # A short poll interval keeps close() (server.shutdown) fast.
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="gemini-stub",
            daemon=True,
        )
        self._thread.start()

    @property
    def requests(self) -> list[RecordedRequest]:
        """The requests received so far, oldest first (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def pending(self) -> int:
        """How many scripted responses have not been used yet."""
        with self._state.lock:
            return len(self._state.script)

    def enqueue(self, *responses: ScriptedResponse) -> None:
        """Script the answers to the next calls, one item per call, in order."""
        with self._state.lock:
            self._state.script.extend(responses)

    def close(self) -> None:
        """Stop the server and its thread."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> GeminiStub:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # persistent connections, as the real endpoint allows
    state: _State

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""

    def do_POST(self) -> None:
        """Record the request, then answer it from the script."""
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        match = _PATH.match(url.path)
        request = RecordedRequest(
            method="POST",
            path=url.path,
            query=parse_qs(url.query),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=json.loads(raw) if raw else None,
            model=match["resource"].removeprefix("models/") if match else None,
            stream=bool(match and match["method"] == "streamGenerateContent"),
        )
        expected_key = self.state.expected_api_key
        key_ok = expected_key is None or request.headers.get("x-goog-api-key") == expected_key
        with self.state.lock:
            self.state.requests.append(request)
            item = self.state.script.popleft() if match and key_ok and self.state.script else None
        if not match:
            self._send_error(StubError(404, f"GeminiStub: unknown path {url.path}"))
        elif not key_ok:
            self._send_error(StubError(400, "API key not valid. Please pass a valid API key."))
        elif item is None:
            self._send_error(StubError(500, f"GeminiStub: no scripted response for {url.path}"))
        elif isinstance(item, StubError):
            self._send_error(item)
        elif request.stream:
            if request.query.get("alt") != ["sse"]:
                self._send_error(StubError(400, "GeminiStub: expected ?alt=sse"))
            else:
                self._send_sse(item if isinstance(item, list) else [item])
        elif isinstance(item, list):
            self._send_error(StubError(500, "GeminiStub: chunk list scripted for a unary call"))
        else:
            self._send_json(200, item)

    def do_GET(self) -> None:
        """Reject GETs: the stub only serves generateContent calls."""
        self._send_error(StubError(404, f"GeminiStub: GET {self.path} not supported"))

    def _send_error(self, error: StubError) -> None:
        self._send_json(error.code, error.body())

    def _send_json(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_sse(self, chunks: list[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in chunks:
            frame = f"data: {json.dumps(chunk)}\r\n\r\n".encode()
            self.wfile.write(f"{len(frame):X}\r\n".encode() + frame + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


# --- Builders for common response dicts (Gemini REST JSON, camelCase) ---


def usage(prompt: int = 3, candidates: int = 5) -> dict[str, Any]:
    """Return a ``usageMetadata`` dict."""
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates,
    }


def response(
    parts: list[dict[str, Any]],
    finish_reason: str | None = "STOP",
    usage_metadata: dict[str, Any] | None = None,
    model_version: str = "gemini-2.5-flash-stub",
) -> dict[str, Any]:
    """Return a GenerateContentResponse dict with one candidate holding ``parts``."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    payload: dict[str, Any] = {"candidates": [candidate], "modelVersion": model_version}
    if usage_metadata is not None:
        payload["usageMetadata"] = usage_metadata
    return payload


def text_response(text: str, finish_reason: str | None = "STOP") -> dict[str, Any]:
    """Return a one-text-part response with usage metadata."""
    return response([{"text": text}], finish_reason=finish_reason, usage_metadata=usage())


def text_chunk(
    text: str, finish_reason: str | None = None, thought: bool = False
) -> dict[str, Any]:
    """Return one stream chunk with a text (or thought) part."""
    part: dict[str, Any] = {"text": text}
    if thought:
        part["thought"] = True
    return response([part], finish_reason=finish_reason, usage_metadata=usage())


def function_call_part(
    name: str, args: dict[str, Any], call_id: str | None = None
) -> dict[str, Any]:
    """Return a ``functionCall`` part dict."""
    call: dict[str, Any] = {"name": name, "args": args}
    if call_id is not None:
        call["id"] = call_id
    return {"functionCall": call}
