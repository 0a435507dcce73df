"""``Recipe``: every section, and the checks that need two of them (a compression and the
tables' shape, a consistency mode and the servers' limits, ...). Each section checks its own
keys (one file each in this package)."""

from dataclasses import dataclass, field

from cardinal.recipe.build import as_dict
from cardinal.recipe.cache import CacheConfig
from cardinal.recipe.checkpoint import CheckpointConfig
from cardinal.recipe.compression import CompressionConfig
from cardinal.recipe.consistency import ConsistencyConfig
from cardinal.recipe.data import DataConfig
from cardinal.recipe.dense_optimizer import DenseOptimizerConfig
from cardinal.recipe.embedding import EmbeddingConfig
from cardinal.recipe.eval import EvalConfig
from cardinal.recipe.metrics import MetricsConfig
from cardinal.recipe.model import SPARSE_OPTIMIZERS, check_model
from cardinal.recipe.plan import PlanConfig
from cardinal.recipe.ps import PSConfig
from cardinal.recipe.train import TrainConfig
from cardinal.recipe.wire import WireConfig


@dataclass(frozen=True)
class Recipe:
    data: DataConfig = field(default_factory=DataConfig, metadata={"help": "where batches come from"})
    model: dict = field(default_factory=lambda: {"name": "deepfm"}, metadata={
        "help": "name + that model's own arguments (checked against its signature)"})
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig, metadata={
        "help": "the tables' shape: dim (dims per table), pooling, which fields share a table"})
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig, metadata={
        "help": "what a pull sees of earlier pushes; a sub-table per mode"})
    compression: CompressionConfig = field(default_factory=CompressionConfig, metadata={
        "help": "row formats, the hashing trick, FIITED, Saec"})
    sparse_optimizer: dict = field(default_factory=lambda: {"name": "rowwise_adagrad"}, metadata={
        "help": "name + that optimizer's hyper-parameters (server side)"})
    dense_optimizer: DenseOptimizerConfig = field(default_factory=DenseOptimizerConfig, metadata={
        "help": "worker side, torch.optim"})
    ps: PSConfig = field(default_factory=PSConfig, metadata={
        "help": "the parameter servers: shards or addresses, auth, limits, memory"})
    plan: PlanConfig = field(default_factory=PlanConfig, metadata={"help": "where each table's rows live"})
    wire: WireConfig = field(default_factory=WireConfig, metadata={
        "help": "how rows and gradients cross to the servers (codecs)"})
    cache: CacheConfig = field(default_factory=CacheConfig, metadata={"help": "the worker cache of hot rows"})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"help": "steps, seed, device, run directory"})
    eval: EvalConfig = field(default_factory=EvalConfig, metadata={"help": "evaluation cadence, early stopping"})
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig, metadata={
        "help": "checkpoint cadence, how many are kept, deltas"})
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata={
        "help": "metrics.jsonl, TensorBoard, the workers' Prometheus endpoints"})

    def __post_init__(self):
        name = self.sparse_optimizer.get("name")
        if name not in SPARSE_OPTIMIZERS:
            raise ValueError(f"sparse_optimizer.name must be one of {list(SPARSE_OPTIMIZERS)}, got {name!r}")
        check_model(self.model)
        from cardinal.optim import make_optimizer  # numba: only once the names are known good

        make_optimizer(self.sparse_optimizer)
        self._check_compression(name)
        c = self.consistency
        if c.async_.compensation == "lr" and name == "ftrl":
            raise ValueError("consistency.async.compensation = 'lr' does not apply to sparse_optimizer ftrl (its lr "
                             "rescales the whole weight, not one step); use consistency.async.compensation = 'none'")
        if c.mode == "geo" and c.geo.interval > self.ps.limits.max_step_ahead:
            raise ValueError(f"consistency.geo.interval = {c.geo.interval} is past ps.limits.max_step_ahead = "
                             f"{self.ps.limits.max_step_ahead}: a GEO worker's pushes are that many steps apart, and "
                             "servers refuse a step further than ps.limits.max_step_ahead past the last; raise "
                             "ps.limits.max_step_ahead")
        if self.cache.capacity and c.mode == "geo":
            raise ValueError("cache.bytes > 0 with consistency.mode = 'geo': a GEO replica holds its rows on the "
                             "worker already; set cache.bytes = 0 or another consistency")

    def _check_compression(self, optimizer: str) -> None:
        e, fiited, saec = self.embedding, self.compression.fiited, self.compression.saec
        if e.dims and fiited.chunks > 1:
            raise ValueError("embedding.dims with compression.fiited.chunks > 1 is not supported (the chunks split "
                             "one dim for every table); set compression.fiited.chunks = 1 or drop embedding.dims")
        if e.dims and saec.ratio:
            raise ValueError("embedding.dims with compression.saec.ratio is not supported (clustered training "
                             "assumes one dim for every table); set compression.saec.ratio = 0 or drop embedding.dims")
        if e.dim % fiited.chunks:
            raise ValueError(f"compression.fiited.chunks must divide embedding.dim = {e.dim}, got {fiited.chunks}")
        if fiited.chunks > 1 and self.checkpoint.full_every > 1:
            raise ValueError("compression.fiited.chunks > 1 with checkpoint.full_every > 1: each pass over the chunks "
                             "changes rows no push touched, which a delta checkpoint would miss; set "
                             "checkpoint.full_every = 1")
        if not saec.ratio:
            return
        if self.consistency.mode == "geo":
            raise ValueError("compression.saec.ratio with consistency.mode = 'geo': a GEO replica trains each id's "
                             "own row on the worker, not its cluster's; use another consistency")
        if self.checkpoint.full_every > 1:
            raise ValueError("compression.saec.ratio with checkpoint.full_every > 1: a clustered table is saved whole "
                             "(its clustering changes every row at once); set checkpoint.full_every = 1")
        if self.cache.capacity:
            raise ValueError("compression.saec.ratio with cache.bytes > 0: a worker cache keeps rows by id, and a push "
                             "to one id of a cluster changes every id's row; set cache.bytes = 0")
        if optimizer == "ftrl":
            raise ValueError("compression.saec.ratio with sparse_optimizer ftrl: a cluster row starts from its "
                             "members' summed state, and FTRL's weights are a function of its state (z, n), not the "
                             "centroid; use another sparse optimizer")

    def to_dict(self) -> dict:
        """Every key by its recipe name (what RUN/recipe.json holds; ``from_dict`` reads it back)."""
        return as_dict(self)
