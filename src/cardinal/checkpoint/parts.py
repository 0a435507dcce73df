"""Parts of a checkpoint on another server's own disk: asked for, not read here.

With no directory shared, a server's disk holds only the parts of a checkpoint it saved
(``layout.own_root``), and a load onto another server count (or plan) needs rows of parts on
other servers' disks. So the readers of ``rows.py`` are generators: for a part whose files are not
on this host they yield a ``Need`` (which checkpoint of the chain, which saved shard, which stored
table and what of it: rows, deleted ids or admission state, and a range) and are sent back a
``Part``: what the part's holder read of it on its own disk (``rows.answer``: each file verified
against the commit, each block checked as a load checks it, and only the rows of the asking shard
kept, by the new plan). No host needs another's files, and a row crosses only to its new shard
(through the client that relays it).

    arrays = yield from ask(need)    a range whole, from as many Parts as it takes (one a message)
    yield from relay(reader, each)   a reader driven inside another generator: its Needs go up,
                                     their Parts come back down, its blocks go to ``each``
    here(reader, path, info)         a reader where every part must be on this host: a Need is
                                     refused, naming the server whose disk holds the part
    value(reader, path, info)        what a reader of values returns (deleted ids, admission state),
                                     every part on this host likewise

A store's load answers its Needs through the client (``ShardStore.load``, ``PSClient.load``);
everything else that reads a checkpoint reads its parts on its own host.
"""

from typing import NamedTuple

import numpy as np

from cardinal.checkpoint.layout import REMOTE, shard_dir

KINDS = ("rows", "deleted", "admission")


class Need(NamedTuple):
    """A range of what one saved part holds of one stored table, asked for by the shard loading it."""

    step: int          # the checkpoint of the chain (its step) the part belongs to
    part: int          # the saved shard
    table: str         # the stored table (a piece's name, ``sharding/plan.py``)
    into: str          # the asking store's table, by whose routing rows are kept for it
    kind: str          # "rows", "deleted" (a delta's ids) or "admission" (its filter's state)
    lo: int            # the range: from row lo
    hi: int | None     # to row hi (None: to the end of the part)

    @classmethod
    def from_json(cls, obj) -> "Need":
        """A Need as sent (a JSON object), every field checked."""
        if not isinstance(obj, dict) or set(obj) != set(cls._fields):
            raise ValueError(f"need: must be an object of {list(cls._fields)}")
        ints = [obj[k] for k in ("step", "part", "lo")] + ([] if obj["hi"] is None else [obj["hi"]])
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in ints):
            raise ValueError("need: step, part, lo and hi must be integers >= 0 (hi may be null)")
        if not isinstance(obj["table"], str) or not isinstance(obj["into"], str) or obj["kind"] not in KINDS:
            raise ValueError(f"need: table and into must be names, kind one of {list(KINDS)}")
        if obj["hi"] is not None and obj["hi"] < obj["lo"]:
            raise ValueError(f"need: an empty range [{obj['lo']}, {obj['hi']})")
        return cls(**obj)


class Part(NamedTuple):
    """What a holder sends for a Need: rows lo..end of ``total`` (their arrays, rows filtered)."""

    end: int
    total: int
    arrays: dict


def ask(need: Need):
    """The arrays of ``need``'s range, whole: a generator that yields a Need for what is still
    missing and is sent a Part for each, until the range's end (the part's, when ``need.hi`` is None)."""
    got, lo, total = [], need.lo, None
    while True:
        part = yield need._replace(lo=lo)
        if not isinstance(part, Part):
            raise ValueError(f"{need.kind} of {need.table}, shard {need.part}: answered with {type(part).__name__}")
        stop = part.total if need.hi is None else need.hi
        if (total is not None and part.total != total) or not lo <= part.end <= min(stop, part.total) \
                or (part.end == lo < stop) or (got and set(part.arrays) != set(got[0])):
            raise ValueError(f"{need.kind} of {need.table}, shard {need.part}: an answer for rows {lo}..{part.end} "
                             f"of {part.total}, asked for {lo}..{stop}")
        got.append(part.arrays)
        total, lo = part.total, part.end
        if lo >= stop:
            return {k: np.concatenate([g[k] for g in got]) for k in got[0]}


def relay(reader, each):
    """Drive ``reader`` (a generator of blocks and Needs) inside another generator: each Need is
    yielded up and the Part sent back is passed down, each block goes to ``each(*block)``; returns
    what ``reader`` returns."""
    answer = None
    while True:
        try:
            item = reader.send(answer)
        except StopIteration as stop:
            return stop.value
        if isinstance(item, Need):
            answer = yield item
        else:
            each(*item)
            answer = None


def here(reader, step_path, info: dict):
    """``reader``'s blocks, every part read on this host: a Need is refused with a ValueError naming
    the server whose disk holds the part. Returns what ``reader`` returns."""
    while True:
        try:
            item = next(reader)
        except StopIteration as stop:
            return stop.value
        if isinstance(item, Need):
            refuse(item, step_path, info)
        yield item


def value(reader, step_path, info: dict):
    """What a reader of values (no blocks) returns, every part read on this host (``here``)."""
    items = here(reader, step_path, info)
    try:
        item = next(items)
    except StopIteration as stop:
        return stop.value
    raise AssertionError(f"a reader of values yielded a block: {item!r}")


def refuse(need: Need, step_path, info: dict):
    """A ValueError: ``need``'s part (of the checkpoint at ``step_path``) is on its server's disk."""
    server = elsewhere(step_path, info, need.part, info["n_shards"]) or "unknown"
    raise ValueError(not_here(step_path, need.part, server))


def elsewhere(step_path, info: dict, shard: int, n_shards: int) -> str | None:
    """The server whose own disk holds a saved shard's files when they are not on this host, else None."""
    path = shard_dir(step_path, shard, n_shards)
    held = info.get(REMOTE, {}).get(path.name)
    return held["server"] if held is not None and not path.is_dir() else None


def not_here(step_path, shard: int, server: str) -> str:
    return (f"checkpoint {step_path.name}: shard {shard}'s files are on the disk of its server ({server}), not on "
            "this host; it reads them there (a load through the servers)")
