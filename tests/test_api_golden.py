"""``adk-celery api`` against google-adk 2.13's own api_server (tests/golden/adk_api_2_13.json).

The steps of ``tests/golden/api_steps.py`` (every ADK route: apps, sessions, artifacts,
``/run``, ``/run_sse`` with and without streaming, a pause on a long-running call and its
answer by a function-response message, the error cases) were sent to google-adk's server by
``tests/golden/record_api.py``. Here the same steps go, in the same order, to ``adk-celery
api`` over a real redis-server, orchestrator and worker (one stack for the module), and each
masked answer (status code and JSON) must equal google-adk's. Where google-adk 2.13 is
installed (the ``devui`` extra, as in CI), the recording is also redone and compared, so the
stored file cannot drift from what google-adk answers.

``KNOWN_DIFFERENCES`` names the few places where we differ on purpose, each with why and with
the answer we give instead (asserted as exactly as google-adk's).
"""

from __future__ import annotations

import copy
import difflib
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.apps_api_golden import APP_SPECS
from tests.golden import api_steps
from tests.support.processes import stack_env, start_celery_process
from tests.test_api import start_api

GOLDEN = Path(__file__).parent / "golden" / "adk_api_2_13.json"

Ours = Callable[[dict[str, Any]], dict[str, Any]]
"""From google-adk's masked answer to a step, the answer we give on purpose."""


def _without_node_info(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_node_info(v) for k, v in node.items() if k != "nodeInfo"}
    if isinstance(node, list):
        return [_without_node_info(v) for v in node]
    return node


def _answer(status: int, detail: str) -> Ours:
    return lambda _: {"status": status, "json": {"detail": detail}}


def _detail(detail: str) -> Ours:
    return lambda adk: {**adk, "json": {"detail": detail}}


_UNKNOWN_APP = "Agent not found: 'nope'. No app of that name is served here (ADK_CELERY_APPS)."

# Where we differ from google-adk on purpose: name -> (the steps concerned, None for all;
# from google-adk's answer, ours). Each says why. Any other difference fails the test.
KNOWN_DIFFERENCES: dict[str, tuple[frozenset[str] | None, Ours]] = {
    # google-adk 2.x runs an agent tree as a graph of workflow nodes and stamps each event
    # with its node path ("forecaster@1"; "" for the user's). Our runtime has no node graph:
    # its events carry no nodeInfo.
    "events_have_no_node_path": (None, _without_node_info),
    # google-adk's loader goes on to name the directory it searched; we serve the apps of
    # settings, not of a directory. The first sentence is google-adk's.
    "unknown_app_names_no_directory": (
        frozenset({"app_info_missing_app", "run_missing_app"}), _detail(_UNKNOWN_APP)),
    # google-adk creates a session for any app name; we refuse an app this deployment does not
    # serve, as every route does (a token opens named apps; a session no orchestrator can run
    # would only collect runs that fail).
    "sessions_only_for_served_apps": (
        frozenset({"create_session_unknown_app"}), _answer(404, _UNKNOWN_APP)),
    # google-adk's in-memory artifact service says only its first sentence; ours goes on to
    # say what is accepted.
    "artifact_error_says_what_is_accepted": (frozenset({"save_artifact_empty_part"}), _detail(
        "Not supported artifact type. The part must carry inline_data, text or file_data.")),
    # A run that fails: google-adk lets the exception escape /run and Starlette answers 500
    # with the text "Internal Server Error" (an unhandled error); we answer 500 with the
    # invocation's error as JSON, as for every other error.
    "failed_run_says_why": (
        frozenset({"run_tool_error"}), _answer(500, "RuntimeError: the tool blew up")),
    # Trust: a client's only writes to a session's history are its own messages (the
    # security rules of the intake), so restoring a session from client-supplied events,
    # which may hold function calls and responses, is refused.
    "no_session_restored_from_client_events": (
        frozenset({"create_session_with_events"}),
        _answer(422, "events: restoring a session's events is not supported here")),
    # Trust: app: state is shared by every user of the app; clients may write it only when
    # the deployment allows it (ADK_CELERY_CLIENT_APP_STATE), as in every door's intake.
    "app_state_needs_permission": (frozenset({"patch_app_state"}), _answer(
        422, "state_delta.app:shared: app: keys are shared by every user of the app; clients "
             "may not write them (ADK_CELERY_CLIENT_APP_STATE).")),
}


@pytest.fixture(scope="module")
def answers(redis_url: str) -> Iterator[dict[str, Any]]:
    """Our masked answers to every step, from one stack of real processes."""
    url = redis_url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    env = stack_env(url, APP_SPECS, lease_retry_seconds="0.2")
    processes = [start_celery_process("orchestrator", "orch-golden", env),
                 start_celery_process("worker", "work-golden", env)]
    try:
        api, base = start_api(env)
        processes.append(api)
        with httpx.Client(base_url=base, timeout=30) as client:

            def send(method: str, path: str, body: Any,
                     params: dict[str, Any] | None) -> tuple[int, str, str]:
                response = client.request(method, path, json=body, params=params)
                return response.status_code, response.headers.get("content-type", ""), response.text

            yield api_steps.masked(api_steps.run_steps(send))
    finally:
        for process in processes:
            process.stop()


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


def _expected(name: str, adk: dict[str, Any]) -> dict[str, Any]:
    """google-adk's answer, with our known differences applied."""
    expected = copy.deepcopy(adk)
    for steps, ours in KNOWN_DIFFERENCES.values():
        if steps is None or name in steps:
            expected = ours(expected)
    return expected


def _diff(expected: Any, actual: Any) -> str:
    want = json.dumps(expected, indent=1, sort_keys=True).splitlines()
    got = json.dumps(actual, indent=1, sort_keys=True).splitlines()
    return "\n".join(difflib.unified_diff(want, got, fromfile="google-adk 2.13",
                                          tofile="adk-celery api", lineterm="", n=3))


def test_golden_file_has_every_step() -> None:
    assert list(_golden()) == sorted(name for name, *_ in api_steps.STEPS), (
        "tests/golden/adk_api_2_13.json is stale: re-run tests/golden/record_api.py with the "
        "python of a venv holding google-adk==2.13.0")
    for steps, _ in KNOWN_DIFFERENCES.values():
        assert steps is None or steps <= set(_golden())


def test_golden_file_is_what_google_adk_answers_now() -> None:
    """Where google-adk 2.13 is installed (the ``devui`` extra), record afresh and compare."""
    try:
        installed = metadata.version("google-adk")
    except metadata.PackageNotFoundError:
        pytest.skip("google-adk is not installed (pip install -e '.[devui]')")
    if installed != "2.13.0":
        pytest.skip(f"google-adk {installed} is installed, not 2.13.0")
    check = subprocess.run([sys.executable, str(GOLDEN.parent / "record_api.py"), "--check"],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("name", [name for name, *_ in api_steps.STEPS])
def test_answers_as_google_adk(name: str, answers: dict[str, Any]) -> None:
    expected = _expected(name, _golden()[name])
    actual = answers[name]
    if actual != expected:
        pytest.fail(f"{name}: adk-celery api answers differently from google-adk 2.13\n"
                    f"{_diff(expected, actual)}", pytrace=False)

