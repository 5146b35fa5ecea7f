"""The HTTP requests of the API's golden run and how their answers are recorded and masked.

The same steps, in the same order, are sent to google-adk's own api_server
(``record_api.py``) and to ``adk-celery api`` (``tests/test_api_golden.py``); each answer is
kept as its status code and its JSON body (for Server-Sent Events, the JSON of each frame;
for anything else, its text), then masked by :class:`Masker`. This module imports neither
framework.

What is masked, and why (everything else is compared as is):

- ids the server makes up (``id`` of a session or event, ``invocationId``, function-call
  ids and ``longRunningToolIds``): random on both sides. Each distinct value becomes
  ``<id N>``, numbered in order of first appearance over the whole run (keys taken in
  sorted order, so a server's key order does not matter), so equal ids stay equal (a function response answers the call it names; an answer resumes the invocation
  that paused). A known prefix (``e-``, ``p-``, ``adk-``) is kept: it is part of the form.
  Ids a request chose (``FIXED_IDS``) are not masked.
- times (``timestamp``, ``lastUpdateTime``, ``createTime``): clocks.
- ``/version``'s ``version`` and ``language_version``: the serving package's version
  (google-adk's there, adk-celery's here) and the Python that ran each side.
- an artifact version's ``canonicalUri``: where the artifact service stores it
  (``memory://`` in google-adk's in-memory service, Redis here).

The recorder also replaces its temporary agents directory, which google-adk names in one
error, by ``<agents dir>``. Steps whose answers differ on purpose come last: ids only one
side shows would shift the numbering of every later step.
"""

import json
import re
from collections.abc import Callable
from typing import Any

USER = "alice"
FIXED_IDS = frozenset({"s1", "s2", "s3", "s4", "s5", "s-missing"})
"""Session ids the requests choose: shown as they are."""

_ID_KEYS = frozenset({"id", "invocationId"})
_TIME_KEYS = frozenset({"timestamp", "lastUpdateTime", "createTime"})
_PREFIX = re.compile(r"^(e-|p-|adk-)")

Send = Callable[[str, str, Any, dict[str, Any] | None], tuple[int, str, str]]
"""``send(method, path, json_body, params)`` -> (status code, content type, body text)."""


def _sessions(user: str = USER, app: str = "weather") -> str:
    return f"/apps/{app}/users/{user}/sessions"


def _artifacts(session: str = "s1") -> str:
    return f"{_sessions()}/{session}/artifacts"


