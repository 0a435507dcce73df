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
from cardinal.checkpoint.parts import Need, Part, refuse, relay
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

    def load(self, step_path: str, phase: str = "load", token: str | None = None, markers=None, part=None) -> dict:
        """Load a committed checkpoint (of any shard count), all or nothing, in phases:

        ``find``: which saved shards of the checkpoint's chain this server's disk holds, each checked
            against its commit: {"held": [[step, shard], ...]} (a client finds where each part is).
        ``prepare``: verify the checkpoint and build this shard's tables from it off to the
            side; returns {"token", "step", "rows"}. Nothing visible changes. While a load is
            prepared the store holds a second copy of its tables (the staged ones). Where it needs
            a part on another server's disk it stops and returns {"token", "need"}: a ``Need``
            (``checkpoint/parts.py``) for the client to ask of a server that holds it (``read_part``).
        ``feed`` (with the token, and the ``Part`` that server sent): go on; returns as ``prepare``.
        ``commit`` (with the token): swap the staged tables in; nothing is left to fail.
        ``abort`` (with the token): drop them.  ``load``: prepare and commit at once (every part here).

        A client loading several shards prepares every one before it commits any
        (``PSClient.load``), so a checkpoint one shard refuses changes no shard. ``markers``: the
        commits of the checkpoint's chain, oldest first, as the workers' rank 0 saved them, when this
        shard's files are on its own disk (which holds no commit): its part is checked against them.
        """
        if phase == "load":
            staging, reply = self._prepare(step_path, markers)
            if "need" in reply:
                self.load(step_path, "abort", reply["token"])
                need = Need.from_json(reply["need"])
                link = next(link for link in staging.chain if link.step == need.step)
                refuse(need, link.path, link.info)
            return self.load(step_path, "commit", reply["token"])
        if phase == "find":
            chain = Reader(step_path, markers=None if markers is None else _by_dir(markers)).chain
            self._verified.clear()  # a new load: files verified for the last one are verified again
            return {"held": [[link.step, k] for link in chain for k in range(link.n_shards)
                             if shard_dir(link.path, k, link.n_shards).is_dir()]}
        if phase == "prepare":
            return self._prepare(step_path, markers)[1]
        if phase == "feed":
            return self._advance(token, part)
        if phase not in ("commit", "abort"):
            raise ValueError(f"phase must be 'load', 'find', 'prepare', 'feed', 'commit' or 'abort', "
                             f"got {quote(str(phase))}")
        with self._staging_lock:
            staging = self._staged
            if staging is None or staging.token != token or (phase == "commit" and staging.stage is not None):
                if phase == "abort":
                    return {"aborted": False}
                raise ValueError(f"no load prepared with token {quote(str(token))} on shard {self.shard} "
                                 "(never prepared, not done preparing, already committed or aborted, or replaced "
                                 "by a newer prepare)")
            self._staged = None
        if phase == "abort":
            staging.drop()
            return {"aborted": True}
        fresh, step = staging.tables, staging.step
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

    def _prepare(self, step_path: str, markers) -> tuple["_Staging", dict]:
        """A new staged load (replacing an older one), built until done or until it needs a part."""
        chain = Reader(step_path, markers=None if markers is None else _by_dir(markers)).chain
        fresh = self._fresh_tables(chain[-1].step)  # a delta: its full checkpoint, then each delta
        staging = _Staging(uuid.uuid4().hex, fresh, chain, self._stage(chain, fresh))
        with self._staging_lock:
            older, self._staged = self._staged, staging  # a newer prepare replaces an older one
        if older is not None:
            older.drop()
        return staging, self._advance(staging.token, None)

    def _advance(self, token: str | None, part) -> dict:
        """Build the staged load of ``token`` on, with ``part`` (a ``Part``) for the Need it stopped at."""
        with self._staging_lock:
            staging = self._staged
            if staging is None or staging.token != token or staging.stage is None or staging.busy:
                raise ValueError(f"no load being prepared with token {quote(str(token))} on shard {self.shard} "
                                 "(never prepared, done, aborted, replaced by a newer prepare, or being fed)")
            staging.busy = True
        try:
            need = staging.stage.send(part)
        except StopIteration:
            staging.stage = None
            return {"token": token, "step": staging.step, "rows": {n: len(t) for n, t in staging.tables.items()}}
        except BaseException:
            with self._staging_lock:
                if self._staged is staging:
                    self._staged = None
            staging.drop()
            raise
        finally:
            staging.busy = False
        return {"token": token, "need": need._asdict()}

    def _stage(self, chain: list[Reader], tables: dict):
        """A load's staged tables, checkpoint by checkpoint of its chain: a generator that yields a
        ``Need`` for each part on another server's disk and is sent its ``Part``."""
        for k, link in enumerate(chain):
            yield from self._load_rows(link, tables, delta=k > 0)
        yield from chain[-1].load_admission(self.plan, self.shard, tables, asking=True)

    def read_part(self, step_path: str, commit: dict, need, to: int, max_bytes: int | None = None) -> Part:
        """What this server's disk holds of a part shard ``to`` needs for its load (``need``, a
        ``Need`` or its JSON), as much as ``max_bytes`` holds: its commit (``commit``, as the workers'
        rank 0 saved it) verified, every file against it (``Reader.answer``)."""
        need = need if isinstance(need, Need) else Need.from_json(need)
        if not isinstance(to, int) or isinstance(to, bool) or not 0 <= to < self.n_shards:
            raise ValueError(f"to: shard {to!r} is not one of the {self.n_shards} shards")
        link = Reader(step_path, markers={Path(step_path).name: commit})
        if link.step != need.step:
            raise ValueError(f"need: step {need.step}, the commit sent is of step {link.step}")
        return link.answer(need, self.plan, to, max_bytes, self._verified)

    def _load_rows(self, link: Reader, tables: dict, delta: bool):
        """One checkpoint's rows into ``tables`` (staged), block by block, the memory budget held as
        they arrive (rows past it go to the disk tier); a delta's deleted ids go first, and its rows
        replace the ones older checkpoints gave. A table this shard saved clustered is made anew from
        its own files (its fresh table's config, optimizer and admission filter carry over). A
        generator, as ``_stage``."""
        link.check_compatible(tables, self.plan, self.tables_of_plan)
        for name, t in list(tables.items()):
            saved = link.clustered_state(name, self.shard, self.n_shards)
            if saved is not None:  # clustered here
                tables[name] = SaecTable.from_state(t.config, t.optimizer, *saved, t.admission)
                t.close()
                continue
            if delta:  # deletions the chain records are not changes since the checkpoint: not logged
                t.delete((yield from link.deleted_ids(self.plan, self.shard, name, asking=True)), log=False)

            def take(where, rows, t=t):
                if delta:
                    t.delete(rows.ids, log=False)
                try:
                    t.import_rows(*rows)
                except ValueError as e:
                    raise ValueError(f"checkpoint file {where}: {e}") from None
                self.memory.hold(tables, link.step)
            yield from relay(link.row_chunks(self.plan, self.shard, t, asking=True), take)
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


class _Staging:
    """A load being prepared: its staged tables, built by ``stage`` (None once done)."""

    def __init__(self, token: str, tables: dict, chain: list[Reader], stage):
        self.token, self.tables, self.chain, self.stage = token, tables, chain, stage
        self.step, self.busy = chain[-1].step, False

    def drop(self) -> None:
        if self.stage is not None and not self.busy:
            self.stage.close()
        _close_tiers(self.tables)


def _close_tiers(tables: dict) -> None:
    for t in tables.values():
        t.close()
