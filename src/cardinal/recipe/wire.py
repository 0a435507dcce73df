"""``[wire]``: codecs (cardinal/codecs) per direction, on every transport (in-process too, so a
recipe gives the same numbers embedded and over gRPC); servers keep float32 and full optimizer
state."""

from dataclasses import dataclass, field

CODECS = ("fp32", "fp16", "bf16", "int8")  # = cardinal.codecs.NAMES (not imported here: numpy)


@dataclass(frozen=True)
class WireConfig:
    pull: str = field(default="fp32", metadata={
        "help": 'rows pulled: "fp32", "fp16", "bf16" (half the bytes) or "int8" (a scale a row)'})
    push: str = field(default="fp32", metadata={"help": "gradients pushed: the same choices"})

    def __post_init__(self):
        for key in ("pull", "push"):
            if getattr(self, key) not in CODECS:
                raise ValueError(f"wire.{key} must be one of {list(CODECS)}, got {getattr(self, key)!r}")
