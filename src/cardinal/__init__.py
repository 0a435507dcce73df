"""Cardinal: parameter-server training for CTR models whose embedding tables outgrow one machine."""

__version__ = "0.1.0"
