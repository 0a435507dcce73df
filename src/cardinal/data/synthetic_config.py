"""The settings of the synthetic data set (``[data.synthetic]``), apart from the generator so a
recipe can be read and checked without importing numpy or torch (``cardinal.data.synthetic``)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SyntheticConfig:
    rows: int = field(default=1_000_000, metadata={"help": "training rows"})
    eval_rows: int = field(default=100_000, metadata={"help": "eval rows, drawn from the same teacher"})
    skew: float = field(default=1.1, metadata={
        "help": "Zipf exponent of each field's ids (> 1; larger: fewer ids carry more rows)"})
    vocab: int = field(default=1_000_000, metadata={
        "help": "ids of the largest field (fields span 10 ... vocab, log-spaced)"})
    missing: float = field(default=0.03, metadata={"help": "share of values left empty"})
    seed: int = field(default=0, metadata={"help": "the teacher's weights and the rows drawn"})

    def __post_init__(self):
        if self.rows < 1 or self.eval_rows < 1:
            raise ValueError("synthetic rows and eval_rows must be >= 1")
        if not self.skew > 1:
            raise ValueError(f"synthetic skew must be > 1 (Zipf exponent), got {self.skew}")
        if self.vocab < 10:
            raise ValueError(f"synthetic vocab must be >= 10, got {self.vocab}")
        if not 0 <= self.missing < 1:
            raise ValueError(f"synthetic missing must be in [0, 1), got {self.missing}")
