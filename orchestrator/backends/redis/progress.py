"""A remote call's progress (``tool_context.report_progress``) in Redis: status and stream.

A worker running a job reports each progress payload with :data:`REPORT` (one script, one
round trip): it becomes the call's latest progress in the job journal (field ``p:<call id>``
of :func:`~orchestrator.backends.redis.keys.invocation_jobs`, which the invocation's status shows for
each pending call) and an entry of the invocation's live stream::

    {"kind": "progress", "call": <call id>, "tool": <name>, "attempt": <n>, "at": <epoch s>,
     "progress": <payload JSON>}

Only the attempt now out may report: a late report of an attempt the watchdog replaced is
dropped. Nothing is written once the invocation's stream is gone (expired).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.codec import dumps
from orchestrator.distributed.streams import STREAM_MAXLEN

# KEYS: jobs hash, the invocation's stream. ARGV: call id, attempt, tool name, epoch seconds,
# payload JSON, the journal field's JSON, stream maxlen. 1 if reported, 0 if the attempt is
# not the one out (or the invocation's stream is gone).
REPORT = """
if redis.call('HGET', KEYS[1], 'a:' .. ARGV[1]) ~= ARGV[2] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'p:' .. ARGV[1], ARGV[6])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[7], '*', 'kind', 'progress', 'call', ARGV[1],
  'tool', ARGV[3], 'attempt', ARGV[2], 'at', ARGV[4], 'progress', ARGV[5])
return 1
"""


def report_operands(
    app_name: str, invocation_id: str, function_call_id: str, attempt: int, tool: str,
    at: float, payload: dict[str, Any],
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of :data:`REPORT`; TypeError or ValueError if ``payload`` is not JSON."""
    encoded = dumps(payload)
    journal = dumps({"attempt": attempt, "at": at, "tool": tool, "progress": payload})
    return ([keys.invocation_jobs(app_name, invocation_id),
             keys.invocation_stream(app_name, invocation_id)],
            [function_call_id, attempt, tool, repr(at), encoded, journal, STREAM_MAXLEN])


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
