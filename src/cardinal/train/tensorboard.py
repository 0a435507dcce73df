"""TensorBoard on request (``metrics.tensorboard = true``): the records of metrics.jsonl, as scalars.

``tensorboard`` is an optional package (torch's writer needs it, Cardinal does not), so asking for
it without the package is an error at the start of the run that says what to install, not a
traceback at the first record.
"""

from pathlib import Path

# the metrics.jsonl fields shown, and their TensorBoard tags
TAGS = {"loss": "train/loss", "samples_per_s": "train/samples_per_s", "eval_auc": "eval/auc",
        "eval_logloss": "eval/logloss"}


def open_writer(log_dir: Path):
    """torch's SummaryWriter on ``log_dir``; a ValueError naming ``pip install tensorboard`` without it."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:  # torch raises ImportError (or ModuleNotFoundError) when tensorboard is missing
        raise ValueError(f"metrics.tensorboard = true needs the tensorboard package ({e}): run "
                         f"`pip install tensorboard`, or set metrics.tensorboard = false") from None
    return SummaryWriter(log_dir=str(log_dir))


class TensorBoardLog:
    def __init__(self, log_dir: Path):
        self.writer = open_writer(log_dir)

    def write(self, record: dict) -> None:
        """One metrics record: each known field as a scalar at the record's step, flushed at once
        (a run that is killed keeps what it logged)."""
        for name, tag in TAGS.items():
            if name in record:
                self.writer.add_scalar(tag, float(record[name]), int(record["step"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
