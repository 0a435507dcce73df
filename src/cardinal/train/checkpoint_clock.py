"""Time-based checkpoints: a run saves every ``checkpoint.minutes`` (by default), so a
crash, a kill or a lost machine costs at most that much work even when nobody set
``checkpoint.every``.

One clock decides for every worker: worker 0's. Its ``due()`` is summed with the step's batch
size in the all-reduce each step already makes, and every other worker contributes 0, so all
workers save at the same step whatever their own clocks say.
"""

import time


class CheckpointClock:
    def __init__(self, minutes: float, leader: bool, now=time.monotonic):
        self.seconds = minutes * 60.0
        self.leader, self.now = leader, now
        self.restart()

    def restart(self) -> None:
        """A checkpoint was just saved: the interval starts again."""
        self.since = self.now()

    def due(self) -> float:
        """1.0 when worker 0's interval has passed (0 turns the clock off), else 0.0."""
        return float(self.leader and self.seconds > 0 and self.now() - self.since >= self.seconds)
