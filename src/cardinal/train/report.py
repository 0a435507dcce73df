"""What a run leaves behind: metrics.jsonl as it goes (and TensorBoard's files on request),
curves.png and summary.json at the end."""

import json
from pathlib import Path


class MetricsLog:
    def __init__(self, run_dir: Path, tensorboard: bool = False):
        self.path = run_dir / "metrics.jsonl"
        self.tensorboard = None
        if tensorboard:
            from cardinal.train.tensorboard import TensorBoardLog  # optional package: only when asked for

            self.tensorboard = TensorBoardLog(run_dir / "tensorboard")

    def write(self, record: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.tensorboard is not None:
            self.tensorboard.write(record)

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]


def panels(records: list[dict]) -> dict[str, tuple[list, list]]:
    """The curves drawn, by panel title: (steps, values) of training loss, eval AUC, eval logloss.
    Eval logloss beside AUC shows what AUC hides: a model whose ranking holds while its
    probabilities drift (overfitting shows in logloss first)."""
    def series(key):
        kept = [r for r in records if key in r]
        return [r["step"] for r in kept], [r[key] for r in kept]

    return {"training loss": series("loss"), "evaluation AUC": series("eval_auc"),
            "evaluation logloss": series("eval_logloss")}


def plot_curves(records: list[dict], out: Path, title: str, best_auc: float | None = None) -> list[str]:
    """Training loss, evaluation AUC (and the best AUC possible, when known) and evaluation
    logloss against steps; returns the panels' titles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = panels(records)
    fig, axes = plt.subplots(1, len(curves), figsize=(14, 3.8))
    styles = {"training loss": ("-", "tab:blue", "logloss"), "evaluation AUC": ("o-", "tab:orange", "AUC"),
              "evaluation logloss": ("o-", "tab:red", "logloss")}
    for ax, (name, (steps, values)) in zip(axes, curves.items()):
        style, color, ylabel = styles[name]
        ax.plot(steps, values, style, color=color, label="model")
        ax.set(xlabel="step", ylabel=ylabel, title=name)
        ax.grid(alpha=0.3)
    if best_auc is not None:
        axes[1].axhline(best_auc, color="gray", linestyle="--", label=f"teacher {best_auc:.3f}")
        axes[1].legend(loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [ax.get_title() for ax in axes]
