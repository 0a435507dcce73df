"""The ``cardinal`` command. Few flags: every knob is a recipe value, set with ``--set``.

    cardinal train [RECIPE] [--set section.key=value ...] [--resume RUN_DIR]
    cardinal eval RUN_DIR [--checkpoint STEP_DIR] [--set data.eval=FILE ...]
    cardinal generate OUT_DIR [--set key=value ...]        (keys of [data.synthetic])
    cardinal convert TSV [TSV ...] --out FILE.parquet [--strict]
    cardinal server [RECIPE] --shard I/N --data-dir DIR [--port P] [--host H] [--set ...]
    cardinal launch --servers S --workers W -- [RECIPE] [--set ...] [--resume RUN_DIR]

Every command's exit status says whether it succeeded: 0 when it did; 2 for an error the user
can fix (bad recipe or data, a run that diverged or trained nothing), named on one line of
stderr; 1 (a traceback) for anything else; ``launch`` exits with its first failing worker's code.
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cardinal", description="Parameter-server training for CTR models.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train a recipe on the embedded parameter server")
    t.add_argument("recipe", nargs="?", default="criteo_synthetic", help="a shipped recipe name or a TOML path")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a recipe value")
    t.add_argument("--resume", metavar="RUN_DIR", help="go on from the newest checkpoint of a run")
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
    c = sub.add_parser("convert", help="convert Criteo TSV files to Parquet")
    c.add_argument("tsv", nargs="+")
    c.add_argument("--out", required=True)
    c.add_argument("--strict", action="store_true", help="stop at the first bad line")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        commands = {"train": train, "eval": evaluate, "generate": generate, "convert": convert, "server": server,
                    "launch": launch}
        return commands[args.command](args)
    except ValueError as e:  # what the user can change; anything else (a bug) is a traceback (exit 1)
        print(f"cardinal {args.command}: error: {e}", file=sys.stderr)
        return 2


def train(args) -> int:
    from cardinal.train import Trainer, config

    shared_dir = os.environ.get("CARDINAL_RUN_DIR")  # set for every worker of a job
    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "recipe.json").exists():
            raise ValueError(f"{run_dir} is not a run directory (no recipe.json)")
        recipe = config.from_dict(_apply(json.loads((run_dir / "recipe.json").read_text()), args.set))
    else:
        recipe = config.load(args.recipe, args.set)
        if shared_dir:
            run_dir = Path(shared_dir)
        elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise ValueError("several workers need one run directory: set CARDINAL_RUN_DIR for all of them")
        else:
            run_dir = Path(recipe.train.run_dir) / f"{recipe.train.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    print(f"run directory: {run_dir}")
    summary = Trainer(recipe, run_dir).fit(resume=bool(args.resume))
    if int(os.environ.get("RANK", "0")) == 0:
        _print_summary(summary)
    return 0


def _apply(raw: dict, overrides: list[str]) -> dict:
    from cardinal.train.config import parse_override

    for text in overrides:
        keys, value = parse_override(text)
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return raw


def _print_summary(s: dict) -> None:
    line = f"AUC {s['eval_auc']:.4f}  logloss {s['eval_logloss']:.4f}  {s['samples_per_s']:,.0f} samples/s  {s['steps']} steps"
    if "baseline_lr_auc" in s:
        line += f"  (lr baseline AUC {s['baseline_lr_auc']:.4f})"
    if "teacher_eval_auc" in s:
        line += f"  (teacher AUC {s['teacher_eval_auc']:.4f})"
    if s.get("best_step") is not None and s["best_step"] != s["steps"]:
        line += f"\nthe kept model is step {s['best_step']}'s (last step: AUC {s['last_eval_auc']:.4f})"
    if s.get("stopped_early"):
        line += f"\n{s['stopped_early']}"
    print(line)


def evaluate(args) -> int:
    """The run's best checkpoint (checkpoints/best.json), else its newest, or ``--checkpoint``; on
    the run's eval data or, with ``--set data.eval=...``, on other data. Prints one JSON line."""
    from cardinal.train import Trainer, config
    from cardinal.train.best import best_checkpoint

    run_dir = Path(args.run_dir)
    if not (run_dir / "recipe.json").exists():
        raise ValueError(f"{run_dir} is not a run directory (no recipe.json)")
    for text in args.set:
        keys, _ = config.parse_override(text)
        if len(keys) != 2 or keys[0] != "data" or not keys[1].startswith("eval"):
            raise ValueError(f"--set {text}: `cardinal eval` changes only the eval data (data.eval, "
                             f"data.eval_batch_size); the model is the run's recipe.json")
    recipe = config.from_dict(_apply(json.loads((run_dir / "recipe.json").read_text()), args.set))
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
    from cardinal.train.config import build

    cfg = build(SyntheticConfig, dict(_apply({}, args.set)), "data.synthetic")
    from cardinal.data.synthetic import generate as write

    with tqdm(total=cfg.rows + cfg.eval_rows, unit="rows", desc="generating") as bar:
        report = write(args.out_dir, cfg, progress=bar.update)
    print(f"teacher AUC on eval: {report['eval']['teacher_auc']:.4f} (logloss {report['eval']['teacher_logloss']:.4f}, "
          f"click rate {report['eval']['click_rate']:.3f}); files in {args.out_dir}")
    return 0


def launch(args) -> int:
    from cardinal.launch import launch as run

    rest = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    return run(args.servers, args.workers, rest)


def server(args) -> int:
    from cardinal.ps import ShardStore
    from cardinal.ps.server import ServerOptions, run
    from cardinal.train import config, tables

    shard, sep, n = args.shard.partition("/")
    if not (sep and shard.isdigit() and n.isdigit() and 0 <= int(shard) < int(n)):
        raise ValueError(f"--shard takes I/N with 0 <= I < N, got {args.shard!r}")
    recipe = config.load(args.recipe, args.set)
    ps = recipe.ps
    store = ShardStore(tables.store_config(recipe), int(shard), int(n), ps.store_limits())
    options = ServerOptions(host=args.host, port=args.port, tls_cert=ps.tls_cert or None, tls_key=ps.tls_key or None,
                            max_message_mb=ps.max_message_mb, max_concurrency=ps.max_concurrent_calls)
    return run(store, args.data_dir, ps.job, ps.token(), options)


def convert(args) -> int:
    from cardinal.data import convert as to_parquet

    with tqdm(unit="rows", desc="converting") as bar:
        report = to_parquet(args.tsv, args.out, strict=args.strict, progress=bar.update)
    print(f"wrote {report['rows']:,} rows to {args.out}; skipped {report['bad_lines']} bad lines")
    for where in report["bad_examples"]:
        print(f"  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
