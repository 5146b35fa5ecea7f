"""The FastAPI application of ``adk-celery api`` and how the command starts it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType

import uvicorn
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse

from config import Settings, get_settings
from workers.addresses import is_loopback
from workers.api import (
    adk_routes,
    artifact_routes,
    invocation_list_routes,
    invocation_routes,
    metrics_route,
)
from workers.api.access_log import defer_access_records, log_config
from workers.api.backend import Backend
from workers.api.direct_run import DirectRun
from workers.api.header_limit import protocol_class
from workers.api.local_guard import LocalOnlyGuard
from workers.api.outages import OutageAnswer
from workers.api.security import BodyLimit
from workers.api.token_gate import TokenGate

logger = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, *, dev_ui: Path | None = None) -> FastAPI:
    """The HTTP API for ``settings`` (the environment's by default).

    ``dev_ui``: the directory of google-adk's web UI to serve under ``/dev-ui/`` with the
    routes it calls (:mod:`workers.api.dev_ui`); None = no UI.

    Raises ValueError for malformed settings (tokens), RuntimeError without a Redis URL.
    """
    settings = settings or get_settings()
    backend = Backend(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await backend.aclose()
        backend.close()

    app = FastAPI(title="adk-celery", version=_version(), lifespan=lifespan,
                  description="google-adk's api_server routes over distributed orchestrators, "
                              "plus invocation routes (enqueue, status, follow, answer, cancel, "
                              "lists).")
    app.state.backend = backend
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.include_router(adk_routes.router)
    app.include_router(artifact_routes.router)
    app.include_router(invocation_routes.router)
    app.include_router(invocation_list_routes.router)
    app.include_router(metrics_route.router)
    # First added, so the innermost middleware: the size limit, CORS, the token gate and the
    # local guard apply to the requests it answers as to any other.
    app.add_middleware(DirectRun)
    # Around every route, DirectRun's /run included: Redis out of reach is a 503.
    app.add_middleware(OutageAnswer)
    public: set[str] = set(adk_routes.PUBLIC_PATHS)
    public_prefixes: tuple[str, ...] = ()
    if dev_ui is not None:
        from workers.api import dev_ui as dev_ui_routes

        dev_ui_routes.install(app, dev_ui)
        public |= dev_ui_routes.PUBLIC_PATHS
        public_prefixes = dev_ui_routes.PUBLIC_PREFIXES
    if backend.access.required:
        # Around the routes and DirectRun, inside CORS (a 401 a browser can read) and the
        # size limit (a run's body it reads is bounded): the token before anything else.
        app.add_middleware(TokenGate, access=backend.access,
                           public=public | _docs_paths(app) | _metrics_path(settings),
                           public_prefixes=public_prefixes)
    if settings.api_cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.api_cors_origins,
                           allow_methods=["*"], allow_headers=["*"])
    app.add_middleware(BodyLimit, limit=settings.api_max_body_bytes)
    if not backend.access.required:  # no tokens: this machine's own clients only, however served
        app.add_middleware(LocalOnlyGuard, allowed_origins=settings.api_cors_origins)
    return app


async def _invalid_request(_: Request, error: Exception) -> JSONResponse:
    """FastAPI's 422 for a request its routes' models refuse, without echoing raw bytes.

    FastAPI's own handler decodes a body that is not JSON (sent with another content type)
    to echo it, as google-adk's server does: a body that is not UTF-8 made that raise, a 500
    whose log held the whole body. Such a body is described (its size), never logged.
    """
    assert isinstance(error, RequestValidationError)
    detail = [{**item, "input": _echo(item["input"])}
              if isinstance(item.get("input"), bytes | bytearray) else item
              for item in error.errors()]
    return JSONResponse(status_code=422, content={"detail": jsonable_encoder(detail)})


def _echo(body: bytes | bytearray) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(body)} bytes, not UTF-8 text>"


def _docs_paths(app: FastAPI) -> set[str]:
    """FastAPI's OpenAPI schema and documentation pages: no token needed."""
    paths = {app.openapi_url, app.docs_url, app.redoc_url}
    if app.docs_url:
        paths.add(app.swagger_ui_oauth2_redirect_url)
    return {path for path in paths if path}


def _metrics_path(settings: Settings) -> set[str]:
    """``/metrics`` if ``ADK_CELERY_API_METRICS_PUBLIC`` opens it to every caller."""
    return {metrics_route.PATH} if settings.api_metrics_public else set()


def _version() -> str:
    from importlib import metadata

    return metadata.version("adk-celery")


def serve(host: str | None, port: int | None, *, dev_ui: bool = False,
          access_log: bool | None = None) -> None:
    """Run the API with uvicorn (``adk-celery api``); exits with one line on bad settings.

    ``dev_ui``: also serve google-adk's web UI from the installed google-adk. ``access_log``:
    a line per request (None: ``ADK_CELERY_API_ACCESS_LOG``).
    """
    settings = get_settings()
    host = host or settings.api_host
    files = None
    if dev_ui:
        from workers.api.dev_ui import MISSING, find_files

        files = find_files()
        if files is None:
            print(f"adk-celery: error: {MISSING}", file=sys.stderr)
            sys.exit(2)
    try:
        app = create_app(settings, dev_ui=files)
    except (ValueError, RuntimeError) as error:  # a malformed or missing setting
        print(f"adk-celery: error: {error}", file=sys.stderr)
        sys.exit(2)
    if not app.state.backend.access.required:
        if not is_loopback(host):
            print(f"adk-celery: error: no ADK_CELERY_API_TOKENS set; refusing to listen on "
                  f"{host!r}, which is not loopback.", file=sys.stderr)
            sys.exit(2)
        print(f"adk-celery api: no ADK_CELERY_API_TOKENS set: no authentication, listening "
              f"on {host} (loopback) only.", file=sys.stderr, flush=True)
    if files is not None:
        print(f"adk-celery api: google-adk's dev UI at http://{host}:{port or settings.api_port}"
              f"/dev-ui/ (files from {files})", file=sys.stderr, flush=True)
    _check_listen(host, port or settings.api_port)
    _freeze_start_up_objects()
    defer_access_records()
    config = uvicorn.Config(
        app, host=host, port=port or settings.api_port, log_level="info",
        log_config=log_config(), timeout_graceful_shutdown=settings.api_shutdown_seconds,
        access_log=settings.api_access_log if access_log is None else access_log,
        http=protocol_class(settings.api_max_header_bytes,
                            header_timeout=settings.api_header_timeout_seconds,
                            body_timeout=settings.api_body_timeout_seconds,
                            send_timeout=settings.api_send_timeout_seconds),
        # uvicorn's own cap, used if it serves with h11 (httptools missing)
        h11_max_incomplete_event_size=settings.api_max_header_bytes or None,
        # uvicorn answers 503 to a request when as many connections as its limit are
        # open, this one included: + 1 serves up to api_max_connections at once
        limit_concurrency=settings.api_max_connections + 1 if settings.api_max_connections
        else None)
    server = _StoppingServer(config, on_exit=app.state.backend.stop_followers)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run
        server.run()
    if not server.started:
        sys.exit(3)  # uvicorn's start-up failure status, as uvicorn.run


class _StoppingServer(uvicorn.Server):
    """uvicorn's server; the signal that stops it also ends the follows it holds.

    uvicorn waits up to its graceful timeout for open requests, then cancels them (a
    traceback each, and a cut response): a follow of a paused invocation would be one.
    Told at the signal, each follow ends at once: an SSE stream with an error frame, a
    ``/run`` with a 503 naming its invocation (:class:`~.outages.ServerStopping`).
    """

    def __init__(self, config: uvicorn.Config, *, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve, noting the loop (the signal's handler runs beside it)."""
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """Stop as uvicorn does, and tell the follows on the server's loop."""
        super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._on_exit)


def _check_listen(host: str, port: int) -> None:
    """Exit with one line if ``host:port`` cannot be listened on (taken, or not this host's).

    uvicorn would say it among its start-up and shutdown lines, and exit 3.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            probe.bind(infos[0][4])
    except OSError as error:
        print(f"adk-celery api: error: cannot listen on {host}:{port}: "
              f"{error.strerror or error}", file=sys.stderr)
        sys.exit(2)


def _freeze_start_up_objects() -> None:
    """Keep what start-up made (modules, apps, models) out of the collector's full passes.

    The process holds some 150,000 objects once its apps and google-genai's types are
    imported, and a full collection walks them all (about 90 ms here). A burst of requests
    promotes enough short-lived objects to set one off every few hundred requests, which cost
    the server about 0.4 ms of CPU per request on average; frozen, a full pass walks only
    what came after.
    """
    import gc

    import uvicorn.protocols.http.auto  # noqa: F401  (what uvicorn imports as it starts)

    gc.collect()
    gc.freeze()
