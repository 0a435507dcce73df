"""benchmarks/scaling.py without running anything: its server rule, its table from fabricated
summaries (what summary.json holds, with and without the staleness keys), its plot and its options."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import jobs  # noqa: E402
import scaling  # noqa: E402


def test_servers_rule_one_per_two_workers_within_the_cores():
    assert [scaling.servers_for(w, 16) for w in (1, 2, 4, 8)] == [1, 1, 2, 4]
    assert [scaling.servers_for(w, 2) for w in (1, 2, 4, 8)] == [1, 1, 1, 1]  # never 0, even past the cores
    assert [scaling.servers_for(w, 8) for w in (2, 4, 6, 8)] == [1, 2, 1, 1]  # workers keep a core each


def _summary(rate, auc, steps=10, samples=40960, **more):
    return {"samples_per_s": rate, "eval_auc": auc, "steps": steps, "samples": samples, **more}


def test_rows_from_summaries_ratios_auc_staleness_and_traffic():
    embedded = _summary(1000.0, 0.78)
    torch = {**_summary(500.0, 0.77), "sparse_lr": 0.03}
    runs = [
        {"run": "embedded", "mode": "async", "W": 1, "S": "4 in-process", "code": 0, "summary": embedded},
        {"run": "launch", "mode": "sync", "W": 2, "S": 1, "code": 0,
         "summary": _summary(1500.0, 0.79, steps=5, bytes_sent=3000, bytes_received=1096,
                             staleness_p50=0, staleness_p99=2)},
        {"run": "launch", "mode": "async", "W": 2, "S": 1, "code": 0,
         "summary": _summary(2000.0, 0.775, bytes_sent=40960, bytes_received=0, staleness_p99=None)},
        {"run": "launch", "mode": "async", "W": 4, "S": 2, "code": 3, "summary": None},
    ]
    rows = scaling.build_rows(runs, embedded, torch)
    assert [list(r) for r in rows] == [list(rows[0])] * 4  # one set of columns for the table
    base, sync, stale_free, failed = rows
    assert base["x embedded"] == 1.0 and base["AUC - embedded"] == "+0.0000" and base["bytes/sample"] == "-"
    assert sync["x embedded"] == 1.5 and sync["x torch"] == 3.0
    assert sync["eval AUC"] == "0.7900" and sync["AUC - embedded"] == "+0.0100"
    assert sync["samples/step"] == 40960 / 5 and sync["bytes/sample"] == 4096 / 40960
    assert (sync["staleness p50"], sync["staleness p99"]) == (0, 2)
    assert (stale_free["staleness p50"], stale_free["staleness p99"]) == ("-", "-")  # key absent or null: "-"
    assert stale_free["AUC - embedded"] == "-0.0050" and stale_free["bytes/sample"] == 1.0
    assert failed["run"] == "launch (failed, exit 3)" and failed["W"] == 4
    assert all(failed[c] == "-" for c in scaling.COLUMNS)


def test_rows_without_references_say_so():
    run = {"run": "launch", "mode": "sync", "W": 1, "S": 1, "code": 0, "summary": _summary(10.0, 0.6)}
    (row,) = scaling.build_rows([run], None, None)
    assert row["x embedded"] == row["x torch"] == row["AUC - embedded"] == "-"


def test_traffic_needs_a_network():
    assert jobs.traffic_per_sample({"samples": 10}) is None
    assert jobs.traffic_per_sample({"samples": 10, "bytes_sent": 30, "bytes_received": 10}) == 4.0


def test_plot_writes_a_png(tmp_path):
    runs = [{"run": "launch", "mode": m, "W": w, "S": 1, "code": 0, "summary": _summary(100.0 * w, 0.7)}
            for m in ("sync", "async") for w in (2, 1)]
    runs.append({"run": "launch", "mode": "sync", "W": 4, "S": 2, "code": 1, "summary": None})
    out = tmp_path / "scaling.png"
    scaling.plot(runs, _summary(150.0, 0.7), _summary(80.0, 0.69), out, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_options():
    args = scaling.parse_args(["--quick"])
    assert args.workers == [1, 2] and args.modes == ["sync", "async", "async-each", "async-each-lr"]
    assert scaling.parse_args(["--workers", "1,2,4,8", "--modes", "geo"]).workers == [1, 2, 4, 8]
    for bad in (["--modes", "sync,eventual"], ["--workers", "0,2"], ["--workers", "two"], ["--rows", "-1"]):
        with pytest.raises(SystemExit):
            scaling.parse_args(bad)
    assert scaling.recipe_sets(0, 0, 0) == ["eval.every=0", "data.batch_size=4096", 'train.baseline="none"',
                                              'train.device="cpu"']
    assert scaling.recipe_sets(50_000, 20_000, 7) == ["eval.every=0", "data.batch_size=4096", 'train.baseline="none"',
                                                       'train.device="cpu"', "data.synthetic.rows=50000",
                                                       "data.synthetic.eval_rows=20000", "train.steps=7"]


def test_report_names_the_cpu_and_puts_the_header_between_title_and_table(tmp_path, monkeypatch):
    import report

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.split(":")[0].strip() == "model name"]
    if names:
        assert report.cpu_model() == names[0]
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    report.write("t", "Title", [{"a": 1}], ["a note"], header=["recipe line"])
    lines = (tmp_path / "t.md").read_text().splitlines()
    assert lines[:4] == ["# Title", "", "recipe line  ", ""] and lines[4].startswith("|")
    assert f"({report.cpu_model()})" in lines[-1]
