"""What a person watching a run sees: a bar on a terminal, plain lines anywhere else, and log
records (bad lines, strict-mode errors, server notices) that never land on the bar's line.

    setup_logging()                                  # once, in the command: records go through tqdm.write
    progress = Progress(total=120, desc="training")  # a bar on a terminal...
    progress.update(1)
    progress.set_postfix(loss="0.4412", samples_per_s="51,230")   # ...or, in a pipe or a file, this
    # training: step 10/120  loss 0.4412  samples/s 51,230  elapsed 0:00:04  ETA 0:00:44

A bar redrawn into a pipe becomes one line per refresh (``cardinal launch`` reads its workers'
output line by line, and splits on the bar's carriage returns too), so off a terminal the bar is
off and the trainer's log interval decides how many lines a run prints: one per interval.
"""

import datetime
import logging
import sys
import time

from tqdm import tqdm

FORMAT = "%(levelname)s %(name)s: %(message)s"


def is_terminal(stream=None) -> bool:
    """Whether ``stream`` (default: stderr, where bars go) is a terminal a bar can redraw in place."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class TqdmHandler(logging.Handler):
    """Writes records with ``tqdm.write``: the bar is cleared, the record printed on its own
    line, the bar redrawn below it. The stream is looked up at each record (stderr by default)."""

    def __init__(self, stream=None):
        super().__init__()
        self.stream = stream

    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream or sys.stderr)
        except Exception:  # as logging.StreamHandler does: a broken stream must not end the run
            self.handleError(record)


def setup_logging(level: int = logging.INFO, stream=None) -> TqdmHandler:
    """The root logger writes through tqdm (replacing an earlier call's handler, not stacking)."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, TqdmHandler)]:
        root.removeHandler(h)
    handler = TqdmHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def say(text: str, stream=None) -> None:
    """One line for the person (an error, the interrupted line) after closing the bars still
    drawn, so it is not printed onto a bar's line and no stale bar is redrawn below it."""
    for shown in list(getattr(tqdm, "_instances", ())):
        shown.close()
    print(text, file=stream or sys.stderr, flush=True)


def bar(**kwargs) -> tqdm:
    """A tqdm bar that is drawn only on a terminal (data generation, conversion)."""
    kwargs["disable"] = kwargs.get("disable", False) or not is_terminal(kwargs.get("file"))
    return tqdm(**kwargs)


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))


class Progress:
    """The training loop's progress: tqdm's ``update``/``set_postfix``/``close``, drawn as a bar
    on a terminal, else printed as one plain line per ``set_postfix`` (the log interval) with
    the step, the values given, and the ETA when the total is known."""

    def __init__(self, total: int | None, initial: int = 0, desc: str = "training", disable: bool = False,
                 file=None, terminal: bool | None = None):
        self.total, self.n, self.initial, self.desc, self.disable, self.file = total, initial, initial, desc, disable, file
        self.terminal = is_terminal(file) if terminal is None else terminal
        self.start = time.monotonic()
        self.first: tuple[float, int] | None = None  # (time, step) after the first step: the ETA leaves out start-up
        self.bar = tqdm(total=total, initial=initial, unit="step", desc=desc, file=file,
                        disable=disable or not self.terminal)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.first is None:
            self.first = (time.monotonic(), self.n)
        self.bar.update(n)

    def set_postfix(self, **values) -> None:
        if self.disable:
            return
        if self.terminal:
            self.bar.set_postfix(**values)
            return
        print(self.line(values), file=self.file or sys.stderr, flush=True)

    def line(self, values: dict) -> str:
        step = f"step {self.n}" + (f"/{self.total}" if self.total else "")
        parts = [f"{self.desc}: {step}", *(f"{k.replace('_per_', '/')} {v}" for k, v in values.items())]
        now = time.monotonic()
        parts.append(f"elapsed {_clock(now - self.start)}")
        if self.total and self.first and self.first[1] < self.n <= self.total:
            since, step = self.first
            parts.append(f"ETA {_clock((now - since) / (self.n - step) * (self.total - self.n))}")
        return "  ".join(parts)

    def close(self) -> None:
        self.bar.close()
