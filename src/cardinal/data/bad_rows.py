"""One way for every reader to report input it cannot use: file, row, reason.

Readers (TSV, Parquet, MovieLens) hand each bad row to ``BadRows.add`` as ``file:row: reason``
strings. Without ``strict`` a bad row is skipped and counted, and the first few are kept to
be named; with ``strict`` the first one stops the run. A share of bad rows above
``max_fraction`` also stops the run, once ``min_rows`` rows were read and at the end of the
data, because a file that is mostly garbage trains a model on almost nothing without saying so:

    bad = BadRows(strict=False, max_fraction=0.01)
    bad.add(["a.tsv:4: wrong column count"], rows_read=1000)   # counted, kept as an example
    bad.check()                                                 # 1 of 1000 = 0.1%: fine
"""

import logging

log = logging.getLogger(__name__)


class BadRows:
    def __init__(self, strict: bool = False, max_fraction: float = 1.0, keep: int = 10, min_rows: int = 1000):
        if not 0 <= max_fraction <= 1:
            raise ValueError(f"the largest share of bad rows must be in [0, 1], got {max_fraction}")
        self.strict, self.max_fraction, self.keep, self.min_rows = strict, max_fraction, keep, min_rows
        self.reset()

    def reset(self) -> None:
        """Forget what was counted (a reader that is read again counts again)."""
        self.rows, self.bad = 0, 0
        self.examples: list[str] = []

    def add(self, where: list[str], rows_read: int) -> None:
        """Count ``rows_read`` rows, of which ``where`` (``file:row: reason``) were bad."""
        if where and self.strict:
            raise ValueError(f"bad input row (data.strict): {where[0]}")
        self.rows += rows_read
        self.bad += len(where)
        self.examples += where[: max(0, self.keep - len(self.examples))]
        if self.rows >= self.min_rows:
            self.check()

    def check(self) -> None:
        """Raise if bad rows are more than ``max_fraction`` of the rows read so far."""
        if self.rows and self.bad > self.max_fraction * self.rows:
            raise ValueError(f"{self.bad} of {self.rows} input rows read are bad ({self.bad / self.rows:.1%}), "
                             f"more than data.max_bad_fraction = {self.max_fraction}; first: "
                             f"{'; '.join(self.examples[:3])}. Fix the data, or raise data.max_bad_fraction")

    def finish(self) -> None:
        """At the end of the data: check the share, and warn about what was skipped."""
        self.check()
        if self.bad:
            log.warning("skipped %d bad rows of %d; first: %s", self.bad, self.rows, "; ".join(self.examples[:3]))
