"""What ``/run_sse`` sends for an event or a failure, in the forms of ADK's ``/run_sse``."""

from __future__ import annotations

import copy
import re
import time
from typing import Any

_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.DOTALL)
"""An invocation's error as the orchestrator records an exception: ``Type: message``."""


def error_frame(error: str) -> dict[str, Any]:
    """The last frame of a failed run, from the invocation's error.

    As ADK's: the exception's type and message when the invocation failed on one
    (``InvocationFailed`` for any other failure, such as a lost lease or a timeout).
    """
    match = _EXCEPTION.match(error)
    error_type, message = match.groups() if match else ("InvocationFailed", error)
    return {"error": error, "error_details": {
        "error_type": error_type, "error_message": message, "timestamp": time.time()}}


def frames_of(event: dict[str, Any], *, split: bool) -> list[dict[str, Any]]:
    """The frames of one event (its wire JSON).

    As ADK's: with ``split``, an event holding both content and an artifact delta is sent
    as the event without the delta, then as the delta without the content (ADK's web UI
    renders artifacts from that second frame). ADK's clients answering a call
    (``functionCallEventId`` set) get it whole.
    """
    parts = (event.get("content") or {}).get("parts")
    if not (split and parts and event.get("actions", {}).get("artifactDelta")):
        return [event]
    content_only = copy.deepcopy(event)
    content_only["actions"]["artifactDelta"] = {}
    delta_only = copy.deepcopy(event)
    del delta_only["content"]
    return [content_only, delta_only]
