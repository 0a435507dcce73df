"""Delta chains that cannot be fooled: each link names its run and the exact commit it applies on.

A delta checkpoint is only as good as its base, and a step number alone does not say which base:
a step directory copied from another run, renamed, or swapped with a neighbour would be applied
as if it were the run's own (or, renamed onto its own base, walked forever). So each commit
marker (``write.commit``) carries

    "run": {"id": "9f2c...", "full_every": 3}   the run's identity: a random id made when the run
                                                 starts, kept across its resumes; and the
                                                 checkpoint.full_every it was saved under
    "base_sha256": "5be1..."                     a delta's: the sha256 of its base's commit marker

and a load walks a chain (``walk``) from its head down to its full checkpoint, every link checked
before any row is read:

    step-..30 (delta on 20, base_sha256 H) --> step-..20 (delta on 10) --> step-..10 (full)
      a commit's step is its directory's         no directory twice (steps only go down)
      a base of the same run as its delta        sha256(step-..20/commit.json) == H
      each delta at most full_every - 1 links from its full checkpoint, as its own commit says

Each failure is a ValueError naming the commit marker. Checkpoints from before this carry neither
field: a full one still loads (it stands alone, every file checked by its crc32), a delta is
refused (nothing ties it to the base it was saved on, so a swapped base would go unnoticed).
"""

import hashlib
import json
import os
import re
from pathlib import Path

from cardinal.checkpoint.layout import COMMIT, step_dir

RUN, BASE_SHA = "run", "base_sha256"
_SHA = re.compile(r"[0-9a-f]{64}")
_STEP_DIR = re.compile(r"step-(\d+)")


def digest(marker: dict) -> str:
    """sha256 of a commit marker's canonical JSON, as written (its crc32 included)."""
    return hashlib.sha256(json.dumps(marker, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def run_id(info: dict) -> str | None:
    """The id of the run that saved a commit; None for one from before run ids."""
    return (info.get(RUN) or {}).get("id")


def identity(info: dict) -> dict:
    """What a served model records of the checkpoint it came from (``serve/follow.py``)."""
    return {"run": run_id(info), "commit_sha256": info["sha256"]}


def base_of(step_path: Path) -> int | None:
    """The step a committed delta checkpoint applies on; None for a full one (or an unreadable marker,
    which the load will name). Read unverified: for choosing what to keep and what to save next."""
    try:
        base = json.loads((step_path / COMMIT).read_text()).get("base")
    except (OSError, ValueError):
        return None
    return base if isinstance(base, int) and not isinstance(base, bool) else None


def deltas_since_full(root: str | os.PathLike, step: int) -> int:
    """How many deltas lead from the full checkpoint at the root of ``step``'s chain to it (0: full)."""
    n, path, seen = 0, step_dir(root, step), {step}
    while (base := base_of(path)) is not None:
        if base in seen:  # a renamed checkpoint: its chain points at itself
            raise ValueError(f"{path / COMMIT}: a delta on step {base}, whose chain leads back to it")
        n, path = n + 1, step_dir(root, base)
        seen.add(base)
    return n


def check_marker(marker: Path, info: dict) -> None:
    """A commit's own claims: its step is its ``step-N`` directory's; ``run`` and ``base_sha256`` well formed."""
    named = _STEP_DIR.fullmatch(marker.parent.name)
    if named and int(named.group(1)) != info["step"]:
        raise ValueError(f"{marker}: holds the checkpoint of step {info['step']}, but its directory is named for step "
                         f"{int(named.group(1))} (renamed or swapped?): put it back in step-{info['step']:010d}")
    run = info.get(RUN)
    if run is not None and not (isinstance(run, dict) and set(run) == {"id", "full_every"}
                                and isinstance(run["id"], str) and 0 < len(run["id"]) <= 64
                                and type(run["full_every"]) is int and run["full_every"] >= 1):
        raise ValueError(f"{marker}: 'run' must be {{\"id\": a string, \"full_every\": an integer >= 1}}, got {run!r}")
    sha = info.get(BASE_SHA)
    if sha is not None and (info.get("base") is None or not isinstance(sha, str) or not _SHA.fullmatch(sha)):
        raise ValueError(f"{marker}: 'base_sha256' must be a delta's 64 hex digits, got {sha!r}")


def walk(head: Path, read, exists=None) -> list[tuple[Path, dict]]:
    """[(step dir, ``read(step dir)``)] of ``head``'s chain, oldest (the full checkpoint) first, each
    link checked against the one it applies on; the walk stops at a directory seen before and past
    the chain length the head's checkpoint.full_every allows. ``exists(step dir)``: whether a link's
    commit is there to read (its commit.json, by default)."""
    exists = exists or (lambda path: (path / COMMIT).is_file())
    chain, seen = [(head, read(head))], {head.resolve()}
    limit = (chain[0][1].get(RUN) or {}).get("full_every")
    while (base := chain[-1][1].get("base")) is not None:
        path = step_dir(head.parent, base)
        if path.resolve() in seen:
            raise ValueError(f"{chain[-1][0] / COMMIT}: a delta on step {base}, which leads back to "
                             f"{path} again: the chain points at itself (a renamed checkpoint?)")
        if limit is not None and len(chain) >= limit:
            _too_long(head, limit, f"more than {limit - 1}")
        if not exists(path):
            raise ValueError(f"{chain[-1][0]} is a delta on step {base}, whose committed checkpoint {path} is missing")
        seen.add(path.resolve())
        chain.append((path, read(path)))
        _check_link(*chain[-2], *chain[-1])
    for k, (path, info) in enumerate(chain[-2::-1], start=1):  # each delta's place, counted from the full one
        allowed = (info.get(RUN) or {}).get("full_every")
        if allowed is not None and k > allowed - 1:
            _too_long(path, allowed, str(k))
    return chain[::-1]


def _check_link(path: Path, info: dict, base_path: Path, base_info: dict) -> None:
    marker, base_marker = path / COMMIT, base_path / COMMIT
    if info.get(BASE_SHA) is None:
        raise ValueError(f"{marker}: a delta from before chains were verified (it records no base_sha256): nothing "
                         f"shows that {base_path.name} is the checkpoint it was saved on, so it is not loaded; load "
                         f"a full checkpoint of the run (--checkpoint), or resume from one by moving the deltas "
                         f"after it out of {path.parent}")
    mine, theirs = run_id(info), run_id(base_info)
    if mine is not None and theirs is not None and mine != theirs:
        raise ValueError(f"{base_marker}: a checkpoint of run {theirs}, but {path.name}, a delta on it, is of run "
                         f"{mine}: a checkpoint copied from another run is no base for this run's deltas")
    if base_info["sha256"] != info[BASE_SHA]:
        raise ValueError(f"{base_marker}: not the checkpoint {path.name} was saved on (its sha256 is "
                         f"{base_info['sha256'][:12]}..., the delta's base_sha256 {info[BASE_SHA][:12]}...): "
                         f"edited, or replaced by another")


def _too_long(path: Path, full_every: int, deltas: str) -> None:
    raise ValueError(f"{path / COMMIT}: {deltas} deltas lead to it from its full checkpoint, its run's "
                     f"checkpoint.full_every = {full_every} allows {full_every - 1}: a chain no run of it wrote")
