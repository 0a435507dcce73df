"""HTTP as a hostile client speaks it: raw sockets on 127.0.0.1, half-sent requests, connections
watched until the server closes them. Every socket is closed when the block ends."""

import contextlib
import socket
import time

import pytest


def ask(port: int, method: str, path: str, body: bytes = b"", timeout: float = 30) -> tuple[int, bytes]:
    """One whole request on a connection of its own: (status, body). A server that answers before it
    has read the body (413) may close while the body is still sent: its answer is read all the same."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        data = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(1 << 16):
                data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    return int(head.split()[1]), rest


@contextlib.contextmanager
def sockets():
    """A list to put open sockets in; closed when the block ends, failed or not."""
    opened: list[socket.socket] = []
    try:
        yield opened
    finally:
        for s in opened:
            s.close()


def half_sent(port: int, opened: list, n: int, data: bytes) -> list[socket.socket]:
    """``n`` connections that each sent ``data`` and nothing more."""
    new = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        opened.append(s)
        new.append(s)
        if data:
            s.sendall(data)
    return new


def closed(s: socket.socket, received: dict | None = None) -> bool:
    """True once the server closed ``s``; what it sent before is added to ``received[s]``."""
    s.setblocking(False)
    try:
        while chunk := s.recv(1 << 16):
            if received is not None:
                received[s] = received.get(s, b"") + chunk
        return True
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def poll_for(check, deadline: float = 60.0, what: str = "") -> float:
    """Seconds until ``check()`` held; fails after ``deadline``."""
    start = time.monotonic()
    while time.monotonic() < start + deadline:
        if check():
            return time.monotonic() - start
        time.sleep(0.05)
    pytest.fail(f"timed out after {deadline} s waiting for {what}")
