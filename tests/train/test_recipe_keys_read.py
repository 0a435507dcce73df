"""Every recipe key is read somewhere outside the recipe's own definitions (issue 26 item 4):
a knob accepted and never read is the kind users complain of. A heuristic over the source text
(``.key`` or ``"key"``, by the field's attribute name), so that a key nobody reads fails here,
naming it. The definitions are cardinal/recipe/: a section reading its own key is no reader."""

import dataclasses
import re
from pathlib import Path

import cardinal
from cardinal.recipe import load
from cardinal.recipe.build import key

SRC = Path(cardinal.__file__).resolve().parent
DEFINITIONS = SRC / "recipe"
READ_BY_ITS_SECTION = {"ps.token_file": "PSConfig.token(), which servers and workers call",
                       "consistency.mode": "ConsistencyConfig.resolve(), which the trainer calls"}


def keys(obj, prefix=""):
    """(recipe key, attribute name) of every leaf of ``obj``."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from keys(value, f"{prefix}{key(f)}.")
        else:
            yield f"{prefix}{key(f)}", f.name


def test_every_recipe_key_is_read_somewhere():
    texts = [p.read_text() for p in SRC.rglob("*.py") if DEFINITIONS not in p.parents]
    unread = [k for k, name in keys(load(None, [])) if k not in READ_BY_ITS_SECTION and not any(
        re.search(rf"\.{name}\b|[\"']{name}[\"']", t) for t in texts)]
    assert unread == [], f"recipe keys no code reads: {unread}"
