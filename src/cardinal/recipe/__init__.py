"""Recipes: one TOML file, one small frozen dataclass per section (a file each here), every key
documented by its field's metadata, nothing accepted and ignored.

    [data]                 DataConfig          where batches come from ([data.synthetic]: the generated set)
    [model]                name + that model's own arguments (model.py)
    [embedding]            EmbeddingConfig     the tables' shape: dim, dims, pooling, shared tables, clipping
    [consistency]          ConsistencyConfig   sync / async / geo, a sub-table per mode
    [compression]          CompressionConfig   row formats, hashing, [compression.fiited], [compression.saec]
    [sparse_optimizer]     name + that optimizer's hyper-parameters (server side)
    [dense_optimizer]      DenseOptimizerConfig (worker side, torch.optim)
    [ps]                   PSConfig            the servers and how to reach them; [ps.limits], [ps.memory]
                                               (with [ps.memory.admission] and [ps.memory.eviction])
    [plan]                 PlanConfig          where each table's rows live
    [wire]                 WireConfig          how rows and gradients cross to the servers (codecs)
    [cache]                CacheConfig         the worker cache of hot rows (off by default)
    [train]                TrainConfig         steps, seed, threads, device, run directory, baseline
    [eval]                 EvalConfig          evaluation cadence, early stopping, the best model
    [checkpoint]           CheckpointConfig    checkpoint cadence, how many are kept, deltas
    [metrics]              MetricsConfig       metrics.jsonl, TensorBoard, Prometheus

An unknown section or key is an error that names it, and a key of the layout before issue 26
cut the sections by concern names its new place (``moved.py``). ``--set section.key=value``
overrides one value (``load.py``). A file list (``data.train``, ``data.eval``, ``ps.servers``)
takes a path, a comma list (``a.tsv,b.tsv``), a TOML list (``["a.tsv","b.tsv"]``) or that list
with its quotes stripped by the shell (``[a.tsv,b.tsv]``); a path holding a comma needs the
quoted TOML list. Loading a recipe imports no torch and no numba until the names are known good.
"""

from cardinal.recipe.load import from_dict, load, load_dict, parse_override
from cardinal.recipe.recipe import Recipe
from cardinal.recipe.shipped import RECIPES, describe, shipped

__all__ = ["RECIPES", "Recipe", "describe", "from_dict", "load", "load_dict", "parse_override", "shipped"]
