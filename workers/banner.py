"""What an orchestrator or worker says at start-up about what it runs at once.

Celery's banner reports its pool ("concurrency: 8 (solo)"). For a worker that is the truth:
that many tool calls or branches at once. An orchestrator's pool only takes orchestrator
tasks (invoke, answer, cancel, drain); what it runs at once is the Runner loops of up to
``ADK_CELERY_ORCHESTRATOR_CONCURRENCY`` sessions on its event loop (in each process, with the
prefork pool). The banner's concurrency line says so, from the settings the process uses.
"""

from __future__ import annotations

import re
from typing import Any

from celery.apps.worker import Worker as CeleryWorker

from config import Settings

_CONCURRENCY_LINE = re.compile(r"(\.> concurrency: ).*$", re.MULTILINE)


def pool_name(pool_cls: Any) -> str:
    """Celery's short name of a pool class (``solo``, ``prefork``, ``thread_pool``...)."""
    module = pool_cls if isinstance(pool_cls, str) else pool_cls.__module__
    return module.split(".")[-1]


def concurrency_text(settings: Settings, *, orchestrating: bool, pool: str, size: int) -> str:
    """What the process runs at once, for the banner.

    ``pool`` and ``size``: Celery's pool and its ``--concurrency`` (for the solo pool, only
    the number of messages prefetched).
    """
    if not orchestrating:
        return f"{size} ({pool})"
    each = " in each process" if pool == "prefork" else ""
    tasks = ("one at a time" if pool == "solo" else f"{size} at once")
    return (f"{settings.orchestrator_concurrency} sessions{each} "
            f"(ADK_CELERY_ORCHESTRATOR_CONCURRENCY); orchestrator tasks: {pool} pool, {tasks}")


class Worker(CeleryWorker):  # type: ignore[misc]
    """Celery's worker, with the banner's concurrency line as :func:`concurrency_text` says."""

    def startup_info(self, artlines: bool = True) -> str:
        """Celery's banner, its concurrency line replaced."""
        info: str = super().startup_info(artlines)
        settings = self.app.adk_settings
        queues = self.app.amqp.queues.consume_from or self.app.amqp.queues
        text = concurrency_text(settings, orchestrating=settings.invocations_queue in queues,
                                pool=pool_name(self.pool_cls), size=int(self.concurrency))
        return _CONCURRENCY_LINE.sub(lambda m: m.group(1) + text, info, count=1)
