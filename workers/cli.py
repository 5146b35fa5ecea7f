"""``adk-celery``: run orchestrators, workers and Flower; enqueue and follow invocations."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence


def _apply_apps(apps: list[str] | None) -> None:
    # Settings are read from the environment, so --app is passed on the same way; the
    # worker processes Celery starts inherit it.
    if apps:
        from config import get_settings

        os.environ["ADK_CELERY_APPS"] = ",".join(apps)
        get_settings.cache_clear()  # importing this package already read the settings


def _celery_worker(queues: str, args: argparse.Namespace, extra: list[str]) -> None:
    from config import get_settings

    settings = get_settings()
    if not settings.redis_url:
        sys.exit("adk-celery: set ADK_CELERY_REDIS_URL (e.g. redis://localhost:6379/0).")
    from orchestrator.distributed.registry import AppRegistry
    from workers import app

    try:  # fail at start-up, not at the first task, when an app cannot be loaded
        registry = AppRegistry.from_specs(settings.app_specs())
    except (ValueError, TypeError) as error:
        sys.exit(f"adk-celery: ADK_CELERY_APPS / --app: {error}")
    if not registry.names:
        print("adk-celery: warning: no apps configured (ADK_CELERY_APPS or --app); every "
              "invocation will fail with 'unknown app'.", file=sys.stderr)
    argv = [
        "worker", "-Q", queues, "-E",
        "--pool", args.pool,
        "--concurrency", str(args.concurrency or settings.worker_concurrency),
        "--loglevel", args.loglevel,
        "--hostname", args.hostname,
        *extra,
    ]
    app.worker_main(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``adk-celery`` command."""
    # Like ``celery`` and ``uvicorn``: apps named in ADK_CELERY_APPS import from the
    # directory the command runs in.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    parser = argparse.ArgumentParser(prog="adk-celery", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def worker_args(p: argparse.ArgumentParser, default_name: str) -> None:
        p.add_argument("--app", action="append", metavar="MODULE:ATTR",
                       help="App or root agent to serve (repeatable; default ADK_CELERY_APPS)")
        p.add_argument("--concurrency", type=int, default=None)
        p.add_argument("--pool", default="threads", choices=["threads", "prefork", "solo"])
        p.add_argument("--loglevel", default="INFO")
        p.add_argument("--hostname", default=f"{default_name}@%h")

    orch = sub.add_parser("orchestrator", help="run Runner loops for queued invocations")
    worker_args(orch, "orchestrator")
    work = sub.add_parser("worker", help="run remote tool calls")
    worker_args(work, "worker")
    work.add_argument("-Q", "--queues", default=None,
                      help="comma-separated queues (default: the tools queue and tool_queues)")
    flower = sub.add_parser("flower", help="run Flower on the same broker")
    flower.add_argument("--port", type=int, default=None)
    flower.add_argument("--address", default="127.0.0.1")
    enqueue = sub.add_parser("enqueue", help="queue a message and print the invocation id")
    enqueue.add_argument("app_name")
    enqueue.add_argument("user_id")
    enqueue.add_argument("message")
    enqueue.add_argument("--session-id", default=None)
    enqueue.add_argument("--wait", action="store_true", help="wait and print the events")
    status = sub.add_parser("status", help="print an invocation's record as JSON")
    status.add_argument("app_name")
    status.add_argument("invocation_id")

    args, extra = parser.parse_known_args(argv)
    if args.command in ("orchestrator", "worker"):
        _apply_apps(args.app)
        from config import get_settings

        settings = get_settings()
        if args.command == "orchestrator":
            queues = settings.invocations_queue
        else:
            queues = args.queues or ",".join(q for q in dict.fromkeys(
                [settings.tools_queue, settings.agents_queue, *settings.tool_queues.values(),
                 *settings.agent_queues.values()]
            ) if q)
        _celery_worker(queues, args, extra)
    elif args.command == "flower":
        _run_flower(args, extra)
    elif args.command == "enqueue":
        _enqueue(args)
    elif args.command == "status":
        from workers.client import Client

        record = Client().status(args.app_name, args.invocation_id)
        print(record.model_dump_json(indent=2) if record else "null")


def _run_flower(args: argparse.Namespace, extra: list[str]) -> None:
    from config import get_settings
    from workers import app

    settings = get_settings()
    argv = ["flower", f"--port={args.port or settings.flower_port}", f"--address={args.address}"]
    if settings.flower_basic_auth is not None:
        argv.append(f"--basic-auth={settings.flower_basic_auth.get_secret_value()}")
    app.start([*argv, *extra])


def _enqueue(args: argparse.Namespace) -> None:
    from workers.client import Client

    client = Client()
    invocation_id = client.enqueue(
        args.app_name, args.user_id, args.message, session_id=args.session_id
    )
    print(invocation_id)
    if args.wait:
        record = client.wait(args.app_name, invocation_id)
        for event in client.events(args.app_name, invocation_id):
            print(json.dumps(event.to_wire()))
        print(record.model_dump_json())
    client.close()


if __name__ == "__main__":
    main()
