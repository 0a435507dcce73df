"""What a recipe builds for a worker: its share of the data, the model, the servers' client,
where embedding rows come from, and the dense optimizer with its schedule.

Apart from the loop (``trainer.py``) so that reading how a recipe becomes parts needs no
reading of how steps run. Each function takes what it needs, not the trainer; the trainer calls
them after seeding torch, so the model's initial weights follow ``train.seed``.
"""

import math
from dataclasses import replace
from pathlib import Path

import torch

from cardinal import planner
from cardinal.models import MODELS
from cardinal.models.projection import with_projections
from cardinal.ps import PSClient, connect
from cardinal.ps.limits import store_limits
from cardinal.recipe import Recipe
from cardinal.recipe.data import DataConfig
from cardinal.recipe.dense_optimizer import DENSE_OPTIMIZERS
from cardinal.train import tables
from cardinal.train.readers import make_readers
from cardinal.train.schedule import DenseSchedule
from cardinal.train.workers import Workers
from cardinal.worker import EmbeddingCollection
from cardinal.worker.clip import CowClip
from cardinal.worker.layouts import Layouts
from cardinal.worker.sources import GeoReplica, PSSource
from cardinal.worker.sources.cache import CachedSource


def global_data(recipe: Recipe, world: int) -> DataConfig:
    """The data section with the global batch: batch_size, or W x batch_size per worker."""
    if recipe.data.batch_scope == "global":
        return recipe.data
    return replace(recipe.data, batch_size=recipe.data.batch_size * world)


def readers(recipe: Recipe, workers: Workers, progress: bool):
    """(train, eval, data info) of this worker's share; worker 0 generates the data set first."""
    if not workers.leader:
        workers.barrier()
    train_data, eval_data, info = make_readers(global_data(recipe, workers.world), recipe.train.seed, progress,
                                               share=(workers.rank, workers.world))
    if workers.world > 1 and getattr(train_data, "bad", None) is not None:
        train_data.bad.min_rows = math.inf  # a share's count alone decides nothing: see Trainer._check_bad_rows
    if workers.leader:
        workers.barrier()
    return train_data, eval_data, info


def model(recipe: Recipe, train_data) -> torch.nn.Module:
    """The recipe's model, with projections where its tables differ in width (``models/projection.py``)."""
    spec = dict(recipe.model)
    model_cls = MODELS[spec.pop("name")]
    return with_projections(model_cls(len(train_data.dense_fields), len(list(train_data.sparse_fields)),
                                      recipe.embedding.dim, **spec), tables.features(recipe), tables.table_dims(recipe))


def dense_lr(recipe: Recipe, world: int) -> float:
    """The recipe's dense lr; times sqrt(W) with per-worker batches and lr_scaling = "sqrt"
    (the global batch grew W times; the sparse lr stays, as CowClip advises)."""
    d, scale = recipe.dense_optimizer, 1.0
    if recipe.data.batch_scope == "worker" and d.lr_scaling == "sqrt":
        scale = math.sqrt(world)
    return d.lr * scale


FUSED_ON_CUDA = ("adam", "sgd")  # torch.optim's fused CUDA kernels: one launch for every parameter


def dense_optimizer(recipe: Recipe, model: torch.nn.Module, world: int) -> torch.optim.Optimizer:
    """The dense optimizer over ``model`` (already on its device), on torch's fused kernels. On
    CUDA where torch has them: the per-parameter loop cost 6.6 ms of host time a step on an H100
    (``benchmarks/step_profile.py``), several times the GPU's own work. On the CPU every optimizer
    here has one (one parallel region a parameter, not a dozen elementwise ops, each a region whose
    waits dominated the step on a busy 2-core machine): Adam over the default recipe's model 105 us
    a step against 300 foreach and 353 in the loop, and whole runs 1.01-1.07x as fast
    (``benchmarks/dense_optimizer.py``). Its bits differ from the loop's by an ulp here and there,
    but not with the thread count (``tests/train/test_dense_optimizer.py``)."""
    d = recipe.dense_optimizer
    params = list(model.parameters())
    on_cuda = bool(params) and params[0].is_cuda
    path = {} if on_cuda and d.name not in FUSED_ON_CUDA else {"fused": True}
    return getattr(torch.optim, DENSE_OPTIMIZERS[d.name])(params, lr=dense_lr(recipe, world),
                                                          weight_decay=d.weight_decay, **path)


PATH_KEYS = ("fused", "foreach")  # how torch.optim runs a step: chosen here, not by a checkpoint


