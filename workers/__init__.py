"""The Celery side: the app (``celery -A workers``), tasks, transport, client and CLI.

This is the only package that imports Celery.
"""

from workers import lifecycle as _lifecycle  # noqa: F401  (starts orchestrators' wake-ups)
from workers import metrics as _metrics  # noqa: F401  (serves a process's metrics if asked)
from workers import tasks as _tasks  # noqa: F401  (registers the tasks)
from workers.celery_app import app

__all__ = ["app"]
