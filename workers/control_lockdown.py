"""Celery's remote control, read-only: a broker client cannot stop, stall or steer the fleet.

Every Celery worker (our orchestrators and workers) answers broadcast commands sent through
the broker (the pidbox). Some only read (``ping``, ``stats``, ``active``: what Flower's
worker pages show), others act: ``shutdown`` stops the process, ``rate_limit`` or
``add_consumer`` can stall every tool job, ``revoke`` of a call's predictable task ids
discards each attempt, and ``revoke(terminate=True)`` kills a running tool (its call is then
answered as a tool error). They need no more than the broker access that sending a task
does, which this project treats as reachable by someone hostile.

So each process keeps only the commands that read (minus the costly memory dumps), plus
``enable_events`` (Flower turns task events on with it: they are on already) and
``heartbeat``; the others are answered with an error saying they are refused (and logged,
without their arguments). ``ADK_CELERY_FLOWER_ALLOW_CONTROL=true`` (the operator lets Flower
control workers) keeps them all.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery.worker import control

logger = logging.getLogger(__name__)

READ_ONLY = frozenset({
    "active", "active_queues", "clock", "conf", "hello", "ping", "query_task", "registered",
    "report", "reserved", "revoked", "scheduled", "stats",
})
"""The inspect commands kept: what Flower and ``celery inspect`` read (``conf`` is censored
by Celery). ``objgraph``, ``memdump`` and ``memsample`` are not: they cost the process much
for a caller nobody checks."""

HARMLESS = frozenset({"enable_events", "heartbeat"})
"""Control commands kept: turning events on (Flower does; they are on) and a heartbeat event."""


def lock_down(allow_control: bool) -> list[str]:
    """Refuse this process's remote-control commands that act; return the names refused.

    With ``allow_control`` only the costly dumps are refused. Celery's registry is per
    process and read when a command arrives, so this holds from the next command on.
    """
    kept = READ_ONLY | HARMLESS
    refused = []
    for name in list(control.Panel.data):
        meta = control.Panel.meta.get(name)
        acts = meta is None or meta.type != "inspect"
        if name in kept or (allow_control and acts):
            continue
        control.Panel.data[name] = _refusal(name)
        refused.append(name)
    return sorted(refused)


def _refusal(name: str) -> Callable[..., dict[str, str]]:
    """A handler answering ``name`` with an error (its arguments are neither used nor logged)."""
    reason = (f"{name}: refused (remote control is read-only here; "
              "ADK_CELERY_FLOWER_ALLOW_CONTROL=true allows it)")

    def refuse(state: Any, **_: Any) -> dict[str, str]:
        logger.warning("Remote control command %r refused", name)
        return {"error": reason}

    return refuse
