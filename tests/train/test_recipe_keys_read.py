"""Every recipe key is read somewhere outside the recipe's own definitions (issue 26 item 4):
a knob accepted and never read is the kind users complain of. A heuristic over the source text
(``.key`` or ``"key"``), so that a key nobody reads fails here, naming it."""

import dataclasses
import re
from pathlib import Path

from cardinal.train import config

SRC = Path(config.__file__).resolve().parents[1]
READ_BY_ITS_SECTION = {"ps.token_file": "PSConfig.token(), which servers and workers call"}


def keys(obj, prefix=""):
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from keys(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def test_every_recipe_key_is_read_somewhere():
    texts = [p.read_text() for p in SRC.rglob("*.py") if p.name != "config.py"]
    unread = [k for k in keys(config.load(None, [])) if k not in READ_BY_ITS_SECTION and not any(
        re.search(rf"\.{k.rsplit('.', 1)[-1]}\b|[\"']{k.rsplit('.', 1)[-1]}[\"']", t) for t in texts)]
    assert unread == [], f"recipe keys no code reads: {unread}"
