"""A remote call's progress (``tool_context.report_progress``) in Redis: status and stream.

A worker running a job reports each progress payload with :data:`REPORT` (one script, one
round trip): it becomes the call's latest progress in the job journal (field ``p:<call id>``
of :func:`~orchestrator.backends.redis.keys.invocation_jobs`, which the invocation's status shows for
each pending call) and an entry of the invocation's live stream::

    {"kind": "progress", "call": <call id>, "tool": <name>, "attempt": <n>, "at": <epoch s>,
     "progress": <payload JSON>}

Only the attempt now out may report: a late report of an attempt the watchdog replaced is
dropped, and so is one made once the call has its result (a thread the tool left behind,
reporting after its job ended: followers would see progress after the call's answer) or
once the invocation is cancelled. Nothing is written once the invocation's stream is gone
(expired).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import dumps
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.distributed.streams import STREAM_MAXLEN


@dataclass(frozen=True, kw_only=True)
class ReportProgress(Operands):
    """Operands of :data:`REPORT`: one progress report of an attempt of a call."""

    jobs: str = key_field()
    """The invocation's jobs hash (``keys.invocation_jobs``)."""
    stream: str = key_field()
    """The invocation's live stream."""
    results: str = key_field()
    """The invocation's results hash (``keys.invocation_results``)."""
    cancel: str = key_field()
    """The invocation's cancel flag (``keys.cancel_flag``)."""
    call_id: str
    attempt: int
    tool: str
    at: str
    """When it was reported (epoch seconds)."""
    payload: str
    """The report's JSON."""
    journal: str
    """The journal field's JSON (the call's latest progress)."""
    maxlen: int


REPORT = LuaScript(ReportProgress, """
if redis.call('HGET', jobs, 'a:' .. call_id) ~= attempt then return 0 end
if redis.call('EXISTS', stream) == 0 then return 0 end
if redis.call('HEXISTS', results, call_id) == 1 or redis.call('EXISTS', cancel) == 1 then
  return 0
end
redis.call('HSET', jobs, 'p:' .. call_id, journal)
redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', 'kind', 'progress', 'call', call_id,
  'tool', tool, 'attempt', attempt, 'at', at, 'progress', payload)
return 1
""")
"""Report progress: 1, or 0 (nothing written) if the attempt is not the one out, the call
has its result, the invocation is cancelled or its stream is gone."""


def report_operands(
    app_name: str, invocation_id: str, function_call_id: str, attempt: int, tool: str,
    at: float, payload: dict[str, Any],
) -> ReportProgress:
    """The operands of :data:`REPORT`; TypeError or ValueError if ``payload`` is not JSON."""
    encoded = dumps(payload)
    journal = dumps({"attempt": attempt, "at": at, "tool": tool, "progress": payload})
    return ReportProgress(
        jobs=keys.invocation_jobs(app_name, invocation_id),
        stream=keys.invocation_stream(app_name, invocation_id),
        results=keys.invocation_results(app_name, invocation_id),
        cancel=keys.cancel_flag(app_name, invocation_id), call_id=function_call_id,
        attempt=attempt, tool=tool, at=repr(at), payload=encoded, journal=journal,
        maxlen=STREAM_MAXLEN)


def latest_progress(raw: str | bytes | None, attempt: str | int | None) -> dict[str, Any] | None:
    """A call's latest report, from its journal field ``p:<call id>``.

    None unless it is the report of ``attempt`` (the call's ``a:<call id>``; None: any).
    """
    if not raw:
        return None
    try:
        latest = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(latest, dict) or (
        attempt is not None and str(latest.get("attempt")) != str(attempt)
    ):
        return None
    return latest
