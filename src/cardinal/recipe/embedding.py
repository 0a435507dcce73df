"""``[embedding]``: the tables' shape (width, pooling, which fields share a table, first values,
gradient clipping). How rows are stored and compressed is ``[compression]``; how workers and
servers agree on them is ``[consistency]``."""

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class EmbeddingConfig:
    dim: int = field(default=16, metadata={
        "help": "width of every embedding row, and of the models' input (fixed for a run: --resume cannot change "
                "it); a table of embedding.dims is projected to it"})
    dims: dict = field(default_factory=dict, metadata={
        "help": "per table, e.g. {C5 = 128}: that table's own dim (mixed-dimension embeddings; fixed for a run); "
                "its fields reach the model through a learned projection to dim (models/projection.py); the "
                "others, and lr_X, keep theirs"})
    pooling: str = field(default="sum", metadata={
        "help": 'how a field\'s several ids become one vector: "sum" or "mean"'})
    shared: bool = field(default=True, metadata={
        "help": "one table for all fields (ids never collide) or one per field"})
    field_tables: dict = field(default_factory=dict, metadata={
        "help": 'with shared = false, fields that read another table than their own, e.g. {C2 = "C1", C3 = "C1"}: '
                "their ids share its rows (a table several features look up, as an item table read by the item "
                "and the history fields)"})
    init_scale: float = field(default=0.01, metadata={
        "help": "a new row starts uniform in [-init_scale, init_scale]..."})
    seed: int = field(default=0, metadata={"help": "...drawn from this seed and its id (the same row on any shard)"})
    clip_ratio: float = field(default=0.0, metadata={
        "help": "CowClip (worker/clip.py): each id's gradient row to norm <= its uses in the batch"})
    clip_min: float = field(default=1e-5, metadata={
        "help": "x max(clip_ratio x |row|, clip_min); clip_ratio = 0: no clipping"})

    def __post_init__(self):
        if self.dim < 1:
            raise ValueError(f"embedding.dim must be >= 1, got {self.dim}")
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
            raise ValueError("embedding.field_tables needs embedding.shared = false (shared: every field reads 'emb'); "
                             "for one table over every field, drop the map too: --set embedding.field_tables={}")
        if self.pooling not in ("sum", "mean"):
            raise ValueError(f"embedding.pooling must be 'sum' or 'mean', got {self.pooling!r}")
        if not (0 <= self.clip_ratio < math.inf and 0 <= self.clip_min < math.inf):
            raise ValueError(f"embedding.clip_ratio and clip_min must be finite and >= 0, got {self.clip_ratio}, "
                             f"{self.clip_min}")
