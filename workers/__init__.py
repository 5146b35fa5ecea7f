"""The Celery side: the app (``celery -A workers``), tasks, transport, client and CLI.

This is the only package that imports Celery. ``app`` is built on first use (``celery -A
workers`` and the CLI's long-running commands ask for it), with the tasks registered and the
orchestrators' wake-ups and metrics hooked in; importing a submodule alone (the CLI's
``--help`` and operator commands, ``workers.client``) imports none of that.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from celery import Celery

    app: Celery

__all__ = ["app"]

_WITH_APP = (
    "workers.lifecycle",  # starts orchestrators' wake-ups
    "workers.metrics",  # serves a process's metrics if asked
    "workers.tasks",  # registers the tasks
)
"""Modules imported for their Celery signal handlers and tasks before ``app`` is handed out."""


def __getattr__(name: str) -> Any:
    """``app``: the Celery app, its tasks and signal handlers imported on first use."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for module in _WITH_APP:
        importlib.import_module(module)
    value = importlib.import_module("workers.celery_app").app
    globals()["app"] = value
    return value
