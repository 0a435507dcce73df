"""More workers, same model: how training speed and AUC change with the number of workers.

    python benchmarks/scaling.py [--workers 1,2,4,8] [--modes sync,async] [--rows N] [--steps N] [--quick]

For each W in ``--workers`` and each mode in ``--modes`` (sync; async, where the servers combine
each step's pushes as in sync; async-each, each push applied on arrival; async-each-lr, the same
with staleness compensation; geo), one
``cardinal launch --servers S --workers W`` on the default recipe, and beside them, in the same
invocation and on the same generated data:
  - embedded: ``cardinal train`` (one process, the recipe's in-process shards and consistency);
  - torch:    plain PyTorch, ``nn.EmbeddingBag(sparse=True)`` + Adagrad (``e2e.run_torch``), its
              sparse lr the best of e2e's grid by AUC on the first half of the eval split.

Servers: S = max(1, min(W // 2, (cores - W) // 2)): one server per two workers, as long as the
workers keep a core each and the servers at most half of the cores left (16 cores: W 1, 2, 4, 8
get S 1, 1, 2, 4). Runs whose W + S exceed the cores share them, and the output says so.

The runs are read only through their command line and summary.json (samples, steps,
samples_per_s, eval_auc, bytes_sent/received, staleness_p50/p99 when the trainer reports them),
so the table means what the trainer's summary means: samples/step shows how data.batch_size was
split among the workers. Writes results/scaling.{md,json,png} (scaling_quick.* with --quick).
"""

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import e2e  # noqa: E402
import jobs  # noqa: E402
from report import RESULTS, machine, write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402

RECIPE = "criteo_synthetic"
MODES = {  # mode -> what a launched run adds to the recipe
    "sync": ['consistency.mode="sync"'],
    "async": ['consistency.mode="async"'],  # servers combine each step's pushes (the default)
    "async-each": ['consistency.mode="async"', "consistency.async.combine=false"],  # each push applied on arrival
    "async-each-lr": ['consistency.mode="async"', "consistency.async.combine=false",
                      'consistency.async.compensation="lr"'],
    "geo": ['consistency.mode="geo"'],
}
QUICK = {"rows": 50_000, "eval_rows": 20_000, "workers": "1,2"}
RUN_TIMEOUT_S = {"quick": 900.0, "full": 4 * 3600.0}
SERVER_RULE = "S = max(1, min(W // 2, (cores - W) // 2))"


