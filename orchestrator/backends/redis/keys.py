"""Every Redis key name the project uses, in one place.

All keys start with ``adk:``. Ids inside key names are escaped (``%`` ``{`` ``}`` ``:`` are
percent-encoded), so an app, user, session or file name can never collide with another key or
break a hash tag. The ``{...}`` part of a key is a Redis Cluster hash tag: every key of one
session (storage, lease, queue, fence, session-scoped artifacts) carries the same tag
``{app:user:session}`` and lands in the same slot; invocation keys share ``{app:invocation}``.

Layout (``A``, ``U``, ``S``, ``I``, ``F`` = escaped app, user, session, invocation, file name)::

    adk:session:{A:U:S}                 hash   id, app_name, user_id, create_time,
                                               last_update_time, seq (creation order)
    adk:session:{A:U:S}:state           hash   session-scoped state, field -> JSON value
    adk:session:{A:U:S}:events          list   committed events, Event wire JSON, oldest first
    adk:session:{A:U:S}:event_ids       set    ids of committed events (idempotent appends)
    adk:session:{A:U:S}:answered        set    call ids answered through a leased writer
    adk:session:{A:U:S}:lease           string fencing token of the orchestrator owning it
    adk:session:{A:U:S}:fence           string counter issuing fencing tokens
    adk:session:{A:U:S}:queue           list   messages waiting for the session
    adk:session:{A:U:S}:processing      list   message being worked on
    adk:session:{A:U:S}:busy            set    invocations that wait for their workers only
    adk:session:{A:U:S}:held            list   new messages held until none does
    adk:session:{A:U:S}:invocations     zset   the session's invocation ids -> created_at
    adk:user:{A:U}:sessions             zset   session id -> last update time
    adk:user:{A:U}:state                hash   ``user:`` state (prefix stripped) -> JSON
    adk:app:{A}:sessions                zset   JSON ``[user, session]`` -> last update time
    adk:app:{A}:state                   hash   ``app:`` state (prefix stripped) -> JSON
    adk:app:{A}:session_seq             string counter ordering sessions created at one time
    adk:app:{A}:invocations:<status>    zset   invocation ids in that status -> time of last save
    adk:artifacts:{A:U:S}:names         set    session-scoped artifact file names
    adk:artifacts:{A:U}:names           set    user-scoped (``user:``) artifact file names
    adk:artifact:{A:U:S}:F:parts        list   one Part JSON per version (bytes base64)
    adk:artifact:{A:U:S}:F:meta         list   one metadata JSON per version
    adk:artifact:{A:U}:F:parts / :meta  list   the same for user-scoped files
    adk:invocation:{A:I}                hash   invocation record (``record``) and its ``status``
    adk:invocation:{A:I}:results        hash   function-call id -> result (first writer wins)
    adk:invocation:{A:I}:cancel         string cancellation flag
    adk:invocation:{A:I}:stream         stream live events of the invocation
    adk:invocation:{A:I}:jobs           hash   function-call id -> its job's dispatch entry
    adk:wake:{Q}                        stream wake-ups for orchestrators of invocations queue Q
    adk:jobs:{Q}                        zset   calls whose job is out, by next watchdog look
    adk:api:{P}:wake                    stream wake-ups of one api process's stream reader
    adk:invocations:{queued|running|paused}
                                        zset   record key of each invocation in that status ->
                                               when it was saved so (metrics)
    adk:stats                           hash   ``finished:<status>`` invocations that ended so,
                                               ``takeovers`` (metrics)
"""

from __future__ import annotations

from functools import lru_cache

PREFIX = "adk:"
"""Common prefix of every key of the project."""

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D", ":": "%3A"})


def escape(part: str) -> str:
    """Return ``part`` with ``%``, ``{``, ``}`` and ``:`` percent-encoded for use in a key."""
    return part.translate(_ESCAPES)


@lru_cache(maxsize=8192)
def _tag(*parts: str) -> str:
    """Return the hash tag ``{p1:p2:...}`` built from escaped ``parts``.

    Cached: every Redis operation builds a few keys, and a session's are built over and over.
    """
    return "{" + ":".join(escape(p) for p in parts) + "}"


