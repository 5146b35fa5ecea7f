"""Failpoints: named places where a fault test makes this process die, fail or stall.

In the style of etcd's gofail and TiKV's fail-rs, but small: the code calls
:func:`hit` with a name at each step worth crashing at; unless a test armed that name, the
call is one lookup in an empty dict and nothing happens. Tests arm failpoints in the
processes they start through the ``ADK_CELERY_FAILPOINTS`` setting (``name=action``, comma
separated), which :func:`arm` reads at process start. Never arm them in production.

Actions:

- ``kill``: SIGKILL this process on the spot (what ``kill -9`` does, at an exact step);
- ``error``: raise :class:`FailpointError`, a ``ConnectionError``, as a dropped Redis
  connection would at that step;
- ``stall``: block this thread for an hour (a hung process whose lease runs out).

``action*N`` triggers on the first N hits only (``error*1``: one transient error); the
hits after that pass.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from orchestrator.errors import FailpointError

logger = logging.getLogger(__name__)


_ACTIONS = ("kill", "error", "stall")
_armed: dict[str, list[int | str]] = {}
"""name -> [action, hits left (-1: every hit)]. Empty unless a test armed something."""
_lock = threading.Lock()


def arm(spec: str) -> None:
    """Arm the failpoints of ``spec`` (``name=action[*N],...``); an empty spec arms none."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, action = item.partition("=")
        action, _, count = action.partition("*")
        if not name or action not in _ACTIONS or (count and not count.isdigit()):
            raise ValueError(
                f"Bad failpoint {item!r}: expected name=action or name=action*N, with action "
                f"one of {', '.join(_ACTIONS)}."
            )
        _armed[name.strip()] = [action, int(count) if count else -1]
    if _armed:
        logger.warning("Failpoints armed (test only): %s", ", ".join(sorted(_armed)))


def disarm() -> None:
    """Disarm every failpoint (a test that armed some in its own process)."""
    with _lock:
        _armed.clear()


def hit(name: str) -> None:
    """Trigger the failpoint ``name`` if a test armed it; otherwise do nothing."""
    if not _armed or name not in _armed:
        return
    with _lock:
        slot = _armed.get(name)
        if slot is None:
            return
        action, left = slot
        if left == 0:
            return
        if isinstance(left, int) and left > 0:
            slot[1] = left - 1
    logger.warning("Failpoint %s: %s", name, action)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the signal is on its way; never return into the step
    if action == "stall":
        time.sleep(3600)
    raise FailpointError(f"failpoint {name}")
