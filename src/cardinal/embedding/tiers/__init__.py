"""Cold tiers (``base.py``): where a table's rows go when they leave RAM. One per file."""

from cardinal.embedding.tiers.base import ColdTier
from cardinal.embedding.tiers.rocks import RocksTier

__all__ = ["ColdTier", "RocksTier"]
