"""Our runtime against google-adk 2.13's own recorded behaviour (tests/golden/adk_2_13.json).

The scenarios live in ``tests/golden/scenarios.py`` and run unchanged against both frameworks;
``tests/golden/record_adk.py`` (run with the google-adk venv) writes the golden file. Each test
runs one scenario against ``orchestrator`` and compares the whole normalised record.

``KNOWN_DIFFERENCES`` lists, per scenario, record fields where we differ from ADK on purpose;
those fields (and only those) are masked before comparing. Everything else must be equal.
The only entry is wording (an error message's prose); behaviour matches everywhere else.
"""

from __future__ import annotations

import copy
import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import (
    AgentTool,
    App,
    BaseLlm,
    InMemoryRunner,
    LlmAgent,
    LlmResponse,
    LongRunningFunctionTool,
    RunConfig,
    SequentialAgent,
    StreamingMode,
    ToolContext,
)
from orchestrator.errors import LlmCallsLimitExceededError
from orchestrator.flows.quoted_turns import CONTEXT_PREAMBLE
from orchestrator.models import LlmCapabilities
from orchestrator.plugins import (
    BasePlugin,
    ContextFilterPlugin,
    GlobalInstructionPlugin,
    SaveFilesAsArtifactsPlugin,
)
from tests.golden import scenarios

GOLDEN = Path(__file__).parent / "golden" / "adk_2_13.json"

# scenario name -> {dotted path into the record: why we differ from google-adk on purpose}.
# A path names a key of the record (``requests``) or a nested one (``turns.1.events``); list
# indices are numbers. The value is masked on both sides. Keep this short and justified: a bug
# in orchestrator is not a known difference (leave the test failing and fix the core).
KNOWN_DIFFERENCES: dict[str, dict[str, str]] = {
    "p11_unknown_tool_through_callbacks": {
        "extra.trace.11.6": "The message of the ValueError an unknown tool's on_tool_error "
                            "callback gets is ADK's prose; ours names the tool and the "
                            "available ones in our words (its type is compared).",
    },
}

# The one text we word differently on purpose: the preamble that introduces another agent's
# turn in a model request. ADK's wording is its own prose; ours says the same thing in our
# words. Both are replaced by this placeholder before comparing; the quoted parts that follow
# (markers, layout, rendering of arguments and results) must match exactly.
PREAMBLE_PLACEHOLDER = "<other-agent preamble>"
ADK_PREAMBLE_START = "For context: below is a transcript of what another agent did"


def our_namespace() -> Any:
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


def load_golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def mask_path(record: dict[str, Any], path: str) -> None:
    """Mask the value at a dotted path (a missing path raises: the list is stale)."""
    *parents, last = path.split(".")
    node: Any = record
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = "<known difference>"
    else:
        node[last] = "<known difference>"


def _mask_preambles(node: Any) -> Any:
    if isinstance(node, list):
        if (len(node) == 2 and node[0] == "text" and isinstance(node[1], str)
                and (node[1] == CONTEXT_PREAMBLE or node[1].startswith(ADK_PREAMBLE_START))):
            return ["text", PREAMBLE_PLACEHOLDER]
        return [_mask_preambles(n) for n in node]
    if isinstance(node, dict):
        return {k: _mask_preambles(v) for k, v in node.items()}
    return node


def without_known_differences(name: str, record: dict[str, Any]) -> dict[str, Any]:
    record = _mask_preambles(copy.deepcopy(record))
    for path in KNOWN_DIFFERENCES.get(name, {}):
        mask_path(record, path)
    return record


def readable_diff(expected: Any, actual: Any) -> str:
    want = json.dumps(expected, indent=1, sort_keys=True).splitlines()
    got = json.dumps(actual, indent=1, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(
        want, got, fromfile="google-adk 2.13", tofile="orchestrator", lineterm="", n=4
    ))


def test_golden_file_covers_every_scenario():
    assert sorted(load_golden()) == sorted(scenarios.SCENARIOS), (
        "tests/golden/adk_2_13.json is stale: re-run "
        "`tests/golden/record_adk.py` with the python of a venv holding google-adk==2.13.0"
    )


def test_known_differences_name_real_scenarios():
    assert set(KNOWN_DIFFERENCES) <= set(scenarios.SCENARIOS)


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_matches_google_adk(name: str) -> None:
    golden = load_golden()
    if name not in golden:
        pytest.fail(f"{name} has no google-adk record; re-run tests/golden/record_adk.py")
    expected = without_known_differences(name, golden[name])
    # Round-trip through JSON so tuples/lists and key types compare as in the file.
    actual = json.loads(scenarios.to_json({name: scenarios.run_scenario(our_namespace(), name)}))
    actual = without_known_differences(name, actual[name])
    if actual != expected:
        pytest.fail(
            f"{name}: orchestrator differs from google-adk 2.13 "
            f"({scenarios.SCENARIOS[name].__doc__})\n{readable_diff(expected, actual)}",
            pytrace=False,
        )
