"""The ``cardinal`` command. Few flags: every knob is a recipe value, set with ``--set``.

    cardinal train [RECIPE] [--set section.key=value ...] [--resume RUN_DIR]
    cardinal recipe show [RECIPE] [--set ...] [--resume RUN_DIR]   (the resolved recipe, each key explained)
    cardinal recipe list
    cardinal eval RUN_DIR [--checkpoint STEP_DIR] [--set data.eval=FILE ...]
    cardinal generate OUT_DIR [--set key=value ...]        (keys of [data.synthetic])
    cardinal convert TSV [TSV ...] --out FILE.parquet [--strict]
    cardinal data movielens [DIR]                          (download; DIR: $CARDINAL_HOME/data/...)
    cardinal server [RECIPE] --shard I/N --data-dir DIR [--port P] [--host H] [--set ...]
    cardinal launch --servers S --workers W -- [RECIPE] [--set ...] [--resume RUN_DIR]
    cardinal sweep [RECIPE] --grid section.key=v1,v2 [--grid ...] [--set ...] [--parallel N]
    cardinal export RUN_DIR --out DIR [--checkpoint STEP_DIR] [--tables fp32|fp16|int8|saec] [--ratio R]
    cardinal serve EXPORT_DIR [--port P] [--host H] [--follow RUN_DIR] [--max-batch N] [--set KEY=VALUE ...]
    cardinal top HOST:PORT [HOST:PORT ...] [--interval S] [--once]   (servers' and workers' metrics, live)

Every command's exit status says whether it succeeded: 0 when it did; 2 for an error the user
can fix (bad recipe or data, a run that diverged or trained nothing), named on one line of
stderr; 1 (a traceback) for anything else; ``launch`` exits with its first failing worker's code;
130 (SIGINT, Ctrl-C) or 143 (SIGTERM) when ``train`` or ``launch`` was stopped by that signal,
after saving a checkpoint of the step it stopped at (one line says how to resume).
Heavy modules (torch, numba, grpc) are imported inside the commands, after the arguments and
the recipe are checked, so ``--help``, ``--version`` and a mistyped key answer at once.
"""

import argparse
import json
import logging
import os
import shlex
import sys
from pathlib import Path

import cardinal
from cardinal.failures import RESUME_HINT, ServerFailure, culprit_named, peer_failure

