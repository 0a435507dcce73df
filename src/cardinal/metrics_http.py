"""A Prometheus endpoint that slow or many clients cannot hold: the servers' and the workers'.

prometheus_client's ``start_http_server`` starts a thread for each connection and waits for its
request without end, so a few thousand half-sent requests hold as many threads. Here one thread
runs an event loop; each connection must send its request head within ``header_timeout_s``, at
most ``max_connections`` are open (``netguard.ConnectionCap``: past it the longest-waiting goes),
and each is answered with the registry's text, then closed.

    server = MetricsServer(registry, "127.0.0.1", 0)    # server.port; GET (any path) -> the metrics
    server.close()
"""

import asyncio
import concurrent.futures
import threading

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cardinal.netguard import ConnectionCap, HttpLimits

HEAD = 16 << 10  # the most bytes of a request head


class MetricsServer:
    def __init__(self, registry, host: str, port: int, limits: HttpLimits = HttpLimits()):
        self.registry, self.limits = registry, limits
        self.cap = ConnectionCap(limits.max_connections)
        self._loop = asyncio.new_event_loop()
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(host, port, started), name="metrics", daemon=True)
        self._thread.start()
        self.port: int = started.result(timeout=60)

    def close(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def _run(self, host: str, port: int, started: concurrent.futures.Future) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            server = self._loop.run_until_complete(asyncio.start_server(self._answer, host, port, limit=HEAD))
        except BaseException as e:  # the port taken...: raised by the constructor
            started.set_exception(e)
            return
        started.set_result(server.sockets[0].getsockname()[1])
        try:
            self._loop.run_forever()
        finally:  # closed: every connection's task ends (and aborts it), then the loop
            server.close()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = writer.transport
        if not self.cap.admit(conn):
            conn.abort()
            return
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.limits.header_timeout_s)
            self.cap.busy(conn)
            method = head.split(b" ", 1)[0]
            body = generate_latest(self.registry) if method in (b"GET", b"HEAD") else b""
            status = "200 OK" if method in (b"GET", b"HEAD") else "405 Method Not Allowed"
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE_LATEST}\r\nContent-Length: {len(body)}\r\n"
                         f"Connection: close\r\n\r\n".encode() + (body if method == b"GET" else b""))
            await asyncio.wait_for(writer.drain(), self.limits.body_timeout_s)
            writer.close()
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass  # too slow, too long, or gone
        finally:
            self.cap.forget(conn)
            if not conn.is_closing():
                conn.abort()
