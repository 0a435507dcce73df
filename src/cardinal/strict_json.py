"""JSON that a user writes by hand (sharding plan files), read strictly.

``json.loads`` takes a key named twice in one object silently (the last wins: a plan naming a
table twice would place it where its second entry says, with no word), and very deep nesting
fails with a ``RecursionError`` that names nothing. Here both are ``ValueError``s saying what
is wrong, for the caller to prefix with the file's name; nesting is bounded before parsing, so
the parser never recurses far.
"""

import json
import re

MAX_DEPTH = 32  # a plan nests 4 levels: {"tables": {"C1": [{"servers": [0, 1]}]}}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def loads(text: str, max_depth: int = MAX_DEPTH):
    """``json.loads(text)``, refusing keys named twice in one object and nesting past ``max_depth``."""
    depth = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except RecursionError:  # not reached past the check above; kept as the guarantee
        raise ValueError(f"nested too deep to read (at most {max_depth} levels)") from None


def _unique(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            shown = repr(key) if len(key) <= 64 else f"{key[:64]!r}..."
            raise ValueError(f"{shown} is named twice in one object (only the last would count): name it once")
        out[key] = value
    return out
