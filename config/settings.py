"""Settings: the one place that reads the environment (prefix ``ADK_CELERY_``)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Runtime settings for orchestrators, workers and clients (see README, "Settings")."""

    # populate_by_name: Settings(max_llm_calls=...) sets the field even where an alias (a
    # google-adk variable name) is accepted from the environment.
    # hide_input_in_errors: a validation error never quotes a value (a URL's password, a token).
    model_config = SettingsConfigDict(env_prefix="ADK_CELERY_", extra="ignore", populate_by_name=True,
                                      hide_input_in_errors=True)

    redis_url: str | None = None
    """Redis URL for broker, results and state; unset = embedded in-process mode."""
    apps: str = ""
    """Comma-separated ``module:attribute`` import strings naming Apps or root agents."""
    google_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ADK_CELERY_GOOGLE_API_KEY", "GOOGLE_API_KEY"),
    )
    """Gemini API key (``GOOGLE_API_KEY`` is accepted too); unset = offline demo model."""
    gemini_base_url: str | None = None
    """Override the Gemini API endpoint (a proxy, or a local stub in tests)."""
    max_llm_calls: int = Field(
        default=500, validation_alias=AliasChoices("ADK_CELERY_MAX_LLM_CALLS", "ADK_MAX_LLM_CALLS")
    )
    """Default limit of model calls per invocation (<= 0 means unlimited)."""
    disable_gemini_model_id_check: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "ADK_CELERY_DISABLE_GEMINI_MODEL_ID_CHECK", "ADK_DISABLE_GEMINI_MODEL_ID_CHECK"
        ),
    )
    """Let Gemini's built-in tools (``google_search``, ``url_context``, ...) go to models
    whose name does not start with ``gemini-`` (google-adk's environment variable works too)."""
    sync_tool_threads: int = Field(default=64, ge=1)
    """Threads a process runs synchronous tool functions on, so that a turn's calls and a
    ParallelAgent's branches wait together, not in turns (Python's default executor has
    only cores + 4). ``RunConfig.tool_thread_pool_config`` sets a run's own pool instead."""

    invocations_queue: str = "adk.invocations"
    """Celery queue orchestrators consume (start, resume, cancel)."""
    tools_queue: str = "adk.tools"
    """Default Celery queue for remote tool calls."""
    agents_queue: str = "agents"
    """Celery queue for ParallelAgent branches (resumable apps); empty = run them in process."""
    agent_queues: dict[str, str] = Field(default_factory=dict)
    """Per-agent routing of parallel branches, JSON: ``{"branch_agent": "queue"}``."""
    tool_queues: dict[str, str] = Field(default_factory=dict)
    """Per-tool routing, JSON: ``{"tool_name": "queue"}``; listed tools always run on workers."""
    lease_ttl_seconds: float = 30.0
    """How long a session lease lives without renewal (a dead orchestrator's lease expires)."""
    lease_retry_seconds: float = 1.0
    """First delay before retrying a wake-up for a session whose lease another orchestrator
    holds (doubling up to half the lease TTL)."""
    orchestrator_concurrency: int = 64
    """Sessions one orchestrator process drains at once (Runner loops on its event loop)."""
    session_cache_max_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    """Approximate memory an orchestrator spends on the sessions it read before, kept so
    that its next lease on one reads only the newer events: each counts the bytes it was
    read as (its events' JSON and its state) plus 4 KiB per event (a parsed event's own
    cost). A session larger than this is not kept (its next lease reads it whole); 0 keeps
    none."""
    visibility_timeout_seconds: int = 3600
    """Redis broker visibility timeout: keep it above your longest tool call."""
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)
    """More kombu Redis transport options, JSON (e.g. ``{"unacked_restore_interval": 1}``);
    they override the ones set from other settings."""
    record_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=1)
    """How long an invocation's record, results and streams are kept in Redis after its last
    change; a paused one is kept while it waits (orchestrators renew it)."""
    max_payload_bytes: int = 1_048_576
    """Largest message, tool argument set or tool result accepted (JSON bytes)."""
    max_task_message_bytes: int = Field(default=32 * 1_048_576, ge=0)
    """Largest Celery task message an orchestrator or worker decodes (its body as sent, in
    bytes): a larger one is refused before its JSON is parsed, which would take many times
    its size in memory; 0: no limit. Well above what the payload limits let through (a tool
    job carries the session's state too)."""
    max_identifier_length: int = 128
    """Longest app name, user, session, invocation or call id a client may send."""
    identifier_pattern: str = r"[A-Za-z0-9_][A-Za-z0-9_.:@+=-]*"
    """The characters of those identifiers (a regular expression each must match whole)."""
    max_nesting_depth: int = 32
    """Deepest nesting of objects and arrays in a message, state delta or answer."""
    client_app_state: bool = False
    """Let clients' ``state_delta`` write ``app:`` keys (state every user of the app sees)."""
    client_user_state: bool = True
    """Let clients' ``state_delta`` write ``user:`` keys (the sending user's own state)."""
    worker_concurrency: int = 8
    """Default concurrency of ``adk-celery orchestrator`` / ``worker`` (threads)."""
    worker_head_start_ms: float = 5.0
    """How long a worker's consumer waits for a job it just handed to a pool thread before
    taking the next one (``adk-celery worker``'s threads pool); 0 = no wait."""
    uvloop: bool = True
    """Orchestrators, workers and clients run their event loop on uvloop where it is
    installed (a dependency on CPython outside Windows): the same asyncio code, with about
    5% less CPU per invocation. False: asyncio's own loop."""
    fast_publish: bool = True
    """Latency trick (workers/publish_commands.py, kombu internals): a tool job's message is
    built by Celery and kombu and sent inside the script that journals the job, which is the
    script committing its call event where it can. False: the call is committed, the journal
    written, then Celery's ``send_task`` sends the message from a thread."""
    broker_client_reuse: bool = True
    """Latency trick (workers/broker.py, kombu's private ``_create_client``): each broker
    channel builds one redis-py client and reuses it. False: one per operation, as kombu."""
    flower_basic_auth: SecretStr | None = None
    """``user:password`` for Flower's basic auth (``adk-celery flower``)."""
    flower_port: int = Field(default=5555, ge=0, le=65535)
    """Port of ``adk-celery flower``."""
    flower_allow_control: bool = False
    """Let Flower's users run tasks and control workers (shut down, pool, queues, revoke)."""
    flower_task_arguments: Literal["redacted", "truncated", "full"] = "redacted"
    """What Flower shows of task arguments: identifiers only (``redacted``), each text cut
    to 40 characters (``truncated``), or all of it (``full``)."""
    task_result_ttl_seconds: int = 3600
    """How long Celery keeps a task's result for its sender (the invoke task's ids)."""
    job_heartbeat_seconds: float = 5.0
    """How often a worker running a job says it is alive (a job silent for three times this
    long is taken for lost and dispatched again)."""
    job_lost_after_seconds: float = 15.0
    """How long a dispatched job may be out of its queue without a worker claiming it (a
    message lost between the broker and a worker) before it is dispatched again."""
    watchdog_interval_seconds: float = 2.0
    """How often an orchestrator looks for lost jobs; 0 turns its watchdog off."""
    tool_timeout_seconds: float = 0.0
    """Default deadline of a remote tool call, from its first dispatch, and of a tool call
    inside a ParallelAgent branch's job on a worker, from its start (0: none). A tool's
    ``custom_metadata={"adk_celery_timeout": seconds}`` sets its own."""
    tool_max_attempts: int = 3
    """How many attempts of a remote call may die with their worker (it went silent while
    running the job) before the call is answered with an error naming the tool and the
    cause: a job that kills every worker running it must not loop for ever. A message lost
    before any worker started it is sent again without counting. A tool's
    ``custom_metadata={"adk_celery_max_attempts": n}`` sets its own."""
    api_host: str = "127.0.0.1"
    """Address of ``adk-celery api``."""
    api_port: int = Field(default=8000, ge=0, le=65535)
    """Port of ``adk-celery api``."""
    api_tokens: SecretStr | None = None
    """Bearer tokens of ``adk-celery api``, JSON: ``{"token": ["app", ...]}`` (``["*"]``: every
    app). Unset: no authentication, and the server only listens on a loopback address."""
    api_cors_origins: list[str] = Field(default_factory=list)
    """Origins browsers may call ``adk-celery api`` from (CORS), JSON list; empty: none."""
    api_max_body_bytes: int = 2_097_152
    """Largest HTTP request body ``adk-celery api`` reads."""
    api_max_header_bytes: int = Field(default=65536, ge=0)
    """Largest request line and headers ``adk-celery api`` reads before answering 431 and
    closing the connection (before any token is checked); 0: no limit (see
    :mod:`workers.api.header_limit`)."""
    api_header_timeout_seconds: float = Field(default=10.0, ge=0)
    """How long ``adk-celery api`` waits for a request's line and headers, from the opening
    of its connection or the end of the previous response on it, before closing the
    connection (408 if part of a request came); 0: no limit (see
    :mod:`workers.api.header_limit`)."""
    api_body_timeout_seconds: float = Field(default=30.0, ge=0)
    """How long ``adk-celery api`` waits for a request's body once its headers are in before
    answering 408 and closing the connection; 0: no limit. Neither timeout counts the time a
    response takes."""
    api_send_timeout_seconds: float = Field(default=60.0, ge=0)
    """How long a response of ``adk-celery api`` may wait for its client to read it (the
    connection's send buffer full) before the connection is closed; 0: no limit. A client
    that reads, however slowly the response streams, is never cut."""
    api_max_connections: int = Field(default=1000, ge=0)
    """Most connections ``adk-celery api`` serves at once (each open SSE follow or ``/run``
    holds one): a request arriving on one more is answered 503 and its connection closed
    (uvicorn's ``limit_concurrency``); 0: no limit."""
    api_shutdown_seconds: float = Field(default=10.0, gt=0)
    """How long a stopping ``adk-celery api`` lets open requests finish (a ``/run`` or an SSE
    follow waiting on its invocation) before it closes them; the invocations go on."""
    api_access_log: bool = True
    """``adk-celery api`` logs one line per request (uvicorn's access log); false saves that
    work on a busy server (``--no-access-log``)."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Port of the Prometheus metrics an orchestrator or worker process serves (its model and
    tool call durations, status changes, redeliveries); 0: none (``--metrics-port``)."""
    metrics_address: str = "127.0.0.1"
    """Address those metrics listen on (``0.0.0.0`` to let a Prometheus elsewhere scrape)."""
    api_metrics_public: bool = False
    """Serve ``adk-celery api``'s ``GET /metrics`` without a token (else it needs a token
    that opens every app, ``["*"]``)."""
    metrics_stuck_after_seconds: float = 600.0
    """An invocation queued or running this long without a status change, or a remote call
    this long overdue for the watchdog's look, counts as stuck."""
    failpoints: str = ""
    """Fault tests only: ``name=action,...`` (see :mod:`orchestrator.failpoints`)."""

    def app_specs(self) -> list[str]:
        """Return the ``module:attribute`` strings of ``apps``."""
        return [s.strip() for s in self.apps.split(",") if s.strip()]

    @field_validator("redis_url")
    @classmethod
    def _a_redis_url(cls, value: str | None) -> str | None:
        # The messages never quote the URL: it may hold a password.
        if not value:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError("not a Redis URL: it must start with redis://, rediss:// or unix:// "
                             "(e.g. redis://localhost:6379/0)")
        try:
            parts.port  # noqa: B018  (raises ValueError for a port that is no port)
        except ValueError:
            raise ValueError("the port is not a number from 0 to 65535") from None
        return value

    @field_validator("flower_basic_auth")
    @classmethod
    def _one_flower_login(cls, value: SecretStr | None) -> SecretStr | None:
        # One login, as a browser sends it: "user:password" (the user name ends at the first
        # colon; the password may hold more). Flower itself splits its basic-auth option on
        # commas and takes any text as a login, a part without a user name included, and
        # the empty text too (`Authorization: Basic =` matched it). Empty is unset, as
        # docker-compose.yml passes it without FLOWER_BASIC_AUTH: no login, loopback only.
        # The messages never quote the value.
        if value is None or not value.get_secret_value():
            return None
        user, colon, password = value.get_secret_value().partition(":")
        if "," in user or "," in password:
            raise ValueError("one user:password only, without a comma (Flower would take each "
                             "comma-separated part, a bare password included, as a login)")
        if not colon:
            raise ValueError("not user:password (no colon)")
        if not user:
            raise ValueError("the user name (before the first colon) is empty")
        if not password:
            raise ValueError("the password (after the first colon) is empty")
        return value

    @field_validator("identifier_pattern")
    @classmethod
    def _a_regular_expression(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a regular expression ({error})") from None
        return value


def describe_settings_error(error: ValueError) -> str:
    """Which settings are malformed and what is wrong, in one line, for an error of ``Settings()``.

    Each is named by its environment variable; no value is shown (a URL's password, tokens).
    """
    if isinstance(error, ValidationError):
        return "; ".join(f"{_variable(problem['loc'])}: {problem['msg'].removeprefix('Value error, ')}"
                         for problem in error.errors(include_url=False, include_input=False))
    field = re.search(r'field "(\w+)"', str(error))  # pydantic-settings: a value not parsed
    cause = error.__cause__
    if field is None:
        return "the ADK_CELERY_* settings cannot be read"
    if isinstance(cause, json.JSONDecodeError):
        return f"{_variable([field[1]])}: not JSON ({cause.msg} at character {cause.pos})"
    return f"{_variable([field[1]])}: cannot be parsed"


def _variable(loc: Sequence[int | str]) -> str:
    """The environment variable of a field (or of one of its aliases), and where inside it."""
    name, inside = str(loc[0]), "".join(f"[{part!r}]" for part in loc[1:])
    for field_name, field in Settings.model_fields.items():
        choices = field.validation_alias.choices if isinstance(
            field.validation_alias, AliasChoices) else []
        if name == field_name or name in choices:
            names = [str(choice) for choice in choices] or [f"ADK_CELERY_{field_name.upper()}"]
            return names[0] + "".join(f" (or {other})" for other in names[1:]) + inside
    return name + inside


NO_REDIS_URL = ("ADK_CELERY_REDIS_URL is not set: orchestrators, workers and clients need Redis "
                "(the embedded mode runs in one process: see examples/demo.py).")
"""Why a Runtime (so a Client) refuses to start: here, so the CLI says it without importing them."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Return the process settings, read once from the environment."""
    return Settings()
