"""Shared by the benchmarks: print a table, write it as results/<name>.md and .json."""

import json
import platform
import subprocess
import time
from pathlib import Path

import numpy as np
import torch

RESULTS = Path(__file__).with_name("results")


def machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
    except OSError:
        commit = ""
    return {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "python": platform.python_version(),
            "cpu": cpu_model(), "cores": __import__("os").cpu_count(),
            "torch": torch.__version__, "numpy": np.__version__}


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fmt(value) -> str:
    if isinstance(value, float):
        if value == 0 or 0.01 <= abs(value) < 1e5:
            return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write(name: str, title: str, rows: list[dict], notes: list[str], extra: dict | None = None,
          header: list[str] | None = None) -> None:
    """Print ``rows`` as a table and save results/<name>.md and results/<name>.json; ``header`` lines
    (what every row shares, e.g. the recipe) go between the title and the table, ``notes`` after it."""
    columns = list(rows[0])
    cells = [[fmt(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = lambda vals: "| " + " | ".join(v.rjust(w) for v, w in zip(vals, widths)) + " |"
    table = [line(columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells)]
    info = machine()
    text = "\n".join([f"# {title}", "", *(f"{h}  " for h in header or []), *([""] if header else []),
                      *table, "", *(f"- {n}" for n in notes), "",
                      f"_{info['date']}, commit {info['commit']}, {info['cores']} cores ({info['cpu']}), "
                      f"Python {info['python']}, torch {info['torch']}_", ""])
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(text)
    (RESULTS / f"{name}.json").write_text(json.dumps({"title": title, "machine": info, "header": header or [],
                                                      "rows": rows, "notes": notes, **(extra or {})}, indent=1))
