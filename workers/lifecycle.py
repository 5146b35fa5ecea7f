"""Start and stop an orchestrator's wake-up consumer with the Celery worker that hosts it.

A worker consuming the invocations queue is an orchestrator: besides its Celery tasks
(invoke, answer, cancel) it drains the sessions announced on the wake stream, on its
runtime's event loop. With the prefork pool each child process runs its own consumer (the
Runner loops then use every child); with threads or solo the worker process runs one.
Plain ``celery -A workers worker -Q adk.invocations`` gets the same behaviour. Such a
process never runs a tool or a branch (:func:`refused_here`).
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Any

from celery import signals

from config import Settings
from workers.celery_app import app_settings
from workers.runtime import get_runtime

logger = logging.getLogger(__name__)

_role: dict[str, bool] = {
    "orchestrating": False, "prefork": False, "started": False, "plugins_closed": False,
}
_node_name: dict[str, str] = {}
"""This worker's Celery node name (``"name"``), once set up."""


def is_orchestrator() -> bool:
    """True in an orchestrator's processes: a Celery worker consuming the invocations queue.

    Set before the pool starts, so prefork children inherit it. Orchestrators never run
    tools or branches (a job delivered to one is refused: see ``workers.tasks``).
    """
    return _role["orchestrating"]


REFUSED_HERE = "refused: orchestrators never run tools or branches"


def refused_here(
    task_name: str, delivery_info: dict[str, Any] | None, kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """The refusal of a tool or branch job delivered to an orchestrator, else None.

    An orchestrator's pool runs the invocations' own tasks (often one at a time): a tool
    there would hold them up, and nothing dispatches jobs to it. Its role says so (it
    consumes the invocations queue), and so does a message that came through that queue.
    The task returns its refusal normally, so the message is acknowledged, not redelivered.
    """
    routing_key = (delivery_info or {}).get("routing_key")
    if not is_orchestrator() and routing_key != app_settings().invocations_queue:
        return None
    logger.warning("Refused %s job %.100r of invocation %.100r delivered to an orchestrator "
                   "(routing key %.100r): orchestrators never run tools or branches", task_name,
                   kwargs.get("function_call_id"), kwargs.get("invocation_id"), routing_key)
    return {"status": REFUSED_HERE}


NOT_AN_ORCHESTRATOR = ("refused: only orchestrators take an invocation's own tasks (invoke, "
                       "answer, cancel, drain); send it to the invocations queue")


def refused_off_orchestrators(task_name: str, delivery_info: dict[str, Any] | None) -> dict[str, str] | None:
    """The refusal of an orchestrator's task delivered to a worker (its queue), else None.

    Workers run tools: an invocation's task there would take a slot a tool needs and build
    the whole service (a Runner per app) a worker never builds. The message is acknowledged
    with the refusal as its result, so its sender hears why.
    """
    if is_orchestrator():
        return None
    logger.warning("Refused %s delivered to a worker (routing key %.100r): %s", task_name,
                   (delivery_info or {}).get("routing_key"), NOT_AN_ORCHESTRATOR)
    return {"error": NOT_AN_ORCHESTRATOR}


def load_apps_or_exit(settings: Settings) -> None:
    """Import the configured apps now: a worker that cannot serve them fails at start-up.

    Plain ``celery -A workers worker`` gets what ``adk-celery worker`` does: apps import
    from the directory the command runs in, and one that cannot be imported stops the
    worker with one line, instead of failing every job later.
    """
    from orchestrator.distributed.registry import AppRegistry

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        registry = AppRegistry.from_specs(settings.app_specs())
    except Exception as error:  # any import-time failure of the user's module
        raise SystemExit(f"adk-celery: cannot load ADK_CELERY_APPS "
                         f"({settings.apps!r}): {type(error).__name__}: {error}") from None
    logger.info("Apps: %s", ", ".join(registry.names) or "none (ADK_CELERY_APPS is empty)")


@signals.celeryd_after_setup.connect
def _note_role(sender: str, instance: Any, **_: Any) -> None:
    """Decide, before the pool starts, whether and where this worker consumes wake-ups."""
    settings = instance.app.adk_settings
    load_apps_or_exit(settings)
    queues = set(instance.app.amqp.queues.consume_from or instance.app.amqp.queues)
    _role["orchestrating"] = settings.invocations_queue in queues
    _node_name["name"] = sender
    _role["prefork"] = "prefork" in getattr(instance.pool_cls, "__module__", "")


@signals.worker_ready.connect
def _start_in_worker(**_: Any) -> None:
    if _role["orchestrating"] and not _role["prefork"]:
        _start()
        logger.info("Orchestrating: draining sessions announced on the wake stream")
    freeze_startup_heap()


@signals.worker_process_init.connect
def _start_in_child(**_: Any) -> None:
    if _role["orchestrating"] and _role["prefork"]:
        _start()
    freeze_startup_heap()


def freeze_startup_heap() -> None:
    """Keep what start-up built (modules, apps, schemas) out of later garbage collections.

    A full collection otherwise walks every object of google-genai, pydantic and Celery on
    each pass: tens of milliseconds in the middle of some unlucky invocation. Frozen objects
    live as long as the process, as they would anyway.
    """
    gc.collect()
    gc.freeze()


def _start() -> None:
    get_runtime().start_orchestrating(_node_name.get("name"))
    _role["started"] = True


@signals.worker_shutdown.connect
@signals.worker_process_shutdown.connect
def _stop(**_: Any) -> None:
    if _role["started"]:
        _role["started"] = False
        get_runtime().stop_orchestrating()
    if not _role["plugins_closed"]:
        # After the consumer stopped: no run of this process uses the plugins any more.
        _role["plugins_closed"] = True
        get_runtime().close_plugins()
