"""``cardinal recipe show``: a resolved recipe printed as TOML, each key with its meaning.

One source of truth for the meanings: the comments beside the dataclass fields (config.py,
data/synthetic_config.py, each sparse optimizer's Config), read from the source here. A comment
on its own line at the field's indent introduces the fields below it; one indented deeper goes
on the comment of the field above. The model's and sparse optimizer's own settings are shown
with their defaults, from the model's signature and the optimizer's Config.

    [embedding]
    dim = 16  # ...
"""

import inspect
import json
import math
import re
from dataclasses import fields, is_dataclass

from cardinal.train.config import Recipe

FIELD = re.compile(r"^(\s+)(\w+)\s*:[^#]*?(?:#\s?(.*))?$")
COMMENT = re.compile(r"^(\s+)#\s?(.*)$")


def field_notes(cls) -> dict[str, str]:
    """{field name: the comment beside it (and its continuation lines)} from ``cls``'s source."""
    notes, lead, last, indent = {}, [], None, None
    for line in inspect.getsource(cls).splitlines()[1:]:
        if (m := COMMENT.match(line)) is not None:
            if last is not None and indent is not None and len(m.group(1)) > indent:
                notes[last] = f"{notes[last]} {m.group(2)}".strip()
            else:
                lead.append(m.group(2))
                last = None
            continue
        if (m := FIELD.match(line)) is None or m.group(2) == "def":
            if line.strip().startswith("def "):
                break
            continue
        last, indent = m.group(2), len(m.group(1))
        notes[last] = "; ".join(x for x in (" ".join(lead), m.group(3) or "") if x)
        lead = []
    return notes


def value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else "nan" if math.isnan(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):  # an inline table
        return "{" + ", ".join(f"{json.dumps(k)} = {value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {v!r}")


def _table(name: str, items: list[tuple[str, object, str]], out: list[str]) -> None:
    out += ["", f"[{name}]"]
    for key, v, note in items:
        if v is None:
            out.append(f"# {key}: not set{f'  ({note})' if note else ''}")
        else:
            out.append(f"{key} = {value(v)}" + (f"  # {note}" if note else ""))


def _dataclass(name: str, obj, out: list[str]) -> None:
    notes = field_notes(type(obj))
    nested = []
    _table(name, [(f.name, getattr(obj, f.name), notes.get(f.name, "")) for f in fields(obj)
                  if not is_dataclass(getattr(obj, f.name)) or nested.append(f.name)], out)
    for sub in nested:
        _dataclass(f"{name}.{sub}", getattr(obj, sub), out)


def _model(spec: dict, out: list[str]) -> None:
    from cardinal.models import MODELS

    cls = MODELS[spec["name"]]
    params = list(inspect.signature(cls.__init__).parameters.values())[4:]  # after self, n_dense, n_fields, dim
    items = [("name", spec["name"], f"one of {sorted(MODELS)}; its settings follow ({cls.__module__})")]
    for p in params:
        given = p.name in spec
        default = list(p.default) if isinstance(p.default, tuple) else p.default
        items.append((p.name, spec[p.name] if given else default, "" if given else "the model's default"))
    _table("model", items, out)


def _sparse_optimizer(spec: dict, out: list[str]) -> None:
    from cardinal.optim import OPTIMIZERS

    config = OPTIMIZERS[spec["name"]].Config
    notes = field_notes(config)
    items = [("name", spec["name"], f"one of {sorted(OPTIMIZERS)} (applied by the servers)")]
    for f in fields(config):
        given = f.name in spec
        items.append((f.name, spec[f.name] if given else f.default, notes.get(f.name, "") or
                       ("" if given else "the optimizer's default")))
    _table("sparse_optimizer", items, out)


def to_toml(recipe: Recipe) -> str:
    """The recipe as TOML that ``cardinal train RECIPE.toml`` reads back to the same recipe."""
    out = ["# the resolved recipe: every key, each with its meaning (cardinal train FILE.toml reads it back)"]
    for f in fields(recipe):
        section = getattr(recipe, f.name)
        if f.name == "model":
            _model(section, out)
        elif f.name == "sparse_optimizer":
            _sparse_optimizer(section, out)
        else:
            _dataclass(f.name, section, out)
    return "\n".join(out) + "\n"
