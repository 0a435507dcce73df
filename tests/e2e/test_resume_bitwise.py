"""Resume is bitwise: a run stopped after a checkpoint and resumed ends with the tables and the
dense model (the lr baseline's too) of the run that went straight on, for every variant that
keeps state a checkpoint must carry: each consistency, delta checkpoints, a worker cache, Saec
clustering before and after the save, a dim per table, a memory budget that evicts, a disk tier,
every regulariser, the baseline. A variant stops either at its own ``train.steps`` (and saves at
the end) or dies right after its periodic save (``crash``). Process and launch variants (Ctrl-C,
SIGTERM, a restarted job) are in test_interrupt.py and test_distributed.py."""

import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest
import torch

from cardinal.checkpoint import layout
from cardinal.train import Trainer
from cardinal.train.summary import summary_line
from helpers.recipes import tiny_recipe
from helpers.runs import same, state

pytestmark = pytest.mark.slow  # whole runs: outside `pytest -m "not slow"`


@dataclass
class Variant:
    flags: list[str]             # over the tiny recipe; "{run}" is the run's directory
    stop: int                    # the resumed run's first part ends after its checkpoint of this step
    end: int                     # train.steps of the straight and the resumed run
    tables: tuple = ("emb", "lr_emb")
    crash: bool = False          # die right after the save at `stop` (else: a run of `stop` steps)
    check: Callable = field(default=lambda straight, resumed, tmp_path: None)  # what else the variant guards
    check_stopped: Callable = field(default=lambda run_dir: None)  # what its stopped run left


@dataclass
class Finished:
    trainer: Trainer
    summary: dict


def consistency_checks(straight, resumed, tmp_path):
    assert (resumed.trainer.epoch, resumed.trainer.batch_in_epoch) == (1, 5)
    again = Trainer(resumed.trainer.recipe, tmp_path / "resumed", progress=False)
    assert again.fit(resume=True)["steps"] == 17  # already done: nothing more is trained
    assert same(state(straight.trainer), state(again))
    again.close()


def delta_bases(run_dir):
    root = run_dir / "checkpoints"
    bases = {k: json.loads((layout.step_dir(root, k) / "commit.json").read_text()).get("base")
             for k in layout.committed_steps(root)}
    assert bases == {3: None, 6: 3, 9: 6, 10: None}  # the end of a run saves in full after two deltas


def cache_checks(straight, resumed, tmp_path):
    """A checkpoint flushes the cache and drops it, so the run after it starts as the resumed one does."""
    assert straight.summary["cache_emb_hit_rate_unique"] > 0


def saec_checks(straight, resumed, tmp_path):
    every = np.concatenate([st.tables["emb"].export()["ids"] for st in straight.trainer.client.transport.stores])
    np.testing.assert_array_equal(straight.trainer.client.pull("emb", every, create=False).wait(),
                                  resumed.trainer.client.pull("emb", every, create=False).wait())


def memory_checks(straight, resumed, tmp_path):
    s = straight.summary
    assert s["ps_emb_evicted_budget"] > 0 and s["ps_emb_refused"] > 0 and s["ps_emb_evicted_ttl_steps"] > 0
    logged = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert any("ps_emb_evicted_budget" in r for r in logged)
    assert resumed.summary["ps_emb_evicted_budget"] > 0


def disk_checks(straight, resumed, tmp_path):
    assert straight.summary["ps_disk_rows"] > 0 and resumed.summary["ps_disk_rows"] > 0  # rows went to disk...
    assert straight.summary["ps_emb_faulted"] > 0                                       # ...and came back


def regulariser_checks(straight, resumed, tmp_path):
    lr = [g["lr"] for g in resumed.trainer.optimizer.param_groups]  # the lr schedule follows the step
    assert lr == [pytest.approx(resumed.trainer.schedule.lr(17), rel=1e-12)] * len(lr)


def baseline_checks(straight, resumed, tmp_path):
    a, b = straight.trainer.baseline.optimizer.state_dict(), resumed.trainer.baseline.optimizer.state_dict()
    assert all(torch.equal(a["state"][k]["exp_avg"], b["state"][k]["exp_avg"]) for k in a["state"])
    assert "lr baseline AUC" in summary_line(json.loads((tmp_path / "resumed" / "summary.json").read_text()))


# a memory budget that evicts every step (3 shards of ~330 KB fixed state, 1100 KiB in all:
# test_budget_floods.py), a disk tier that holds most rows (560 KiB of RAM)
MEMORY = ["ps.shards=3", 'consistency.mode="sync"', 'ps.memory.admission.policy="count"', "ps.memory.admission.threshold=2",
          'ps.memory.budget="1100KiB"', "ps.memory.eviction.ttl_steps=1", "ps.memory.eviction.every=3", "train.epochs=3"]