def load_dense_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """``optimizer.load_state_dict(state)``, keeping the kernel path it was built with: torch takes
    whole param groups from the state, so a checkpoint saved on foreach (or on the CPU, fused where
    this device has no fused kernel) would otherwise set how this run steps."""
    built = [{k: g[k] for k in PATH_KEYS if k in g} for g in optimizer.param_groups]
    optimizer.load_state_dict(state)
    for group, path in zip(optimizer.param_groups, built):
        group.update(path)


def schedule(recipe: Recipe, data_info: dict, world: int) -> DenseSchedule:
    """The dense warmup and decay, over train.steps or the epochs' steps when the data knows them."""
    t, per_epoch = recipe.train, data_info["train_steps"]
    return DenseSchedule(recipe.dense_optimizer, dense_lr(recipe, world),
                         t.steps or (per_epoch * t.epochs if per_epoch else None))


def client(recipe: Recipe, workers: Workers, run_dir: Path) -> PSClient:
    """The servers' client, with the recipe's sharding plan (``cardinal/planner``; written to
    the run's plan.json when it is not the hash plan); servers are checked to hold what it says."""
    ps, codecs = recipe.ps, {"pull_codec": recipe.wire.pull, "push_codec": recipe.wire.push}
    plan = planner.resolve(tables.plan_inputs(recipe), len(ps.servers) or ps.shards,  # embedded shards split the budget
                           budget=None if ps.servers else ps.memory.budget_bytes() // ps.shards)
    record = run_dir / "plan.json"
    if workers.leader and not (plan.is_hash() and not plan.replicas) and \
            Path(recipe.plan.layout).resolve() != record.resolve():
        planner.write(plan, record)  # not the file the job reads (cardinal launch's): others read it now
    if ps.servers:  # how to reach the servers; else what this process's shard stores are made of
        where = {"servers": ps.servers, "job": ps.job, "token": ps.token(), "timeout": ps.timeout_s,
                 "tls_ca": ps.tls_ca or None, "max_message_mb": ps.limits.max_message_mb,
                 "calls": ps.limits.max_concurrent_calls, "worker": workers.rank, "workers": workers.world}
    else:
        where = {"concurrent": ps.concurrent, "lanes": ps.lanes or None, "inline": ps.inline,
                 "limits": store_limits(ps, ps.shards), "tier_dir": ps.memory.disk_dir}
    return connect(tables.store_config(recipe), ps.shards, plan=plan, **codecs, **where)


def source(recipe: Recipe, ps_client: PSClient, workers: Workers, consistency: str):
    """Where one collection's rows come from: the servers (with the in-flight window), or a GEO replica.
    ``consistency``: the mode the run trains in (``ConsistencyConfig.resolve``), whose sub-table it reads."""
    c, timeout = recipe.consistency, recipe.ps.timeout_s
    if consistency == "geo":
        return GeoReplica(ps_client, recipe.sparse_optimizer, c.geo.interval, timeout, wide=tables.wide(recipe))
    return PSSource(ps_client, c.max_in_flight, timeout, worker=workers.rank, workers=workers.world,
                    combine=c.of(consistency).combine,
                    compensate=consistency == "async" and c.async_.compensation == "lr")


def cached(recipe: Recipe, rows, device: torch.device):
    """The source behind a worker cache of hot rows when ``cache.bytes`` > 0 (worker/sources/cache.py)."""
    c = recipe.cache
    if not c.capacity:
        return rows
    dims = {t: tables.row_width(recipe, t) for t in set(tables.features(recipe).values())}
    return CachedSource(rows, dims, c.capacity, c.staleness, recipe.sparse_optimizer, c.hold, c.policy, c.admit_after,
                        device if c.device == "auto" else c.device, wide=tables.wide(recipe))  # auto: the worker's


def embedding(recipe: Recipe, ps_client: PSClient, workers: Workers, consistency: str, device: torch.device,
              staging) -> EmbeddingCollection:
    """The model's embedding collection: rows pulled ahead by ``consistency.async.staleness`` steps in async mode;
    with the `lr` baseline, its ``layouts`` (each batch's de-duplication) are the baseline's too (``baseline.py``)."""
    e = recipe.embedding
    staleness = recipe.consistency.async_.staleness if consistency == "async" else None
    return EmbeddingCollection(cached(recipe, source(recipe, ps_client, workers, consistency), device),
                               tables.features(recipe), e.pooling, staleness, timeout=recipe.ps.timeout_s,
                               clip=CowClip.from_config(e), staging=staging,
                               buckets=recipe.compression.hash_buckets,
                               layouts=Layouts() if tables.baseline(recipe) else None)