def servers_for(workers: int, cores: int) -> int:
    """SERVER_RULE: W // 2, capped at half the cores the workers leave, at least 1."""
    return max(1, min(workers // 2, (cores - workers) // 2))


def recipe_sets(rows: int, eval_rows: int, steps: int) -> list[str]:
    """The overrides every run gets (the launched runs add consistency.mode)."""
    sets = ["eval.every=0"]  # evaluate once, at the end: evaluations are not training time anyway
    sets += ["data.batch_size=4096", 'train.baseline="none"']  # the published table's batch; no lr baseline
    sets += ['train.device="cpu"']  # cores, not a GPU "auto" would take where there is one (gpu.py measures that)
    sets += [f"data.synthetic.rows={rows}"] if rows else []
    sets += [f"data.synthetic.eval_rows={eval_rows}"] if eval_rows else []
    return sets + ([f"train.steps={steps}"] if steps else [])


# --- plain PyTorch, reusing e2e's baseline ------------------------------------------------

class FirstBatches:
    """The reader's first ``limit`` batches (all when 0), read from the files inside the timed loop, as
    Cardinal's trainer reads them; counts the samples of the last pass."""

    def __init__(self, reader, limit: int):
        self.reader, self.limit, self.samples, self.steps = reader, limit, 0, 0
        self.dense_fields, self.sparse_fields = reader.dense_fields, reader.sparse_fields

    def __iter__(self):
        self.samples = self.steps = 0
        for batch in itertools.islice(iter(self.reader), self.limit or None):
            self.samples, self.steps = self.samples + len(batch), self.steps + 1
            yield batch


def torch_baseline(recipe, steps: int, tmp: Path) -> dict:
    """Summary-like dict of plain PyTorch at its best sparse lr of ``e2e.SPARSE_LRS``; generates the data.

    The readers come from a trainer that never trains (as in e2e.py), so they are the ones a
    one-process ``cardinal train`` reads: the same files, batches of data.batch_size."""
    probe = Trainer(recipe, tmp / "probe")
    train = probe.train_data
    ev = e2e.Cached(probe.eval_data)
    if len(ev.batches) < 2:
        raise SystemExit(f"the eval split has {len(ev.batches)} batch(es); the lr grid needs 2 or more: "
                         f"raise data.synthetic.eval_rows above data.eval_batch_size ({recipe.data.eval_batch_size})")
    half = len(ev.batches) // 2
    splits = [e2e.Batches(ev.batches[:half], ev), e2e.Batches(ev.batches[half:], ev), ev]  # select, holdout, all
    source, grid = FirstBatches(train, steps), []
    for lr in e2e.SPARSE_LRS:
        seconds, metrics = e2e.run_torch(recipe, source, splits, probe.fields, "adagrad", lr, e2e.TORCH_TABLE_ROWS)
        grid.append({"sparse_lr": lr, "samples_per_s": source.samples / seconds, "steps": source.steps,
                     "samples": source.samples, "select_auc": metrics[0][0], "holdout_auc": metrics[1][0],
                     "eval_auc": metrics[2][0]})
        print(f"  torch adagrad lr {lr}: {grid[-1]['samples_per_s']:,.0f} samples/s, AUC {metrics[2][0]:.4f}")
    return {**max(grid, key=lambda g: g["select_auc"]), "grid": grid}


# --- the table --------------------------------------------------------------------------

COLUMNS = ("steps", "samples/step", "samples/s", "x embedded", "x torch", "eval AUC", "AUC - embedded",
           "staleness p50", "staleness p99", "bytes/sample")


def build_rows(runs: list[dict], embedded: dict | None, torch: dict | None) -> list[dict]:
    """Table rows from run records {run, mode, W, S, code, summary}; a failed run (summary None) is all "-"."""
    base_rate = embedded["samples_per_s"] if embedded else None
    torch_rate = torch["samples_per_s"] if torch else None
    rows = []
    for r in runs:
        s = r["summary"]
        name = r["run"] if s is not None else f"{r['run']} (failed, exit {r['code']})"
        row = {"run": name, "mode": r["mode"], "W": r["W"], "S": r["S"]}
        if s is None:
            rows.append({**row, **dict.fromkeys(COLUMNS, "-")})
            continue
        rate, traffic = s["samples_per_s"], jobs.traffic_per_sample(s)
        rows.append({**row, "steps": s["steps"], "samples/step": s["samples"] / s["steps"] if s["steps"] else "-",
                     "samples/s": rate, "x embedded": rate / base_rate if base_rate else "-",
                     "x torch": rate / torch_rate if torch_rate else "-", "eval AUC": f"{s['eval_auc']:.4f}",
                     "AUC - embedded": f"{s['eval_auc'] - embedded['eval_auc']:+.4f}" if embedded else "-",
                     "staleness p50": _or_dash(s.get("staleness_p50")),
                     "staleness p99": _or_dash(s.get("staleness_p99")),
                     "bytes/sample": "-" if traffic is None else traffic})
    return rows


def _or_dash(value):
    return "-" if value is None else value


def plot(runs: list[dict], embedded: dict | None, torch: dict | None, out: Path, title: str) -> None:
    """samples/s and eval AUC against W, one line per mode; the embedded default and torch as dashed lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed, auc) = plt.subplots(1, 2, figsize=(11, 4))
    for mode in dict.fromkeys(r["mode"] for r in runs):
        done = sorted((r for r in runs if r["mode"] == mode and r["summary"]), key=lambda r: r["W"])
        speed.plot([r["W"] for r in done], [r["summary"]["samples_per_s"] for r in done], "o-", label=f"launch, {mode}")
        auc.plot([r["W"] for r in done], [r["summary"]["eval_auc"] for r in done], "o-", label=f"launch, {mode}")
    for name, ref, color in (("embedded default", embedded, "gray"), ("plain PyTorch", torch, "tab:red")):
        if ref:
            speed.axhline(ref["samples_per_s"], color=color, linestyle="--", label=name)
            auc.axhline(ref["eval_auc"], color=color, linestyle="--", label=name)
    speed.set(xlabel="workers W", ylabel="training samples/s (all workers)", title="throughput")
    auc.set(xlabel="workers W", ylabel="eval AUC", title="model quality")
    ws = sorted({r["W"] for r in runs})
    for ax in (speed, auc):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ws, [str(w) for w in ws])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


# --- the runs ---------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", help="worker counts, comma-separated (default 1,2,4,8; 1,2 with --quick)")
    p.add_argument("--modes", default="sync,async,async-each,async-each-lr",
                   help=f"consistency modes, comma-separated, of {', '.join(MODES)}")
    p.add_argument("--rows", type=int, default=0, help="generated training rows (default: the recipe's; "
                                                        f"{QUICK['rows']:,} with --quick)")
    p.add_argument("--steps", type=int, default=0, help="train.steps for every run (default: one epoch)")
    p.add_argument("--quick", action="store_true", help="a small data set: a few minutes on 2 cores")
    args = p.parse_args(argv)
    try:
        args.workers = [int(w) for w in (args.workers or (QUICK["workers"] if args.quick else "1,2,4,8")).split(",")]
    except ValueError:
        p.error(f"--workers takes comma-separated integers, e.g. 1,2,4,8; got {args.workers!r}")
    args.modes = args.modes.split(",")
    if min(args.workers) < 1:
        p.error(f"--workers must each be >= 1, got {args.workers}")
    if bad := [m for m in args.modes if m not in MODES]:
        p.error(f"--modes takes {', '.join(MODES)}; got {', '.join(bad)}")
    if args.rows < 0 or args.steps < 0:
        p.error("--rows and --steps must be >= 0")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cores = os.cpu_count() or 1
    rows = args.rows or (QUICK["rows"] if args.quick else 0)
    sets = recipe_sets(rows, QUICK["eval_rows"] if args.quick else 0, args.steps)
    recipe = load(RECIPE, sets)
    timeout = RUN_TIMEOUT_S["quick" if args.quick else "full"]
    settings = describe(recipe)
    info = machine()
    print(f"machine: {cores} cores ({info['cpu']}), torch {info['torch']}\nrecipe: {settings}")
    runs = []
    with tempfile.TemporaryDirectory(prefix="cardinal-scaling-") as tmp:
        print("plain PyTorch, sparse lr grid (generates the data set first when needed):")
        torch = torch_baseline(recipe, args.steps, Path(tmp))
        warm = jobs.train([*sets, "train.steps=2"], Path(tmp) / "warm-up", timeout)  # compiles the kernels once
        if warm.summary is None:
            raise SystemExit(f"cardinal train fails on this recipe (exit {warm.code}); its output ends:\n{warm.tail()}")
        embedded = _record(runs, "embedded (cardinal train)", recipe.consistency.resolve(distributed=False), 1,
                           f"{recipe.ps.shards} in-process", jobs.train(sets, Path(tmp) / "embedded", timeout))
        torch_run = {"run": f"torch EmbeddingBag + Adagrad (lr {torch['sparse_lr']})", "mode": "-", "W": 1, "S": "-",
                     "code": 0, "summary": torch}
        for mode, w in itertools.product(args.modes, args.workers):
            s = servers_for(w, cores)
            run = jobs.launch(s, w, [*sets, *MODES[mode]], Path(tmp) / f"{mode}-{w}x{s}", timeout)
            _record(runs, "cardinal launch", mode, w, s, run)
    name = "scaling" + ("_quick" if args.quick else "")
    title = (f"Scaling: W workers x S servers vs the embedded default and plain PyTorch ({RECIPE}: "
             f"{recipe.model['name']}, dim {recipe.embedding.dim}, data.batch_size {recipe.data.batch_size})")
    table = build_rows([runs[0], torch_run, *runs[1:]], embedded, torch)
    plot(runs[1:], embedded, torch, RESULTS / f"{name}.png", title)
    header = [f"**every run**: recipe {RECIPE} with {' '.join(f'--set {s}' for s in sets)}; that is: {settings}",
              f"**launched runs** add, per mode, {'; '.join(f'{m}: ' + ' '.join(v) for m, v in MODES.items())}, "
              f"with {SERVER_RULE} servers on this "
              f"machine's {cores} cores; **embedded**: `cardinal train`, the recipe's consistency "
              f"({recipe.consistency.resolve(distributed=False)}) and {recipe.ps.shards} in-process shards",
              f"**machine**: {cores} cores ({info['cpu']}), torch {info['torch']}"]
    write(name, title, table, notes(args, runs, torch, cores), header=header, extra={
        "recipe_sets": sets, "torch_grid": torch["grid"],
        "summaries": [{k: r[k] for k in ("run", "mode", "W", "S", "code", "summary")} for r in runs]})
    print(f"plot: {RESULTS / f'{name}.png'}")


def _record(runs: list[dict], label: str, mode: str, w, s, run: jobs.Run) -> dict | None:
    runs.append({"run": label, "mode": mode, "W": w, "S": s, "code": run.code, "summary": run.summary})
    if run.summary is None:
        print(f"  {label} {mode} W={w} S={s}: FAILED (exit {run.code}); its output ends:\n{run.tail()}")
    else:
        print(f"  {label} {mode} W={w} S={s}: {run.summary['samples_per_s']:,.0f} samples/s, "
              f"AUC {run.summary['eval_auc']:.4f}")
    return run.summary


def describe(recipe) -> str:
    """The recipe values every run shares, as a user would set them."""
    d, e, so, do = recipe.data, recipe.embedding, recipe.sparse_optimizer, recipe.dense_optimizer
    model = ", ".join(f"{k}={v}" for k, v in recipe.model.items())
    return (f"data.batch_size={d.batch_size}, data.synthetic.rows={d.synthetic.rows:,}, "
            f"data.synthetic.eval_rows={d.synthetic.eval_rows:,}, train.epochs={recipe.train.epochs}, "
            f"train.steps={recipe.train.steps or 'one epoch'}, model: {model}, embedding.dim={e.dim}, "
            f"consistency.async.staleness={recipe.consistency.async_.staleness}, "
            f"consistency.geo.interval={recipe.consistency.geo.interval}, "
            f"sparse_optimizer: {', '.join(f'{k}={v}' for k, v in so.items())}, dense_optimizer: {do.name} lr={do.lr}")


def notes(args, runs, torch, cores) -> list[str]:
    crowded = sorted({(r["W"], r["S"]) for r in runs[1:] if r["W"] + r["S"] > cores})
    failed = [f"{r['run']} {r['mode']} W={r['W']}" for r in runs if r["summary"] is None]
    reproduce = " ".join(["python benchmarks/scaling.py", f"--workers {','.join(map(str, args.workers))}",
                          f"--modes {','.join(args.modes)}", *([f"--rows {args.rows}"] if args.rows else []),
                          *([f"--steps {args.steps}"] if args.steps else []), *(["--quick"] if args.quick else [])])
    return [
        "samples/s: training samples of all workers over the training time the trainer reports (steps and "
        "reading their batches; evaluation and checkpoints excluded); samples/step: samples over steps, "
        "so it shows what one step means with W workers",
        f"torch: e2e.run_torch, nn.EmbeddingBag(sparse=True), ids % {e2e.TORCH_TABLE_ROWS:,}, Adagrad; batches read "
        f"from the same files inside the timed loop; sparse lr {torch['sparse_lr']} chosen from {e2e.SPARSE_LRS} "
        f"on the eval split's first half (AUC on its second half: {torch['holdout_auc']:.4f}); Cardinal runs use "
        f"the recipe's lr, untuned",
        "before the timed runs, a 2-step `cardinal train` compiles the kernels (numba caches them on disk), "
        "so no run pays for it; every run starts its processes afresh (imports, connections), outside its timed steps",
        "eval AUC: the whole eval split; AUC - embedded: against the embedded default's",
        "staleness p50/p99: summary.json's staleness_p50/staleness_p99 ('-': not reported by this build)",
        "bytes/sample: gRPC message bytes (requests + replies, all workers) per training sample",
        *([f"W + S above the {cores} cores for (W, S) in {crowded}: those processes share cores, so their "
           f"samples/s measure contention, not scaling"] if crowded else []),
        *([f"failed runs (their output was printed above): {', '.join(failed)}"] if failed else []),
        f"reproduce: {reproduce}",
    ]


if __name__ == "__main__":
    main()
