"""Recipes: one TOML file, one small dataclass per component, nothing accepted and ignored.

    [data]              DataConfig         where batches come from
    [data.synthetic]    SyntheticConfig    the generated data set (format = "synthetic")
    [model]             name + that model's own arguments (checked against its signature)
    [embedding]         EmbeddingConfig    tables, dim (dims per table), pooling, consistency
    [sparse_optimizer]  name + that optimizer's hyper-parameters (server side)
    [dense_optimizer]   DenseOptimizerConfig (worker side, torch.optim)
    [ps]                PSConfig           shards of the embedded parameter server
    [wire]              WireConfig         how rows and gradients cross to the servers (codecs)
    [cache]             CacheConfig        the worker cache of hot rows (off by default)
    [admission]         AdmissionConfig    which new ids get a row (memory_config.py)
    [eviction]          EvictionConfig     which rows go when a server passes ps.memory_budget; TTL
    [train]             TrainConfig        steps, evaluation, checkpoints, run directory

An unknown section or key is an error that names it; ``--set section.key=value`` overrides
one value (TOML syntax: ``--set model.hidden=[256,128]``, ``--set data.format=criteo``).
A file list (``data.train``, ``data.eval``, ``ps.servers``) takes a path, a comma list
(``a.tsv,b.tsv``), a TOML list (``["a.tsv","b.tsv"]``) or that list with its quotes stripped
by the shell (``[a.tsv,b.tsv]``); a path holding a comma needs the quoted TOML list.
``--set model.name=...`` naming another model starts that model from its own defaults, and
``--set sparse_optimizer.name=...`` another optimizer from its own (hyper-parameters differ per optimizer).
"""

import copy
import math
import os
import tomllib
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

from cardinal.data.synthetic_config import SyntheticConfig
from cardinal.home import expand
from cardinal.memory_config import AdmissionConfig, EvictionConfig
from cardinal.train.schedule import DECAYS

STORAGE = ("fp32", "fp16", "bf16", "int8")  # the row formats of embedding/formats (not imported here: numba)

RECIPES = Path(__file__).resolve().parent.parent / "recipes"
FORMATS = ("synthetic", "criteo", "parquet", "movielens")
DENSE_OPTIMIZERS = {"adam": "Adam", "adagrad": "Adagrad", "sgd": "SGD"}
# the names alone, checked before torch or numba is imported (tests/test_cli_fast.py keeps them
# equal to cardinal.models.MODELS and cardinal.optim.OPTIMIZERS)
MODEL_NAMES = ("deepfm", "dlrm", "lr", "wide_deep")
SPARSE_OPTIMIZERS = ("adagrad", "adam", "ftrl", "rowwise_adagrad", "sgd")
CODECS = ("fp32", "fp16", "bf16", "int8")  # = cardinal.codecs.NAMES


@dataclass(frozen=True)
class DataConfig:
    format: str = "synthetic"     # "synthetic" (generated), "criteo" (TSV), "parquet" or "movielens"
    train: list[str] = field(default_factory=list)  # files (criteo, parquet) or a directory (movielens);
                                                    # a plain string is a list of one
    eval: list[str] = field(default_factory=list)  # criteo, parquet: empty carves `holdout` out of data.train
    holdout: float = 0.1          # the share of the training rows held out for evaluation when data.eval is empty
    holdout_by: str = "time"      # "time": the last rows (files in time order); "hash": a seeded hash of each row
    batch_size: int = 4096        # the global batch: W workers each train a 1/W share of every batch...
    batch_scope: str = "global"   # ...or "worker": each worker trains batch_size (global batch W x batch_size)
    eval_batch_size: int = 16384  # rows per eval batch (evaluation only: any size gives the same metrics)
    strict: bool = False          # stop at the first bad input line instead of skipping it
    max_bad_fraction: float = 0.01  # stop the run when more of the lines read are bad than this share
    cache_dir: str = "$CARDINAL_HOME/data"  # where generated data sets are kept, shared by runs from any folder;
                                  # CARDINAL_HOME defaults to $XDG_CACHE_HOME/cardinal, else ~/.cache/cardinal
                                  # (cardinal/home.py). In train, eval and cache_dir, a leading $CARDINAL_HOME
                                  # or ~ is expanded when the recipe is loaded
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)

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


