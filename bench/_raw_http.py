"""A minimal HTTP/1.1 keep-alive client on asyncio streams, as a cheap load generator.

httpx's ``AsyncClient`` spends about 3 ms of CPU per request with a couple of hundred
connections open (a known httpx issue, encode/httpx#3215), more than ``adk-celery api``
spends serving one ``/run``: on a small machine shared with the server, a burst measured
through it measures httpx. This client writes one request and reads one response
(``Content-Length`` or chunked) per call on an open connection, and costs well under a
tenth of a millisecond per request, so a burst measures the server. :class:`RawSyncConnection`
is the same on a blocking socket, for one request at a time (the latency's ``--latency-load raw``).
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any


class RawConnection:
    """One kept-alive HTTP/1.1 connection; one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> None:
        self._reader = reader
        self._writer = writer
        self._host = host

    @classmethod
    async def open(cls, host: str, port: int) -> RawConnection:
        """Connect to ``host:port``."""
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer, f"{host}:{port}")

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """Send one request (``body`` as JSON) and return the status and the response body."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nhost: {self._host}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n")
        self._writer.write(head.encode() + data)
        status = int((await self._reader.readline()).split()[1])
        length, chunked = 0, False
        while (line := await self._reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, await self._reader.readexactly(length)
        parts = []
        while size := int((await self._reader.readline()).strip(), 16):
            parts.append((await self._reader.readexactly(size + 2))[:-2])
        await self._reader.readline()  # the blank line after the last chunk
        return status, b"".join(parts)

    async def close(self) -> None:
        """Close the connection."""
        self._writer.close()
        await self._writer.wait_closed()


class RawSyncConnection:
    """One kept-alive HTTP/1.1 connection on a blocking socket; one request at a time."""

    def __init__(self, host: str, port: int) -> None:
        self._socket = socket.create_connection((host, port))
        self._socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._file = self._socket.makefile("rb")
        self._host = f"{host}:{port}"

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """Send one request (``body`` as JSON) and return the status and the response body."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nhost: {self._host}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n")
        self._socket.sendall(head.encode() + data)
        status = int(self._file.readline().split()[1])
        length, chunked = 0, False
        while (line := self._file.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        if not chunked:
            return status, self._file.read(length)
        parts = []
        while size := int(self._file.readline().strip(), 16):
            parts.append(self._file.read(size + 2)[:-2])
        self._file.readline()  # the blank line after the last chunk
        return status, b"".join(parts)

    def close(self) -> None:
        """Close the connection."""
        self._file.close()
        self._socket.close()
