"""Sections from dicts and back: ``build`` makes a section's dataclass from a TOML table, naming
an unknown or mistyped key with its full name; ``as_dict`` writes the keys ``build`` reads.

A field's recipe key is its name, or its metadata's "key" where the name cannot be one (the
sub-table ``[consistency.async]`` is the field ``async_``); its metadata's "help" is its meaning,
which ``cardinal recipe show`` prints beside it."""

import copy
from dataclasses import MISSING, Field, fields, is_dataclass


def key(f: Field) -> str:
    """The recipe's name of a section's field."""
    return f.metadata.get("key", f.name)


def build(cls, values: dict, where: str):
    """A config dataclass from a dict, naming any unknown or mistyped key as ``where.key``."""
    if not isinstance(values, dict):
        raise ValueError(f"[{where}] must be a table, got {values!r}")
    known = {key(f): f for f in fields(cls)}
    kwargs = {}
    for name, value in values.items():
        f = known.get(name)
        if f is None:
            raise ValueError(f"unknown setting {where}.{name}; [{where}] takes {sorted(known)}")
        nested = f.default_factory() if f.default_factory is not MISSING else None
        if is_dataclass(nested):
            value = build(type(nested), value, f"{where}.{name}")
        else:
            if f.type == list[str] and isinstance(value, str):
                value = as_list(value)
            _check_type(f.type, value, f"{where}.{name}")
        kwargs[f.name] = value
    return cls(**kwargs)


def as_dict(obj) -> dict:
    """A section (or the whole recipe) as a dict by recipe keys, nested sections as tables."""
    return {key(f): as_dict(v) if is_dataclass(v := getattr(obj, f.name)) else copy.deepcopy(v) for f in fields(obj)}


def as_list(text: str) -> list[str]:
    """A file list written as one string: ``a.tsv``, ``a.tsv,b.tsv`` or ``[a.tsv,b.tsv]`` (what bash
    leaves of ``["a.tsv","b.tsv"]`` once it strips the quotes). A path holding a comma needs the
    TOML list with quoted strings, ``'data.train=["a,b.tsv"]'``, which arrives here as a list."""
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    items = (item.strip() for item in text.split(","))
    return [item[1:-1] if len(item) > 1 and item[0] == item[-1] and item[0] in "'\"" else item
            for item in items if item]


def _check_type(expected, value, name: str) -> None:
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          bool: lambda v: isinstance(v, bool), str: lambda v: isinstance(v, str),
          list[str]: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}.get(expected)
    if ok is not None and not ok(value):
        raise ValueError(f"{name} must be {getattr(expected, '__name__', expected)}, got {value!r}")
