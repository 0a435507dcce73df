"""`cardinal serve`'s edge: its limits (``--set KEY=VALUE``) and the connection cap in front of aiohttp.

    limits = ServeLimits(max_body_mb=4, header_timeout_s=10, body_timeout_s=30, max_connections=512)
    server = await listen(runner, host, port, cap)     # each connection counted by cap before aiohttp has it
    app.middlewares.append(busy_while_answered(cap))   # a connection in a request is never dropped for a new one

aiohttp closes a connection that sends no whole request head within its keep-alive timeout (set
to ``header_timeout_s``) and ``body.py`` bounds the body; what aiohttp lacks is a cap on
connections (``netguard.ConnectionCap``: past it the longest-idle connection goes first).
"""

import asyncio
from dataclasses import dataclass

from aiohttp import web

from cardinal.netguard import ConnectionCap, HttpLimits
from cardinal.recipe import parse_override
from cardinal.recipe.build import build

REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True)
class ServeLimits(HttpLimits):
    max_body_mb: float = 4.0        # a request body past this is refused (413) before it is read: 4 MiB holds
                                    # --max-batch 4,096 examples of up to 1 KiB of JSON each (a named example with
                                    # every field at its widest takes 842 bytes)

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.max_body_mb <= 1024:
            raise ValueError(f"max_body_mb must be in (0, 1024], got {self.max_body_mb!r}")

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * (1 << 20))


def limits(settings: list[str]) -> ServeLimits:
    """``cardinal serve --set KEY=VALUE`` values as limits; an unknown or mistyped key is named."""
    return build(ServeLimits, {".".join(k): v for k, v in map(parse_override, settings)}, "serve")


class _Counted(asyncio.Protocol):
    """One connection: counted in (or refused at once), then handed to aiohttp's protocol."""

    def __init__(self, cap: ConnectionCap, inner: asyncio.Protocol):
        self.cap, self.inner, self.transport = cap, inner, None

    def connection_made(self, transport) -> None:
        if not self.cap.admit(transport):
            transport.write(REFUSED)
            transport.close()
            return
        self.transport = transport
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:
        if self.transport is not None:
            self.cap.forget(self.transport)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport is not None:
            self.inner.data_received(data)

    def eof_received(self):
        return self.inner.eof_received() if self.transport is not None else None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


async def listen(runner: web.AppRunner, host: str, port: int, cap: ConnectionCap) -> asyncio.Server:
    return await asyncio.get_running_loop().create_server(lambda: _Counted(cap, runner.server()), host, port)


def busy_while_answered(cap: ConnectionCap):
    @web.middleware
    async def middleware(request, handler):
        conn = request.transport
        cap.busy(conn)
        try:
            return await handler(request)
        finally:
            cap.idle(conn)

    return middleware
