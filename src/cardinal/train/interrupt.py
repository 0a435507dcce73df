"""Ctrl-C and SIGTERM end a run at a step boundary, with a committed checkpoint, not a traceback.

    stop = StopFlag()
    trainer = Trainer(recipe, run_dir, stop=stop)
    with stop.catching_signals():        # SIGINT / SIGTERM only set a flag from here on
        trainer.fit()                    # raises Interrupted after saving the step it stopped at

The handler only records the signal: the loop reads it once per step, in the all-reduce every
step already makes (``flags()`` beside the batch size), so W workers agree on the same step
even when only one of them was signalled (torchrun, a shell's process group, a launcher that
forwards the signal a moment apart). That step is trained without prefetching the next batch,
checkpointed like any other (committed or absent, see ``checkpoint/write.py``), and the run ends with
``Interrupted``: the command prints one line and exits 128 + the signal (130, 143).

A second signal while that happens is told to wait; a third aborts at once (KeyboardInterrupt):
the checkpoint being written is then never committed, and the newest committed one stays.
"""

import signal
import sys
from contextlib import contextmanager
from pathlib import Path

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The run stopped on a signal at ``step``, after a committed checkpoint of that step."""

    def __init__(self, step: int, signum: int, run_dir: Path):
        self.step, self.signum, self.run_dir = step, signum, Path(run_dir)
        super().__init__(f"interrupted at step {step}; resume with: cardinal train --resume {run_dir}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopFlag:
    """What this process was asked (``requested``: a signal number, or 0) and what the workers
    agreed (``agreed``), kept apart so a worker acts only on the step every worker acts on."""

    def __init__(self):
        self.requested = 0
        self.agreed = 0
        self.repeats = 0

    def request(self, signum: int, frame=None) -> None:
        """The signal handler: records the first signal; later ones say what is happening."""
        if not self.requested:
            self.requested = signum
            return
        self.repeats += 1
        if self.repeats >= 2:
            raise KeyboardInterrupt  # a checkpoint half written is never committed (checkpoint/write.py)
        print("cardinal: stopping: finishing the step and saving a checkpoint; signal again to abort without it",
              file=sys.stderr, flush=True)

    def flags(self) -> tuple[float, float]:
        """This worker's (SIGINT seen, SIGTERM seen), to be summed over the workers with the step's batch size."""
        return float(self.requested == signal.SIGINT), float(self.requested == signal.SIGTERM)

    def agree(self, interrupts: float, terms: float) -> bool:
        """The summed ``flags()`` of every worker: True (on every worker alike) when any was signalled.
        A worker that saw no signal itself exits as its peers do (SIGINT if any saw one)."""
        if interrupts or terms:
            self.agreed = self.requested or (signal.SIGINT if interrupts else signal.SIGTERM)
        return bool(self.agreed)

    def raise_if_agreed(self, step: int, run_dir: Path) -> None:
        if self.agreed:
            raise Interrupted(step, self.agreed, run_dir)

    @contextmanager
    def catching_signals(self):
        """SIGINT and SIGTERM set this flag inside the block (main thread only); the old handlers after."""
        previous = {s: signal.signal(s, self.request) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
