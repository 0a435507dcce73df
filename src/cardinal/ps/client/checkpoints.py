"""A client's checkpoints: every shard saves its part, then one commit; a load all or nothing.

Apart from the requests (``client.py``) because a checkpoint spans every shard and the workers'
disk. Where the servers' parts lie is found out, never assumed: after a save, a shard whose
manifest is not under the workers' checkpoint directory, byte for byte, saved on its server's own
disk, and the commit then holds a copy of that manifest (``checkpoint/write.py``). A load of such a
checkpoint sends each server the commits of its chain, so each checks and loads its own part, and
each following save tells those servers which steps the workers still keep. Onto another server
count (or plan) a shard needs rows of parts on other servers' disks: each server first says which
parts its disk holds (a part no server holds is refused before any shard prepares), then a shard
that needs a part not on its disk says so (``checkpoint/parts.py``), the server holding it reads
there the rows of that shard, and this client passes them on. A mixin of ``PSClient``: it uses the
client's transport, plan and hot-row reader.
"""

import socket
from collections.abc import Iterable
from pathlib import Path

from cardinal.checkpoint.durable import probe_dir
from cardinal.checkpoint.layout import MANIFEST, OWN, committed_steps, latest, shard_dir, step_dir
from cardinal.checkpoint.reader import Reader
from cardinal.checkpoint.retention import remove_older
from cardinal.checkpoint.write import commit
from cardinal.ps.transport.base import DEFAULT_TIMEOUT


