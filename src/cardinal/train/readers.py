"""Readers for a recipe's ``[data]`` section; generates the synthetic data set on first use."""

import hashlib
import json
import math
from dataclasses import asdict
from pathlib import Path

from cardinal.data import CriteoReader, MovieLensReader, ParquetReader, generate, sizes
from cardinal.data.download import default_dir
from cardinal.data.generation_lock import generated_once
from cardinal.progress import bar as progress_bar
from cardinal.data.holdout import Holdout, count_rows
from cardinal.recipe.data import DataConfig


def synthetic_dir(cfg: DataConfig) -> Path:
    key = hashlib.sha1(json.dumps(asdict(cfg.synthetic), sort_keys=True).encode()).hexdigest()[:10]
    return Path(cfg.cache_dir) / f"synthetic-{key}"


def ensure_synthetic(cfg: DataConfig, progress: bool = True) -> dict:
    """Generate the data set once, also when several processes ask at once (data/generation_lock.py;
    ``teacher.json`` is written last and marks it complete)."""
    out = synthetic_dir(cfg)

    def make(tmp: Path) -> None:
        total = cfg.synthetic.rows + cfg.synthetic.eval_rows
        with progress_bar(total=total, desc=f"generating {out}", unit="rows", disable=not progress) as bar:
            generate(tmp, cfg.synthetic, progress=bar.update)

    generated_once(out, lambda d: (d / "teacher.json").is_file(), make)
    return json.loads((out / "teacher.json").read_text())


def make_readers(cfg: DataConfig, seed: int = 0, progress: bool = True, share: tuple[int, int] = (0, 1)):
    """(train reader, eval reader, info): info has 'train_steps' per epoch when known (global
    batches, whatever the share), 'train_files' and 'eval_files' (to name in errors), and
    'teacher' for synthetic data. The train reader yields only worker ``share=(rank, world)``'s
    share of every global batch; the eval reader stays whole (the trainer splits its batches)."""
    info: dict = {"train_steps": None, "train_files": cfg.train, "eval_files": cfg.eval}
    checks = {"strict": cfg.strict, "max_bad_fraction": cfg.max_bad_fraction}
    mine = {**checks, "share": share}
    if cfg.format == "synthetic":
        info["teacher"] = ensure_synthetic(cfg, progress)
        d = synthetic_dir(cfg)
        train = CriteoReader([d / "train.tsv"], cfg.batch_size, **mine)
        eval_files = cfg.eval or [str(d / "eval.tsv")]  # data.eval: other data (`cardinal eval RUN --set ...`)
        evaluation = _reader(eval_files)(eval_files, cfg.eval_batch_size, **checks)
        info["train_steps"] = math.ceil(cfg.synthetic.rows / cfg.batch_size)
        info["train_files"], info["eval_files"] = [str(d / "train.tsv")], eval_files
    elif cfg.format in ("criteo", "parquet") and cfg.eval:
        reader = CriteoReader if cfg.format == "criteo" else ParquetReader
        train = reader(cfg.train, cfg.batch_size, **mine)
        evaluation = _eval_reader(cfg.eval, reader)(cfg.eval, cfg.eval_batch_size, **checks)
    elif cfg.format in ("criteo", "parquet"):  # no eval files: hold out a share of the training rows
        reader = CriteoReader if cfg.format == "criteo" else ParquetReader
        total = count_rows(cfg.format, cfg.train)
        train_side, eval_side = (Holdout(cfg.holdout, cfg.holdout_by, side, total, seed) for side in ("train", "eval"))
        train = reader(cfg.train, cfg.batch_size, **mine, holdout=train_side)
        evaluation = reader(cfg.train, cfg.eval_batch_size, **checks, holdout=eval_side)
        info["train_steps"] = math.ceil((train_side.cut if cfg.holdout_by == "time" else total) / cfg.batch_size)
        which = "the last" if cfg.holdout_by == "time" else f"a hash (seed {seed}) of"
        info["eval_files"] = [f"{which} {cfg.holdout:.0%} of the rows of {', '.join(map(str, cfg.train))} "
                              f"(data.holdout)"]
    else:
        _check_movielens(cfg.train[0])
        train = MovieLensReader(cfg.train[0], "train", cfg.batch_size, seed=seed, **mine)
        evaluation = MovieLensReader(cfg.train[0], "eval", cfg.eval_batch_size, seed=seed, **checks)
        info["train_steps"] = math.ceil(len(train.labels) / cfg.batch_size)
        info["eval_files"] = [f"{cfg.train[0]} (the latest ratings)"]
    if cfg.format in ("criteo", "parquet"):  # a progress bar's total: the files' sizes or row counts
        info["train_steps_estimate"] = sizes.train_batches(cfg.format, cfg.train, cfg.batch_size)
    return train, evaluation, info


def _check_movielens(folder: str) -> None:
    """A missing MovieLens folder is the first thing a new user meets: name both ways out."""
    if not (Path(folder) / "ratings.csv").is_file():
        where = "" if Path(folder) == default_dir("movielens") else f" {folder}"
        raise ValueError(f"MovieLens data not found: {folder} holds no ratings.csv. Download it with "
                         f"`cardinal data movielens{where}`, or point to a copy (the folder of ratings.csv "
                         f"and movies.csv) with --set data.train=\"PATH\"")


def _reader(files: list[str]) -> type:
    """Parquet for .parquet files, else Criteo TSV."""
    return ParquetReader if all(str(f).endswith(".parquet") for f in files) else CriteoReader


def _eval_reader(files: list[str], reader: type) -> type:
    """The eval files' reader: as their names say (.parquet, .tsv or .txt: `cardinal eval RUN --set
    data.eval=...` of a TSV run on Parquet files, or the other way), else the training data's."""
    suffixes = {Path(f).suffix.lower() for f in files}
    if suffixes == {".parquet"}:
        return ParquetReader
    return CriteoReader if suffixes and suffixes <= {".tsv", ".txt"} else reader
