"""``[checkpoint]``: when a run saves, how many saves it keeps, and which are deltas."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = field(default=0, metadata={"help": "steps between checkpoints (0: none by steps)"})
    minutes: float = field(default=10.0, metadata={
        "help": "minutes between checkpoints, by worker 0's clock (0: none by time); a run always saves at its end "
                "and on SIGINT / SIGTERM. A save is a barrier (no pull ahead), so in async mode the steps it falls "
                "on change the numbers: set 0 for runs that must repeat bit for bit"})
    keep: int = field(default=1, metadata={
        "help": "the newest this many are kept; the best one is kept besides (and every checkpoint a kept delta "
                "applies on)"})
    full_every: int = field(default=1, metadata={
        "help": "one checkpoint in this many is full; the others are deltas: the rows pulled or pushed since the "
                "previous checkpoint and the ids deleted since (1: all full)"})

    def __post_init__(self):
        if self.every < 0:
            raise ValueError(f"checkpoint.every must be >= 0 (0: none by steps), got {self.every}")
        if self.keep < 1 or self.full_every < 1:
            raise ValueError("checkpoint.keep and checkpoint.full_every must be >= 1")
        if not 0 <= self.minutes < float("inf"):
            raise ValueError(f"checkpoint.minutes must be >= 0 (0: no checkpoints by time), got {self.minutes}")