class ClientCheckpoints:
    def check_checkpoints(self, root: str, *, here: bool = True, timeout: float | None = DEFAULT_TIMEOUT) -> list[str]:
        """A dry save: each server checks it can write where its part of a checkpoint under ``root``
        would go, and (``here``: the workers' rank 0, which writes the commit) ``root`` is written
        here, so a job misconfigured for checkpoints fails at its start, not at its first save.
        Returns where each server would write; a ValueError naming the host, the directory and the
        setting that places it."""
        if here:
            try:
                probe_dir(Path(root))
            except OSError as e:
                raise ValueError(f"the worker on {socket.gethostname()} cannot write checkpoints under {root} "
                                 f"({e}): they go to <run dir>/checkpoints (CARDINAL_RUN_DIR, or train.run_dir)"
                                 ) from None
        handles = [self.transport.save(s, str(root), 0, dry=True) for s in range(self.n_shards)]
        places = []
        for s, h in enumerate(handles):
            try:
                places.append(h.wait(timeout).get("where", str(root)))
            except ValueError as e:
                raise ValueError(f"server {self.transport.where(s)} (shard {s}) cannot write checkpoints: {e} "
                                 "(they go under its --data-dir: cardinal server --data-dir)") from None
        return places

    def save(self, root: str, step: int, *, keep: int = 1, extra: dict | None = None,
             before_commit=None, timeout: float | None = None, protect: Iterable[int] = (),
             base: int | None = None, run: dict | None = None) -> Path:
        """Save every shard, commit, then remove all but the newest ``keep`` checkpoints and
        those of the steps in ``protect`` (the best checkpoint, which the trainer keeps), and any
        checkpoint a kept delta needs. ``base``: a delta checkpoint on that step's (committed, in
        ``root``, and the step every shard saved or loaded last; it records the digest of that
        checkpoint as this client saved or loaded it). ``run``: the run's {"id", "full_every"}.

        ``before_commit(step_path)`` writes anything else that belongs to the checkpoint
        (the trainer's dense state): it is committed, or lost, with the shards.
        """
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        handles = [self.transport.save(s, str(root), step, base, keep=self._own_disks) for s in range(self.n_shards)]
        replies = [h.wait(timeout) for h in handles]
        path = step_dir(root, step)
        remote = {s: (self.transport.where(s), r["manifest"]) for s, r in enumerate(replies)
                  if not _here(shard_dir(path, s, self.n_shards) / MANIFEST, r["manifest"])}
        if before_commit is not None:
            before_commit(path)
        known = self._committed[1] if base is not None and self._committed and self._committed[0] == base else None
        digest = commit(path, step, self.n_shards, extra, base, None if self.plan.is_hash() else self.plan.to_json(),
                        run, known, remote)
        self._committed = (step, digest)
        remove_older(root, keep, protect)
        self._own_disks = committed_steps(root) if remote else None
        return path

    def load(self, path: str, *, timeout: float | None = None) -> dict:
        """Load a checkpoint (a step directory, or the newest committed one under a root), all or
        nothing: every shard prepares (verifies, stages its rows); only if all succeed does any
        commit. When one refuses, every prepared shard aborts and a ValueError names the shard."""
        path = Path(path)
        if not path.name.startswith("step-"):
            found = latest(path)
            if found is None:
                raise ValueError(f"no committed checkpoint in {path}")
            path = found
        head = Reader(path).chain[-1]  # commits and manifests, every link checked before any shard works
        markers = head.marker_chain() if any(link.remote for link in head.chain) else None
        holders = None if markers is None else self._holders(path, head, markers, timeout)
        prepared, failed = self._prepare(path, head, markers, holders, timeout)
        if failed:
            s, e = failed[0]
            message = f"checkpoint {path} not loaded, no shard changed: shard {s} refused it: {e}"
            raise (ValueError if isinstance(e, ValueError) else RuntimeError)(message) from e
        results = []
        for s in range(self.n_shards):  # a commit only swaps tables in: it fails only if the shard is gone
            try:
                results.append(self.transport.load(s, str(path), "commit", prepared[s]["token"]).wait(timeout))
            except Exception as e:
                raise RuntimeError(f"checkpoint {path}: shard {s} did not commit it ({e}), shards "
                                   f"{list(range(s))} did: load it again") from e
        self._committed = (head.step, head.sha256)
        self._own_disks = committed_steps(path.parent) if markers is not None else None
        self.reader.forget()  # every server forgot its copies of hot rows
        rows: dict[str, int] = {}
        for r in results:  # per table: the rows of its first piece (a shard may hold none of a table, plan.py)
            for name, n in r["rows"].items():
                table, piece = self.plan.locate(name)
                if piece == self.plan.pieces(table)[0]:
                    rows[table] = rows.get(table, 0) + n
        return {"path": str(path), "step": head.step, "extra": head.extra, "rows": rows}


    def _holders(self, path: Path, head: Reader, markers: list, timeout: float | None) -> dict:
        """(step, saved shard) -> a shard whose server holds that part of the chain on its disk, each
        server telling which it holds, checked against their commits. A part of a table that no
        server holds (a host gone with its disk) is refused here, before any shard prepares."""
        handles = [self.transport.load(s, str(path), "find", markers=markers) for s in range(self.n_shards)]
        held = {}
        for s, h in enumerate(handles):
            try:
                for step, part in h.wait(timeout)["held"]:
                    held.setdefault((step, part), s)
            except Exception as e:  # noqa: BLE001 - a shard that cannot tell refuses the load
                raise (ValueError if isinstance(e, ValueError) else RuntimeError)(
                    f"checkpoint {path} not loaded, no shard changed: shard {s} refused it: {e}") from e
        for link in head.chain:
            for name, m in link.info["manifests"].items():
                if (link.step, m["shard"]) not in held and m["tables"]:
                    server = link.remote.get(name, {}).get("server", "the workers' own")
                    raise ValueError(f"checkpoint {path} not loaded, no shard changed: shard {m['shard']} of "
                                     f"{link.n_shards} of {link.path.name} is on no server's disk (saved by the server "
                                     f"at {server}: a host gone with its disk?); start a server on that disk, or put "
                                     f"its {name} under a server's <data-dir>/{OWN}/<ps.job>/{link.path.name}")
        return held

    def _prepare(self, path: Path, head: Reader, markers: list | None, holders: dict | None,
                 timeout: float | None) -> tuple[dict, list]:
        """Every shard prepares the load; a shard that needs a part on another server's disk says which
        (a ``Need``, ``checkpoint/parts.py``), the server holding it reads it there and this client
        passes it on (``feed``), a shard at a time in turn, until every shard is done. Returns
        ({shard: its prepare's reply}, [(shard, error)]); on any error every shard's load is aborted."""
        calls = {s: self.transport.load(s, str(path), "prepare", markers=markers) for s in range(self.n_shards)}
        commits = {link.step: link.info["marker"] for link in head.chain}
        prepared, tokens, failed = {}, {}, []
        while calls:
            for s, call in list(calls.items()):
                del calls[s]
                try:
                    reply = call.wait(timeout)
                    tokens[s] = reply["token"]
                    if "need" not in reply:
                        prepared[s] = reply
                    elif not failed:  # once one shard refused, the others stop where they are
                        calls[s] = self._feed(path, s, reply, holders, commits, timeout)
                except Exception as e:  # noqa: BLE001 - any failure of any shard aborts the load
                    failed.append((s, e))
        if failed:
            for s, token in tokens.items():
                try:
                    self.transport.load(s, str(path), "abort", token).wait(timeout)
                except Exception:  # noqa: BLE001 - staged rows of an unreachable shard are replaced by its next prepare
                    pass
        return prepared, failed

    def _feed(self, path: Path, s: int, reply: dict, holders: dict | None, commits: dict, timeout: float | None):
        """Shard ``s``'s need read where it is, and passed on to ``s``: the call that answers."""
        need = reply["need"]
        holder = (holders or {}).get((need["step"], need["part"]))
        if holder is None:  # every part with a table was found: a need for another is the shard's error
            raise ValueError(f"it needs shard {need['part']} of step {need['step']}, which no server holds")
        try:
            part = self.transport.read_part(holder, str(step_dir(path.parent, need["step"])), commits[need["step"]],
                                            need, s).wait(timeout)
        except Exception as e:
            what = (f"reading its {need['kind']} of {need['table']} from shard {need['part']} of step {need['step']} "
                    f"on server {self.transport.where(holder)}: {e}")
            raise (ValueError if isinstance(e, ValueError) else RuntimeError)(what) from e
        return self.transport.load(s, str(path), "feed", reply["token"], part=part)


def _here(manifest: Path, sent: bytes) -> bool:
    """Whether the manifest a server sent is the file at ``manifest``, here: a directory shared."""
    try:
        return manifest.read_bytes() == sent
    except OSError:
        return False
