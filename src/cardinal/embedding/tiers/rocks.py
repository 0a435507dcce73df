"""The disk tier on RocksDB (through ``rocksdict``), as Paddle's and TorchRec's SSD tables are.

Why RocksDB rather than files of our own: its index and Bloom filters stay on disk, so a tier
of 100M rows costs a few MB of RAM to find a row in, where an in-RAM id -> offset map of our
own would cost about 2 GB; and its compaction reclaims the space of rows read back in.

    key    the id, 8 bytes little-endian
    value  [ values and optimizer state (width x float32) | count uint32 | last_step uint32 ]

Writes skip RocksDB's write-ahead log: the tier is scratch (``base.py``), rebuilt from the last
checkpoint after a crash, and a failed batch raises before any row leaves RAM. The directory
is created empty and removed on ``close``.

Costs per row, measured (CPU time, 600k rows of 21 words): a get of one key 10-11 us, a multi-get
of a batch's keys 5-6 us a key, so reads go as one multi-get a request, split over the kernel threads
(``parallel.py``: rocksdict lets go of the GIL while RocksDB reads, and a request's fault-ins are on
the step's path: two threads read 40k keys in about half the time of one); a write batch's rows in
RocksDB's key order go into its memtable in 1.2-1.4 us a row against 2.0-2.1 in arrival order, so
puts are sorted first. Values are float32 words, which no block compressor shrinks: blocks are
stored uncompressed, sparing the CPU both ways.

Compaction is universal, merging up to SORTED_RUNS files of like size at a time: a budgeted server's
memtable is small (a 64th of its budget: ~220 KB a shard for the tiers benchmark), so it flushes every
few demotions, and leveled compaction (RocksDB's default) merged each such file into the level holding
every row: the tier's files took 16x the bytes put in it, RocksDB's threads 27 ms of CPU a step beside
the step's own 20 (a budgeted run on 300k rows). Universal compaction rewrites each row about 3 times.
"""

import shutil
from pathlib import Path

import numpy as np
from rocksdict import (BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, Options, Rdict, WriteBatch,
                       WriteOptions)

from cardinal import parallel
from cardinal.embedding.storage import Columns
from cardinal.embedding.tiers.base import ColdTier
from cardinal.embedding.tiers.membership import KeyFilter
from cardinal.failpoints import failpoint

SORTED_RUNS = 16  # files RocksDB lets pile up before it merges them (its default: 4)
GET_PER_THREAD = 256  # keys a thread's multi-get takes at least (~5 us a key: a thread hop is ~50 us)


