"""What a ``PSClient`` moved, per direction: the numbers ``PSClient.metrics()`` reports.

    pull_ids, pull_row_bytes   ids pulled (create=True: training), and their rows' bytes at the
                               pull codec's size
    lookup_ids, lookup_row_bytes   the same for pulls that create nothing (evaluation, serving)
    push_ids, push_row_bytes   ids pushed, and their gradients' bytes at the push codec's size
    copied_ids, copied_stale_ids   ids a training pull read from copies of hot rows (``sharding/plan.py``),
                               and ids whose copies were past their bound (read again from their
                               own servers); only with a plan that copies hot rows
    copy_refresh_ids           hot rows this client wrote to servers' copies (each copy counts)
                               (the three present, from 0, in a client whose plan copies hot rows)
    message_bytes_sent/_received   whole messages (headers, ids, chunks, resends), where the
                                   transport has messages (gRPC); absent in-process

Row bytes count each request once, as the codec encodes it, whatever the transport: they
are the same numbers in-process and over gRPC, so a run can be sized before it is spread
over machines. A request that fails counts its ids and no rows.
"""

import threading


class Traffic:
    FIELDS = ("pull_ids", "pull_row_bytes", "lookup_ids", "lookup_row_bytes", "push_ids", "push_row_bytes")

    def __init__(self):
        self._lock = threading.Lock()  # handles are waited on from several threads
        self._counts = dict.fromkeys(self.FIELDS, 0)

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                self._counts[name] = self._counts.get(name, 0) + int(n)

    def metrics(self, transport=None) -> dict[str, int]:
        with self._lock:
            out = dict(self._counts)
        if hasattr(transport, "bytes_sent"):
            out.update(message_bytes_sent=transport.bytes_sent, message_bytes_received=transport.bytes_received)
        return out
