"""MovieLens ratings as click data (``ml-latest-small`` layout: ratings.csv, movies.csv).

A rating of 4 or more is a click. Sparse fields: ``user``, ``movie``, ``genres``
(multi-hot), ``year`` (from the title; an empty bag when absent), and what was known before
the rating (``movielens_history``: the user's and the movie's earlier ratings, the movie's
age); no dense features.
Ids are ``(field << 40) | value`` so fields never collide. Split by time: the earliest
``1 - eval_fraction`` of ratings train, the latest evaluate; training order is shuffled
with ``seed``. A global batch is ``batch_size`` consecutive rows of that order; a reader with
``share=(rank, world)`` yields only that worker's slice of each (``shares``; the last batch's
shares split its own length), an empty Batch where the slice is empty. Every worker reads and
checks the whole CSV (it is small and in memory), so each counts every bad row.

Rows are checked as the TSV reader checks lines (``bad_rows.BadRows``): a missing column or
a column of text is a ValueError naming the file and the column; a rating outside 0.5..5
(or missing), an id outside [0, 2**40) (it would spill into the field bits) or a missing
timestamp makes a bad row, skipped and counted or, with ``strict``, the end of the run.
"""

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import torch

from cardinal.data import movielens_history as history
from cardinal.data.bad_rows import BadRows
from cardinal.data.batch import Batch, Bag, single_hot
from cardinal.data.shares import bounds, check_share

SPARSE = ["user", "movie", "genres", "year", *history.FIELDS]
DENSE: list[str] = []  # no dense features: batches' dense is (B, 0)
FIELD_CODE = {name: i + 1 for i, name in enumerate(SPARSE)}  # an id is (code << 40) | value
_YEAR = re.compile(r"\((\d{4})\)\s*$")
ID_LIMIT = 1 << 40   # ids sit below the field bits
RATINGS = (0.5, 5.0)
COLUMNS = {"ratings.csv": {"userId": "int", "movieId": "int", "rating": "num", "timestamp": "num"},
           "movies.csv": {"movieId": "int", "title": "str", "genres": "str"}}


