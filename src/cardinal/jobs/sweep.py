"""``cardinal sweep``: train every combination of a few recipe values and tabulate eval AUC.

    cardinal sweep criteo_synthetic --grid sparse_optimizer.lr=0.02,0.05 --grid embedding.dim=16,32 --parallel 2

Each setting is a normal ``cardinal train`` in its own process (so a crash or a diverged run
costs one row, not the sweep) writing into its own run directory under one sweep directory:

    runs/sweep-criteo_synthetic-20261123-031500/
        00-sparse_optimizer.lr=0.02,embedding.dim=16/   recipe.json, metrics, summary.json, log.txt
        01-...
        sweep.md   sweep.json                           one row per setting, best eval AUC first

Every setting is validated in this process before anything runs (a bad value is a row with
its error), and generated data is made here once, before the children start, so parallel
children never race to write it. With ``--parallel N`` each child gets ``train.threads =
cores // N`` unless the sweep sets train.threads itself.
"""

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from cardinal.parallel import available_cores
from cardinal.recipe import load, parse_override

DEFAULT_TIMEOUT_S = 6 * 3600.0  # one setting's deadline: a hung child becomes an error row


@dataclass
class Setting:
    """One combination of grid values and what became of it."""
    index: int
    values: dict[str, object]      # grid key -> value (TOML-typed)
    overrides: list[str]           # the --set texts of this combination, grid values last
    run_dir: Path | None = None
    result: dict = field(default_factory=dict)  # eval_auc, eval_logloss, samples_per_s, steps, wall_s
    error: str = ""

    def label(self) -> str:
        return ", ".join(f"{k}={_toml(v)}" for k, v in self.values.items())


