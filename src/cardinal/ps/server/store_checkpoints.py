"""A shard store's checkpoints: saving its part, and loading one staged, then swapped in.

Apart from the requests (``store.py``) because a checkpoint is the one operation on every table
at once: a save reads them all under one fence, so rows, optimizer state and filter counters come
from one moment; a load builds a whole second set of tables off to the side and swaps it in only
when every shard has prepared, so a checkpoint one shard refuses changes no shard. Whether the next
save may be a delta follows what happened since the last one. The on-disk format is the
checkpoint package's (``checkpoint/``: written by ``write.py``, read through ``Reader``). A mixin
of ``ShardStore``: it uses the store's tables, plan, clock, memory and logs.
"""

import contextlib
import uuid
from pathlib import Path

from cardinal.checkpoint.durable import probe_dir
from cardinal.checkpoint.layout import MANIFEST, committed, shard_dir, step_dir
from cardinal.checkpoint.reader import Reader
from cardinal.checkpoint.retention import keep_only
from cardinal.checkpoint.write import save_shard
from cardinal.embedding.clustered_table import SaecTable
from cardinal.ps import validate
from cardinal.ps.server.process_memory import SAVE_CHUNK_BYTES
from cardinal.ps.validate import quote


class StoreCheckpoints:
    def save(self, root: str, step: int, base: int | None = None, *, keep=None, dry: bool = False) -> dict:
        """Write this shard's part of checkpoint ``step`` under ``root`` (not committed yet); returns
        {"rows": table -> rows saved, "manifest": the manifest's bytes} (the workers' rank 0 records
        them in the commit when this shard's files are not where it can read them).

        ``keep``: the steps the workers still keep, sent when this shard's files are on its own disk:
        the other step directories before ``step`` go (``retention.keep_only``). ``dry``: write nothing
        of the store; check that ``root`` can be written (``durable.probe_dir``), at a job's start.

        With ``base``, a delta: the rows pulled or pushed after step ``base`` and the ids deleted
        since this shard's previous save, which must have been of step ``base`` (the checkpoint
        the delta applies on). Every table is read under one fence (all their locks at once), so
        rows, optimizer state and filter counters of the shard come from one moment."""
        validate.check_step(step)
        if dry:
            try:
                probe_dir(Path(root))
            except OSError as e:
                raise ValueError(f"shard {self.shard} cannot write checkpoints under {root}: {e}") from None
            return {"rows": {}}
        if base is not None:
            validate.check_step(base)
            if base != self._saved or base >= step:
                raise ValueError(f"a delta checkpoint of step {step} on step {base}: shard {self.shard} last saved "
                                 f"or loaded step {self._saved}, the only base it can save a delta on; save a full one")
            if (why := self._why_no_delta()) is not None:
                raise ValueError(f"a delta checkpoint of step {step} on step {base}: shard {self.shard} {why}; "
                                 "save a full one")
        path = step_dir(root, step)
        if committed(path):
            raise ValueError(f"a committed checkpoint for step {step} already exists in {root}")
        with contextlib.ExitStack() as fence:  # held while a full checkpoint streams its rows out
            for t in self.tables.values():
                fence.enter_context(t.lock)
            snapshots = {name: t.snapshot(base) for name, t in self.tables.items()}
            self._saved, self._stepped_back, self._reshaped = step, False, False
            manifest = save_shard(path, self.shard, self.n_shards, step, self.tables, snapshots, base,
                                  chunk_bytes=SAVE_CHUNK_BYTES)
        if keep is not None:
            keep_only(root, keep, before=step)
        return {"rows": {t: m["rows"] for t, m in manifest["tables"].items()},
                "manifest": (shard_dir(path, self.shard, self.n_shards) / MANIFEST).read_bytes()}

    def load(self, step_path: str, phase: str = "load", token: str | None = None, markers=None) -> dict:
        """Load a committed checkpoint (of any shard count), all or nothing, in phases:

        ``prepare``: verify the checkpoint and build this shard's tables from it off to the
            side; returns {"token", "step", "rows"}. Nothing visible changes. While a load is
            prepared the store holds a second copy of its tables (the staged ones).
        ``commit`` (with the token): swap the staged tables in; nothing is left to fail.
        ``abort`` (with the token): drop them.  ``load``: prepare and commit at once.

        A client loading several shards prepares every one before it commits any
        (``PSClient.load``), so a checkpoint one shard refuses changes no shard. ``markers``: the
        commits of the checkpoint's chain, oldest first, as the workers' rank 0 saved them, when this
        shard's files are on its own disk (which holds no commit): its part is checked against them.
        """
        if phase == "load":
            return self.load(step_path, "commit", self.load(step_path, "prepare", markers=markers)["token"])
        if phase == "prepare":
            by_dir = None if markers is None else _by_dir(markers)
            chain = Reader(step_path, markers=by_dir).chain  # a delta: its full checkpoint, then each delta
            head = chain[-1]
            fresh = self._fresh_tables(head.step)
            try:
                for k, link in enumerate(chain):
                    self._load_rows(link, fresh, delta=k > 0)
                head.load_admission(self.plan, self.shard, fresh)
            except BaseException:
                _close_tiers(fresh)
                raise
            token = uuid.uuid4().hex
            with self._staging_lock:
                if self._staged is not None:
                    _close_tiers(self._staged[1])
                self._staged = (token, fresh, head.step)  # a newer prepare replaces an older one
            return {"token": token, "step": head.step, "rows": {n: len(t) for n, t in fresh.items()}}
        if phase not in ("commit", "abort"):
            raise ValueError(f"phase must be 'load', 'prepare', 'commit' or 'abort', got {quote(str(phase))}")
        with self._staging_lock:
            if self._staged is None or self._staged[0] != token:
                if phase == "abort":
                    return {"aborted": False}
                raise ValueError(f"no load prepared with token {quote(str(token))} on shard {self.shard} "
                                 "(never prepared, already committed or aborted, or replaced by a newer prepare)")
            _, fresh, step = self._staged
            self._staged = None
        if phase == "abort":
            _close_tiers(fresh)
            return {"aborted": True}
        old, self.tables, self._saved, self._stepped_back = self.tables, fresh, step, False
        self.clock.reset(step)
        _close_tiers(old)
        self.memory.swept = step // self.memory.config.every
        self._reshaped = False
        self.steps.reset(step)
        self.log.reset()
        for copies in self.replicas.values():  # copies of rows from before the load: none is served again
            copies.forget()
        return {"step": step, "rows": {n: len(t) for n, t in fresh.items()}}

    def check_final(self, step: int) -> None:
        """The job ends with its checkpoint of ``step`` (the ``Finish`` of ``process.py``): refused
        unless that is the checkpoint this shard saved or loaded last and no request of a later
        step came since, so a server never ends holding rows its job's final checkpoint lacks."""
        validate.check_step(step)
        if step != self._saved or self.clock.step > step:
            raise ValueError(f"step: the job's final checkpoint is step {step}, but shard {self.shard} last saved or "
                             f"loaded step {self._saved} and has taken requests up to step {self.clock.step}: "
                             "it ends only after the job's final checkpoint")

    def _load_rows(self, link: Reader, tables: dict, delta: bool) -> None:
        """One checkpoint's rows into ``tables`` (staged), block by block, the memory budget held as
        they arrive (rows past it go to the disk tier); a delta's deleted ids go first, and its rows
        replace the ones older checkpoints gave. A table this shard saved clustered is made anew from
        its own files (its fresh table's config, optimizer and admission filter carry over)."""
        link.check_compatible(tables, self.plan, self.tables_of_plan)
        for name, t in list(tables.items()):
            saved = link.clustered_state(name, self.shard, self.n_shards)
            if saved is not None:  # clustered here
                tables[name] = SaecTable.from_state(t.config, t.optimizer, *saved, t.admission)
                t.close()
                continue
            if delta:  # deletions the chain records are not changes since the checkpoint: not logged
                t.delete(link.deleted_ids(self.plan, self.shard, name), log=False)
            for where, rows in link.row_chunks(self.plan, self.shard, t):
                if delta:
                    t.delete(rows.ids, log=False)
                try:
                    t.import_rows(*rows)
                except ValueError as e:
                    raise ValueError(f"checkpoint file {where}: {e}") from None
                self.memory.hold(tables, link.step)
            if t.tiered:  # the tier's background writes done, the budget held once more
                t.settle()
                self.memory.hold(tables, link.step)

    def _why_no_delta(self) -> str | None:
        """Why this shard's next checkpoint cannot be a delta on its last one, or None."""
        if self._stepped_back:
            return f"has since changed rows at a step <= {self._saved}, which a delta cannot find"
        if self._reshaped:
            return ("has since chosen which chunks its rows keep (compression.fiited.chunks) or clustered a table "
                    "(Saec), a change to rows no push touched, which a delta cannot find")
        return next((why for t in self.tables.values() if (why := t.delta_refused()) is not None), None)


def _by_dir(markers) -> dict:
    """Step directory name -> commit, from the commits a client sent (a list of JSON objects)."""
    if not isinstance(markers, list) or not all(isinstance(m, dict) for m in markers):
        raise ValueError("commits: must be a list of commit objects")
    for m in markers:
        validate.check_step(m.get("step"))
    return {step_dir("", m["step"]).name: m for m in markers}


def _close_tiers(tables: dict) -> None:
    for t in tables.values():
        t.close()