class RocksTier(ColdTier):
    def __init__(self, path: str | Path, width: int, write_buffer: int = 16 << 20, cache: int = 8 << 20):
        """``write_buffer``, ``cache``: RocksDB's memtable size (it holds two at most: one being
        flushed) and block cache, in bytes (a server sizes them from its budget: ps/server/process_memory.py)."""
        self.path = Path(path)
        self.width = width
        if self.path.exists():
            shutil.rmtree(self.path)  # left by an earlier process: scratch, never read back
        self.path.parent.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(write_buffer)  # RAM it may hold before writing a file
        options.set_max_write_buffer_number(2)
        options.set_compression_type(DBCompressionType.none())
        options.set_compaction_style(DBCompactionStyle.universal())  # merges runs of like size: each row rewritten
        options.set_level_zero_file_num_compaction_trigger(SORTED_RUNS)  # a few times, not once a flush
        options.set_level_zero_slowdown_writes_trigger(2 * SORTED_RUNS)
        options.set_level_zero_stop_writes_trigger(4 * SORTED_RUNS)
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        table.set_block_cache(Cache(cache))  # data blocks; index and filter blocks stay in the table readers:
        options.set_block_based_table_factory(table)  # kept in a cache of 8 MB, a get took 680 us, not 8 us
        options.enable_statistics()  # byte counters, for the write amplification (io_bytes)
        self._db = Rdict(str(self.path), options)
        self._write = WriteOptions()
        self._write.disable_wal = True
        self._batch_bytes = max(4 << 10, write_buffer // 2)  # a write batch lands in one memtable whole: kept small
        self.put_bytes = 2 * self._batch_bytes  # a demotion's copies of its rows: a memtable's worth at a time
        self._n = 0
        self.keys = KeyFilter()  # which ids may be here: lookups of the others never reach RocksDB

    def __len__(self) -> int:
        return self._n

    def put(self, rows: Columns) -> None:
        n, w = len(rows.ids), self.width
        if n == 0:
            return
        order = np.argsort(_key_order(rows.ids), kind="stable")  # the memtable's order: cheaper inserts
        record = np.empty((n, w + 2), np.uint32)
        record[:, :w] = rows.data.view(np.uint32)[order]
        record[:, w] = rows.count[order]
        record[:, w + 1] = rows.last_step[order]
        keys, size = rows.ids[order].astype("<i8").tobytes(), 4 * (w + 2)
        failpoint("tier.before_put")
        per_batch = max(1, self._batch_bytes // (8 + size))
        done = 0
        try:
            for done in range(0, n, per_batch):  # the memtable switches between batches: it stays near its size
                batch, values = WriteBatch(raw_mode=True), record[done:done + per_batch].tobytes()  # a batch's copy
                for i in range(min(n - done, per_batch)):
                    batch.put(keys[8 * (done + i):8 * (done + i + 1)], values[size * i:size * (i + 1)])
                self._db.write(batch, self._write)
        except BaseException:  # all or nothing, as one batch was: the rows stay in RAM only
            undo = WriteBatch(raw_mode=True)
            for i in range(done):
                undo.delete(keys[8 * i:8 * i + 8])
            self._db.write(undo, self._write)
            raise
        self._n += n
        if self.keys.needs_rebuild(self._n):
            self.keys.rebuild(self._n, self._key_chunks())
        else:
            self.keys.add(rows.ids, self._n)

    @property
    def ram_bytes(self) -> int:
        """The key filter and RocksDB's index and filter blocks, which grow with the tier (as RocksDB
        estimates them: they follow its compactions, so demotions are timed by them too). Its
        memtables (at most 2 x write_buffer) and block cache are not counted: a server sizes them
        within its budget's margin (ps/server/process_memory.py)."""
        db = self._db
        return self.keys.nbytes + (db.property_int_value("rocksdb.estimate-table-readers-mem") if db else 0)

    def settle(self) -> None:
        """RocksDB's memtables flushed, waited for: its table readers' memory (``ram_bytes``) grows
        with each file a background flush writes, after the budget was held."""
        self._db.flush(wait=True)

    def io_bytes(self) -> tuple[int, int]:
        """Bytes put (RocksDB's bytes.written: keys and values) and written to its files (flushes and
        compactions), from its statistics."""
        text = self._db.property_value("rocksdb.options-statistics") if self._db is not None else None
        counts = {}
        for line in (text or "").splitlines():
            name, sep, value = line.partition(" COUNT : ")
            if sep:  # tickers: "name COUNT : n"; histograms go on: "name COUNT : n SUM : m"
                counts[name] = int(value.split()[0])
        written = counts.get("rocksdb.flush.write.bytes", 0) + counts.get("rocksdb.compact.write.bytes", 0)
        return counts.get("rocksdb.bytes.written", 0), written

    def get(self, ids):
        found = self.keys.may_have(ids)
        maybe = np.flatnonzero(found)
        keys = ids[maybe].astype("<i8").tobytes()
        values = self._multi_get(keys, len(maybe))
        found[maybe] = [v is not None for v in values]
        record = np.frombuffer(b"".join(v for v in values if v is not None), np.uint32).reshape(-1, self.width + 2)
        return found, self._columns(ids[found], record)

    def _multi_get(self, keys: bytes, n: int) -> list:
        """The values of ``n`` 8-byte ``keys`` (None where absent), in order: one multi-get a kernel thread."""
        k = parallel.parts(n, GET_PER_THREAD)
        got = [[] for _ in range(k)]

        def read(part, k):
            lo, hi = n * part // k, n * (part + 1) // k
            if hi > lo:
                got[part] = self._db.get([keys[8 * i:8 * i + 8] for i in range(lo, hi)])
        parallel.each(k, read)
        return [v for values in got for v in values]

    def delete(self, ids):
        if len(ids) == 0:
            return
        keys = ids.astype("<i8").tobytes()
        batch = WriteBatch(raw_mode=True)
        for i in range(len(ids)):
            batch.delete(keys[8 * i:8 * i + 8])
        failpoint("tier.before_delete")
        self._db.write(batch, self._write)
        self._n -= len(ids)
        self.keys.stale += len(ids)

    def chunks(self, size: int | None = None):
        size = size or max(1, (4 << 20) // (4 * self.width + 16))  # about 4 MiB of rows at a time
        it = self._db.iter()
        it.seek_to_first()
        keys, values = [], []
        while it.valid():
            keys.append(it.key())
            values.append(it.value())
            it.next()
            if len(keys) == size or not it.valid():
                ids = np.frombuffer(b"".join(keys), "<i8").astype(np.int64)
                yield self._columns(ids, np.frombuffer(b"".join(values), np.uint32).reshape(-1, self.width + 2))
                keys, values = [], []

    def _key_chunks(self, size: int = 1 << 16):
        """Every id, ``size`` at a time, values left on disk (a rebuild of the key filter reads only these)."""
        it, keys = self._db.iter(), []
        it.seek_to_first()
        while it.valid():
            keys.append(it.key())
            it.next()
            if len(keys) == size or not it.valid():
                yield np.frombuffer(b"".join(keys), "<i8").astype(np.int64)
                keys = []

    def _columns(self, ids, record) -> Columns:
        w = self.width
        return Columns(ids, np.ascontiguousarray(record[:, :w]).view(np.float32), record[:, w].copy(),
                       record[:, w + 1].copy())

    def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            try:
                db.close()
            except Exception:  # noqa: BLE001 - scratch: its files go next whether or not they could be flushed
                pass
            shutil.rmtree(self.path, ignore_errors=True)


def _key_order(ids: np.ndarray) -> np.ndarray:
    """A sort key giving ids in RocksDB's order of their keys: bytewise, little-endian bytes first."""
    return ids.astype("<i8").byteswap().view(np.uint64)
