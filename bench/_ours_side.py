"""The runner_overhead workload on adk-celery's orchestrator (run by our venv's python)."""

import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root

from _workload import Framework, main  # noqa: E402

from orchestrator import BaseLlm, FunctionTool, InMemoryRunner, LlmAgent, LlmResponse  # noqa: E402


def _version() -> str:
    try:
        return metadata.version("adk-celery")
    except metadata.PackageNotFoundError:
        return "working tree"


if __name__ == "__main__":
    main(
        Framework(
            name="ours",
            version=_version(),
            LlmAgent=LlmAgent,
            InMemoryRunner=InMemoryRunner,
            FunctionTool=FunctionTool,
            BaseLlm=BaseLlm,
            LlmResponse=LlmResponse,
        )
    )