# --- sessions -----------------------------------------------------------------------------


def session(app: str, user: str, session_id: str) -> str:
    """Hash of a session's metadata; its existence is the session's existence."""
    return f"{PREFIX}session:{_tag(app, user, session_id)}"


def session_state(app: str, user: str, session_id: str) -> str:
    """Hash of the session-scoped state: state key -> JSON value."""
    return f"{session(app, user, session_id)}:state"


def session_events(app: str, user: str, session_id: str) -> str:
    """List of the session's committed events (Event wire JSON), oldest first."""
    return f"{session(app, user, session_id)}:events"


def session_event_ids(app: str, user: str, session_id: str) -> str:
    """Set of the ids of the session's committed events."""
    return f"{session(app, user, session_id)}:event_ids"


def session_answered(app: str, user: str, session_id: str) -> str:
    """Set of the call ids answered in the session (appends through a leased writer)."""
    return f"{session(app, user, session_id)}:answered"


def session_storage_keys(app: str, user: str, session_id: str) -> list[str]:
    """Return the keys holding a session's data (what deleting the session removes)."""
    return [
        session(app, user, session_id),
        session_state(app, user, session_id),
        session_events(app, user, session_id),
        session_event_ids(app, user, session_id),
    ]


def user_sessions(app: str, user: str) -> str:
    """Sorted set of a user's session ids, scored by last update time."""
    return f"{PREFIX}user:{_tag(app, user)}:sessions"


def app_sessions(app: str) -> str:
    """Sorted set of an app's sessions (JSON ``[user, session]``), scored by last update."""
    return f"{PREFIX}app:{_tag(app)}:sessions"


def app_session_seq(app: str) -> str:
    """Counter giving each new session of the app a creation sequence number."""
    return f"{PREFIX}app:{_tag(app)}:session_seq"


def app_state(app: str) -> str:
    """Hash of the app's ``app:`` state (prefix stripped): key -> JSON value."""
    return f"{PREFIX}app:{_tag(app)}:state"


def user_state(app: str, user: str) -> str:
    """Hash of the user's ``user:`` state (prefix stripped): key -> JSON value."""
    return f"{PREFIX}user:{_tag(app, user)}:state"


# --- session ownership (used by the orchestrator processes) ---------------------------------


def session_lease(app: str, user: str, session_id: str) -> str:
    """Key of the string holding the fencing token of the session's current owner."""
    return f"{session(app, user, session_id)}:lease"


def session_lease_taker(app: str, user: str, session_id: str) -> str:
    """Key of the string naming the call that took the session's lease (as long as it)."""
    return f"{session(app, user, session_id)}:lease_taker"


def session_queue(app: str, user: str, session_id: str) -> str:
    """List of messages (start/resume/cancel) waiting for the session, in arrival order."""
    return f"{session(app, user, session_id)}:queue"


def session_processing(app: str, user: str, session_id: str) -> str:
    """List holding the message the session's owner is working on (reliable-queue pattern)."""
    return f"{session(app, user, session_id)}:processing"


def session_busy(app: str, user: str, session_id: str) -> str:
    """Set: the session's invocations paused on calls only their workers answer."""
    return f"{session(app, user, session_id)}:busy"


def session_held(app: str, user: str, session_id: str) -> str:
    """List of the session's new messages held while any invocation is busy, in order."""
    return f"{session(app, user, session_id)}:held"


def fence_counter(app: str, user: str, session_id: str) -> str:
    """Counter issuing strictly increasing fencing tokens for the session's lease."""
    return f"{session(app, user, session_id)}:fence"


# --- invocations ----------------------------------------------------------------------------


def session_invocations(app: str, user: str, session_id: str) -> str:
    """Sorted set of a session's invocation ids, scored by creation time.

    Written with the record (``lua_functions.LUA_SAVE_RECORD`` builds the same name in Lua).
    """
    return f"{session(app, user, session_id)}:invocations"