PROBE_S = 5.0  # how long a rank whose peer stopped waits on each server before blaming the peer
TRAIN_HELP = """keys: `cardinal recipe show [RECIPE]` prints every key of the resolved recipe with its meaning
(each section is a dataclass in cardinal/recipe/, each key documented by its field's metadata).
file lists (data.train, data.eval, ps.servers): a path, a comma list a.tsv,b.tsv, or a TOML list
'["a.tsv","b.tsv"]' (a path holding a comma needs the quoted TOML list).
--resume RUN: the run's recipe.json plus the --set values. Learning rates, train.* (steps, epochs),
eval.*, checkpoint.*, data files, ps.* and plan.* may change; keys that fix the saved shapes
(model.*, embedding.dim/dims/shared/field_tables, compression's formats, hashing, chunks and Saec,
optimizer names, data.format, data.batch_size) may not, nor those that choose the held-out rows
(data.holdout, data.holdout_by, train.seed) or train.baseline. An old key names its new place.
train.steps and train.epochs are totals from the run's start: to go on, raise them past where the
run is (a run already there is an error, exit 2).
"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cardinal", description="Parameter-server training for CTR models.")
    p.add_argument("--version", action="version", version=f"cardinal {cardinal.__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    recipes = _shipped()
    t = sub.add_parser("train", help="train a recipe on the embedded parameter server", epilog=TRAIN_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("recipe", nargs="?", default="criteo_synthetic",
                   help=f"a shipped recipe ({', '.join(recipes)}) or a TOML path (default: criteo_synthetic)")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a recipe value")
    t.add_argument("--resume", metavar="RUN_DIR", help="go on from the newest checkpoint of a run (see below)")
    r = sub.add_parser("recipe", help="show a resolved recipe with each key's meaning, or list the shipped ones")
    rs = r.add_subparsers(dest="action", required=True)
    show = rs.add_parser("show", help="print the resolved recipe as TOML, each key with its meaning")
    show.add_argument("recipe", nargs="?", default="criteo_synthetic",
                      help=f"a shipped recipe ({', '.join(recipes)}) or a TOML path")
    show.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a value")
    show.add_argument("--resume", metavar="RUN_DIR", help="what `cardinal train --resume RUN_DIR` would train with")
    rs.add_parser("list", help="the shipped recipes")
    e = sub.add_parser("eval", help="evaluate a run's checkpoint on its eval data")
    e.add_argument("run_dir")
    e.add_argument("--checkpoint", metavar="STEP_DIR", help="a step directory (default: the best, else the newest)")
    e.add_argument("--set", action="append", default=[], metavar="data.eval=FILES",
                   help="evaluate on other data: only data.eval* keys may change")
    g = sub.add_parser("generate", help="write synthetic Criteo-layout data with a planted teacher")
    g.add_argument("out_dir")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a [data.synthetic] value")
    s = sub.add_parser("server", help="serve one shard of a recipe's tables over gRPC")
    s.add_argument("recipe", nargs="?", default="criteo_synthetic", help="a shipped recipe name or a TOML path")
    s.add_argument("--shard", required=True, metavar="I/N", help="this server's shard, e.g. 0/4")
    s.add_argument("--port", type=int, default=0, help="0 picks a free port (printed when ready)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    s.add_argument("--data-dir", required=True, help="where this server writes and reads checkpoints")
    s.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a recipe value")
    lch = sub.add_parser("launch", help="run servers and workers of one job on this machine")
    lch.add_argument("--servers", type=int, default=2)
    lch.add_argument("--workers", type=int, default=1)
    lch.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then what `cardinal train` takes")
    w = sub.add_parser("sweep", help="train every combination of --grid values; one table of eval AUC")
    w.add_argument("recipe", nargs="?", default="criteo_synthetic", help="a shipped recipe name or a TOML path")
    w.add_argument("--grid", action="append", default=[], metavar="SECTION.KEY=V1,V2", help="values to try")
    w.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="fixed for every setting")
    w.add_argument("--parallel", type=int, default=1, help="settings trained at once (threads split among them)")
    w.add_argument("--out", metavar="DIR", help="where the sweep directory goes (default: the recipe's train.run_dir)")
    x = sub.add_parser("export", help="a run's model for serving: ONNX dense model, live rows, manifest")
    x.add_argument("run_dir")
    x.add_argument("--out", required=True, help="a new (or empty) directory")
    x.add_argument("--checkpoint", metavar="STEP_DIR", help="a step directory (default: the best, else the newest)")
    x.add_argument("--tables", default="fp32", help="the rows' form: fp32 (exact), fp16, int8 or saec (clustered)")
    x.add_argument("--ratio", type=float, default=20.0, help="saec: rows per cluster in each field (default 20)")
    v = sub.add_parser("serve", help="serve an export's predictions over HTTP (JSON), batching requests")
    v.add_argument("export_dir")
    v.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed when ready)")
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    v.add_argument("--follow", metavar="RUN_DIR", help="swap in each newer checkpoint of this training run")
    v.add_argument("--poll", type=float, default=1.0, help="seconds between looks at the run (default 1)")
    v.add_argument("--max-batch", type=int, default=4096, help="examples in a request, and in one model call")
    v.add_argument("--threads", type=int, default=1, help="onnxruntime threads a model call uses (default 1)")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a limit: max_body_mb, header_timeout_s, body_timeout_s, max_connections (serve/guard.py)")
    tp = sub.add_parser("top", help="watch a running job: each server's load, rows, bytes, latency; workers' progress")
    tp.add_argument("addresses", nargs="+", metavar="HOST:PORT", help="metrics endpoints of servers and workers")
    tp.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    tp.add_argument("--once", action="store_true", help="print one frame and exit")
    pl = sub.add_parser("plan", help="propose a sharding plan for a recipe's tables (for its ps.servers or "
                                     "ps.shards servers); print each server's load")
    pl.add_argument("recipe", nargs="?", default="criteo_synthetic", help="a shipped recipe or a TOML path")
    pl.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a recipe value")
    pl.add_argument("--stats", metavar="RUN_DIR", help="table sizes from this run's newest checkpoint")
    pl.add_argument("--out", metavar="FILE", help="write the plan here; train with --set plan.layout=FILE")
    c = sub.add_parser("convert", help="convert Criteo TSV files to Parquet")
    c.add_argument("tsv", nargs="+")
    c.add_argument("--out", required=True)
    c.add_argument("--strict", action="store_true", help="stop at the first bad line")
    d = sub.add_parser("data", help="download a public data set (movielens), check its checksum and unpack it")
    d.add_argument("name", help="movielens: MovieLens ml-latest-small (1 MB)")
    d.add_argument("dir", nargs="?", help="where to put it (default: $CARDINAL_HOME/data/<name>-...)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from cardinal.progress import say, setup_logging

    setup_logging(logging.INFO)  # records through tqdm.write: never onto a progress bar's line
    try:
        commands = {"train": train, "recipe": recipe, "eval": evaluate, "generate": generate, "convert": convert,
                    "server": server, "launch": launch, "data": data, "sweep": sweep, "export": export, "serve": serve,
                    "top": top, "plan": plan}
        return commands[args.command](args)
    except (ValueError, ServerFailure) as e:  # what the user can change; anything else (a bug) is a traceback (exit 1)
        say(f"cardinal {args.command}: error: {e}" + (f" ({RESUME_HINT})" if isinstance(e, ServerFailure) else ""))
        return 2  # on a line of its own, not on a progress bar's
    except Exception as e:  # noqa: BLE001 - a peer's failure met in a collective is named; anything else re-raised
        if (line := peer_failure(e)) is None:
            raise
        say(f"cardinal {args.command}: error: {line}")
        return 2
    except KeyboardInterrupt:  # before training started, or a third Ctrl-C while saving (no torn checkpoint)
        say(f"cardinal {args.command}: interrupted")
        return 130


def train(args) -> int:
    from cardinal.recipe import load
    from cardinal.train.leader_reads import before_group
    from cardinal.train.run_dirs import new_run_dir

    shared_dir = os.environ.get("CARDINAL_RUN_DIR")  # set for every worker of a job
    if args.resume:  # RUN is worker 0's: the others take its recipe, or its refusal, from worker 0
        run_dir = Path(args.resume)
        recipe = before_group(lambda: _resumed(run_dir, args.set))
    else:
        recipe = load(args.recipe, args.set)
        if shared_dir:
            run_dir = Path(shared_dir)
        elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("several workers need one run directory: set CARDINAL_RUN_DIR for all of them")
        else:
            run_dir = new_run_dir(Path(recipe.train.run_dir), recipe.train.name)
    print(f"run directory: {run_dir}")
    from cardinal.train import Trainer, job_servers
    from cardinal.train.interrupt import Interrupted, StopFlag

    stop = StopFlag()
    try:
        trainer = Trainer(recipe, run_dir, stop=stop)
    except BaseException:  # data not found, a missing package...: no empty run directory per attempt
        if not args.resume and not shared_dir and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        raise
    try:  # SIGINT / SIGTERM: save at a step boundary, one line, 130 / 143; a peer's failure names a dead server
        with stop.catching_signals(), culprit_named(lambda: trainer.client.health(timeout=PROBE_S)):
            summary = trainer.fit(resume=bool(args.resume))
            job_servers.end(trainer)  # every worker's fit returned: the servers end with the job
    except Interrupted as e:
        if int(os.environ.get("RANK", "0")) == 0:
            print(e, file=sys.stderr, flush=True)  # the one line (the bar is closed)
        return e.exit_code
    finally:  # channels closed while every thread lives: a gRPC finalizer run at interpreter exit can
        trainer.close()  # wait forever on a lock a frozen daemon thread holds (seen after a server died)
    if int(os.environ.get("RANK", "0")) == 0:
        from cardinal.train.summary import summary_line

        print(summary_line(summary))
    return 0


def _resumed(run_dir: Path, overrides: list[str]):
    """The recipe a resume trains with, refused (nothing written) when it cannot go on."""
    from cardinal.train.resume import resumable

    return resumable(run_dir, overrides)


def _shipped() -> list[str]:
    from cardinal.recipe import shipped

    return shipped()


def recipe(args) -> int:
    from cardinal.recipe import describe, load, shipped

    if args.action == "list":
        for name in shipped():
            print(f"{name:20s} {describe(name)}")
        return 0
    from cardinal.train.recipe_toml import to_toml

    resolved = _resumed(Path(args.resume), args.set) if args.resume else load(args.recipe, args.set)
    print(to_toml(resolved), end="")
    return 0


def _apply(raw: dict, overrides: list[str]) -> dict:
    from cardinal.recipe import parse_override

    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return raw


def evaluate(args) -> int:
    """The run's best checkpoint (checkpoints/best.json), else its newest, or ``--checkpoint``; on
    the run's eval data or, with ``--set data.eval=...``, on other data. Prints one JSON line."""
    from cardinal.recipe import from_dict, parse_override
    from cardinal.train.resume import saved_recipe

    run_dir = Path(args.run_dir)
    raw = saved_recipe(run_dir)
    for text in args.set:
        keys, _ = parse_override(text)
        if len(keys) != 2 or keys[0] != "data" or not keys[1].startswith("eval"):
            raise ValueError(f"--set {text}: `cardinal eval` changes only the eval data (data.eval, "
                             f"data.eval_batch_size); the model is the run's recipe.json")
    recipe = from_dict(_apply(raw, args.set))
    from cardinal.checkpoint.best import best_checkpoint
    from cardinal.train import Trainer

    root = run_dir / "checkpoints"
    best = None if args.checkpoint else best_checkpoint(root)
    which = args.checkpoint or ("best" if best is not None else "newest")
    trainer = Trainer(recipe, run_dir, progress=False)
    info = trainer.load(args.checkpoint or best or root)
    print(json.dumps({"checkpoint": which, "path": str(info.get("path", "")), "step": trainer.step,
                      **trainer.evaluate()}))
    return 0


