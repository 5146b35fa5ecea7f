"""adk-celery: run orchestrators, workers, Flower and the HTTP API; queue and follow invocations.

Also answer and cancel them, and list sessions and invocations (the operator commands).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from workers import cli_follow, cli_ops
from workers.cli_follow import EventPrinter, describe_event
from workers.cli_types import count, port

if TYPE_CHECKING:
    from config import Settings
    from workers.client import Client


__all__ = ["EventPrinter", "describe_event", "main", "worker_queues"]

_APPS_LINE = "  ADK_CELERY_APPS        module:attribute of the apps to serve, comma-separated\n"
PROCESS_ENVIRONMENT = f"""environment:
  ADK_CELERY_REDIS_URL   Redis for broker, results and state (required)
{_APPS_LINE}  see the README's Settings table for the rest (all ADK_CELERY_*)"""

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
        cli_ops.fail("ADK_CELERY_REDIS_URL is not set (e.g. redis://localhost:6379/0).")
    from orchestrator.distributed.app_checks import check_remote_tools
    from orchestrator.distributed.registry import AppRegistry
    from workers import app
    from workers.celery_app import use_settings
    from workers.transport import tool_route

    use_settings(settings)

    try:  # fail at start-up, not at the first task, when an app cannot be loaded or served
        registry = AppRegistry.from_specs(settings.app_specs())
        route = functools.partial(tool_route, settings=settings)
        for served in registry:
            check_remote_tools(served, route)
    except (ValueError, TypeError) as error:
        cli_ops.fail(f"ADK_CELERY_APPS / --app: {error}")
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
    pending, an unknown app, session or invocation) prints why on stderr and exits with
    status 2, without a traceback. When the reader of its output goes away (``| head``), it
    stops quietly with status 141, as a command ended by SIGPIPE.
    """
    from orchestrator.errors import (
        AnswerRejectedError,
        AppConfigError,
        InvocationNotFoundError,
        RequestError,
        SessionNotFoundError,
    )

    try:
        _main(argv)
    except (RequestError, AnswerRejectedError, InvocationNotFoundError, SessionNotFoundError,
            AppConfigError) as error:
        print(f"adk-celery: error: {error}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        # Nothing more can be written; the interpreter's last flush must not fail either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)


def _main(argv: Sequence[str] | None) -> None:
    # Like ``celery`` and ``uvicorn``: apps named in ADK_CELERY_APPS import from the
    # directory the command runs in.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    parser = argparse.ArgumentParser(prog="adk-celery", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    # Defaults in the help are the ones the settings in force give (ADK_CELERY_* variables).
    from config import get_settings
    from config.settings import describe_settings_error

    try:
        current = get_settings()
    except ValueError as error:  # a malformed ADK_CELERY_* setting
        cli_ops.fail(describe_settings_error(error))

    def worker_args(p: argparse.ArgumentParser, default_name: str, pool: str) -> None:
        p.add_argument("--app", action="append", metavar="MODULE:ATTR",
                       help="App or root agent to serve (repeatable; default ADK_CELERY_APPS)")
        p.add_argument("--concurrency", type=count, default=None,
                       help="Celery pool size for the threads and prefork pools, and the "
                            "prefetch of every pool (default ADK_CELERY_WORKER_CONCURRENCY: "
                            f"{current.worker_concurrency}; the solo pool runs one task at a "
                            "time)")
        p.add_argument("--pool", default=pool, choices=["threads", "prefork", "solo"],
                       help=f"Celery pool (default {pool})")
        p.add_argument("--loglevel", default="INFO", help="default INFO")
        p.add_argument("--hostname", default=f"{default_name}@%h",
                       help=f"Celery node name (default {default_name}@<host name>)")
        p.add_argument("--metrics-port", type=port, default=None,
                       help="serve this process's Prometheus metrics on this port (default "
                            "ADK_CELERY_METRICS_PORT; 0, the default, serves none)")

    def process_command(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        # Raw, so the environment block keeps its lines; the description is wrapped here.
        return sub.add_parser(name, help=help_text, description=textwrap.fill(description, 79),
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
    flower = process_command(
        "flower", "run Flower on the same broker",
        "Run Flower on the orchestrators' and workers' broker, locked down: a login from "
        "ADK_CELERY_FLOWER_BASIC_AUTH (none: loopback only), control routes off unless "
        "ADK_CELERY_FLOWER_ALLOW_CONTROL, task arguments redacted unless "
        "ADK_CELERY_FLOWER_TASK_ARGUMENTS. Other Flower options pass through as --name=value.")
    flower.epilog = PROCESS_ENVIRONMENT.replace(_APPS_LINE, "")
    flower.add_argument("--port", type=port, default=None,
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
    api.add_argument("--port", type=port, default=None,
                     help=f"default ADK_CELERY_API_PORT: {current.api_port}")
    api.add_argument("--no-access-log", dest="access_log", action="store_false", default=None,
                     help="no line per request (default ADK_CELERY_API_ACCESS_LOG: "
                          f"{str(current.api_access_log).lower()})")
    api.add_argument("--dev-ui", action="store_true",
                     help="also serve google-adk's web UI at /dev-ui/ (needs google-adk "
                          "installed: from a checkout, pip install -e '.[devui]')")
    enqueue = sub.add_parser(
        "enqueue", help="queue a message and print the invocation id",
        description="Queue a message for a new session of USER (or an existing one, "
                    "--session-id) and print the invocation id. With ADK_CELERY_APPS set, APP "
                    "must be one of its apps (they are loaded to check it); without, any app "
                    "name is queued and an orchestrator that does not serve it fails the "
                    "invocation. An unknown --session-id exits 2, storing nothing.")
    enqueue.add_argument("app_name", metavar="APP", help="the app to run (its name, e.g. chat)")
    enqueue.add_argument("user_id", metavar="USER", help="the user the session belongs to")
    enqueue.add_argument("message", metavar="MESSAGE",
                         help="the user's message (text); - reads it from stdin, @FILE from FILE "
                              "(one trailing newline dropped; a message that starts with @ "
                              "goes through stdin)")
    enqueue.add_argument("--session-id", default=None,
                         help="an existing session of USER (default: a new session)")
    enqueue.add_argument("--wait", action="store_true",
                         help="wait until it pauses or ends (up to --timeout, default 60 s), then "
                              "print its events and record; exit status 1 if it failed or was "
                              "cancelled")
    enqueue.add_argument("--follow", action="store_true",
                         help="print the events live, as they happen, and the final status "
                              "(not with --wait)")
    enqueue.add_argument("--stream", action="store_true",
                         help="run the model with streaming (partial chunks show with --follow)")
    follow = sub.add_parser(
        "follow", help="print an invocation's events live (replayed from its start) and its "
                       "final status",
        description="Print the invocation's events, one line each (author, then its text, "
                    "call or answer; chunks inline), from its start and then as they are "
                    "committed, until it ends (or pauses, with --until-paused), then its final "
                    "status in brackets. Exit status 0: completed (or paused, with "
                    "--until-paused); 1: failed or cancelled; 2: unknown invocation or timed "
                    "out.")
    cli_ops.invocation_args(follow)
    cli_follow.add_follow_args(follow, "no limit")
    cli_follow.add_follow_args(enqueue, "no limit with --follow, 60 s with --wait",
                               needs="--wait or --follow",
                               until_default="--follow follows until it ends; --wait always "
                                             "returns at a pause")
    cli_ops.add_commands(sub)

    args, extra = parser.parse_known_args(argv)
    if extra and args.command not in PASS_THROUGH:  # the command's own usage, not the top's
        (sub.choices.get(args.command) or parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "enqueue":
        if args.wait and args.follow:
            enqueue.error("--wait and --follow: choose one (--follow prints the events as they "
                          "happen, --wait once it pauses or ends)")
        if not (args.wait or args.follow) and (args.timeout is not None or args.until_paused):
            given = "--timeout" if args.timeout is not None else "--until-paused"
            enqueue.error(f"{given} needs --wait or --follow (without them enqueue does not wait)")
    if args.command in PASS_THROUGH:
        usage = {"orchestrator": orch, "worker": work, "flower": flower}[args.command]
        _pass_through(current, args, extra, usage)
    elif args.command == "api":
        from workers.api.app import serve

        serve(args.host, args.port, dev_ui=args.dev_ui, access_log=args.access_log)
    elif args.command == "enqueue":
        _enqueue(args)
    elif args.command == "follow":
        # An unknown invocation: InvocationNotFoundError from Client.follow, at once.
        sys.exit(cli_ops.with_client(lambda client: cli_follow.follow(client, args)))
    else:
        cli_ops.run(args)


def _pass_through(current: Settings, args: argparse.Namespace, extra: list[str],
                  usage: argparse.ArgumentParser) -> None:
    """Run ``orchestrator``, ``worker`` or ``flower`` with ``extra`` options for Celery or Flower.

    An option Celery or Flower refuses is a usage error of the command (exit status 2).
    """
    if args.command == "flower":
        from workers.flower import FlowerOptionError

        try:
            _run_flower(args, extra)
        except FlowerOptionError as error:
            usage.error(str(error))
        return
    from click import UsageError  # Celery's command line is click's

    settings = _with_options(current, args.app, args.metrics_port)
    if args.command == "orchestrator":
        queues = settings.invocations_queue
    else:
        queues = args.queues or worker_queues(settings)
    try:
        _celery_worker(settings, queues, args, extra)
    except UsageError as error:  # raised as `celery worker` parses, before it starts
        usage.error(f"celery worker: {error.format_message()}")


def _run_flower(args: argparse.Namespace, extra: list[str]) -> None:
    from config import get_settings
    from workers import app
    from workers.flower import run_flower

    settings = get_settings()
    run_flower(app, settings, args.port or settings.flower_port, args.address, extra)


def _enqueue(args: argparse.Namespace) -> None:
    message = cli_ops.argument_text(args.message, "MESSAGE")
    if args.message == "-" or args.message.startswith("@"):
        message = message.removesuffix("\n").removesuffix("\r")

    def enqueue(client: Client) -> int:
        invocation_id = client.enqueue(
            args.app_name, args.user_id, message, session_id=args.session_id,
            streaming=args.stream,
        )
        print(invocation_id, flush=True)
        if args.follow:
            args.invocation_id = invocation_id
            return cli_follow.follow(client, args)
        if args.wait:
            try:
                record = client.wait(args.app_name, invocation_id,
                                     timeout=60.0 if args.timeout is None else args.timeout)
            except TimeoutError as error:  # as ``follow`` says it
                return cli_follow.timed_out(client, args.app_name, invocation_id, error)
            for event in client.events(args.app_name, invocation_id):
                print(json.dumps(event.to_wire()))
            print(record.model_dump_json())
            return cli_follow.exit_status(record.status)
        return 0

    sys.exit(cli_ops.with_client(enqueue))


if __name__ == "__main__":
    main()