class MovieLensReader:
    dense_fields: list[str] = []
    sparse_fields = SPARSE

    def __init__(self, path: str | Path, split: str, batch_size: int, eval_fraction: float = 0.2, seed: int = 0,
                 strict: bool = False, max_bad_fraction: float = 1.0, share: tuple[int, int] = (0, 1)):
        path = Path(path)
        self.share = check_share(share)
        for name in ("ratings.csv", "movies.csv"):
            if not (path / name).is_file():
                raise ValueError(f"MovieLens file not found: {path / name}")
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        if not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        self.bad = BadRows(strict, max_bad_fraction)
        ratings, good = _read(path / "ratings.csv", self.bad, {
            "userId": lambda v: (v >= 0) & (v < ID_LIMIT), "movieId": lambda v: (v >= 0) & (v < ID_LIMIT),
            "rating": lambda v: (v >= RATINGS[0]) & (v <= RATINGS[1]), "timestamp": np.isfinite})
        movies, movie_ok = _read(path / "movies.csv", self.bad, {"movieId": lambda v: (v >= 0) & (v < ID_LIMIT)})
        self.bad.finish()
        self._movie_info({k: v[movie_ok] for k, v in movies.items()})
        good = np.flatnonzero(good)
        order = good[np.argsort(ratings["timestamp"][good], kind="stable")]
        cut = int(len(order) * (1 - eval_fraction))
        rows = order[:cut] if split == "train" else order[cut:]
        if split == "train":
            rows = np.random.default_rng(seed).permutation(rows)
        self.user = ratings["userId"][rows].astype(np.int64)
        self.movie = ratings["movieId"][rows].astype(np.int64)
        self.labels = (ratings["rating"][rows] >= 4.0).astype(np.float32)
        self.history = self._history(ratings, good, rows)
        self.batch_size = batch_size

    @property
    def bad_lines(self) -> int:
        return self.bad.bad

    def _movie_info(self, movies):
        genres = [gs or "" for gs in movies["genres"]]
        genre_names = sorted({g for gs in genres for g in gs.split("|")})
        code = {g: i for i, g in enumerate(genre_names)}
        self.genres_of, self.year_of = {}, {}
        for mid, title, gs in zip(movies["movieId"].tolist(), movies["title"], genres):
            self.genres_of[mid] = [code[g] for g in gs.split("|")]
            m = _YEAR.search(title or "")
            self.year_of[mid] = int(m.group(1)) if m else -1

    def _history(self, ratings: dict, good: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Each history field's bucket for ``rows`` (-1: absent), from all good ratings of both splits
        (each sees only earlier ones, so the eval split's come from its own past, never its future)."""
        movie = ratings["movieId"][good].astype(np.int64)
        year = np.array([self.year_of.get(m, -1) for m in movie.tolist()], np.int64)
        ts = ratings["timestamp"][good]
        genres = [self.genres_of.get(m, []) for m in movie.tolist()]
        offsets = np.zeros(len(movie) + 1, np.int64)
        np.cumsum([len(g) for g in genres], out=offsets[1:])
        codes = np.fromiter((g for gs in genres for g in gs), np.int64, int(offsets[-1]))
        fields = history.encode(ratings["userId"][good].astype(np.int64), movie, ratings["rating"][good].astype(float),
                                ts, year, np.floor(ts).astype(np.int64), (codes, offsets))
        where = np.full(len(ratings["rating"]), -1, np.int64)
        where[good] = np.arange(len(good))
        return {name: values[where[rows]] for name, values in fields.items()}

    def __iter__(self) -> Iterator[Batch]:
        for start in range(0, len(self.labels), self.batch_size):
            lo, hi = bounds(min(self.batch_size, len(self.labels) - start), self.share)
            s = slice(start + lo, start + hi)
            user, movie = self.user[s], self.movie[s]
            genres = [self.genres_of.get(int(m), []) for m in movie]
            offsets = np.zeros(len(movie) + 1, np.int64)
            np.cumsum([len(g) for g in genres], out=offsets[1:])
            genre_ids = np.fromiter((g for gs in genres for g in gs), np.int64, int(offsets[-1])) | (3 << 40)
            years = np.array([self.year_of.get(int(m), -1) for m in movie], np.int64)
            sparse = {"user": single_hot(user | (1 << 40), np.ones(len(user), bool)),
                      "movie": single_hot(movie | (2 << 40), np.ones(len(movie), bool)),
                      "genres": Bag(genre_ids, offsets),
                      "year": single_hot(years | (4 << 40), years >= 0)}
            for name, values in self.history.items():
                v = values[s]
                sparse[name] = single_hot(v | (FIELD_CODE[name] << 40), v >= 0)
            yield Batch(torch.zeros(len(user), 0), sparse, torch.from_numpy(self.labels[s]))


def _read(path: Path, bad: BadRows, rules: dict) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Columns of a CSV file as arrays (text: object arrays of str | None) and which rows are good;
    each bad row is reported to ``bad`` as ``file:line: reason``."""
    try:
        table = pcsv.read_csv(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path}: not a readable CSV file ({e})") from e
    columns, good = {}, np.ones(table.num_rows, bool)
    reason = np.full(table.num_rows, None, object)
    for name, kind in COLUMNS[path.name].items():
        if name not in table.column_names:
            raise ValueError(f"{path}: no column {name!r}; it needs {list(COLUMNS[path.name])}")
        col = table[name]
        numeric = pa.types.is_integer(col.type) or (kind == "num" and pa.types.is_floating(col.type))
        if kind != "str" and not numeric and not pa.types.is_null(col.type):
            raise ValueError(f"{path}: column {name!r} holds {col.type}; it must hold "
                             f"{'integers' if kind == 'int' else 'numbers'}")
        if kind == "str":
            columns[name] = np.array(col.to_pylist(), object)
            continue
        present = col.is_valid().to_numpy(zero_copy_only=False)
        values = col.fill_null(0).to_numpy(zero_copy_only=False) if not pa.types.is_null(col.type) \
            else np.zeros(table.num_rows, np.int64)
        ok = present & rules.get(name, lambda v: np.ones(len(v), bool))(values)
        for i in np.flatnonzero(~ok & good):
            reason[i] = f"bad {name} ({values[i].item() if present[i] else 'missing'})"
        good &= ok
        columns[name] = values
    bad.add([f"{path}:{i + 2}: {reason[i]}" for i in np.flatnonzero(~good)], table.num_rows)
    return columns, good
