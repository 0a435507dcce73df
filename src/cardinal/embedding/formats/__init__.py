"""Row formats: how a table stores its values (``base.py``), chosen per table in the recipe.

    name   bytes a value    error of a stored value           memory of dim 16 + row-wise Adagrad
    fp32   4                none                              17 words
    fp16   2                <= 2**-11 relative (|x| < 65504)  9 words
    bf16   2                <= 2**-8 relative                 9 words
    int8   1 + 4 a row      <= max|x| / 127 of its row        6 words
(stochastic rounding: a bound on one rounding; the error's mean is zero.)

``chunked.py`` (FIITED) is not chosen by name: a table with ``chunks > 1`` stores its fp32
values in chunks that it frees and revives per row during training (one instance per table).
"""

from cardinal.embedding.formats.base import RowFormat
from cardinal.embedding.formats.bf16 import BF16
from cardinal.embedding.formats.chunked import Chunked
from cardinal.embedding.formats.fp16 import FP16
from cardinal.embedding.formats.fp32 import FP32
from cardinal.embedding.formats.int8 import INT8

FORMATS: dict[str, RowFormat] = {f.name: f for f in (FP32(), FP16(), BF16(), INT8())}


def get(name: str) -> RowFormat:
    fmt = FORMATS.get(name) if isinstance(name, str) else None
    if fmt is None:
        raise ValueError(f"unknown row format {name!r}; the formats are {list(FORMATS)}")
    return fmt


__all__ = ["FORMATS", "Chunked", "RowFormat", "get"]
