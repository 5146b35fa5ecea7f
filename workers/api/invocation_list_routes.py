"""Lists of invocations: a session's (newest first) and an app's by status (latest first).

Pages of at most ``limit`` invocations; ``nextCursor`` (null on the last page) is passed back
as ``cursor`` for the next one. Each invocation is shown as the status route shows it
(without its pending calls' whereabouts).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request

from orchestrator.distributed.intake import RequestError
from orchestrator.distributed.invocation_lists import DEFAULT_LIMIT, InvocationPage, invocation_query
from workers.api.adk_routes import checked
from workers.api.backend import Backend, record_json

router = APIRouter(tags=["invocations"])


async def _page(backend: Backend, app_name: str, *, status: str | None, limit: str | None,
                cursor: str | None, user_id: str | None = None,
                session_id: str | None = None) -> dict[str, Any]:
    try:
        query = invocation_query(
            app_name, status=status, user_id=user_id, session_id=session_id,
            limit=int(limit) if limit is not None and limit.isascii() and limit.isdigit()
            else limit or DEFAULT_LIMIT,
            cursor=cursor, limits=backend.runtime.limits)
    except RequestError as error:
        raise HTTPException(422, str(error)) from None
    services = await backend.services()
    page: InvocationPage = await services.store.list_invocations(query)
    return {"invocations": [record_json(record) for record in page.records],
            "nextCursor": page.next_cursor}


@router.get("/apps/{app_name}/users/{user_id}/sessions/{session_id}/invocations")
async def list_session_invocations(request: Request, app_name: str, user_id: str,
                                   session_id: str, status: str | None = None,
                                   limit: str | None = None,
                                   cursor: str | None = None) -> dict[str, Any]:
    """The session's invocations, newest first (``?status=`` for one status only).

    404 ``Session not found`` if there is no such session.
    """
    backend = checked(request, app_name, ("user_id", user_id), ("session_id", session_id))
    await backend.session(app_name, user_id, session_id)
    return await _page(backend, app_name, status=status, limit=limit, cursor=cursor,
                       user_id=user_id, session_id=session_id)


@router.get("/apps/{app_name}/invocations")
async def list_invocations(request: Request, app_name: str, status: str | None = None,
                           limit: str | None = None, cursor: str | None = None) -> dict[str, Any]:
    """The app's invocations in ``status`` (every status without it), latest updated first."""
    backend = checked(request, app_name)
    return await _page(backend, app_name, status=status, limit=limit, cursor=cursor)
