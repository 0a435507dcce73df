"""benchmarks/peers.py without the peer: the label encoding it exports, its table, and a whole run of
Cardinal's side on tiny data beside a fake peer that reads the exported arrays (no environment made,
nothing downloaded)."""

import ast
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cardinal.data.batch import Bag, Batch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import peers  # noqa: E402
import peers_env  # noqa: E402
import report  # noqa: E402


def test_the_peer_runner_compiles_and_imports_no_cardinal():
    tree = ast.parse(peers_env.RUNNER.read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {"deepctr_torch.models", "torch"} <= imported
    assert not any(m.split(".")[0] == "cardinal" for m in imported)
    compile(tree, str(peers_env.RUNNER), "exec")


def test_encode_codes_ids_over_both_splits_with_zero_for_missing_and_padding():
    train = [Bag(np.array([70, 5, 70]), np.array([0, 1, 1, 3])), Bag(np.array([9]), np.array([0, 1]))]
    evaluation = [Bag(np.array([5, 11]), np.array([0, 2, 2]))]  # 11: seen in eval only
    a, b, vocab = peers_env.encode(train, evaluation)
    assert vocab == 5  # 5, 9, 11, 70 and the code 0
    assert a.tolist() == [[4, 0], [0, 0], [1, 4], [2, 0]]  # ids -> 1 + rank; the empty bag and padding 0
    assert b.tolist() == [[1, 3], [0, 0]]


def test_encode_single_hot_is_one_column():
    a, b, vocab = peers_env.encode([Bag(np.array([3, 1 << 40]), np.array([0, 1, 1, 2]))], [])
    assert a.tolist() == [[1], [0], [2]] and b.shape == (0, 1) and vocab == 3


def test_halve_cuts_the_eval_rows_in_the_middle_of_a_batch():
    batches = [Batch(torch.arange(3.0)[:, None], {"f": Bag(np.array([1, 2, 3, 4]), np.array([0, 2, 2, 4]))},
                     torch.tensor([0.0, 1.0, 0.0])),
               Batch(torch.zeros(2, 1), {"f": Bag(np.array([5]), np.array([0, 0, 1]))}, torch.ones(2))]
    first, second = peers.halve(batches)
    assert [len(b) for b in first] == [2] and [len(b) for b in second] == [1, 2]
    assert first[0].sparse["f"].values.tolist() == [1, 2] and first[0].sparse["f"].offsets.tolist() == [0, 2, 2]
    assert second[0].sparse["f"].values.tolist() == [3, 4] and second[0].sparse["f"].offsets.tolist() == [0, 2]
    assert second[0].dense.tolist() == [[2.0]] and second[0].labels.tolist() == [0.0]


def test_rowless_fields_are_those_whose_table_admits_none_of_the_ids_the_data_holds():
    base = ['data.format="movielens"', 'data.train=["x"]', "embedding.shared=false",
            'ps.memory.admission.policy="count"']
    fields = peers.tables.sparse_fields(peers.load(None, base))
    assert {"user", "movie"} < set(fields)
    batch = Batch(torch.zeros(2, 0), {f: Bag(np.array([1, 2]), np.array([0, 1, 2])) for f in fields}, torch.ones(2))
    data = type("Data", (), {"batches": [batch]})

    def rowless(*sets):
        return peers.rowless_fields(peers.load(None, [*base, *sets]), data)
    assert rowless("ps.memory.admission.threshold=1", "ps.memory.admission.tables.user.threshold=3") == ["user"]
    assert rowless("ps.memory.admission.threshold=2", "ps.memory.admission.tables.user.threshold=2") == []  # seen twice
    assert rowless("ps.memory.admission.threshold=3") == fields
    assert peers.rowless_fields(peers.load(None, base[:3]), data) == []  # no filter: every id gets a row


def _run(system, data, lr, select, ev, rate):
    return {"system": system, "data": data, "lr": lr, "select": [select, 0.5], "eval": [ev, 0.45], "samples/s": rate}


def test_table_keeps_each_systems_best_lr_by_the_selection_half_and_compares_with_the_peer():
    runs = [_run("cardinal", "criteo", 0.01, 0.70, 0.90, 100.0), _run("deepctr-torch", "criteo", 0.01, 0.72, 0.71, 40.0),
            _run("cardinal", "criteo", 0.03, 0.75, 0.74, 300.0), _run("deepctr-torch", "criteo", 0.03, 0.71, 0.99, 60.0),
            _run("cardinal", "movielens", 0.03, 0.8, 0.8, 10.0)]
    rows = peers.table(runs)
    assert [(r["system"], r["data"], r["best lr"]) for r in rows] == [
        ("cardinal", "criteo", 0.03), ("deepctr-torch", "criteo", 0.01), ("cardinal", "movielens", 0.03)]
    card, peer, alone = rows
    assert card["eval AUC"] == "0.7400" and card["AUC - peer"] == "+0.0300" and card["x peer samples/s"] == 7.5
    assert card["samples/s, grid median"] == 200.0 and peer["samples/s, grid median"] == 50.0
    assert peer["AUC - peer"] == peer["x peer samples/s"] == "-"
    assert alone["AUC - peer"] == alone["x peer samples/s"] == "-"  # no peer ran on it


@pytest.mark.slow
def test_cardinal_side_and_table_beside_a_fake_peer(tmp_path, monkeypatch, movielens_folder):
    seen = []

    def fake_peer(python, folder, lr):
        spec = json.loads((folder / "spec.json").read_text())
        train, evaluation = np.load(folder / "train.npz"), np.load(folder / "eval.npz")
        width = {f["name"]: train[f["name"]].shape[1] for f in spec["sparse"]}
        assert spec["seed"] == 3 and spec["epochs"] == 1
        seen.append((spec["batch_size"], spec["dim"], len(spec["dense"]), width, len(train["labels"]),
                     len(evaluation["labels"]), spec["select_rows"]))
        assert all(train[f["name"]].max() < f["vocab"] for f in spec["sparse"])
        return {"samples_per_s": 10.0, "select": [0.6, 0.6], "eval": [0.5, 0.7], "deepctr_torch": "fake"}

    monkeypatch.setattr(peers, "peer_python", lambda: Path("no-such-python"))
    monkeypatch.setattr(peers, "run_peer", fake_peer)
    monkeypatch.setattr(peers, "find_copy", lambda: movielens_folder)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    peers.main(["--rows", "2000", "--lrs", "0.03", "--seed", "3"])
    criteo, movielens, shipped = seen
    assert criteo[:4] == (1024, 16, 13, {f"C{i}": 1 for i in range(1, 27)})
    assert criteo[4:7] == (2000, 4096, 2048)  # the first half of the eval rows selects
    assert movielens[:3] == (1024, 8, 0) and movielens[3]["genres"] > 1 and movielens[3]["user"] == 1
    assert shipped[:3] == (512, 32, 0) and shipped[3].keys() == movielens[3].keys() - {"user"}  # users: no rows
    saved = json.loads((tmp_path / "peers.json").read_text())
    assert [(r["system"], r["data"]) for r in saved["rows"]] == [
        (system, data) for data in ("criteo", "movielens", "movielens_shipped") for system in ("cardinal", "deepctr-torch")]
    card = saved["rows"][0]
    assert card["x peer samples/s"] == card["samples/s"] / 10.0
    assert card["eval AUC"] == f"{saved['grid'][0]['eval'][0]:.4f}" and 0 < saved["grid"][0]["eval"][0] < 1
    assert len(saved["grid"]) == 6 and "deepctr-torch fake" in (tmp_path / "peers.md").read_text()


@pytest.mark.slow
def test_peer_none_runs_cardinal_alone_and_says_why_movielens_is_skipped(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(peers, "find_copy", lambda: None)
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    peers.main(["--rows", "2000", "--lrs", "0.03,0.1", "--peer", "none"])
    assert "movielens: skipped: no MovieLens copy" in capsys.readouterr().out
    saved = json.loads((tmp_path / "peers.json").read_text())
    assert [(r["system"], r["x peer samples/s"]) for r in saved["rows"]] == [("cardinal", "-")]
    assert [r["lr"] for r in saved["grid"]] == [0.03, 0.1] and any("movielens skipped" in n for n in saved["notes"])