def _message(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


def _run(session: str, text: str, app: str = "weather", **extra: Any) -> dict[str, Any]:
    return {"appName": app, "userId": USER, "sessionId": session, "newMessage": _message(text),
            **extra}


def _answer_message() -> dict[str, Any]:
    return {"role": "user", "parts": [{"functionResponse": {
        "id": "$call_id", "name": "ask_approval", "response": {"approved": True}}}]}


def _call_id(events: list[dict[str, Any]]) -> str:
    call: str = events[-1]["content"]["parts"][0]["functionCall"]["id"]
    return call


# (name, method, path, JSON body, query parameters, captures: {variable: fn(body)}).
# ``$variable`` in a body is replaced by what an earlier step captured.
Step = tuple[str, str, str, Any, dict[str, Any] | None, dict[str, Callable[[Any], str]]]

STEPS: list[Step] = [
    ("health", "GET", "/health", None, None, {}),
    ("version", "GET", "/version", None, None, {}),
    ("list_apps", "GET", "/list-apps", None, None, {}),
    ("list_apps_detailed", "GET", "/list-apps", None, {"detailed": "true"}, {}),
    ("app_info_weather", "GET", "/apps/weather/app-info", None, None, {}),
    ("app_info_approval", "GET", "/apps/approval/app-info", None, None, {}),
    ("app_info_missing_app", "GET", "/apps/nope/app-info", None, None, {}),
    # -- sessions
    ("create_session_no_body", "POST", _sessions(), None, None, {}),
    ("create_session_with_id_and_state", "POST", _sessions(),
     {"sessionId": "s1", "state": {"k": 1, "user:tz": "UTC"}}, None, {}),
    ("create_session_again", "POST", _sessions(), {"sessionId": "s1"}, None, {}),
    ("create_session_unknown_app", "POST", _sessions(app="nope"), {"sessionId": "s1"}, None, {}),
    ("create_session_state_only", "POST", _sessions(), {"state": {"k": 0}}, None, {}),
    ("create_session_old_route", "POST", f"{_sessions()}/s2", {"color": "red"}, None, {}),
    ("create_session_old_route_again", "POST", f"{_sessions()}/s2", None, None, {}),
    ("get_session", "GET", f"{_sessions()}/s1", None, None, {}),
    ("get_session_missing", "GET", f"{_sessions()}/s-missing", None, None, {}),
    ("get_session_other_user", "GET", f"{_sessions('bob')}/s1", None, None, {}),
    ("list_sessions", "GET", _sessions(), None, None, {}),
    ("list_sessions_other_user", "GET", _sessions("bob"), None, None, {}),
    ("patch_state", "PATCH", f"{_sessions()}/s1", {"stateDelta": {"k": 2, "new": [1, 2]}},
     None, {}),
    ("patch_state_missing_session", "PATCH", f"{_sessions()}/s-missing",
     {"stateDelta": {"k": 3}}, None, {}),
    ("patch_state_no_delta", "PATCH", f"{_sessions()}/s1", {}, None, {}),
    ("delete_session", "DELETE", f"{_sessions()}/s2", None, None, {}),
    ("get_deleted_session", "GET", f"{_sessions()}/s2", None, None, {}),
    ("delete_session_missing", "DELETE", f"{_sessions()}/s-missing", None, None, {}),
    # -- artifacts
    ("save_artifact", "POST", _artifacts(), {"filename": "a.txt", "artifact": {"text": "one"}},
     None, {}),
    ("save_artifact_again", "POST", _artifacts(), {
        "filename": "a.txt", "artifact": {"text": "two"}, "customMetadata": {"by": "test"}},
     None, {}),
    ("save_user_artifact", "POST", _artifacts(), {"filename": "user:profile.bin", "artifact": {
        "inlineData": {"mimeType": "application/octet-stream", "data": "AAEC"}}}, None, {}),
    ("save_artifact_empty_part", "POST", _artifacts(), {"filename": "b.txt", "artifact": {}},
     None, {}),
    ("list_artifacts", "GET", _artifacts(), None, None, {}),
    ("list_artifacts_other_session", "GET", _artifacts("s-missing"), None, None, {}),
    ("list_versions", "GET", f"{_artifacts()}/a.txt/versions", None, None, {}),
    ("list_versions_metadata", "GET", f"{_artifacts()}/a.txt/versions/metadata", None, None, {}),
    ("version_metadata", "GET", f"{_artifacts()}/a.txt/versions/0/metadata", None, None, {}),
    ("version_metadata_latest", "GET", f"{_artifacts()}/a.txt/versions/latest/metadata",
     None, None, {}),
    ("version_metadata_missing", "GET", f"{_artifacts()}/a.txt/versions/9/metadata",
     None, None, {}),
    ("version_metadata_bad_id", "GET", f"{_artifacts()}/a.txt/versions/first/metadata",
     None, None, {}),
    ("load_artifact", "GET", f"{_artifacts()}/a.txt", None, None, {}),
    ("load_artifact_version_query", "GET", f"{_artifacts()}/a.txt", None, {"version": "0"}, {}),
    ("load_artifact_version_path", "GET", f"{_artifacts()}/a.txt/versions/0", None, None, {}),
    ("load_artifact_latest_path", "GET", f"{_artifacts()}/a.txt/versions/latest", None, None, {}),
    ("load_artifact_bad_version", "GET", f"{_artifacts()}/a.txt/versions/first", None, None, {}),
    ("load_user_artifact", "GET", f"{_artifacts()}/user:profile.bin", None, None, {}),
    ("load_artifact_missing", "GET", f"{_artifacts()}/b.txt", None, None, {}),
    ("delete_artifact", "DELETE", f"{_artifacts()}/a.txt", None, None, {}),
    ("list_artifacts_after_delete", "GET", _artifacts(), None, None, {}),
    ("list_versions_after_delete", "GET", f"{_artifacts()}/a.txt/versions", None, None, {}),
    ("load_deleted_artifact", "GET", f"{_artifacts()}/a.txt", None, None, {}),
    ("delete_artifact_missing", "DELETE", f"{_artifacts()}/b.txt", None, None, {}),
    # -- runs
    ("run_text", "POST", "/run", _run("s1", "hello"), None, {}),
    ("run_plain_tool", "POST", "/run", _run("s1", "weather in Oslo"), None, {}),
    ("run_with_state_delta", "POST", "/run", _run("s1", "hi", stateDelta={"mood": "good"}),
     None, {}),
    ("run_streaming_flag", "POST", "/run", _run("s1", "no chunks here", streaming=True), None, {}),
    ("run_missing_session", "POST", "/run", _run("s-missing", "hello"), None, {}),
    ("run_missing_app", "POST", "/run", _run("s1", "hello", app="nope"), None, {}),
    ("run_without_user", "POST", "/run", {"appName": "weather", "sessionId": "s1"}, None, {}),
    ("run_sse", "POST", "/run_sse", _run("s1", "hello again"), None, {}),
    ("run_sse_streaming", "POST", "/run_sse", _run("s1", "stream me", streaming=True), None, {}),
    ("run_sse_artifact", "POST", "/run_sse", _run("s1", "note buy milk"), None, {}),
    ("run_sse_missing_session", "POST", "/run_sse", _run("s-missing", "hello"), None, {}),
    ("run_tool_error", "POST", "/run", _run("s1", "boom"), None, {}),
    ("run_sse_tool_error", "POST", "/run_sse", _run("s1", "boom"), None, {}),
    ("get_session_after_runs", "GET", f"{_sessions()}/s1", None, None, {}),
    ("list_sessions_after_runs", "GET", _sessions(), None, None, {}),
    ("list_artifacts_after_runs", "GET", _artifacts(), None, None, {}),
    # -- a long-running call, answered by a function-response message
    ("create_approval_session", "POST", _sessions(app="approval"), {"sessionId": "s3"}, None, {}),
    ("run_pauses_on_long_running_call", "POST", "/run", _run("s3", "pay 100", app="approval"),
     None, {"call_id": _call_id}),
    ("run_answers_the_call", "POST", "/run", {
        "appName": "approval", "userId": USER, "sessionId": "s3",
        "newMessage": _answer_message()}, None, {}),
    ("get_approval_session", "GET", f"{_sessions(app='approval')}/s3", None, None, {}),
    ("create_approval_session_sse", "POST", _sessions(app="approval"), {"sessionId": "s4"},
     None, {}),
    ("run_sse_pauses_on_long_running_call", "POST", "/run_sse",
     _run("s4", "pay 7", app="approval"), None, {"call_id": _call_id}),
    ("run_sse_answers_the_call", "POST", "/run_sse", {
        "appName": "approval", "userId": USER, "sessionId": "s4",
        "newMessage": _answer_message()}, None, {}),
    # -- last: answers that differ on purpose (ids they hold would shift the numbering)
    ("create_session_with_events", "POST", _sessions("carol"), {"sessionId": "s5", "events": [
        {"author": "user", "invocationId": "e-restored",
         "content": {"role": "user", "parts": [{"text": "hello from before"}]}}]}, None, {}),
    ("patch_app_state", "PATCH", f"{_sessions(app='approval')}/s3",
     {"stateDelta": {"app:shared": 1}}, None, {}),
]


def _substitute(node: Any, captured: dict[str, str]) -> Any:
    if isinstance(node, str) and node.startswith("$"):
        return captured[node[1:]]
    if isinstance(node, list):
        return [_substitute(n, captured) for n in node]
    if isinstance(node, dict):
        return {k: _substitute(v, captured) for k, v in node.items()}
    return node


def _body(content_type: str, text: str) -> dict[str, Any]:
    """The answer's body: its JSON, the JSON of each Server-Sent Events frame, or its text."""
    if content_type.startswith("text/event-stream"):
        frames = []
        for block in text.split("\n\n"):
            data = [line.removeprefix("data:").strip() for line in block.splitlines()
                    if line.startswith("data:")]
            if data:
                frames.append(json.loads("\n".join(data)))
        return {"events": frames}
    if content_type.startswith("application/json"):
        return {"json": json.loads(text)}
    return {"text": text}  # e.g. a server error's plain text


def run_steps(send: Send) -> dict[str, Any]:
    """Send every step in order; ``{step: {"status": ..., "json" | "events" | "text": ...}}``
    before masking (captured values are read from the raw answers)."""
    captured: dict[str, str] = {}
    answers: dict[str, Any] = {}
    for name, method, path, body, params, captures in STEPS:
        status, content_type, text = send(method, path, _substitute(body, captured), params)
        answer = {"status": status, **_body(content_type, text)}
        answers[name] = answer
        for variable, read in captures.items():
            try:
                captured[variable] = read(answer.get("json", answer.get("events")))
            except (KeyError, IndexError, TypeError):  # the step's own comparison shows why
                captured[variable] = f"<no {variable} in the answer to {name}>"
    return answers


class Masker:
    """Replaces what legitimately differs between two servers (see the module docstring)."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}

    def _id(self, value: Any) -> Any:
        if not isinstance(value, str) or value in FIXED_IDS:
            return value
        if value not in self._ids:
            match = _PREFIX.match(value)
            self._ids[value] = f"{match.group(1) if match else ''}<id {len(self._ids)}>"
        return self._ids[value]

    def mask(self, node: Any) -> Any:
        """``node`` with ids, times and version strings replaced."""
        if isinstance(node, dict):  # in key order: numbering must not follow the server's order
            return {k: self._value(k, node[k]) for k in sorted(node)}
        if isinstance(node, list):
            return [self.mask(n) for n in node]
        return node

    def _value(self, key: str, value: Any) -> Any:
        if key in _ID_KEYS:
            return self._id(value)
        if key == "longRunningToolIds" and isinstance(value, list):
            return [self._id(v) for v in value]
        if key in _TIME_KEYS and isinstance(value, int | float):
            return "<time>"
        if key == "canonicalUri" and isinstance(value, str):
            return "<storage uri>"
        return self.mask(value)


def masked(answers: dict[str, Any]) -> dict[str, Any]:
    """The answers of a run with ids, times and storage places masked (one numbering)."""
    masker = Masker()
    out = {name: masker.mask(answer) for name, answer in answers.items()}
    version = out["version"].get("json")
    if isinstance(version, dict):
        for key in ("version", "language_version"):
            if key in version:
                version[key] = f"<{key}>"
    return out


def to_json(record: dict[str, Any]) -> str:
    """Stable text of a record (the golden file's form)."""
    return json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
