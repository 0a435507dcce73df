"""``[data]``: where batches come from, and ``[data.synthetic]`` (the generated data set)."""

from dataclasses import dataclass, field

from cardinal.data.synthetic_config import SyntheticConfig
from cardinal.home import expand

FORMATS = ("synthetic", "criteo", "parquet", "movielens")


@dataclass(frozen=True)
class DataConfig:
    format: str = field(default="synthetic", metadata={
        "help": '"synthetic" (generated), "criteo" (TSV), "parquet" or "movielens"'})
    train: list[str] = field(default_factory=list, metadata={
        "help": "files (criteo, parquet) or a directory (movielens); a plain string is a list of one"})
    eval: list[str] = field(default_factory=list, metadata={
        "help": "criteo, parquet: empty carves `holdout` out of data.train"})
    holdout: float = field(default=0.1, metadata={
        "help": "the share of the training rows held out for evaluation when data.eval is empty"})
    holdout_by: str = field(default="time", metadata={
        "help": '"time": the last rows (files in time order); "hash": a seeded hash of each row'})
    batch_size: int = field(default=4096, metadata={
        "help": "the global batch: W workers each train a 1/W share of every batch..."})
    batch_scope: str = field(default="global", metadata={
        "help": '...or "worker": each worker trains batch_size (global batch W x batch_size)'})
    eval_batch_size: int = field(default=16384, metadata={
        "help": "rows per eval batch (evaluation only: any size gives the same metrics)"})
    strict: bool = field(default=False, metadata={"help": "stop at the first bad input line instead of skipping it"})
    max_bad_fraction: float = field(default=0.01, metadata={
        "help": "stop the run when more of the lines read are bad than this share"})
    cache_dir: str = field(default="$CARDINAL_HOME/data", metadata={
        "help": "where generated data sets are kept, shared by runs from any folder; CARDINAL_HOME defaults to "
                "$XDG_CACHE_HOME/cardinal, else ~/.cache/cardinal (cardinal/home.py). In train, eval and cache_dir, "
                "a leading $CARDINAL_HOME or ~ is expanded when the recipe is loaded"})
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig, metadata={
        "help": 'the generated data set (format = "synthetic")'})

    def __post_init__(self):
        for name in ("train", "eval"):  # a plain string is a list of one file
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, [getattr(self, name)])
            object.__setattr__(self, name, [expand(p) for p in getattr(self, name)])
        object.__setattr__(self, "cache_dir", expand(self.cache_dir))
        if self.format not in FORMATS:
            raise ValueError(f"data.format must be one of {FORMATS}, got {self.format!r}")
        if self.format in ("criteo", "parquet") and not self.train:
            raise ValueError(f"data.format = {self.format!r} needs a data.train file list")
        if self.format in ("criteo", "parquet") and not self.eval and not 0 < self.holdout < 1:
            raise ValueError(f"data.format = {self.format!r} needs data.eval files, or data.holdout in (0, 1) "
                             f"to hold out that share of data.train; got data.holdout = {self.holdout}")
        if self.holdout_by not in ("time", "hash"):
            raise ValueError(f"data.holdout_by must be 'time' or 'hash', got {self.holdout_by!r}")
        if self.format == "movielens" and self.eval:
            raise ValueError("data.eval does not apply to data.format = 'movielens' (its eval split is the latest "
                             "ratings of data.train); leave it empty")
        if self.format == "movielens" and len(self.train) != 1:
            raise ValueError("data.format = 'movielens' needs data.train = [directory of ratings.csv]")
        if self.batch_scope not in ("global", "worker"):
            raise ValueError(f"data.batch_scope must be 'global' or 'worker', got {self.batch_scope!r}")
        if self.batch_size < 1 or self.eval_batch_size < 1:
            raise ValueError("data.batch_size and data.eval_batch_size must be >= 1")
        if not 0 <= self.max_bad_fraction <= 1:
            raise ValueError(f"data.max_bad_fraction must be in [0, 1], got {self.max_bad_fraction}")
