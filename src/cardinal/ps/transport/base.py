"""The narrow interface through which workers reach shard stores.

Eight calls, each returning a ``Handle`` whose ``.wait(timeout)`` gives the result or raises
the request's error; a pull and a push take their request whole (``requests.py``). Two
strategies: ``InProcessTransport`` (the embedded default: stores in this process, no sockets)
and the gRPC transport (stores in server processes). A client addresses shards by index;
routing ids to shards is the client's job, not the transport's.
"""

from abc import ABC, abstractmethod
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any

from cardinal.ps.transport.requests import PullRequest, PushRequest

DEFAULT_TIMEOUT = 60.0


class TransientError(RuntimeError):
    """A request that may not have arrived, or whose reply was lost: sending it again with the
    same request id is safe, since stores apply each request id once."""


class Handle(ABC):
    @abstractmethod
    def wait(self, timeout: float | None = DEFAULT_TIMEOUT) -> Any:
        """The result; raises the request's error, or TimeoutError after ``timeout`` seconds."""


class Completed(Handle):
    """A request already done (in-process calls): ``wait`` returns at once."""

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    @classmethod
    def run(cls, fn, *args, **kwargs) -> "Completed":
        try:
            return cls(fn(*args, **kwargs))
        except Exception as e:  # delivered at wait(), as a remote error would be
            return cls(error=e)


class FutureHandle(Handle):
    """A request running on a thread or the network."""

    def __init__(self, future: Future, what: str):
        self.future, self.what = future, what

    def wait(self, timeout: float | None = DEFAULT_TIMEOUT) -> Any:
        try:
            return self.future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(f"{self.what}: no answer within {timeout} s") from None


class Transport(ABC):
    n_shards: int

    @abstractmethod
    def pull(self, shard: int, request: PullRequest) -> Handle:
        """``ShardStore.pull``; the rows arrive as the request's codec (``cardinal.codecs``) delivers them."""

    @abstractmethod
    def push(self, shard: int, request: PushRequest) -> Handle:
        """``ShardStore.push`` of the gradients as the request's codec delivers them: the reply is
        {"clock": ...} for a push with an origin, else {}."""

    @abstractmethod
    def save(self, shard: int, root: str, step: int, base: int | None = None, *, keep=None,
             dry: bool = False) -> Handle:
        """``ShardStore.save``: a full checkpoint, or with ``base`` a delta on that step's; ``keep``,
        ``dry`` as there. A server puts ``root`` where its disk has it (``ShardServicer._place``)."""

    @abstractmethod
    def load(self, shard: int, step_path: str, phase: str = "load", token: str | None = None, *,
             markers: list | None = None, part=None) -> Handle:
        """``ShardStore.load``: phases find / prepare / feed / commit / abort (with the prepare's
        token), or load; ``markers``: the chain's commits, for a server whose part is on its own disk;
        ``part``: a feed's ``Part`` (``checkpoint/parts.py``)."""

    @abstractmethod
    def read_part(self, shard: int, step_path: str, commit: dict, need: dict, to: int) -> Handle:
        """``ShardStore.read_part``: what the shard's server holds on its disk of a part of the
        checkpoint ``step_path`` (its commit ``commit``) that shard ``to`` needs (``need``), a ``Part``
        that fits a message to either."""

    def where(self, shard: int) -> str:
        """The shard's server as an error message names it (its address)."""
        return f"shard {shard}"

    @abstractmethod
    def stats(self, shard: int, digest: bool = False, check: bool = False) -> Handle: ...

    @abstractmethod
    def health(self, shard: int) -> Handle: ...

    @abstractmethod
    def finish(self, shard: int, step: int) -> Handle:
        """The job ended with its checkpoint of ``step``: the shard's server ends with it
        (``ps/server/process.py``); refused unless the shard holds that checkpoint."""

    def close(self) -> None:
        pass
