"""What a table does after a push, besides the push: its schedule (``EmbeddingTable.schedule``).

    ChunkPasses   a table with chunked rows (``chunks > 1``, FIITED: ``formats/chunked.py``): its pass
                  over which chunks each row keeps (``adjust_dims``), after its first push at or past
                  each multiple of ``TableConfig.chunk_every`` (a loaded table: past its step's)
    ClusterAt     a table with a ``TableConfig.saec`` spec: after its first push at or past the
                  spec's step, its rows clustered into the ``SaecTable`` that replaces it
                  (``clustered_table.py``), made and handed over under the table's lock

The store calls ``Table.after_push`` after each push and learns from it whether rows changed that
no push touched (then its next checkpoint is a full one); a schedule is called on whichever thread
pushed, so it decides under a lock of its own, and runs once per due step.
"""

import threading

from cardinal.embedding.clustered_table import SaecTable
from cardinal.embedding.table_config import SaecSpec, TableConfig


def schedule(config: TableConfig, step: int = 0):
    """The schedule of a table of ``config`` that starts at ``step`` (0, or a load's), or None."""
    if config.saec is not None:
        return ClusterAt(config.saec)
    if config.chunks > 1:
        return ChunkPasses(config.chunk_every, step)
    return None


class ChunkPasses:
    def __init__(self, every: int, step: int = 0):
        self.every = every
        self.done = step // every  # step // every of the last pass (a load's: the run that saved it went on so)
        self.lock = threading.Lock()

    def __call__(self, table, step: int, replace) -> bool:
        due = step // self.every
        with self.lock:
            if due <= self.done:
                return False
            self.done = due
        return table.adjust_dims() is not None


class ClusterAt:
    def __init__(self, spec: SaecSpec):
        self.spec = spec
        self.done = False
        self.lock = threading.Lock()

    def __call__(self, table, step: int, replace) -> bool:
        if step < self.spec.at or self.done:
            return False
        with self.lock:
            if self.done:
                return False
            with table.lock:  # a request waiting for it then finds the store's table replaced (``ShardStore._on``)
                replace(SaecTable.cluster(table, self.spec, step))
            self.done = True
            table.close()
        return True
