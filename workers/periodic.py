"""A pass an orchestrator runs every so often on its event loop (the job watchdog, the keeper).

Each subclass names what its pass does (:attr:`Periodic.what`, for the logs) and runs it in
:meth:`Periodic.run_pass`. A pass that fails is logged, never the end of the loop: an
infrastructure error (Redis away) as a warning, the next pass retrying; any other with its
traceback.
"""

from __future__ import annotations

import asyncio
import logging

from orchestrator.errors import is_infrastructure_error


class Periodic:
    """:meth:`run_pass` every ``interval`` seconds on the running loop, from start to stop."""

    what = "A periodic pass"
    """What the pass does, as the logs say it (``"<what> failed"``)."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start (on the running loop); an interval of 0 or less never runs."""
        if self._interval > 0 and self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Stop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def run_pass(self) -> None:
        """One pass."""
        raise NotImplementedError

    def on_outage(self) -> None:
        """A pass failed on infrastructure (Redis away); the next one runs as usual."""

    async def _run(self) -> None:
        logger = logging.getLogger(type(self).__module__)
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.run_pass()
            except Exception as error:
                if not is_infrastructure_error(error):
                    logger.exception("%s failed", self.what)
                else:
                    self.on_outage()
                    logger.warning("%s failed (%s); retrying", self.what, error)
