"""``adk-celery``: run orchestrators, workers and Flower; enqueue and follow invocations."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from workers import cli_ops

if TYPE_CHECKING:
    from config import Settings
    from orchestrator.distributed.streams import StreamItem
    from orchestrator.events.event import Event
    from workers.client import Client


PROCESS_ENVIRONMENT = """environment:
  ADK_CELERY_REDIS_URL   Redis for broker, results and state (required)
  ADK_CELERY_APPS        module:attribute of the apps to serve, comma-separated
  see the README's Settings table for the rest (all ADK_CELERY_*)"""

PASS_THROUGH = frozenset({"orchestrator", "worker", "flower"})
"""Commands whose unknown options go on to Celery or Flower; the others refuse them."""

POOL_THREADS = "workers.thread_pool:TaskPool"
"""What ``--pool threads`` runs: Celery's threads pool, starting each job at once."""


def worker_queues(settings: Settings) -> str:
    """The queues ``adk-celery worker`` consumes without ``-Q``, comma-separated.

    The tools and agents queues, and the queues tools and agents are routed to.
    """
    return ",".join(q for q in dict.fromkeys(
        [settings.tools_queue, settings.agents_queue, *settings.tool_queues.values(),
         *settings.agent_queues.values()]) if q)


def _with_options(settings: Settings, apps: list[str] | None,
                  metrics_port: int | None = None) -> Settings:
    """The settings from the environment with ``--app`` and ``--metrics-port`` on top."""
    update: dict[str, object] = {}
    if apps:
        update["apps"] = ",".join(apps)
    if metrics_port is not None:
        update["metrics_port"] = metrics_port
    return settings.model_copy(update=update) if update else settings


