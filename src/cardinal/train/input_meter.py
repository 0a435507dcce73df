"""What feeding the step costs: host-to-device bytes per step, and the share of the step spent
waiting for input. Both go on every metrics.jsonl line (over the steps since the line before)
and in summary.json (over the run).

    h2d_bytes_per_step   bytes staged onto the device (rows, inverse, offsets, dense, labels;
                         0 on the CPU path, where nothing is copied)
    input_wait_share     (waits for batches + waits for pulled rows [+ on CUDA, the time the
                         compute stream waited for staged copies, timed with CUDA events])
                         / the steps' wall time

Evaluations and the checks before a checkpoint pull and stage too; they are not training
steps, so what they add is set aside (``excluded()``).
"""

from contextlib import contextmanager

from cardinal.worker.device import DeviceRows


class InputMeter:
    def __init__(self, staging: DeviceRows | None, timings: list[dict]):
        """``timings``: the dicts of seconds that hold "data" (the trainer's) and "pull_wait"
        (each collection's); read, never written."""
        self.staging, self.timings = staging, timings
        self.steps = 0            # training steps, counted by the trainer
        self._gpu_wait = 0.0
        self._excluded = [0, 0.0]  # bytes, seconds of waits outside training steps
        self._last = (0, 0.0, 0.0, 0)

    def _totals(self) -> tuple[int, float]:
        if self.staging is not None:
            self._gpu_wait += self.staging.wait_seconds()
        wait = sum(t.get("data", 0.0) + t.get("pull_wait", 0.0) for t in self.timings) + self._gpu_wait
        h2d = self.staging.h2d_bytes if self.staging is not None else 0
        return h2d - self._excluded[0], wait - self._excluded[1]

    @contextmanager
    def excluded(self):
        """What the block stages and waits for is no training step's."""
        h2d, wait = self._totals()
        try:
            yield
        finally:
            h2d_after, wait_after = self._totals()
            self._excluded[0] += h2d_after - h2d
            self._excluded[1] += wait_after - wait

    @staticmethod
    def _rates(h2d: float, wait: float, seconds: float, steps: int) -> dict:
        return {"h2d_bytes_per_step": h2d / steps if steps else 0.0,
                "input_wait_share": min(1.0, wait / seconds) if seconds > 0 else 0.0}

    def metrics(self, train_time: float) -> dict:
        """Over the steps since the last call (``train_time``: the run's training seconds so far)."""
        h2d, wait = self._totals()
        last = self._last
        self._last = (h2d, wait, train_time, self.steps)
        return self._rates(h2d - last[0], wait - last[1], train_time - last[2], self.steps - last[3])

    def summary(self, train_time: float) -> dict:
        """Over this run's training steps."""
        h2d, wait = self._totals()
        return {**self._rates(h2d, wait, train_time, self.steps), "h2d_bytes": h2d}
