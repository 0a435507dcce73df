"""The value checks several sections share: sizes in bytes ("64MiB", "50%" is memory.py's) and
bounded integers, with the full key in the message."""

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def parse_bytes(value: int | str, name: str) -> int:
    """An int, or a string such as "64MiB", "1.5GB", "4096" (KB/MB/GB: powers of 10, KiB/MiB/GiB: of 2)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be an int or a size such as \"64MiB\", got {value!r}")
    if isinstance(value, int):
        n = value
    else:
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("kmgib")
        unit = text[len(number):]
        try:
            n = int(float(number) * _UNITS[unit])
        except (KeyError, ValueError):
            raise ValueError(f"{name} must be an int or a size such as \"64MiB\", \"1.5GB\", got {value!r}") from None
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return n


def check_int(value, name: str, least: int, most: int) -> None:
    """``value`` is an integer (not a bool) in [least, most], else a ValueError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:
        raise ValueError(f"{name} must be an integer in [{least}, {most}], got {value!r}")