def generate(args) -> int:
    from cardinal.data import SyntheticConfig
    from cardinal.recipe.build import build

    cfg = build(SyntheticConfig, dict(_apply({}, args.set)), "data.synthetic")
    from cardinal.data.synthetic import generate as write
    from cardinal.progress import bar as progress_bar  # drawn on a terminal only

    with progress_bar(total=cfg.rows + cfg.eval_rows, unit="rows", desc="generating") as bar:
        report = write(args.out_dir, cfg, progress=bar.update)
    print(f"teacher AUC on eval: {report['eval']['teacher_auc']:.4f} (logloss {report['eval']['teacher_logloss']:.4f}, "
          f"click rate {report['eval']['click_rate']:.3f}); files in {args.out_dir}")
    return 0


def data(args) -> int:
    from cardinal.data.download import command

    print(command(args.name, args.dir))
    return 0


def launch(args) -> int:
    from cardinal.jobs.launch import launch as run

    rest = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    return run(args.servers, args.workers, rest, _train_args)


def _train_args(args: list[str]) -> tuple[str, list[str], str | None]:
    """(recipe, --set values, --resume dir) of arguments meant for ``cardinal train``, read as it
    reads them (argparse exits 2 on a bad one)."""
    parsed = parser().parse_args(["train", *args])
    return parsed.recipe, parsed.set, parsed.resume


