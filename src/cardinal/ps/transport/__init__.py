from cardinal.ps.transport.base import DEFAULT_TIMEOUT, Completed, FutureHandle, Handle, TransientError, Transport
from cardinal.ps.transport.inprocess import InProcessTransport

__all__ = ["Transport", "Handle", "Completed", "FutureHandle", "InProcessTransport", "DEFAULT_TIMEOUT",
           "TransientError"]
