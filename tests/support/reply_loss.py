"""A TCP proxy in front of Redis that loses the reply of one chosen command.

The services' Redis clients send a command again when its connection drops after Redis ran
it but before the reply came back (``orchestrator/backends/redis/connection.py``): a script
then runs twice. Armed with a needle (bytes of the request, e.g. a script's SHA), the proxy
forwards that request, lets Redis run it, and cuts the connection before its reply.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import redis.asyncio as aioredis

from orchestrator.backends.redis.connection import connect


class ReplyLosingProxy:
    """Forwards to Redis on ``upstream_port``; loses the reply of the next request holding
    :attr:`needle`, once (then disarms)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.needle: bytes | None = None
        self.lost = 0
        self.on_lost: Callable[[], Awaitable[None]] | None = None
        """Run once after Redis ran the doomed request, before the client learns its
        connection dropped (so before it sends the request again)."""
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        """Listen; return the ``redis://`` URL (db 0) that goes through the proxy."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/0"

    def close(self) -> None:
        """Stop listening."""
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        doomed = asyncio.Event()
        ran = asyncio.Event()

        async def to_redis() -> None:
            while data := await reader.read(65536):
                lose = self.needle is not None and self.needle in data
                if lose:
                    self.needle = None
                    doomed.set()  # nothing more goes back to the client on this connection
                up_writer.write(data)
                await up_writer.drain()
                if lose:
                    await ran.wait()  # Redis ran it and replied: that reply is lost
                    self.lost += 1
                    if self.on_lost is not None:
                        hook, self.on_lost = self.on_lost, None
                        await hook()
                    return

        async def to_client() -> None:
            while data := await up_reader.read(65536):
                if doomed.is_set():
                    ran.set()
                    continue
                writer.write(data)
                await writer.drain()

        try:
            await asyncio.wait({asyncio.ensure_future(to_redis()),
                                asyncio.ensure_future(to_client())},
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for side in (writer, up_writer):
                with contextlib.suppress(Exception):
                    side.transport.abort()


@contextlib.asynccontextmanager
async def losing_client(redis_url: str) -> AsyncIterator[tuple[ReplyLosingProxy, aioredis.Redis]]:
    """A proxy in front of the Redis at ``redis_url`` and a project client (retrying, as the
    services' are) talking through it; both closed on exit."""
    proxy = ReplyLosingProxy(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    client = connect(await proxy.start())
    try:
        yield proxy, client
    finally:
        await client.aclose()
        proxy.close()