def sweep(args) -> int:
    from cardinal.jobs.sweep import run as run_sweep

    run_sweep(args.recipe, args.grid, args.set, args.parallel, args.out)
    return 0


def server(args) -> int:
    from cardinal import planner
    from cardinal.ps import ShardStore
    from cardinal.ps.limits import store_limits
    from cardinal.ps.server.process import ServerOptions, run
    from cardinal.recipe import load
    from cardinal.train import tables

    shard, sep, n = args.shard.partition("/")
    if not (sep and shard.isdigit() and n.isdigit() and 0 <= int(shard) < int(n)):
        raise ValueError(f"--shard takes I/N with 0 <= I < N, got {args.shard!r}")
    recipe = load(args.recipe, args.set)
    ps = recipe.ps
    if recipe.plan.layout == "auto":  # each server would read the training data, and servers must agree
        raise ValueError('plan.layout = "auto" on a server: make the plan once (cardinal plan RECIPE --out FILE) and '
                         "give every server and worker --set plan.layout=FILE (cardinal launch does this for you)")
    store = ShardStore(tables.store_config(recipe), int(shard), int(n), store_limits(ps), ps.memory.disk_dir,
                       planner.resolve(tables.plan_inputs(recipe), int(n)))
    options = ServerOptions(host=args.host, port=args.port, tls_cert=ps.tls_cert or None, tls_key=ps.tls_key or None,
                            max_message_mb=ps.limits.max_message_mb, max_concurrency=ps.limits.max_concurrent_calls,
                            metrics_port=ps.metrics_port)
    return run(store, args.data_dir, ps.job, ps.token(), options)


