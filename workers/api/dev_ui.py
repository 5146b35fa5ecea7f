"""``adk-celery api --dev-ui``: google-adk's web UI, served from an installed google-adk.

The UI's files ship inside google-adk's wheel; they are found through the package's
metadata (google-adk is never imported) and served as they are. Besides ADK's API routes
the UI calls a few routes of ADK's development server: its configuration, the agent graph
and traces (here), and the panels :mod:`workers.api.dev_ui_panels` answers.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from workers.api import agent_graph, dev_ui_panels
from workers.api.adk_routes import checked

DISTRIBUTION = "google-adk"
FILES = "google/adk/cli/browser"
"""Where the UI's files lie inside google-adk's installed distribution."""
MISSING = ("--dev-ui needs google-adk's web UI, which ships in the google-adk package: "
           "from a checkout, .venv/bin/pip install -e '.[devui]' (or pip install "
           "google-adk==2.13.0)")

router = APIRouter(tags=["dev-ui"])
PUBLIC_PATHS = frozenset({"/", "/dev-ui", "/config/telemetry"})
"""The routes here any caller may request, tokens set or not: the UI's own, not the app's."""
PUBLIC_PREFIXES = ("/dev-ui/",)
"""The UI's files and configuration, which any caller may request."""


def find_files() -> Path | None:
    """The directory of the installed google-adk's web UI, or None if there is none."""
    try:
        distribution = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    directory = Path(str(distribution.locate_file(FILES)))
    return directory if (directory / "index.html").is_file() else None


def install(app: FastAPI, files: Path) -> None:
    """Add the UI's routes and serve ``files`` under ``/dev-ui/``."""
    app.include_router(router)
    app.include_router(dev_ui_panels.router)
    # After the routes: the mount would answer every /dev-ui/... path otherwise.
    app.mount("/dev-ui/", StaticFiles(directory=files, html=True), name="dev-ui")


@router.get("/", include_in_schema=False)
@router.get("/dev-ui", include_in_schema=False)
async def to_dev_ui() -> RedirectResponse:
    """The UI lives under ``/dev-ui/``."""
    return RedirectResponse("/dev-ui/")


@router.get("/dev-ui/assets/config/runtime-config.json", include_in_schema=False)
async def runtime_config() -> dict[str, Any]:
    """Read by the UI before it starts: the API is this server; usage telemetry off."""
    return {"backendUrl": "", "telemetry": False}


@router.get("/dev-ui/config")
async def ui_config() -> dict[str, Any]:
    """No custom logo."""
    return {"logo_text": None, "logo_image_url": None}


@router.get("/config/telemetry")
async def telemetry() -> dict[str, Any]:
    """google-adk's usage telemetry is always off here."""
    return {"telemetry": False}


@router.post("/config/telemetry")
async def set_telemetry() -> None:
    """Not settable: adk-celery sends no usage telemetry."""
    raise HTTPException(501, "adk-celery sends no usage telemetry; there is nothing to turn on")


@router.get("/dev/apps/{app_name}/build_graph")
async def build_graph(request: Request, app_name: str) -> dict[str, Any]:
    """The app's agent tree (names, kinds, models, tools)."""
    backend = checked(request, app_name)
    return agent_graph.describe_app(backend.registry.get(app_name))


@router.get("/dev/apps/{app_name}/build_graph_image")
async def build_graph_image(request: Request, app_name: str, dark_mode: bool = False,
                            node: str | None = None) -> dict[str, Any]:
    """DOT source of the agent at ``node`` (the root by default), keyed by its path."""
    backend = checked(request, app_name)
    agent = agent_graph.find_agent(backend.registry.get(app_name).root_agent, node or "")
    if agent is None:
        raise HTTPException(404, f"Node not found: {node}")
    return {node or "": {"dotSrc": agent_graph.to_dot(agent, dark=dark_mode)}}


@router.get("/dev/apps/{app_name}/graph")
async def app_graph(request: Request, app_name: str, dark_mode: bool = False) -> dict[str, Any]:
    """DOT source of the whole agent tree."""
    backend = checked(request, app_name)
    root = backend.registry.get(app_name).root_agent
    return {"dotSrc": agent_graph.to_dot(root, dark=dark_mode)}


@router.get("/dev/apps/{app_name}/users/{user_id}/sessions/{session_id}/events/{event_id}/graph")
async def event_graph(request: Request, app_name: str, user_id: str, session_id: str,
                      event_id: str, dark_mode: bool = False) -> dict[str, Any]:
    """The agent tree with the event's calls (agent -> tool) or answers highlighted."""
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    services = await backend.services()
    session = await services.sessions.get_session(
        app_name=app_name, user_id=user_id, session_id=session_id)
    event = next((e for e in session.events if e.id == event_id), None) if session else None
    if event is None:
        return {}
    pairs = [(event.author, call.name or "") for call in event.get_function_calls()]
    pairs += [(answer.name or "", event.author) for answer in event.get_function_responses()]
    root = backend.registry.get(app_name).root_agent
    return {"dotSrc": agent_graph.to_dot(root, dark=dark_mode,
                                         highlights=pairs or [(event.author, event.author)])}


@router.get("/dev/apps/{app_name}/debug/trace/session/{session_id}")
async def session_trace(request: Request, app_name: str, session_id: str) -> list[Any]:
    """No OpenTelemetry spans are recorded: an empty trace."""
    checked(request, app_name, ("session_id", session_id))
    return []


@router.get("/dev/apps/{app_name}/debug/trace/{event_id}")
async def event_trace(request: Request, app_name: str, event_id: str) -> None:
    """No spans are recorded, so no event has a trace (ADK's answer for an unknown one)."""
    checked(request, app_name, ("event_id", event_id))
    raise HTTPException(404, "Trace not found")
