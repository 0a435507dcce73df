"""Delta chains that cannot be fooled (``checkpoint/chain.py``): the step directories of real tiny
runs copied from another run, edited and resealed, renamed onto their own base or swapped with a
neighbour. `cardinal eval` refuses each within a bounded time, naming the file; a trainer that refuses
one keeps every row and weight; `cardinal serve --follow` counts each as a failed reload, keeps serving
the old model's predictions, takes the run's real checkpoints after, and stops on SIGTERM at once."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from cardinal import cli
from cardinal.checkpoint import layout
from cardinal.checkpoint.chain import digest
from cardinal.serve.export import export_run, run_recipe
from cardinal.serve.follow import Follower
from cardinal.serve.model import ServingModel
from cardinal.train import Trainer
from cardinal.train.resume import resumed_recipe
from helpers.checkpoint_edit import edit_json, reseal
from helpers.recipes import tiny_recipe
from helpers.processes import reaped
from helpers.raw_http import poll_for
from test_serve_process import call, started

pytestmark = pytest.mark.slow
# 12 steps of run a and run b (another sparse lr): checkpoints 4 (full), 8 (a delta on 4), 12 (a delta on 8)
FLAGS = ("train.steps=12", "checkpoint.every=4", "checkpoint.full_every=3", "checkpoint.keep=10",
         'eval.early_stop="none"', "eval.keep_best=false")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chains")
    for name, lr in (("a", 0.05), ("b", 0.3)):
        trainer = Trainer(tiny_recipe(tmp, *FLAGS, f"sparse_optimizer.lr={lr}"), tmp / name, progress=False)
        trainer.fit()
        trainer.close()
    return tmp / "a", tmp / "b"


@pytest.fixture
def run(runs, tmp_path):
    """A copy of run a to break, and run b."""
    shutil.copytree(runs[0], tmp_path / "a")
    return tmp_path / "a", runs[1]


def at(run_dir, step):
    return layout.step_dir(run_dir / "checkpoints", step)


def base_from_another_run(a, b):  # run b's step 8, a delta base, copied over run a's
    shutil.rmtree(at(a, 8))
    shutil.copytree(at(b, 8), at(a, 8))
    return at(a, 12), at(a, 8) / "commit.json", "a checkpoint of run .* is of run"


def base_edited_and_resealed(a, b):  # run a's own step 8, its commit edited, every checksum recomputed
    edit_json(at(a, 8) / "commit.json", lambda c: c["extra"].update(note="edited"))
    reseal(at(a, 8))
    return at(a, 12), at(a, 8) / "commit.json", "not the checkpoint step-0000000012 was saved on"


def renamed_onto_its_base(a, b):  # step 8 deleted, step 12 (a delta on 8) renamed to step 8
    shutil.rmtree(at(a, 8))
    at(a, 12).rename(at(a, 8))
    return at(a, 8), at(a, 8) / "commit.json", "holds the checkpoint of step 12, but its directory is named for step 8"


def swapped(a, b):  # the directories of steps 8 and 12 swapped
    at(a, 8).rename(at(a, 0))
    at(a, 12).rename(at(a, 8))
    at(a, 0).rename(at(a, 12))
    return at(a, 12), at(a, 12) / "commit.json", "holds the checkpoint of step 8, but its directory is named for step 12"


def longer_than_full_every(a, b):  # step 12 (the second delta) says its run allowed one delta a chain
    edit_json(at(a, 12) / "commit.json", lambda c: c["run"].update(full_every=2))
    reseal(at(a, 12))
    return at(a, 12), at(a, 12) / "commit.json", "deltas lead to it from its full checkpoint, its run.s checkpoint.full_every = 2 allows 1"


def manifest_base_edited(a, b):  # a delta's shard manifest names another base than its commit
    manifest = sorted(at(a, 8).glob("shard-*/manifest.json"))[-1]
    edit_json(manifest, lambda m: m.update(base=0))
    reseal(at(a, 8))
    return at(a, 8), manifest, "base is 0, its commit marker says 4"


def own_step_as_base(a, b):  # a delta whose base is its own step
    edit_json(at(a, 12) / "commit.json", lambda c: c.update(base=12))
    reseal(at(a, 12))
    return at(a, 12), at(a, 12) / "commit.json", "base 12 must be the step of an earlier checkpoint"


EDITS = [base_from_another_run, base_edited_and_resealed, renamed_onto_its_base, swapped, longer_than_full_every,
         manifest_base_edited, own_step_as_base]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__ for e in EDITS])
def test_cardinal_eval_refuses_a_broken_chain_naming_the_file(run, edit):
    a, b = run
    path, named, says = edit(a, b)
    proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "eval", str(a), "--checkpoint", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped([proc]):
        out, err = proc.communicate(timeout=60)  # a chain walked forever would never return
    assert proc.returncode == 2 and out == "", (out, err[-3000:])
    assert len(err.strip().splitlines()) == 1, err[-3000:]
    assert re.search(f"{re.escape(str(named))}: .*{says}", err), err


@pytest.mark.parametrize("edit", [base_from_another_run, base_edited_and_resealed, longer_than_full_every],
                         ids=lambda e: e.__name__)
def test_a_trainer_that_refuses_a_chain_keeps_its_rows_and_weights(run, tmp_path, edit):
    a, b = run
    trainer = Trainer(run_recipe(a), tmp_path / "evaluator", progress=False)
    try:
        trainer.load(at(a, 4))
        tables = {name for st in trainer.client.stats() for name in st["tables"]}
        before = ({t: trainer.client.digest(t) for t in tables},
                  {k: v.clone() for k, v in trainer.model.state_dict().items()}, trainer.step)
        path, named, says = edit(a, b)
        with pytest.raises(ValueError, match=f"{re.escape(str(named))}: .*{says}"):
            trainer.load(path)
        assert {t: trainer.client.digest(t) for t in before[0]} == before[0] and trainer.step == before[2] == 4
        for k, v in trainer.model.state_dict().items():
            assert torch.equal(v, before[1][k])
    finally:
        trainer.close()


def test_a_resumed_run_keeps_its_id_and_its_deltas_name_their_base(run):
    """A resume's deltas are of the same run as the checkpoints before it, and record their base's digest."""
    a, _ = run
    resumed = Trainer(resumed_recipe(a, ["train.steps=16", "train.epochs=2"]), a, progress=False)
    resumed.fit(resume=True)
    resumed.close()
    commits = {s: json.loads((at(a, s) / "commit.json").read_text()) for s in (4, 8, 12, 16)}
    assert len({c["run"]["id"] for c in commits.values()}) == 1 and commits[16].get("base") is None  # 3 a chain
    assert commits[12]["base_sha256"] == digest(commits[8]) and commits[8]["base_sha256"] == digest(commits[4])


def from_before_run_ids(step_path):
    """The commit as a checkpoint written before this change has it: no run, no base digest."""
    edit_json(step_path / "commit.json", lambda c: [c.pop(k, None) for k in ("run", "base_sha256")])
    reseal(step_path)


def test_checkpoints_from_before_run_ids_load_when_full_and_are_refused_as_deltas(run, tmp_path):
    """A full one stands alone (every file checked by its crc32); nothing ties an old delta to its base.
    A run resumed from an old full checkpoint writes deltas that record it, and they load."""
    a, _ = run
    for step in (4, 8, 12):
        from_before_run_ids(at(a, step))
    trainer = Trainer(run_recipe(a), tmp_path / "evaluator", progress=False)
    try:
        assert trainer.load(at(a, 4))["step"] == 4
        with pytest.raises(ValueError, match=f"{re.escape(str(at(a, 12)))}/commit.json: a delta from before chains "
                                             "were verified"):
            trainer.load(at(a, 12))
        assert trainer.step == 4
    finally:
        trainer.close()
    shutil.rmtree(at(a, 8))
    shutil.rmtree(at(a, 12))
    resumed = Trainer(run_recipe(a), a, progress=False)
    resumed.fit(resume=True)  # from the old step 4: 8 and 12 are deltas on it, as before
    resumed.close()
    assert json.loads((at(a, 12) / "commit.json").read_text())["base"] == 8
    trainer = Trainer(run_recipe(a), tmp_path / "again", progress=False)
    try:
        assert trainer.load(at(a, 12))["step"] == 12
    finally:
        trainer.close()


# --- serve --follow, a real process ------------------------------------------------------------


def metric(text, name):
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def reloads(port, result):
    return metric(call(port, "/metrics")[1].decode(), f'cardinal_serve_reloads_total{{result="{result}"}}')


def put(source, target):
    """A checkpoint directory copied in at once (renamed into place), as a save commits one."""
    tmp = target.parent / f"incoming-{target.name}"
    shutil.copytree(source, tmp)
    tmp.rename(target)


@pytest.fixture
def serving(runs, tmp_path):
    """`cardinal serve` of run a's step 4, following a copy of run a that holds only step 4:
    (process, port, follow dir, a request, its answer)."""
    a, _ = runs
    follow = tmp_path / "follow"
    (follow / "checkpoints").mkdir(parents=True)
    shutil.copy(a / "recipe.json", follow / "recipe.json")
    put(at(a, 4), at(follow, 4))
    assert cli.main(["export", str(follow), "--out", str(tmp_path / "x")]) == 0
    line = next((a.parent / "data").glob("*/eval.tsv")).read_text().splitlines()[0]
    proc = subprocess.Popen([sys.executable, "-m", "cardinal.cli", "serve", str(tmp_path / "x"), "--port", "0",
                             "--follow", str(follow), "--poll", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped([proc]):
        port = started(proc)
        poll_for(lambda: call(port, "/readyz")[0] == 200, what="readiness")
        status, body = call(port, "/predict", {"labelled_rows": [line]})
        assert status == 200 and json.loads(body)["step"] == 4
        yield proc, port, follow, line, json.loads(body)


def test_a_follower_applies_deltas_only_over_the_very_commit_it_serves(runs, tmp_path):
    """Run b's steps 4 and 8 copied over the followed run's step 4 (served) and in as its step 8: a
    chain whole in itself, but not on the served model's base. Read whole, it serves run b's step 8;
    its delta applied over run a's rows would serve a mix of the two."""
    a, b = runs
    follow = tmp_path / "follow"
    (follow / "checkpoints").mkdir(parents=True)
    shutil.copy(a / "recipe.json", follow / "recipe.json")
    put(at(a, 4), at(follow, 4))
    export_run(follow, tmp_path / "x")
    served = ServingModel.load(tmp_path / "x")
    shutil.rmtree(at(follow, 4))
    put(at(b, 4), at(follow, 4))
    put(at(b, 8), at(follow, 8))
    new = Follower(follow).next_model(served)
    export_run(b, tmp_path / "b8", checkpoint=at(b, 8))
    fresh = ServingModel.load(tmp_path / "b8")
    assert new.step == 8
    for name, table in fresh.tables.items():
        np.testing.assert_array_equal(new.tables[name].ids, table.ids)
        np.testing.assert_array_equal(new.tables[name].arrays["values"], table.arrays["values"])


