"""The runner_overhead workload on google-adk (run by the ADK venv's python, never by ours)."""

import sys

import google.adk
from _workload import Framework, main
from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmCapabilities, LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool

if "orchestrator" in sys.modules:  # pragma: no cover - a PYTHONPATH mix-up
    raise SystemExit("_adk_side.py must not import adk-celery's orchestrator")


if __name__ == "__main__":
    main(
        Framework(
            name="google-adk",
            version=google.adk.__version__,
            LlmAgent=LlmAgent,
            InMemoryRunner=InMemoryRunner,
            FunctionTool=FunctionTool,
            BaseLlm=BaseLlm,
            LlmResponse=LlmResponse,
            capabilities=LlmCapabilities,
        )
    )
