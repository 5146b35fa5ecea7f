"""The app of bench/long_session.py: runner_overhead's one-tool agent, for the orchestrator.

Built from ``_workload.py``'s agent, tool and scripted model (each invocation: a call to
``get_weather``, its answer, a final text), with adk-celery's classes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # _workload is a sibling script

import _workload  # noqa: E402

from orchestrator import App, BaseLlm, FunctionTool, InMemoryRunner, LlmAgent, LlmResponse  # noqa: E402

OURS = _workload.Framework(
    name="ours", version="", LlmAgent=LlmAgent, InMemoryRunner=InMemoryRunner,
    FunctionTool=FunctionTool, BaseLlm=BaseLlm, LlmResponse=LlmResponse,
)

weather_app = App(name=_workload.APP_NAME, root_agent=_workload.make_runner(OURS).agent)

APP_SPECS = "bench._long_session_apps:weather_app"
