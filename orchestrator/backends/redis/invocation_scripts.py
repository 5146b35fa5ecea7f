"""The Lua scripts saving invocation records and storing call results, with their operands.

Used by :class:`~.invocation_store.RedisInvocationStore`, and (the same operands, in the
scripts that also push a work item) by :mod:`.session_queue_scripts`.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends.redis import keys
from orchestrator.backends.redis.jobs import watch_member
from orchestrator.backends.redis.lua import LuaScript, Operands, key_field
from orchestrator.backends.redis.lua_functions import LUA_PUT_RESULT, LUA_SAVE_RECORD, STATUSES_MAXLEN
from orchestrator.distributed.models import InvocationRecord, ToolResult
from orchestrator.distributed.streams import STREAM_MAXLEN
from orchestrator.sessions.state import without_temp

STATUS_STREAM_MAXLEN = STREAM_MAXLEN
"""Status entries share the stream with live events: trim it to the same length."""


@dataclass(frozen=True, kw_only=True)
class RecordKeys(Operands):
    """The keys saving an invocation record writes (``keys.invocation_record_keys``)."""

    record_key: str = key_field()
    """The record's hash."""
    stream: str = key_field()
    """The invocation's live stream."""
    statuses: str = key_field()
    """Its status-only stream."""


@dataclass(frozen=True, kw_only=True)
class SaveRecord(RecordKeys):
    """Operands of :data:`CREATE_RECORD` and :data:`SAVE_RECORD`."""

    record: str
    """The record's JSON."""
    status: str
    ttl: int
    maxlen: int
    shown: str = ""
    """The record's JSON for its status entries, when it differs ('': ``record``)."""


def save_record_operands(record: InvocationRecord, ttl: int) -> SaveRecord:
    """The operands saving ``record`` (expiring ``ttl`` seconds after).

    ``temp:`` values of the record's ``state_delta`` stay in the record until its start has
    applied them, and never go to its status entries: those are read by every watcher and
    kept as long as the record (a value meant for one invocation, a per-request key say).
    """
    record_key, stream, statuses = keys.invocation_record_keys(record.app_name, record.invocation_id)
    kept = without_temp(record.state_delta)
    shown = (record.model_copy(update={"state_delta": kept}).model_dump_json()
             if kept is not record.state_delta else "")
    return SaveRecord(record_key=record_key, stream=stream, statuses=statuses,
                      record=record.model_dump_json(), status=record.status.value, ttl=ttl,
                      maxlen=STATUS_STREAM_MAXLEN, shown=shown)


CREATE_RECORD = LuaScript(SaveRecord, """
if not save_record(record_key, stream, statuses, record, status, ttl, maxlen, true, shown) then
  return 0
end
return 1
""", functions=[LUA_SAVE_RECORD])
"""Store a new record and publish its status: 1, or 0 (nothing written) if one exists."""

SAVE_RECORD = LuaScript(SaveRecord, """
save_record(record_key, stream, statuses, record, status, ttl, maxlen, false, shown)
return 1
""", functions=[LUA_SAVE_RECORD])
"""Overwrite a record and publish its status."""


@dataclass(frozen=True, kw_only=True)
class PutResult(Operands):
    """Operands of :data:`PUT_RESULT`: a call's result (see ``put_result`` in :mod:`.lua_functions`)."""

    results: str = key_field()
    """The invocation's results hash."""
    watch: str = key_field()
    """The job watch index the call leaves."""
    jobs: str = key_field()
    """The invocation's jobs hash (``keys.invocation_jobs``)."""
    call_id: str
    result: str
    """The result's JSON."""
    ttl: int
    member: str
    """The call's member of the watch index (:func:`~.jobs.watch_member`)."""
    final: str
    """'1' if the result answers the call (not a pending placeholder, not a paused branch's
    turn), else '0'."""


PUT_RESULT = LuaScript(PutResult, """
if not put_result(results, watch, jobs, call_id, result, ttl, member, final) then return 0 end
return 1
""", functions=[LUA_PUT_RESULT])
"""Store a call's result: 1, or 0 (nothing written) if a final one is there already."""


@dataclass(frozen=True, kw_only=True)
class PutPending(PutResult):
    """Operands of :data:`PUT_PENDING`: a call's pending placeholder, and where to say so."""

    stream: str = key_field()
    """The invocation's live stream."""
    statuses: str = key_field()
    """Its status-only stream."""
    tool: str
    maxlen: int
    """The live stream's cap (``XADD MAXLEN ~``)."""


PUT_PENDING = LuaScript(PutPending, f"""
if not put_result(results, watch, jobs, call_id, result, ttl, member, final) then return 0 end
-- The call now waits for an answer from outside, and nothing else would say so: a follower
-- paused on it (a /run, a /run_sse) learns it from this entry, written with the placeholder
-- (never one without the other). Streams that are gone (expired) are not made again.
local function tell(key, cap)
  if redis.call('EXISTS', key) == 1 then
    redis.call('XADD', key, 'MAXLEN', '~', cap, '*', 'kind', 'waiting', 'call', call_id, 'tool', tool)
  end
end
tell(stream, maxlen)
tell(statuses, {STATUSES_MAXLEN})
return 1
""", functions=[LUA_PUT_RESULT])
"""Store a call's pending placeholder (as :data:`PUT_RESULT`) and, if it was stored, add a
``waiting`` entry (``call``, ``tool``) to the invocation's live and status streams: 1, else
0 and nothing written."""


def put_pending_operands(
    app_name: str, invocation_id: str, result: ToolResult, *, watch: str, ttl: int
) -> PutPending:
    """The operands storing the placeholder ``result`` and telling the invocation's followers."""
    stored = put_result_operands(app_name, invocation_id, result, watch=watch, ttl=ttl)
    _, stream, statuses = keys.invocation_record_keys(app_name, invocation_id)
    return PutPending(**stored.field_values(), stream=stream, statuses=statuses,
                      tool=result.tool_name, maxlen=STREAM_MAXLEN)


def put_result_operands(
    app_name: str, invocation_id: str, result: ToolResult, *, watch: str, ttl: int
) -> PutResult:
    """The operands storing ``result`` (taking its call out of the watch index ``watch``)."""
    return PutResult(results=keys.invocation_results(app_name, invocation_id), watch=watch,
                     jobs=keys.invocation_jobs(app_name, invocation_id),
                     call_id=result.function_call_id, result=result.model_dump_json(), ttl=ttl,
                     member=watch_member(app_name, invocation_id, result.function_call_id),
                     final="0" if result.response is None else "1")