def export(args) -> int:
    from cardinal.serve.export import export_run, next_step

    m = export_run(args.run_dir, args.out, args.checkpoint, args.tables, args.ratio)
    rows = sum(t["rows"] for t in m["tables"].values())
    mb = sum(t["bytes"] for t in m["tables"].values()) / 1e6
    print(f"exported step {m['step']} of {args.run_dir} to {args.out}: {rows:,} rows ({args.tables}, {mb:.1f} MB) "
          f"and model.onnx; {next_step(m, args.out)}")
    return 0


def serve(args) -> int:
    from cardinal.serve.follow_process import FollowerProcess
    from cardinal.serve.http import PredictionServer, serve as run
    from cardinal.serve.guard import limits
    from cardinal.serve.model import ServingModel

    checked = limits(args.set)  # before the model loads: a mistyped key answers at once
    follower = FollowerProcess(args.follow) if args.follow else None
    server = PredictionServer(ServingModel.load(args.export_dir, args.threads), args.max_batch, follower=follower,
                              poll_s=args.poll, limits=checked)  # the only reference: a reload frees it
    return run(server, args.host, args.port)


def plan(args) -> int:
    from cardinal import planner
    from cardinal.planner.propose import propose
    from cardinal.planner.report import report
    from cardinal.planner.stats import from_run, from_sample
    from cardinal.recipe import load
    from cardinal.train import tables

    recipe = load(args.recipe, ['plan.layout="auto"', *args.set])  # what it makes: plan.replicate applies
    n = len(recipe.ps.servers) or recipe.ps.shards
    inputs = tables.plan_inputs(recipe)
    stats = from_run(args.stats, inputs) if args.stats else from_sample(inputs, progress=True)
    proposed = propose(stats, n, inputs.budget, pinned=planner.pinned(inputs))  # each server's budget
    proposed, copied = planner.replicate(inputs, proposed)
    print("\n".join([report(proposed, stats), *copied]))
    if args.out:
        planner.write(proposed, args.out)
        sets = [*planner.without_plan_settings(args.set), f"plan.layout={args.out}"]
        print(f"wrote {args.out}; train with it: cardinal train {shlex.quote(args.recipe)} "
              + " ".join(f"--set {shlex.quote(s)}" for s in sets))
    return 0


def top(args) -> int:
    from cardinal.jobs.top import run as watch

    return watch(args.addresses, args.interval, args.once)


def convert(args) -> int:
    from cardinal.data import convert as to_parquet
    from cardinal.progress import bar as progress_bar  # drawn on a terminal only

    with progress_bar(unit="rows", desc="converting") as bar:
        report = to_parquet(args.tsv, args.out, strict=args.strict, progress=bar.update)
    print(f"wrote {report['rows']:,} rows to {args.out}; skipped {report['bad_lines']} bad lines")
    for where in report["bad_examples"]:
        print(f"  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