def _celery_worker(
    settings: Settings, queues: str, args: argparse.Namespace, extra: list[str]
) -> None:
    if not settings.redis_url:
        sys.exit("adk-celery: set ADK_CELERY_REDIS_URL (e.g. redis://localhost:6379/0).")
    from orchestrator.distributed.registry import AppRegistry
    from workers import app
    from workers.celery_app import use_settings

    use_settings(settings)

    try:  # fail at start-up, not at the first task, when an app cannot be loaded
        registry = AppRegistry.from_specs(settings.app_specs())
    except (ValueError, TypeError) as error:
        sys.exit(f"adk-celery: ADK_CELERY_APPS / --app: {error}")
    if not registry.names:
        print("adk-celery: warning: no apps configured (ADK_CELERY_APPS or --app); every "
              "invocation will fail with 'unknown app'.", file=sys.stderr)
    pool = ["--pool", args.pool]
    if args.pool == "threads":
        # Celery takes a pool class (not one of its own names) only from its configuration.
        app.conf.worker_pool = POOL_THREADS
        pool = []
    argv = [
        "worker", "-Q", queues, "-E", *pool,
        "--concurrency", str(args.concurrency or settings.worker_concurrency),
        "--loglevel", args.loglevel,
        "--hostname", args.hostname,
        *extra,
    ]
    app.worker_main(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``adk-celery`` command.

    A refused request (a malformed id or message, an answer for a call that is not
    pending) prints why on stderr and exits with status 2, without a traceback.
    """
    from orchestrator.errors import AnswerRejectedError, RequestError

    try:
        _main(argv)
    except (RequestError, AnswerRejectedError) as error:
        print(f"adk-celery: error: {error}", file=sys.stderr)
        sys.exit(2)


def _main(argv: Sequence[str] | None) -> None:
    # Like ``celery`` and ``uvicorn``: apps named in ADK_CELERY_APPS import from the
    # directory the command runs in.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    parser = argparse.ArgumentParser(prog="adk-celery", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # Defaults in the help are the ones the settings in force give (ADK_CELERY_* variables).
    from config import get_settings

    current = get_settings()

    def worker_args(p: argparse.ArgumentParser, default_name: str, pool: str) -> None:
        p.add_argument("--app", action="append", metavar="MODULE:ATTR",
                       help="App or root agent to serve (repeatable; default ADK_CELERY_APPS)")
        p.add_argument("--concurrency", type=int, default=None,
                       help="Celery pool size for the threads and prefork pools, and the "
                            "prefetch of every pool (default ADK_CELERY_WORKER_CONCURRENCY: "
                            f"{current.worker_concurrency}; the solo pool runs one task at a "
                            "time)")
        p.add_argument("--pool", default=pool, choices=["threads", "prefork", "solo"],
                       help=f"Celery pool (default {pool})")
        p.add_argument("--loglevel", default="INFO", help="default INFO")
        p.add_argument("--hostname", default=f"{default_name}@%h",
                       help=f"Celery node name (default {default_name}@<host name>)")
        p.add_argument("--metrics-port", type=int, default=None,
                       help="serve this process's Prometheus metrics on this port (default "
                            "ADK_CELERY_METRICS_PORT; 0, the default, serves none)")

    def process_command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=description,
                              epilog=PROCESS_ENVIRONMENT,
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    orch = process_command(
        "orchestrator", "run Runner loops for queued invocations",
        f"Consume the invocations queue (ADK_CELERY_INVOCATIONS_QUEUE: "
        f"{current.invocations_queue}) and run the Runner loops of queued invocations on one "
        f"event loop, up to ADK_CELERY_ORCHESTRATOR_CONCURRENCY sessions at once "
        f"({current.orchestrator_concurrency}). Unknown options go to `celery worker`.")
    # Orchestrator tasks only record and queue work (Runner loops run on the wake-up
    # consumer's event loop), so one solo consumer spares a thread hop per task.
    worker_args(orch, "orchestrator", "solo")
    work = process_command(
        "worker", "run remote tool calls and parallel branches",
        "Run the jobs of remote tool calls and parallel branches. Unknown options go to "
        "`celery worker`.")
    worker_args(work, "worker", "threads")  # tools may block: run several at once
    work.add_argument("-Q", "--queues", default=None,
                      help="comma-separated queues (default: ADK_CELERY_TOOLS_QUEUE, "
                           "ADK_CELERY_AGENTS_QUEUE and the queues of ADK_CELERY_TOOL_QUEUES "
                           f"and ADK_CELERY_AGENT_QUEUES: {worker_queues(current)})")
    flower = sub.add_parser("flower", help="run Flower on the same broker")
    flower.add_argument("--port", type=int, default=None,
                        help=f"default ADK_CELERY_FLOWER_PORT: {current.flower_port}")
    flower.add_argument("--address", default="127.0.0.1", help="default 127.0.0.1")
    api = process_command(
        "api", "serve the HTTP API (google-adk's api_server routes and invocation routes)",
        "Serve HTTP in front of the orchestrators: google-adk's api_server routes (/run, "
        "/run_sse, sessions, artifacts, /list-apps, ...) and invocation routes (enqueue, status, "
        "follow, answer, cancel, lists); OpenAPI docs at /docs. Without ADK_CELERY_API_TOKENS it "
        "only listens on loopback.")
    api.add_argument("--host", default=None,
                     help=f"default ADK_CELERY_API_HOST: {current.api_host}")
    api.add_argument("--port", type=int, default=None,
                     help=f"default ADK_CELERY_API_PORT: {current.api_port}")
    api.add_argument("--no-access-log", dest="access_log", action="store_false", default=None,
                     help="no line per request (default ADK_CELERY_API_ACCESS_LOG: "
                          f"{str(current.api_access_log).lower()})")
    api.add_argument("--dev-ui", action="store_true",
                     help="also serve google-adk's web UI at /dev-ui/ (needs the installed "
                          "google-adk: pip install 'adk-celery[devui]')")
    enqueue = sub.add_parser("enqueue", help="queue a message and print the invocation id")
    enqueue.add_argument("app_name")
    enqueue.add_argument("user_id")
    enqueue.add_argument("message")
    enqueue.add_argument("--session-id", default=None)
    enqueue.add_argument("--wait", action="store_true", help="wait and print the events")
    enqueue.add_argument("--follow", action="store_true",
                         help="print the events live, as they happen, and the final status")
    enqueue.add_argument("--stream", action="store_true",
                         help="run the model with streaming (partial chunks show with --follow)")
    follow = sub.add_parser("follow", help="print an invocation's events live (replayed from "
                                           "its start) and its final status")
    follow.add_argument("app_name")
    follow.add_argument("invocation_id")
    _follow_args(follow)
    _follow_args(enqueue)
    cli_ops.add_commands(sub)

    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in PASS_THROUGH:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in ("orchestrator", "worker"):
        settings = _with_options(current, args.app, args.metrics_port)
        if args.command == "orchestrator":
            queues = settings.invocations_queue
        else:
            queues = args.queues or worker_queues(settings)
        _celery_worker(settings, queues, args, extra)
    elif args.command == "flower":
        _run_flower(args, extra)
    elif args.command == "api":
        from workers.api.app import serve

        serve(args.host, args.port, dev_ui=args.dev_ui, access_log=args.access_log)
    elif args.command == "enqueue":
        _enqueue(args)
    elif args.command == "follow":
        def follow(client: Client) -> int:
            cli_ops.require_invocation(client, args.app_name, args.invocation_id)
            return _follow(client, args)

        sys.exit(cli_ops.with_client(follow))
    else:
        cli_ops.run(args)


def _run_flower(args: argparse.Namespace, extra: list[str]) -> None:
    from config import get_settings
    from workers import app
    from workers.flower import run_flower

    settings = get_settings()
    run_flower(app, settings, args.port or settings.flower_port, args.address, extra)


def _enqueue(args: argparse.Namespace) -> None:
    def enqueue(client: Client) -> int:
        invocation_id = client.enqueue(
            args.app_name, args.user_id, args.message, session_id=args.session_id,
            streaming=args.stream,
        )
        print(invocation_id, flush=True)
        if args.follow:
            args.invocation_id = invocation_id
            return _follow(client, args)
        if args.wait:
            record = client.wait(args.app_name, invocation_id)
            for event in client.events(args.app_name, invocation_id):
                print(json.dumps(event.to_wire()))
            print(record.model_dump_json())
        return 0

    sys.exit(cli_ops.with_client(enqueue))


def _follow_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--timeout", type=float, default=None,
                        help="give up after this many seconds (exit status 2)")
    parser.add_argument("--until-paused", action="store_true",
                        help="stop when the invocation pauses (default: follow until it ends)")


def _follow(client: Client, args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Print the invocation's live stream and final status; return the exit status.

    0: completed (or paused, with ``--until-paused``); 1: failed or cancelled; 2: timed out.
    """
    from orchestrator.distributed.models import InvocationStatus

    out = out or sys.stdout
    printer = EventPrinter(out)
    until = InvocationStatus.SETTLED if args.until_paused else InvocationStatus.FINISHED
    last: InvocationStatus | None = None
    try:
        for item in client.follow(args.app_name, args.invocation_id, timeout=args.timeout,
                                  until=until):
            printer.print(item)
            if item.status is not None and item.status in until:
                last = item.status
    except TimeoutError as error:
        printer.end_line()
        print(f"adk-celery: {error}", file=sys.stderr)
        return 2
    record = client.status(args.app_name, args.invocation_id)
    if record is not None and record.error:
        print(f"error: {record.error}", file=out)
    if record is not None and last is InvocationStatus.PAUSED and record.pending_calls:
        print(f"waiting for: {', '.join(record.pending_calls)}", file=out)
    out.flush()
    return 1 if last in (InvocationStatus.FAILED, InvocationStatus.CANCELLED) else 0


class EventPrinter:
    """Prints a live stream readably: one line per event, partial chunks inline, statuses.

    A committed event prints as ``author: text``, ``author: call name({args}) [id]`` or
    ``author: response name -> {response}``, one part after another; streaming chunks print
    their text as it comes, on a line of their own starting ``author ~``; a status change
    prints as ``[status]``, a remote call's progress as ``[progress tool [call id]: {...}]``.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._partial_author: str | None = None

    def print(self, item: StreamItem) -> None:
        """Print one stream item."""
        if item.event is not None and item.partial:
            self._chunk(item.event)
            return
        self.end_line()
        if item.event is not None:
            self._out.write(describe_event(item.event) + "\n")
        elif item.status is not None:
            self._out.write(f"[{item.status.value}]\n")
        elif item.progress is not None:
            self._out.write(f"[progress {item.progress.tool} [{item.progress.function_call_id}]: "
                            f"{_compact(item.progress.payload)}]\n")
        self._out.flush()

    def end_line(self) -> None:
        """Finish a line of partial chunks, if one is open."""
        if self._partial_author is not None:
            self._out.write("\n")
            self._partial_author = None

    def _chunk(self, event: Event) -> None:
        parts = (event.content.parts or []) if event.content else []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        if self._partial_author != event.author:
            self.end_line()
            self._out.write(f"{event.author} ~ ")
            self._partial_author = event.author
        self._out.write(text)
        self._out.flush()


def describe_event(event: Event) -> str:
    """One readable line for a committed event."""
    pieces: list[str] = []
    for part in (event.content.parts or []) if event.content else []:
        if part.function_call is not None:
            call = part.function_call
            running = " (long-running)" if call.id in (event.long_running_tool_ids or ()) else ""
            pieces.append(f"call {call.name}({_compact(call.args or {})}) [{call.id}]{running}")
        elif part.function_response is not None:
            response = part.function_response
            pieces.append(f"response {response.name} -> {_compact(response.response or {})}")
        elif part.text and not part.thought:
            pieces.append(part.text)
    if event.error_code or event.error_message:
        pieces.append(f"error {event.error_code}: {event.error_message}")
    if event.actions.state_delta:
        pieces.append(f"state {_compact(event.actions.state_delta)}")
    if event.actions.transfer_to_agent:
        pieces.append(f"transfer to {event.actions.transfer_to_agent}")
    return f"{event.author or '?'}: {' | '.join(pieces) or '(no content)'}"


def _compact(value: Any) -> str:
    return json.dumps(value, default=str, separators=(", ", ": "))


if __name__ == "__main__":
    main()
