"""Redis commands of many requests in one pipeline: those asked for in one turn of the loop.

A burst of ``/run`` requests wakes many runs at once (one stream read hands out the
statuses of many invocations), and each then reads its events or looks at its pause: with
redis-py's asyncio client each command costs about 60-70 us of CPU of its own (a pooled
connection taken and given back, one write, one read), against about 15 us in a pipeline of
fifty. :class:`TurnBatcher` gathers what the requests ask for during one turn of the event
loop and sends it as one pipeline at the end of that turn; each request gets its own replies.
A request alone pays one pipeline of its own commands, as before, plus one turn of the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline

from orchestrator import failpoints

Queue = Callable[[Pipeline], object]
"""Adds a request's commands to a pipeline (``pipe.xrange(...)``, ...)."""


class TurnBatcher:
    """Sends the commands asked for during one turn of the event loop as one pipeline.

    One per event loop (its futures and connections belong to it); see the module docstring.
    ``transaction``: the pipeline is one MULTI/EXEC, so each request's commands run together
    (those of the others with them: Redis runs them all at once, which each request's own
    transaction allows).
    """

    def __init__(self, client: aioredis.Redis, *, transaction: bool = False) -> None:
        self.loop = asyncio.get_running_loop()
        self._client = client
        self._transaction = transaction
        self._held: list[tuple[Queue, asyncio.Future[list[Any]]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def run(self, queue: Queue) -> list[Any]:
        """The replies of the commands ``queue`` adds, sent with the others of this turn.

        Raises the first error among its own replies (as ``Pipeline.execute`` does), or
        the error that failed the whole pipeline (Redis gone past the client's retries).
        """
        replies = await self.replies(queue)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def replies(self, queue: Queue) -> list[Any]:
        """As :meth:`run`, with errors in their place among the replies (not raised)."""
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        self._held.append((queue, future))
        if len(self._held) == 1:
            # The task starts at the loop's next turn and takes what this turn asked for.
            task = self.loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return await future

    async def _send(self) -> None:
        held, self._held = self._held, []
        try:
            async with self._client.pipeline(transaction=self._transaction) as pipe:
                bounds = []
                for queue, _ in held:
                    start = len(pipe)
                    queue(pipe)
                    bounds.append((start, len(pipe)))
                if self._transaction:
                    failpoints.hit("api.transaction.before_send")
                replies = await pipe.execute(raise_on_error=False)
                if self._transaction:  # written, and no request has its answer yet
                    failpoints.hit("api.transaction.sent")
        except asyncio.CancelledError:
            for _, future in held:
                future.cancel()
            raise
        except Exception as error:
            for _, future in held:
                if not future.done():
                    future.set_exception(error)
            return
        for (_, future), (start, end) in zip(held, bounds, strict=True):
            if not future.done():  # its request may have gone (a client that hung up)
                future.set_result(replies[start:end])

    async def aclose(self) -> None:
        """Wait for the pipelines on their way (at shutdown)."""
        if self._sending:
            await asyncio.wait(set(self._sending))
