"""What a run leaves behind: metrics.jsonl as it goes, curves.png and summary.json at the end."""

import json
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: Path):
        self.path = run_dir / "metrics.jsonl"

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


def plot_curves(records: list[dict], out: Path, title: str, best_auc: float | None = None) -> None:
    """Training loss and evaluation AUC against steps (and the best AUC possible, when known)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_auc" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    a.plot([r["step"] for r in train], [r["loss"] for r in train], color="tab:blue")
    a.set(xlabel="step", ylabel="training logloss", title="loss")
    b.plot([r["step"] for r in evals], [r["eval_auc"] for r in evals], "o-", color="tab:orange", label="model")
    if best_auc is not None:
        b.axhline(best_auc, color="gray", linestyle="--", label=f"teacher {best_auc:.3f}")
    b.legend(loc="best")
    b.set(xlabel="step", ylabel="AUC", title="evaluation AUC")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