def still_serves_step_4(port, line, answer):
    assert json.loads(call(port, "/readyz")[1]) == {"ready": True, "step": 4}
    status, body = call(port, "/predict", {"labelled_rows": [line]})
    assert status == 200 and json.loads(body) == answer  # the very same probabilities
    assert reloads(port, "ok") == 0


def stops_on_sigterm(proc, within=5.0):
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    assert time.monotonic() - start < within


def test_serve_refuses_a_delta_from_another_run_then_follows_the_real_one(runs, serving):
    a, b = runs
    proc, port, follow, line, answer = serving
    put(at(b, 8), at(follow, 8))  # run b's delta on its own step 4, beside run a's step 4
    poll_for(lambda: reloads(port, "failed") >= 2, deadline=60, what="a failed reload")
    still_serves_step_4(port, line, answer)
    shutil.rmtree(at(follow, 8))
    put(at(a, 12), at(follow, 12))  # the run's own two deltas: 12 first (a failed reload while its base is missing)
    put(at(a, 8), at(follow, 8))
    poll_for(lambda: json.loads(call(port, "/readyz")[1])["step"] == 12, deadline=60, what="the reload of step 12")
    status, body = call(port, "/predict", {"labelled_rows": [line]})
    assert status == 200 and json.loads(body)["step"] == 12 and json.loads(body) != answer
    assert reloads(port, "ok") == 1
    stops_on_sigterm(proc)


def test_serve_refuses_a_chain_that_points_at_itself_and_stops_on_sigterm(runs, serving):
    a, _ = runs
    proc, port, follow, line, answer = serving
    put(at(a, 12), at(follow, 8))  # step 12, a delta on step 8, in step 8's directory
    poll_for(lambda: reloads(port, "failed") >= 3, deadline=60, what="failed reloads, again and again")
    still_serves_step_4(port, line, answer)
    stops_on_sigterm(proc)