@dataclass(frozen=True)
class EmbeddingConfig:
    dim: int = 16                 # width of every embedding row, and of the models' input (fixed for a run: --resume
                                  # cannot change it); a table of embedding.dims is projected to it
    pooling: str = "sum"          # how a field's several ids become one vector: "sum" or "mean"
    shared: bool = True           # one table for all fields (ids never collide) or one per field
    init_scale: float = 0.01      # a new row starts uniform in [-init_scale, init_scale]...
    seed: int = 0                 # ...drawn from this seed and its id (the same row on any shard)
    consistency: str = "auto"     # sync: pulls see every earlier push; async: all but the last `staleness` steps';
                                  # geo: rows train on the worker, changes pushed every `geo_interval` steps;
                                  # auto: async in one process (the next pull overlaps the step), sync with
                                  # parameter servers or several workers (as fast there, and a better model)
    staleness: int = 1            # async only: with 1, the next batch's pull overlaps this step (prefetch)
    geo_interval: int = 4         # geo only
    max_in_flight: int = 4        # pushes not yet acknowledged, per worker, before a step waits
    combine: bool = True          # several workers: servers apply each step's pushes of all workers as one update
                                  # (what one process computes); false: each worker's push applies on arrival
    compensation: str = "none"    # several workers: "lr" divides a push's sparse lr by its rows' staleness
    clip_ratio: float = 0.0       # CowClip (worker/clip.py): each id's gradient row to norm <= its uses in the batch
    clip_min: float = 1e-5        # x max(clip_ratio x |row|, clip_min); clip_ratio = 0: no clipping
    storage: str = "fp32"         # how servers store values (embedding/formats): fp32, fp16, bf16, int8 (a per-row
                                  # scale); optimizer state stays float32; pulls read float32 either way
    table_storage: dict = field(default_factory=dict)  # per table, e.g. {emb = "int8"}; baseline tables lr_X: fp32
    dims: dict = field(default_factory=dict)  # per table, e.g. {C5 = 128}: that table's own dim (mixed-dimension
                                  # embeddings; fixed for a run); its fields reach the model through a learned
                                  # projection to dim (models/projection.py); the others, and lr_X, keep theirs
    field_tables: dict = field(default_factory=dict)  # with shared = false, fields that read another table than
                                  # their own, e.g. {C2 = "C1", C3 = "C1"}: their ids share its rows (a table several
                                  # features look up, as an item table read by the item and the history fields)
    hash_buckets: int = 0         # the hashing trick (a baseline for the formats): ids fold into this many rows per
                                  # table, colliding ids share one; 0: every id its own row
    chunks: int = 1               # FIITED (embedding/formats/chunked.py): > 1 splits each row's dim values into this
                                  # many chunks; a row keeps the prefix of chunks its gradients show useful, freed
                                  # chunks read zeros (a wide part's weight is never freed); 1: off
    chunk_target: float = 1.0     # the share of chunks kept live on each server, in [1/chunks, 1] (each row keeps one)
    chunk_every: int = 100        # steps between the passes that choose which chunks stay (and free the others' memory)
    saec_ratio: float = 0.0       # Saec as the training table (embedding/clustered_table.py): after the push of
                                  # step saec_at each server clusters its rows of the model's tables field by field,
                                  # about this many ids a cluster (ceil(n / ratio), at least 16 a field), and from then
                                  # on an id reads and trains its cluster's vector (the map frozen; an id first seen
                                  # later joins its field's default cluster). 0: off; else >= 1. Tables lr_X stay whole
    saec_at: int = 0              # the step after whose push the servers cluster (>= 1 with saec_ratio; 0 without);
                                  # that push waits for the clustering (1.39M rows, 4 shards: 35 s on 2 cores, one
                                  # after another), so ps.timeout_s must exceed it

    def mode(self, distributed: bool) -> str:
        """The consistency this run trains with: "auto" is sync for servers or several workers."""
        if self.consistency != "auto":
            return self.consistency
        return "sync" if distributed else "async"

    def __post_init__(self):
        if self.dim < 1:
            raise ValueError(f"embedding.dim must be >= 1, got {self.dim}")
        if self.consistency not in ("auto", "sync", "async", "geo"):
            raise ValueError(f"embedding.consistency must be 'auto', 'sync', 'async' or 'geo', got {self.consistency!r}")
        if self.hash_buckets < 0:
            raise ValueError(f"embedding.hash_buckets must be >= 0 (0: off), got {self.hash_buckets}")
        if self.geo_interval < 1:
            raise ValueError(f"embedding.geo_interval must be >= 1, got {self.geo_interval}")
        if self.staleness < 0:
            raise ValueError(f"embedding.staleness must be >= 0, got {self.staleness}")
        if self.compensation not in ("none", "lr"):
            raise ValueError(f"embedding.compensation must be 'none' or 'lr', got {self.compensation!r}")
        for where, name in [("embedding.storage", self.storage), *(
                (f"embedding.table_storage.{t}", n) for t, n in self.table_storage.items())]:
            if name not in STORAGE:
                raise ValueError(f"{where} must be one of {list(STORAGE)}, got {name!r}")
        if not isinstance(self.dims, dict) or not all(
                isinstance(t, str) and isinstance(d, int) and not isinstance(d, bool) and d >= 1
                for t, d in self.dims.items()):
            raise ValueError(f"embedding.dims maps table names to their dims (integers >= 1), e.g. {{C5 = 128}}; "
                             f"got {self.dims!r}")
        if not isinstance(self.field_tables, dict) or not all(
                isinstance(f, str) and isinstance(t, str) and t and t.replace("_", "").replace("-", "").isalnum()
                for f, t in self.field_tables.items()):
            raise ValueError("embedding.field_tables maps fields to the table they read (letters, digits, '_', '-'), "
                             f"e.g. {{C2 = \"C1\"}}; got {self.field_tables!r}")
        if self.field_tables and self.shared:
            raise ValueError("embedding.field_tables needs embedding.shared = false (shared: every field reads 'emb')")
        if self.dims and self.chunks > 1:
            raise ValueError("embedding.dims with embedding.chunks > 1 is not supported (the chunks split one dim "
                             "for every table); set embedding.chunks = 1 or drop embedding.dims")
        if self.dims and self.saec_ratio:
            raise ValueError("embedding.dims with embedding.saec_ratio is not supported (clustered training assumes "
                             "one dim for every table); set embedding.saec_ratio = 0 or drop embedding.dims")
        if self.pooling not in ("sum", "mean"):
            raise ValueError(f"embedding.pooling must be 'sum' or 'mean', got {self.pooling!r}")
        if not isinstance(self.chunks, int) or self.chunks < 1 or self.dim % self.chunks:
            raise ValueError(f"embedding.chunks must be an integer >= 1 dividing embedding.dim = {self.dim}, "
                             f"got {self.chunks!r}")
        if self.chunks == 1 and self.chunk_target != 1:
            raise ValueError(f"embedding.chunk_target = {self.chunk_target} applies only with embedding.chunks > 1")
        if not 1 / self.chunks <= self.chunk_target <= 1:
            raise ValueError(f"embedding.chunk_target must be in [1 / chunks, 1] = [{1 / self.chunks:g}, 1] (every row "
                             f"keeps its first chunk), got {self.chunk_target!r}")
        if not isinstance(self.chunk_every, int) or self.chunk_every < 1:
            raise ValueError(f"embedding.chunk_every must be an integer >= 1, got {self.chunk_every!r}")
        if self.chunks > 1 and self.storage != "fp32":
            raise ValueError(f"embedding.chunks > 1 stores values as fp32 in its chunks; set embedding.storage = "
                             f"'fp32' (got {self.storage!r}) or embedding.chunks = 1")
        if not (self.saec_ratio == 0 or 1 <= self.saec_ratio < math.inf):
            raise ValueError(f"embedding.saec_ratio must be 0 (off) or a number >= 1 (ids a cluster), "
                             f"got {self.saec_ratio!r}")
        if self.saec_ratio and self.saec_at < 1:
            raise ValueError(f"embedding.saec_ratio = {self.saec_ratio} needs embedding.saec_at >= 1 (the step after "
                             f"which the servers cluster), got {self.saec_at}")
        if not self.saec_ratio and self.saec_at:
            raise ValueError(f"embedding.saec_at = {self.saec_at} applies only with embedding.saec_ratio >= 1")
        if self.saec_ratio and self.chunks > 1:
            raise ValueError("embedding.saec_ratio with embedding.chunks > 1: Saec clusters whole rows; set "
                             "embedding.chunks = 1 or embedding.saec_ratio = 0")
        if self.saec_ratio and self.hash_buckets:
            raise ValueError("embedding.saec_ratio with embedding.hash_buckets: hashed ids have lost their field and "
                             "share rows already; set one of them to 0")
        if self.saec_ratio and self.consistency == "geo":
            raise ValueError("embedding.saec_ratio with embedding.consistency = 'geo': a GEO replica trains each id's "
                             "own row on the worker, not its cluster's; use another consistency")
        if not (0 <= self.clip_ratio < math.inf and 0 <= self.clip_min < math.inf):
            raise ValueError(f"embedding.clip_ratio and clip_min must be finite and >= 0, got {self.clip_ratio}, "
                             f"{self.clip_min}")


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_bytes(value: int | str, name: str) -> int:
    """An int, or a string such as "64MiB", "1.5GB", "4096" (KB/MB/GB: powers of 10, KiB/MiB/GiB: of 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be an int or a size such as \"64MiB\", got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("kmgib")
        unit = text[len(number):]
        try:
            n = int(float(number) * _UNITS[unit])
        except (KeyError, ValueError):
            raise ValueError(f"{name} must be an int or a size such as \"64MiB\", \"1.5GB\", got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return n


@dataclass(frozen=True)
class CacheConfig:
    bytes: int | str = 0          # the worker cache of hot rows (worker/sources/cache.py): its size, an int or
                                  # "64MiB"-style; 0: no cache. Sync and async consistency only (geo keeps a replica)
    staleness: int = 2            # s: a cached row is read at most s updates behind its server, and a worker holds
                                  # at most s unpushed updates of a row (0 in sync mode: bitwise as no cache; on the
                                  # default recipe, 2 workers: s=2 cost 0.0015 AUC, s=4 0.004; benchmarks/cache.py)
    policy: str = "lru"           # eviction when full: "lru" (least recently used) or "lfu" (least often used)
    admit_after: int = 1          # a row is cached once pulled this many times (counted in a small sketch)
    device: str = "auto"          # where cached rows live: "cpu", "cuda", or "auto" (the worker's device)

    def __post_init__(self):
        parse_bytes(self.bytes, "cache.bytes")
        if self.staleness < 0:
            raise ValueError(f"cache.staleness must be >= 0, got {self.staleness}")
        if self.policy not in ("lru", "lfu"):
            raise ValueError(f"cache.policy must be 'lru' or 'lfu', got {self.policy!r}")
        if self.admit_after < 0:
            raise ValueError(f"cache.admit_after must be >= 0, got {self.admit_after}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"cache.device must be 'auto', 'cpu' or 'cuda', got {self.device!r}")

    @property
    def capacity(self) -> int:
        """cache.bytes as a number of bytes."""
        return parse_bytes(self.bytes, "cache.bytes")


@dataclass(frozen=True)
class DenseOptimizerConfig:
    name: str = "adam"            # torch.optim: "adam", "adagrad" or "sgd" (fixed for a run)
    lr: float = 0.001             # the dense layers' learning rate
    weight_decay: float = 0.0     # torch.optim's weight_decay on the dense weights
    lr_scaling: str = "none"      # "sqrt": with data.batch_scope = "worker", lr x sqrt(workers) (CowClip's rule;
                                  # the sparse lr stays); with a global batch the workers change nothing
    warmup_steps: int = 0         # lr rises linearly from 0 over these steps (train/schedule.py)...
    decay: str = "none"           # ...then "none", "cosine" or "linear" down to lr x min_lr_ratio at the run's last step
    min_lr_ratio: float = 0.0     # the decayed lr's floor, a share of lr

    def __post_init__(self):
        if self.name not in DENSE_OPTIMIZERS:
            raise ValueError(f"dense_optimizer.name must be one of {sorted(DENSE_OPTIMIZERS)}, got {self.name!r}")
        if not self.lr > 0:
            raise ValueError(f"dense_optimizer.lr must be > 0, got {self.lr}")
        if self.lr_scaling not in ("none", "sqrt"):
            raise ValueError(f"dense_optimizer.lr_scaling must be 'none' or 'sqrt', got {self.lr_scaling!r}")
        if self.warmup_steps < 0 or self.decay not in DECAYS or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"dense_optimizer: warmup_steps must be >= 0 (got {self.warmup_steps}), decay one of "
                             f"{DECAYS} (got {self.decay!r}), min_lr_ratio in [0, 1] (got {self.min_lr_ratio})")


@dataclass(frozen=True)
class PSConfig:
    shards: int = 4               # embedded shards (in this process)
    concurrent: bool = True       # one thread per embedded shard: pulls and pushes overlap compute
    servers: list[str] = field(default_factory=list)  # host:port of each shard's server; empty: embedded
    timeout_s: float = 20.0       # deadline of each call to a server
    job: str = "cardinal"         # servers answer only requests of this job...
    token_file: str = ""          # ...carrying this token (or $CARDINAL_TOKEN)
    tls_cert: str = ""            # server certificate and key (PEM): TLS when given
    tls_key: str = ""             # (goes with tls_cert)
    tls_ca: str = ""              # what clients trust
    # what one server accepts (cardinal server): bytes and calls are read by gRPC before any check,
    # so max_message_mb x max_concurrent_calls bounds the memory a flood of requests can take
    max_message_mb: int = 16      # largest request or reply; clients split larger ones
    max_concurrent_calls: int = 16  # more are refused (RESOURCE_EXHAUSTED) before they are read
    # rows (every transport, the embedded one too; see cardinal/ps/limits.py)
    max_rows: int = 64_000_000    # rows of all tables on one shard; past it: RESOURCE_EXHAUSTED, nothing created
    max_new_rows_per_request: int = 1 << 20  # rows one pull may create; past it the pull is refused
    request_window: int = 2048    # request ids remembered per client (exactly-once)
    max_clients: int = 1024       # clients remembered at once...
    client_idle_s: float = 600.0  # ...each until silent this long
    max_step_ahead: int = 64      # steps a training request may run past the newest step a server accepted; past it
                                  # the request is refused (a step from the future would age every row at once)
    max_gradient: float = 1e9     # a push holding a gradient larger in magnitude is refused whole (as a non-finite
                                  # one is): far past any sane gradient, while its square stays far inside float32
                                  # for the optimizers' accumulators (ps/limits.py)
    memory_budget: int | str = 0  # bytes all tables of one server may take (rows, index, admission filters), an int,
                                  # "8GiB"-style or "50%" of this machine's memory; past it the lowest-scored rows are
                                  # evicted ([eviction]), or moved to disk with disk_budget. Embedded shards share it
                                  # equally. 0: no budget
    disk_budget: int | str = 0    # bytes of rows one server may keep in its disk tier (RocksDB): rows past memory_budget
                                  # go there and come back when used, bitwise the same run as all in RAM; past it, the
                                  # disk tier's lowest-scored rows are evicted. 0: no disk tier (needs memory_budget)
    disk_dir: str = "$CARDINAL_HOME/tiers"  # where disk tiers make their (temporary) directories
    metrics_port: int = 0         # cardinal server: Prometheus metrics over HTTP on its --host (GET /metrics) at this
                                  # port; 0: a free one, printed on its ready line (metrics=PORT); -1: none
    plan: str = "hash"            # where each table's rows live (cardinal/planner): "hash", every table row-wise over
                                  # every server; "auto", the planner's plan from a sample of the data (tables whole on
                                  # one server where the load stays balanced: fewer requests a step); or a plan file
                                  # from `cardinal plan RECIPE --out FILE`. A checkpoint loads into any plan (into
                                  # another column split from fp32 rows only)
    replicate: dict = field(default_factory=dict)  # with plan = "auto" (and `cardinal plan`): per table, e.g.
                                  # {C5 = 2000}, its ids in the most batches of a sample copied to every server,
                                  # read-only; worker w reads them from one server, the table's first + w, so several
                                  # workers' reads of a table placed on fewer servers than all spread over them, while
                                  # its gradients go to its own servers (ps/plan.py). A table the plan spreads over
                                  # every server gets no copies: its reads are spread already
    replica_staleness: int = 4    # steps a copy may lag its row: one worker refreshes the copies that often; a copy
                                  # older than this is not read (its row is, from its own server)

    def __post_init__(self):
        if self.shards < 1:
            raise ValueError(f"ps.shards must be >= 1, got {self.shards}")
        if not 1 <= self.max_message_mb <= 2047:
            raise ValueError(f"ps.max_message_mb must be in [1, 2047] (gRPC's limit is 2 GiB), got {self.max_message_mb}")
        if self.max_concurrent_calls < 1:
            raise ValueError(f"ps.max_concurrent_calls must be >= 1, got {self.max_concurrent_calls}")
        for name in ("max_rows", "max_new_rows_per_request", "request_window", "max_clients", "client_idle_s",
                     "max_step_ahead", "max_gradient"):
            if not getattr(self, name) >= 1:  # StoreLimits checks them again; importing it here would import numba
                raise ValueError(f"ps.{name} must be a number >= 1, got {getattr(self, name)!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("ps.tls_cert and ps.tls_key go together")
        if not isinstance(self.plan, str) or not self.plan:
            raise ValueError(f"ps.plan must be 'hash', 'auto' or a plan file's path, got {self.plan!r}")
        if self.plan not in ("hash", "auto"):
            object.__setattr__(self, "plan", expand(self.plan))
        if not isinstance(self.replicate, dict) or not all(
                isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in self.replicate.values()):
            raise ValueError(f"ps.replicate must map tables to a number of hot ids >= 1, e.g. {{C5 = 2000}}, "
                             f"got {self.replicate!r}")
        if not isinstance(self.replica_staleness, int) or isinstance(self.replica_staleness, bool) or \
                self.replica_staleness < 1:
            raise ValueError(f"ps.replica_staleness must be an integer >= 1, got {self.replica_staleness!r}")
        if self.replicate and self.plan != "auto":
            raise ValueError(f"ps.replicate copies hot rows in the planner's plan: set ps.plan = \"auto\", or make a "
                             f"plan file with `cardinal plan RECIPE --set ps.replicate=... --out FILE` and train with "
                             f"ps.plan = FILE alone (ps.plan is {self.plan!r})")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"ps.metrics_port must be a port, 0 (a free one) or -1 (none), got {self.metrics_port}")
        self.budget()
        parse_bytes(self.disk_budget, "ps.disk_budget")
        if parse_bytes(self.disk_budget, "ps.disk_budget") and not self.budget():
            raise ValueError("ps.disk_budget needs ps.memory_budget: rows go to disk when RAM is past its budget")
        object.__setattr__(self, "disk_dir", expand(self.disk_dir))

    def budget(self) -> int:
        """ps.memory_budget in bytes (a share of the machine's memory resolved here)."""
        value = self.memory_budget
        if isinstance(value, str) and value.strip().endswith("%"):
            try:
                share = float(value.strip()[:-1]) / 100
            except ValueError:
                share = -1.0
            if not 0 < share <= 1:
                raise ValueError(f"ps.memory_budget as a share must be in (0%, 100%], got {value!r}")
            return int(share * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        return parse_bytes(value, "ps.memory_budget")

    def store_limits(self, shares: int = 1):
        """The limits of one store; ``shares`` stores (embedded shards) split the memory budget."""
        from cardinal.ps.limits import StoreLimits

        return StoreLimits(max_rows=self.max_rows, max_new_rows_per_request=self.max_new_rows_per_request,
                           request_window=self.request_window, max_clients=self.max_clients,
                           client_idle_s=self.client_idle_s, max_step_ahead=self.max_step_ahead,
                           memory_budget=self.budget() // shares,
                           disk_budget=parse_bytes(self.disk_budget, "ps.disk_budget") // shares,
                           max_gradient=self.max_gradient)

    def token(self) -> str:
        """The job's token: $CARDINAL_TOKEN, else the contents of ps.token_file."""
        token = os.environ.get("CARDINAL_TOKEN") or (Path(self.token_file).read_text().strip() if self.token_file else "")
        if not token:
            raise ValueError("no job token: set CARDINAL_TOKEN or ps.token_file (servers refuse requests without one)")
        return token


@dataclass(frozen=True)
class WireConfig:
    """Codecs (cardinal/codecs) per direction, on every transport (in-process too, so a recipe
    gives the same numbers embedded and over gRPC); servers keep float32 and full optimizer state."""
    pull: str = "fp32"            # rows pulled: "fp32", "fp16", "bf16" (half the bytes) or "int8" (a scale a row)
    push: str = "fp32"            # gradients pushed: the same choices

    def __post_init__(self):
        for key in ("pull", "push"):
            if getattr(self, key) not in CODECS:
                raise ValueError(f"wire.{key} must be one of {list(CODECS)}, got {getattr(self, key)!r}")


@dataclass(frozen=True)
class TrainConfig:
    name: str = "run"             # the run directory's name: run_dir/name-YYYYmmdd-HHMMSS
    epochs: int = 1               # passes over the training data (a total: on --resume, from the run's start)
    steps: int = 0                # stop after this many steps (0: run the epochs; a total, as epochs)
    eval_every: int = 0           # steps between evaluations, counted over epochs (0: at the end only)
    early_stop: str = "auc"       # stop when eval "auc" or "logloss" has not improved for `patience` evaluations;
                                  # "none": never stop early (the best model is then judged by AUC)
    patience: int = 3             # evaluations without an improvement of more than min_delta
    min_delta: float = 0.0        # the least gain that counts as an improvement
    keep_best: bool = True        # checkpoint at each evaluation that improves; kept beside the newest
                                  # (checkpoints/best.json names it; eval and the summary use it)
    baseline: str = "lr"          # "lr": train logistic regression on the same batches and report it beside the
                                  # model (its own tables lr_*, on the same servers); "none": no baseline
    log_every: int = 10           # steps between lines of metrics.jsonl
    checkpoint_every: int = 0     # steps between checkpoints (0: none by steps)
    checkpoint_minutes: float = 10.0  # minutes between checkpoints, by worker 0's clock (0: none by time);
                                      # a run always saves at its end and on SIGINT / SIGTERM. A save is a
                                      # barrier (no pull ahead), so in async mode the steps it falls on change
                                      # the numbers: set 0 for runs that must repeat bit for bit
    keep_checkpoints: int = 1     # the newest this many are kept; the best one is kept besides (and every
                                  # checkpoint a kept delta applies on)
    full_every: int = 1           # one checkpoint in this many is full; the others are deltas: the rows pulled or
                                  # pushed since the previous checkpoint and the ids deleted since (1: all full)
    run_dir: str = "runs"         # the folder that holds one directory per run
    seed: int = 0                 # torch's seed (dense weights) and the data order where it is shuffled
    # One thread budget for the worker (train/threads.py): torch's intra-op threads, Cardinal's
    # kernel threads (dedup, pooling, the embedded shards' pull/push) and numba's all get it; the
    # phases of a step take turns, so they share the cores without oversubscribing them. 0: the
    # cores this worker may use (OMP_NUM_THREADS when a launcher split the machine, else its CPU
    # affinity). The batch prefetcher adds one thread outside the budget.
    threads: int = 0
    tensorboard: bool = False     # also write loss, samples/s, eval AUC and logloss for TensorBoard
    metrics_port: int = -1        # each worker serves Prometheus metrics (GET /metrics) at this port + its rank, updated
                                  # every log_every steps; 0: a free port (printed); -1: none
    metrics_host: str = "127.0.0.1"  # where workers' metrics listen (0.0.0.0: every interface, for a scraper elsewhere)
                                  # (RUN_DIR/tensorboard; needs `pip install tensorboard`)
    device: str = "auto"          # where the dense model, pooling and the loss run: "cpu", "cuda" (an error without
                                  # a GPU), or "auto" (cuda when torch sees a GPU, else cpu); embedding rows stay
                                  # on the servers and dedup on the CPU either way (worker/device.py)

    def __post_init__(self):
        if self.epochs < 1 or self.steps < 0 or self.eval_every < 0 or self.checkpoint_every < 0:
            raise ValueError("train.epochs must be >= 1; steps, eval_every, checkpoint_every >= 0")
        if self.keep_checkpoints < 1 or self.log_every < 1 or self.full_every < 1:
            raise ValueError("train.keep_checkpoints, train.log_every and train.full_every must be >= 1")
        if not -1 <= self.metrics_port <= 65535:
            raise ValueError(f"train.metrics_port must be a port, 0 (a free one) or -1 (none), got {self.metrics_port}")
        if not 0 <= self.checkpoint_minutes < float("inf"):
            raise ValueError(f"train.checkpoint_minutes must be >= 0 (0: no checkpoints by time), "
                             f"got {self.checkpoint_minutes}")
        if self.threads < 0:
            raise ValueError(f"train.threads must be >= 0 (0: the cores this worker may use), got {self.threads}")
        if self.early_stop not in ("auc", "logloss", "none"):
            raise ValueError(f"train.early_stop must be 'auc', 'logloss' or 'none', got {self.early_stop!r}")
        if self.patience < 1:
            raise ValueError(f"train.patience must be >= 1 (evaluations without improvement), got {self.patience}")
        if not (self.min_delta >= 0 and math.isfinite(self.min_delta)):
            raise ValueError(f"train.min_delta must be a finite number >= 0, got {self.min_delta}")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"train.device must be 'cpu', 'cuda' or 'auto', got {self.device!r}")
        if self.baseline not in ("lr", "none"):
            raise ValueError(f"train.baseline must be 'lr' or 'none', got {self.baseline!r}")


@dataclass(frozen=True)
class Recipe:
    data: DataConfig = field(default_factory=DataConfig)
    model: dict = field(default_factory=lambda: {"name": "deepfm"})
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    sparse_optimizer: dict = field(default_factory=lambda: {"name": "rowwise_adagrad"})
    dense_optimizer: DenseOptimizerConfig = field(default_factory=DenseOptimizerConfig)
    ps: PSConfig = field(default_factory=PSConfig)
    wire: WireConfig = field(default_factory=WireConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    eviction: EvictionConfig = field(default_factory=EvictionConfig)

    def __post_init__(self):
        name = self.sparse_optimizer.get("name")
        if name not in SPARSE_OPTIMIZERS:
            raise ValueError(f"sparse_optimizer.name must be one of {list(SPARSE_OPTIMIZERS)}, got {name!r}")
        check_model(self.model)
        from cardinal.optim import make_optimizer  # numba: only once the names are known good

        make_optimizer(self.sparse_optimizer)
        if self.embedding.compensation == "lr" and self.sparse_optimizer.get("name") == "ftrl":
            raise ValueError("embedding.compensation = 'lr' does not apply to sparse_optimizer ftrl (its lr rescales "
                             "the whole weight, not one step); use embedding.compensation = 'none'")
        if self.embedding.chunks > 1 and self.train.full_every > 1:
            raise ValueError("embedding.chunks > 1 with train.full_every > 1: each pass over the chunks changes rows "
                             "no push touched, which a delta checkpoint would miss; set train.full_every = 1")
        if self.embedding.saec_ratio and self.train.full_every > 1:
            raise ValueError("embedding.saec_ratio with train.full_every > 1: a clustered table is saved whole (its "
                             "clustering changes every row at once); set train.full_every = 1")
        if self.embedding.saec_ratio and self.cache.capacity:
            raise ValueError("embedding.saec_ratio with cache.bytes > 0: a worker cache keeps rows by id, and a push "
                             "to one id of a cluster changes every id's row; set cache.bytes = 0")
        if self.embedding.saec_ratio and name == "ftrl":
            raise ValueError("embedding.saec_ratio with sparse_optimizer ftrl: a cluster row starts from its "
                             "members' summed state, and FTRL's weights are a function of its state (z, n), not the "
                             "centroid; use another sparse optimizer")
        if self.embedding.consistency == "geo" and self.embedding.geo_interval > self.ps.max_step_ahead:
            raise ValueError(f"embedding.geo_interval = {self.embedding.geo_interval} is past ps.max_step_ahead = "
                             f"{self.ps.max_step_ahead}: a GEO worker's pushes are that many steps apart, and servers "
                             "refuse a step further than ps.max_step_ahead past the last; raise ps.max_step_ahead")
        if self.cache.capacity and self.embedding.consistency == "geo":
            raise ValueError("cache.bytes > 0 with embedding.consistency = 'geo': a GEO replica holds its rows on the "
                             "worker already; set cache.bytes = 0 or another consistency")

    def to_dict(self) -> dict:
        return asdict(self)


def check_model(spec: dict) -> None:
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in MODEL_NAMES:
        raise ValueError(f"model.name must be one of {sorted(MODEL_NAMES)}, got {name!r}")
    from cardinal.model_traits import MODELS  # no torch: servers load recipes too

    params = list(MODELS[name].settings)
    for key in spec:
        if key not in params:
            raise ValueError(f"model {name!r} has no setting {key!r}; it takes {params}")


def build(cls, values: dict, where: str):
    """A config dataclass from a dict, naming any unknown or mistyped key as ``where.key``."""
    if not isinstance(values, dict):
        raise ValueError(f"[{where}] must be a table, got {values!r}")
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in values.items():
        f = known.get(key)
        if f is None:
            raise ValueError(f"unknown setting {where}.{key}; [{where}] takes {sorted(known)}")
        nested = f.default_factory() if f.default_factory is not MISSING else None
        if is_dataclass(nested):
            value = build(type(nested), value, f"{where}.{key}")
        else:
            if f.type == list[str] and isinstance(value, str):
                value = as_list(value)
            _check_type(f.type, value, f"{where}.{key}")
        kwargs[key] = value
    return cls(**kwargs)


def as_list(text: str) -> list[str]:
    """A file list written as one string: ``a.tsv``, ``a.tsv,b.tsv`` or ``[a.tsv,b.tsv]`` (what bash
    leaves of ``["a.tsv","b.tsv"]`` once it strips the quotes). A path holding a comma needs the
    TOML list with quoted strings, ``'data.train=["a,b.tsv"]'``, which arrives here as a list."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = (item.strip() for item in text.split(","))
    return [item[1:-1] if len(item) > 1 and item[0] == item[-1] and item[0] in "'\"" else item
            for item in items if item]


def _check_type(expected, value, name: str) -> None:
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str),
          list[str]: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}.get(expected)
    if ok is not None and not ok(value):
        raise ValueError(f"{name} must be {getattr(expected, '__name__', expected)}, got {value!r}")


def parse_override(text: str) -> tuple[list[str], object]:
    """``section.key=value`` -> (["section", "key"], value); the value is TOML, else a string."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise ValueError(f"--set takes section.key=value, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path.strip().split("."), value


def shipped() -> list[str]:
    """The names of the recipes that come with Cardinal (``cardinal train NAME``)."""
    return sorted(q.stem for q in RECIPES.glob("*.toml"))


def describe(name: str) -> str:
    """A shipped recipe's first comment line (what it trains)."""
    for line in (RECIPES / f"{name}.toml").read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def load(path: str | Path | None = None, overrides: list[str] = ()) -> Recipe:
    """A recipe from a TOML file (a name from the shipped recipes, or a path) plus overrides."""
    raw = {}
    if path is not None:
        p = Path(path)
        if not p.exists() and (RECIPES / f"{path}.toml").exists():
            p = RECIPES / f"{path}.toml"
        if not p.exists():
            raise ValueError(f"recipe {path!r} not found (a path, or one of {shipped()})")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"recipe {p} is not valid TOML: {e}") from None
    return load_dict(raw, overrides)


def load_dict(raw: dict, overrides: list[str] = ()) -> Recipe:
    """A recipe from a dict (a parsed TOML file, a run's recipe.json) plus overrides."""
    raw = copy.deepcopy(raw)
    parsed = [parse_override(text) + (text,) for text in overrides]
    # a new model or sparse optimizer name first: the recipe's settings for the old one do not carry over
    named = (["model", "name"], ["sparse_optimizer", "name"])
    parsed.sort(key=lambda p: p[0] not in named)
    for keys, value, text in parsed:
        if keys in named and raw.get(keys[0], {}).get("name") != value:
            raw[keys[0]] = {}
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {text}: {k} is a value, not a section")
        node[keys[-1]] = value
    return from_dict(raw)


def from_dict(raw: dict) -> Recipe:
    sections = {f.name for f in fields(Recipe)}
    for key in raw:
        if key not in sections:
            raise ValueError(f"unknown recipe section [{key}]; sections are {sorted(sections)}")
    kwargs = {}
    for f in fields(Recipe):
        if f.name not in raw:
            continue
        value = raw[f.name]
        if f.name in ("model", "sparse_optimizer"):
            if not isinstance(value, dict):
                raise ValueError(f"[{f.name}] must be a table")
            kwargs[f.name] = {**f.default_factory(), **value}
        else:
            kwargs[f.name] = build(type(f.default_factory()), value, f.name)
    return Recipe(**kwargs)
