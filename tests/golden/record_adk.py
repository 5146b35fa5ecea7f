"""Record google-adk's behaviour on the golden scenarios into ``adk_2_13.json``.

Run with the google-adk venv, never ours::

    <python of a venv with google-adk==2.13.0> tests/golden/record_adk.py [--check] [scenario ...]

With scenario names, only those are run and printed (the file is not written). ``--check`` runs
everything and exits non-zero if the stored file differs from a fresh recording.
"""

import logging
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import scenarios  # noqa: E402  (after the path tweak; this file is run as a script)
from golden_file import write_or_check  # noqa: E402

GOLDEN = HERE / "adk_2_13.json"
EXPECTED_VERSION = "2.13.0"


def adk_namespace() -> object:
    """The scenario namespace filled from google.adk."""
    from google.adk.agents import LlmAgent, RunConfig, SequentialAgent
    from google.adk.agents.invocation_context import LlmCallsLimitExceededError
    from google.adk.agents.run_config import StreamingMode
    from google.adk.apps import App
    from google.adk.models import BaseLlm, LlmCapabilities, LlmResponse
    from google.adk.plugins import BasePlugin
    from google.adk.plugins.context_filter_plugin import ContextFilterPlugin
    from google.adk.plugins.global_instruction_plugin import GlobalInstructionPlugin
    from google.adk.plugins.save_files_as_artifacts_plugin import SaveFilesAsArtifactsPlugin
    from google.adk.runners import InMemoryRunner
    from google.adk.tools import AgentTool, LongRunningFunctionTool, ToolContext

    return scenarios.namespace(
        AgentTool=AgentTool,
        App=App,
        BaseLlm=BaseLlm,
        BasePlugin=BasePlugin,
        ContextFilterPlugin=ContextFilterPlugin,
        GlobalInstructionPlugin=GlobalInstructionPlugin,
        InMemoryRunner=InMemoryRunner,
        LlmAgent=LlmAgent,
        LlmCallsLimitExceededError=LlmCallsLimitExceededError,
        LlmCapabilities=LlmCapabilities,
        LlmResponse=LlmResponse,
        LongRunningFunctionTool=LongRunningFunctionTool,
        RunConfig=RunConfig,
        SaveFilesAsArtifactsPlugin=SaveFilesAsArtifactsPlugin,
        SequentialAgent=SequentialAgent,
        StreamingMode=StreamingMode,
        ToolContext=ToolContext,
    )


def main(argv: list[str]) -> int:
    """Record every scenario (or print the named ones); return the exit status."""
    import google.adk

    if google.adk.__version__ != EXPECTED_VERSION:
        print(f"expected google-adk {EXPECTED_VERSION}, found {google.adk.__version__}")
        return 2
    # SequentialAgent is deprecated in 2.x and tool errors are logged; neither is recorded.
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)
    adk = adk_namespace()
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")]
    if names:
        print(scenarios.to_json({n: scenarios.run_scenario(adk, n) for n in names}), end="")
        return 0
    return write_or_check(GOLDEN, scenarios.to_json(scenarios.run_all(adk)), check=check,
                          recorded=f"{len(scenarios.SCENARIOS)} scenarios")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
