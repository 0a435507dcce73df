"""Admission filters (``base.py``): which new ids get a row. One policy per file.

    make_filter(AdmissionConfig(policy="count", threshold=3))   # exact counts
    make_filter(AdmissionConfig(policy="bloom", threshold=3))   # bounded memory
    make_filter(AdmissionConfig(policy="probability", probability=0.25))  # Monolith's
    make_filter(AdmissionConfig())                               # None: every id gets a row at once
"""

from cardinal.embedding.admission.base import AdmissionFilter, Decision
from cardinal.embedding.admission.bloom import BloomFilter
from cardinal.embedding.admission.count import CountFilter
from cardinal.embedding.admission.probability import ProbabilityFilter
from cardinal.recipe.admission import AdmissionConfig

FILTERS = {f.name: f for f in (CountFilter, BloomFilter, ProbabilityFilter)}


def make_filter(config: AdmissionConfig | None) -> AdmissionFilter | None:
    """The filter of ``config``'s policy; None for no config or policy "none"."""
    if config is None or config.policy == "none":
        return None
    return FILTERS[config.policy](config)


__all__ = ["AdmissionConfig", "AdmissionFilter", "Decision", "FILTERS", "make_filter"]