DISK = ["ps.shards=3", 'consistency.mode="sync"', "train.epochs=2", 'ps.memory.budget="560KiB"',
        'ps.memory.disk_budget="1GiB"', "ps.memory.eviction.protect_steps=0", 'ps.memory.disk_dir="{run}/tiers"']
REGULARISERS = ["sparse_optimizer.l2=1e-3", "embedding.clip_ratio=1.0", "embedding.clip_min=1e-4", "model.dropout=0.3",
                "dense_optimizer.warmup_steps=5", 'dense_optimizer.decay="cosine"', "dense_optimizer.min_lr_ratio=0.1"]
LEARNS = ["ps.shards=3", "data.synthetic.vocab=30", "train.epochs=3", "dense_optimizer.lr=0.01", "eval.every=12"]
SAEC = ["ps.shards=2", "train.epochs=2", "compression.saec.ratio=4", 'consistency.mode="sync"']
MIXED = ["ps.shards=2", "embedding.dim=16", "embedding.shared=false", "embedding.dims={C5=32}", "train.epochs=2"]

VARIANTS = {
    **{c: Variant(["ps.shards=3", f'consistency.mode="{c}"', "train.epochs=3", "checkpoint.every=7"],
                  7, 17, check=consistency_checks) for c in ("async", "sync", "geo")},
    "delta checkpoints": Variant(["ps.shards=3", 'consistency.mode="sync"', "train.epochs=3",
                                  "checkpoint.every=3", "checkpoint.full_every=3", "checkpoint.keep=2",
                                  "eval.keep_best=false"], 10, 20, check_stopped=delta_bases),
    **{f"cache {c}": Variant(["ps.shards=3", f'consistency.mode="{c}"', "train.epochs=3",
                              "checkpoint.every=7", 'cache.bytes="1MiB"', "cache.staleness=2"],
                             7, 17, check=cache_checks) for c in ("async", "sync")},
    # clustered before the checkpoint, and after it
    **{f"saec at {at}": Variant([*SAEC, f"compression.saec.at={at}", "checkpoint.every=7"], 7, 14,
                                check=saec_checks) for at in (5, 9)},
    "mixed dims": Variant([*MIXED, "checkpoint.every=7"], 7, 17, tables=("C5", "C6", "C1", "lr_C5")),
    "memory budget": Variant([*MEMORY, "checkpoint.every=7"], 7, 20, check=memory_checks),
    "disk tier": Variant([*DISK, "checkpoint.every=7"], 7, 17, check=disk_checks),
    "every regulariser": Variant(["ps.shards=2", "train.epochs=3", *REGULARISERS, "checkpoint.every=7"], 7, 17,
                                 crash=True, check=regulariser_checks),
    "lr baseline": Variant([*LEARNS, "checkpoint.every=5"], 10, 17, check=baseline_checks),
}


class Crash(Exception):
    pass


def run(tmp_path, name: str, v: Variant, steps: int, monkeypatch=None, resume=False) -> Finished:
    flags = [f.replace("{run}", str(tmp_path / name)) for f in v.flags]
    trainer = Trainer(tiny_recipe(tmp_path, *flags, f"train.steps={steps}"), tmp_path / name, progress=False)
    if monkeypatch is not None:  # the process dies right after its checkpoint of `v.stop`
        save = trainer.save

        def save_then_crash():
            step = save()
            if step == v.stop:
                raise Crash
            return step
        monkeypatch.setattr(trainer, "save", save_then_crash)
        with pytest.raises(Crash):
            trainer.fit()
        return Finished(trainer, {})
    return Finished(trainer, trainer.fit(resume=resume))


@pytest.mark.parametrize("name", VARIANTS)
def test_a_resumed_run_is_bitwise_the_run_that_went_straight_on(tmp_path, monkeypatch, name):
    v = VARIANTS[name]
    straight = run(tmp_path, "straight", v, v.end)
    first = run(tmp_path, "resumed", v, v.end, monkeypatch) if v.crash else run(tmp_path, "resumed", v, v.stop)
    first.trainer.close()
    v.check_stopped(tmp_path / "resumed")
    resumed = run(tmp_path, "resumed", v, v.end, resume=True)
    assert resumed.summary["steps"] == v.end
    assert same(state(straight.trainer, v.tables), state(resumed.trainer, v.tables))
    a, b = straight.trainer.baseline.model.state_dict(), resumed.trainer.baseline.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # the lr baseline's dense layer
    v.check(straight, resumed, tmp_path)
    straight.trainer.close()
    resumed.trainer.close()