def app_invocations(app: str, status: str) -> str:
    """Sorted set of an app's invocation ids in ``status``, scored by their last save.

    Written with the record (``lua_functions.LUA_SAVE_RECORD`` builds the same name in Lua).
    """
    return f"{PREFIX}app:{_tag(app)}:invocations:{escape(status)}"


def invocation(app: str, invocation_id: str) -> str:
    """Hash holding an invocation's record (status, outstanding call ids, ...)."""
    return f"{PREFIX}invocation:{_tag(app, invocation_id)}"


def invocation_results(app: str, invocation_id: str) -> str:
    """Hash of an invocation's remote-call results: function-call id -> result JSON."""
    return f"{invocation(app, invocation_id)}:results"


def cancel_flag(app: str, invocation_id: str) -> str:
    """Key of the flag set when the invocation has been asked to stop."""
    return f"{invocation(app, invocation_id)}:cancel"


def invocation_stream(app: str, invocation_id: str) -> str:
    """Stream of an invocation's live events (partial and committed) for listeners."""
    return f"{invocation(app, invocation_id)}:stream"


def invocation_statuses(app: str, invocation_id: str) -> str:
    """Stream of an invocation's status changes only (what a waiting client reads)."""
    return f"{invocation(app, invocation_id)}:statuses"


def invocation_jobs(app: str, invocation_id: str) -> str:
    """Hash of the jobs sent for an invocation's remote calls: call id -> dispatch entry."""
    return f"{invocation(app, invocation_id)}:jobs"


def invocation_record_keys(app: str, invocation_id: str) -> list[str]:
    """The keys saving an invocation's record writes: the record hash, then its two streams."""
    return [invocation(app, invocation_id), invocation_stream(app, invocation_id),
            invocation_statuses(app, invocation_id)]


def wake_stream(invocations_queue: str) -> str:
    """Stream of wake-ups (sessions with new work) read by the orchestrators of a queue."""
    return f"{PREFIX}wake:{_tag(invocations_queue)}"


def job_watch(invocations_queue: str) -> str:
    """Sorted set of the calls whose job is out and unanswered, scored by next look (watchdog)."""
    return f"{PREFIX}jobs:{_tag(invocations_queue)}"


def api_wake(instance: str) -> str:
    """Stream one ``adk-celery api`` process's stream reader watches, to be woken by its followers.

    ``instance`` is unique per process; the stream expires soon after the process stops.
    """
    return f"{PREFIX}api:{_tag(instance)}:wake"


# --- metrics -------------------------------------------------------------------------------

def invocations_in(status: str) -> str:
    """Sorted set of the invocations now in ``status`` (one of ``InvocationStatus.LIVE``).

    Members are their record keys, scored by when the record was saved in that status
    (Redis time, seconds); saving a record moves it, a finished status takes it out.
    """
    return f"{PREFIX}invocations:{_tag(status)}"


def stats() -> str:
    """Hash of counters kept by the scripts: ``finished:<status>``, ``takeovers``."""
    return f"{PREFIX}stats"


# --- artifacts ------------------------------------------------------------------------------


def _artifact_scope(app: str, user: str, session_id: str | None) -> str:
    return _tag(app, user) if session_id is None else _tag(app, user, session_id)


def artifact_names(app: str, user: str, session_id: str | None) -> str:
    """Set of artifact file names in one scope (``session_id`` None = the user scope)."""
    return f"{PREFIX}artifacts:{_artifact_scope(app, user, session_id)}:names"


def artifact_parts(app: str, user: str, session_id: str | None, filename: str) -> str:
    """List of an artifact's payloads, one Part JSON per version (index = version)."""
    scope = _artifact_scope(app, user, session_id)
    return f"{PREFIX}artifact:{scope}:{escape(filename)}:parts"


def artifact_meta(app: str, user: str, session_id: str | None, filename: str) -> str:
    """List of an artifact's version metadata, one JSON object per version (index = version)."""
    scope = _artifact_scope(app, user, session_id)
    return f"{PREFIX}artifact:{scope}:{escape(filename)}:meta"
