"""Cardinal: parameter-server training for CTR models whose embedding tables outgrow one machine."""

from cardinal import omp_wait  # noqa: F401  (first: before anything imports torch)

__version__ = "0.1.0"