def split_values(text: str) -> list[str]:
    """``0.1,0.2`` -> ["0.1", "0.2"]; commas inside brackets or quotes stay (``[256,128],[64]``)."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    if depth or quote:
        raise ValueError(f"--grid value list {text!r} has an unclosed bracket or quote")
    return [p.strip() for p in parts]


def parse_grid(grids: list[str]) -> dict[str, list[str]]:
    """``["a.b=1,2", "c.d=x"]`` -> {"a.b": ["1", "2"], "c.d": ["x"]}: raw texts, parsed as --set values."""
    out: dict[str, list[str]] = {}
    for text in grids:
        key, sep, raw = text.partition("=")
        key = key.strip()
        if not sep or not key or "." not in key:
            raise ValueError(f"--grid takes section.key=v1,v2,..., got {text!r}")
        if key in out:
            raise ValueError(f"--grid {key} is given twice; list all its values in one --grid {key}=v1,v2")
        values = split_values(raw)
        if any(v == "" for v in values):
            raise ValueError(f"--grid {text!r} has an empty value; separate values with single commas")
        out[key] = values
    if not out:
        raise ValueError("cardinal sweep needs at least one --grid section.key=v1,v2")
    return out


def settings(grid: dict[str, list[str]], base: list[str]) -> list[Setting]:
    """Every combination of the grid, in order (the last key varies fastest)."""
    keys = list(grid)
    out = []
    for i, combo in enumerate(itertools.product(*(grid[k] for k in keys))):
        overrides = [*base, *(f"{k}={v}" for k, v in zip(keys, combo))]
        values = {k: parse_override(f"{k}={v}")[1] for k, v in zip(keys, combo)}
        out.append(Setting(i, values, overrides))
    return out


def sweep_dir(root: Path, name: str) -> Path:
    """A new directory ``root/sweep-NAME-TIME[-k]`` (created here, so two sweeps never share one)."""
    root.mkdir(parents=True, exist_ok=True)
    stem = f"sweep-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    for k in itertools.count():
        path = root / (stem if k == 0 else f"{stem}-{k}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise AssertionError("unreachable")


def prepare(recipe: str, items: list[Setting], out: Path, threads: int | None) -> None:
    """Validate each setting's recipe in this process (a bad one becomes an error row), fix its
    run directory and thread budget, and generate each synthetic data set once."""
    from cardinal.train.readers import ensure_synthetic, synthetic_dir  # torch: only when a sweep runs

    made = set()
    for s in items:
        s.run_dir = out / _dir_name(s)
        if threads is not None and not any(o.startswith("train.threads=") for o in s.overrides):
            s.overrides.insert(0, f"train.threads={threads}")
        try:
            loaded = load(recipe, s.overrides)
        except ValueError as e:
            s.error = str(e)
            continue
        if loaded.data.format == "synthetic" and synthetic_dir(loaded.data) not in made:
            ensure_synthetic(loaded.data)
            made.add(synthetic_dir(loaded.data))


def _dir_name(s: Setting) -> str:
    text = ",".join(f"{k}={_toml(v)}" for k, v in s.values.items())
    safe = "".join(c if c.isalnum() or c in "._=,-" else "_" for c in text)
    return f"{s.index:02d}-{safe[:80]}"


def _toml(v) -> str:
    return json.dumps(v) if isinstance(v, (list, dict, bool)) else str(v)


def run_one(recipe: str, s: Setting, timeout_s: float) -> Setting:
    """Train one setting as ``cardinal train`` in a child process; its output goes to log.txt."""
    if s.error:
        return s
    s.run_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "cardinal.cli", "train", recipe, *sum((["--set", o] for o in s.overrides), [])]
    env = {**os.environ, "CARDINAL_RUN_DIR": str(s.run_dir)}  # the child trains into exactly this directory
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)  # each setting is a job of one worker, whatever launched the sweep
    start = time.monotonic()
    with open(s.run_dir / "log.txt", "wb") as log:
        with subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env) as done:
            _children.add(done)  # a SIGTERM of the sweep is forwarded to it (see `run`)
            try:
                done.wait(timeout_s)
            except subprocess.TimeoutExpired:
                done.kill()
                done.wait()
                s.error = f"timed out after {timeout_s:.0f} s (see {s.run_dir / 'log.txt'})"
                return s
            finally:
                _children.discard(done)
    wall = time.monotonic() - start
    summary = s.run_dir / "summary.json"
    if done.returncode != 0 or not summary.exists():
        s.error = f"exit {done.returncode}: {_last_line(s.run_dir / 'log.txt')}"
        return s
    got = json.loads(summary.read_text())
    s.result = {k: got.get(k) for k in ("eval_auc", "eval_logloss", "samples_per_s", "steps", "train_seconds")}
    s.result["wall_s"] = wall
    if "teacher_eval_auc" in got:
        s.result["teacher_eval_auc"] = got["teacher_eval_auc"]
    return s


_children: set[subprocess.Popen] = set()  # the settings training now


def _terminate(signum, frame) -> None:
    """SIGTERM of the sweep: the children save and stop (they are not in a terminal's process group
    when the sweep alone was signalled, so they would train on, orphaned); no further setting starts."""
    for child in list(_children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    raise KeyboardInterrupt


def _last_line(log: Path) -> str:
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower()]
    return (errors or lines or ["no output"])[-1].strip()[:300]


def run(recipe: str, grids: list[str], base: list[str], parallel: int = 1, out_root: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, echo=print) -> dict:
    """The sweep: every combination, ``parallel`` at a time; returns the table (also written as
    sweep.json and sweep.md in the sweep directory)."""
    if parallel < 1:
        raise ValueError(f"--parallel must be >= 1, got {parallel}")
    if not timeout_s > 0:
        raise ValueError(f"--timeout must be > 0 seconds, got {timeout_s}")
    items = settings(parse_grid(grids), base)
    first = load(recipe, base)  # the base recipe must load, else nothing is worth running
    recipe = str(Path(recipe).resolve()) if Path(recipe).exists() else recipe
    out = sweep_dir(Path(out_root or first.train.run_dir), first.train.name)
    threads = max(1, available_cores() // parallel) if parallel > 1 else None
    echo(f"sweep directory: {out} ({len(items)} settings, {parallel} at a time)")
    prepare(recipe, items, out, threads)
    start = time.monotonic()
    pool = ThreadPoolExecutor(parallel)
    previous = signal.signal(signal.SIGTERM, _terminate) if threading.current_thread() is threading.main_thread() \
        else None
    try:
        for s in pool.map(lambda s: run_one(recipe, s, timeout_s), items):
            auc = s.result.get("eval_auc")
            echo(f"[{s.index + 1}/{len(items)}] {s.label()}: " + (f"AUC {auc:.4f}" if auc is not None else s.error))
    finally:  # Ctrl-C (which the children get too) or SIGTERM (forwarded) starts no further setting
        pool.shutdown(wait=True, cancel_futures=True)
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    table = tabulate(recipe, items, base, parallel, time.monotonic() - start)
    (out / "sweep.json").write_text(json.dumps(table, indent=1))
    (out / "sweep.md").write_text(markdown(table))
    echo(markdown(table))
    return {**table, "dir": str(out)}


def tabulate(recipe: str, items: list[Setting], base: list[str], parallel: int, wall_s: float) -> dict:
    """Rows sorted by eval AUC, best first; failed settings last, in grid order."""
    rows = [{"setting": s.values, "run_dir": str(s.run_dir) if s.run_dir else None,
             **({"error": s.error} if s.error else s.result)} for s in items]
    rows.sort(key=lambda r: -r["eval_auc"] if r.get("eval_auc") is not None else float("inf"))
    teacher = next((r["teacher_eval_auc"] for r in rows if "teacher_eval_auc" in r), None)
    return {"recipe": recipe, "base": base, "parallel": parallel, "wall_s": wall_s, "teacher_eval_auc": teacher,
            "rows": rows}


def markdown(table: dict) -> str:
    keys = list(table["rows"][0]["setting"]) if table["rows"] else []
    lines = [f"recipe `{table['recipe']}`" + "".join(f" `--set {b}`" for b in table["base"])
             + f"; {table['parallel']} at a time; {table['wall_s']:.0f} s in all"]
    if table["teacher_eval_auc"] is not None:
        lines[0] += f"; the planted teacher's eval AUC {table['teacher_eval_auc']:.4f}"
    lines += ["", "| " + " | ".join([*keys, "eval AUC", "logloss", "samples/s", "steps", "wall s"]) + " |",
              "|" + "---|" * (len(keys) + 5)]
    for r in table["rows"]:
        cells = [_toml(r["setting"][k]) for k in keys]
        if "error" in r:
            cells += [f"failed: {r['error']}".replace("|", "/"), "", "", "", ""]
        else:
            cells += [f"{r['eval_auc']:.4f}", f"{r['eval_logloss']:.4f}", f"{r['samples_per_s']:,.0f}",
                      str(r["steps"]), f"{r['wall_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
