"""MovieLens ratings as click data (``ml-latest-small`` layout: ratings.csv, movies.csv).

A rating of 4 or more is a click. Sparse fields: ``user``, ``movie``, ``genres``
(multi-hot), ``year`` (from the title; an empty bag when absent); no dense features.
Ids are ``(field << 40) | value`` so fields never collide. Split by time: the earliest
``1 - eval_fraction`` of ratings train, the latest evaluate; training order is shuffled
with ``seed``.
"""

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.csv as pcsv
import torch

from cardinal.data.batch import Batch, Bag, single_hot

SPARSE = ["user", "movie", "genres", "year"]
_YEAR = re.compile(r"\((\d{4})\)\s*$")


class MovieLensReader:
    dense_fields: list[str] = []
    sparse_fields = SPARSE

    def __init__(self, path: str | Path, split: str, batch_size: int, eval_fraction: float = 0.2, seed: int = 0):
        path = Path(path)
        for name in ("ratings.csv", "movies.csv"):
            if not (path / name).is_file():
                raise ValueError(f"MovieLens file not found: {path / name}")
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        if not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        ratings = pcsv.read_csv(path / "ratings.csv")
        movies = pcsv.read_csv(path / "movies.csv")
        order = np.argsort(ratings["timestamp"].to_numpy(), kind="stable")
        cut = int(len(order) * (1 - eval_fraction))
        rows = order[:cut] if split == "train" else order[cut:]
        if split == "train":
            rows = np.random.default_rng(seed).permutation(rows)
        self.user = ratings["userId"].to_numpy()[rows].astype(np.int64)
        self.movie = ratings["movieId"].to_numpy()[rows].astype(np.int64)
        self.labels = (ratings["rating"].to_numpy()[rows] >= 4.0).astype(np.float32)
        self._movie_info(movies)
        self.batch_size = batch_size

    def _movie_info(self, movies):
        genre_names = sorted({g for gs in movies["genres"].to_pylist() for g in gs.split("|")})
        code = {g: i for i, g in enumerate(genre_names)}
        self.genres_of, self.year_of = {}, {}
        for mid, title, gs in zip(movies["movieId"].to_pylist(), movies["title"].to_pylist(), movies["genres"].to_pylist()):
            self.genres_of[mid] = [code[g] for g in gs.split("|")]
            m = _YEAR.search(title)
            self.year_of[mid] = int(m.group(1)) if m else -1

    def __iter__(self) -> Iterator[Batch]:
        for start in range(0, len(self.labels), self.batch_size):
            s = slice(start, start + self.batch_size)
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
            yield Batch(torch.zeros(len(user), 0), sparse, torch.from_numpy(self.labels[s]))
