"""The HTTP golden run's apps (``tests/golden/api_apps.py``) built with our classes, for the
orchestrators and workers behind ``adk-celery api`` in ``tests/test_api_golden.py``."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from orchestrator import App, LlmAgent, LlmRequest, LongRunningFunctionTool, ToolContext
from orchestrator.models.fake import Chunks, FunctionLlm
from tests.golden import api_apps


def _answer(request: LlmRequest) -> Any:
    return Chunks(api_apps.answer(request.contents))


def _model() -> FunctionLlm:
    return FunctionLlm(record_requests=False, fn=_answer)


_APPS = api_apps.build_apps(SimpleNamespace(
    App=App, LlmAgent=LlmAgent, LongRunningFunctionTool=LongRunningFunctionTool,
    ToolContext=ToolContext), _model)
weather_app = _APPS["weather"]
approval_app = _APPS["approval"]

APP_SPECS = "tests.apps_api_golden:weather_app,tests.apps_api_golden:approval_app"
