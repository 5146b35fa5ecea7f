"""The dev UI's panels adk-celery does not support: evals, agent tests, builder, deploy.

Reads answer empty (no eval sets, no results, no tests, no builder file), so the panels open
and show nothing instead of breaking the page; anything that would create, change or run
something answers 501 with a sentence saying so. These panels act on agent source
directories on the server's disk and run agents in the server process, neither of which an
adk-celery API server has.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute

from workers.api.adk_routes import checked


def _operation_id(route: APIRoute) -> str:
    """An OpenAPI operation id unique per path and method.

    ADK's old (``eval_sets``) and new (``eval-sets``) paths share functions here, and
    FastAPI's default ids would read the same for both.
    """
    path = route.path_format.replace("-", "__")
    return re.sub(r"\W", "_", f"{route.name}{path}_{'_'.join(sorted(route.methods))}".lower())


router = APIRouter(tags=["dev-ui"], generate_unique_id_function=_operation_id)

EVALS = ("Evaluations are not supported by adk-celery's API: run google-adk's `adk eval` "
         "against the agent's source instead")
TESTS = "Agent tests are not supported by adk-celery's API"
BUILDER = "The agent builder is not supported by adk-celery's API: agents are Python code " \
          "deployed to the orchestrators and workers"
DEPLOY = "Deploying from the dev UI is not supported by adk-celery: see the README's " \
         "Docker Compose section"


def _unsupported(detail: str) -> HTTPException:
    return HTTPException(501, detail)


# ---- evaluations: nothing stored, nothing runs -----------------------------------------

@router.get("/dev/apps/{app_name}/eval_sets")
async def eval_set_names(request: Request, app_name: str) -> list[str]:
    """No eval sets."""
    checked(request, app_name)
    return []


@router.get("/dev/apps/{app_name}/eval-sets")
async def eval_sets(request: Request, app_name: str) -> dict[str, Any]:
    """No eval sets."""
    checked(request, app_name)
    return {"evalSetIds": []}


@router.get("/dev/apps/{app_name}/eval_results")
async def eval_result_names(request: Request, app_name: str) -> list[str]:
    """No eval results."""
    checked(request, app_name)
    return []


@router.get("/dev/apps/{app_name}/eval-results")
async def eval_results(request: Request, app_name: str) -> dict[str, Any]:
    """No eval results."""
    checked(request, app_name)
    return {"evalResultIds": []}


@router.get("/dev/apps/{app_name}/metrics-info")
async def metrics_info(request: Request, app_name: str) -> dict[str, Any]:
    """No eval metrics."""
    checked(request, app_name)
    return {"metricsInfo": []}


@router.get("/dev/apps/{app_name}/eval_sets/{eval_set_id}/evals")
@router.get("/dev/apps/{app_name}/eval-sets/{eval_set_id}")
@router.get("/dev/apps/{app_name}/eval_sets/{eval_set_id}/evals/{eval_case_id}")
@router.get("/dev/apps/{app_name}/eval-sets/{eval_set_id}/eval-cases/{eval_case_id}")
@router.get("/dev/apps/{app_name}/eval_results/{eval_result_id}")
@router.get("/dev/apps/{app_name}/eval-results/{eval_result_id}")
async def no_such_eval_item(request: Request, app_name: str) -> None:
    """There are no eval sets, cases or results to read."""
    checked(request, app_name)
    raise HTTPException(404, "Eval set not found: " + EVALS)


@router.post("/dev/apps/{app_name}/eval-sets")
@router.post("/dev/apps/{app_name}/eval_sets/{eval_set_id}")
@router.post("/dev/apps/{app_name}/eval-sets/{eval_set_id}/add-session")
@router.post("/dev/apps/{app_name}/eval_sets/{eval_set_id}/add_session")
@router.post("/dev/apps/{app_name}/eval-sets/{eval_set_id}/run")
@router.post("/dev/apps/{app_name}/eval_sets/{eval_set_id}/run_eval")
@router.put("/dev/apps/{app_name}/eval_sets/{eval_set_id}/evals/{eval_case_id}")
@router.put("/dev/apps/{app_name}/eval-sets/{eval_set_id}/eval-cases/{eval_case_id}")
@router.delete("/dev/apps/{app_name}/eval_sets/{eval_set_id}/evals/{eval_case_id}")
@router.delete("/dev/apps/{app_name}/eval-sets/{eval_set_id}/eval-cases/{eval_case_id}")
@router.delete("/dev/apps/{app_name}/eval-sets/{eval_set_id}")
async def change_evals(request: Request, app_name: str) -> None:
    """Creating, changing or running evaluations: 501."""
    checked(request, app_name)
    raise _unsupported(EVALS)


# ---- agent tests ----------------------------------------------------------------------

@router.get("/dev/apps/{app_name}/tests")
async def tests(request: Request, app_name: str) -> list[str]:
    """No agent tests."""
    checked(request, app_name)
    return []


@router.get("/dev/apps/{app_name}/tests/{test_name}")
async def no_such_test(request: Request, app_name: str) -> None:
    """There are no tests to read."""
    checked(request, app_name)
    raise HTTPException(404, "Test not found: " + TESTS)


@router.post("/dev/apps/{app_name}/tests/rebuild")
@router.post("/dev/apps/{app_name}/tests/run")
@router.put("/dev/apps/{app_name}/tests/{test_name}")
@router.delete("/dev/apps/{app_name}/tests/{test_name}")
async def change_tests(request: Request, app_name: str) -> None:
    """Creating, running or deleting agent tests: 501."""
    checked(request, app_name)
    raise _unsupported(TESTS)


# ---- the builder and deployment -----------------------------------------------------------

@router.get("/dev/apps/{app_name}/builder", response_class=PlainTextResponse)
async def builder_file(request: Request, app_name: str) -> str:
    """No YAML agent definition: empty text (ADK's answer when an app has none)."""
    checked(request, app_name)
    return ""


@router.post("/dev/apps/{app_name}/builder/save")
@router.post("/dev/apps/{app_name}/builder/cancel")
@router.get("/dev/apps/{app_name}/deploy/defaults")
@router.post("/dev/apps/{app_name}/deploy/{target}")
async def builder_or_deploy(request: Request, app_name: str) -> None:
    """Saving agent definitions or deploying: 501."""
    checked(request, app_name)
    raise _unsupported(DEPLOY if "/deploy/" in request.url.path else BUILDER)
