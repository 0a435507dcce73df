"""Row codecs, shared by the wire and row storage: ``get(name)`` gives one.

    name   bytes a value   error (relative to the row)           NaN / inf
    fp32   4               none                                  kept
    fp16   2               <= 2**-11 of each value (|x| < 65504)  kept (overflow -> inf)
    bf16   2               <= 2**-8 of each value                kept (NaN canonical)
    int8   1 + 4 a row     <= max|x| / 254 for every value       refused
                           (rows of subnormals: steps of the least float32, 1.4e-45)
"""

from cardinal.codecs.base import Codec
from cardinal.codecs.bf16 import BF16
from cardinal.codecs.fp16 import FP16
from cardinal.codecs.fp32 import FP32
from cardinal.codecs.int8 import INT8

CODECS: dict[str, Codec] = {c.name: c for c in (FP32(), FP16(), BF16(), INT8())}
NAMES = tuple(CODECS)


def get(name: str) -> Codec:
    codec = CODECS.get(name) if isinstance(name, str) else None
    if codec is None:
        raise ValueError(f"unknown codec {name!r}; the codecs are {list(CODECS)}")
    return codec


__all__ = ["Codec", "CODECS", "NAMES", "get"]
