"""``cardinal recipe show``: a resolved recipe printed as TOML, each key with its meaning.

One source of truth for the meanings: each section's field metadata ("help", cardinal/recipe/),
and a sub-table's help on a comment line above its header. The model's and sparse optimizer's
own settings are shown with their defaults, from the model's signature and the optimizer's Config.

    [embedding]
    dim = 16  # ...
"""

import inspect
import json
import math
from dataclasses import fields, is_dataclass

from cardinal.recipe import Recipe
from cardinal.recipe.build import key


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


def _table(name: str, items: list[tuple[str, object, str]], out: list[str], about: str = "") -> None:
    out += ["", *([f"# {about}"] if about else []), f"[{name}]"]
    for k, v, note in items:
        if v is None:
            out.append(f"# {k}: not set{f'  ({note})' if note else ''}")
        else:
            out.append(f"{k} = {value(v)}" + (f"  # {note}" if note else ""))


def _dataclass(name: str, obj, out: list[str], about: str = "") -> None:
    nested = [f for f in fields(obj) if is_dataclass(getattr(obj, f.name))]
    _table(name, [(key(f), getattr(obj, f.name), f.metadata.get("help", "")) for f in fields(obj) if f not in nested],
           out, about)
    for f in nested:
        _dataclass(f"{name}.{key(f)}", getattr(obj, f.name), out, f.metadata.get("help", ""))


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
    items = [("name", spec["name"], f"one of {sorted(OPTIMIZERS)} (applied by the servers)")]
    for f in fields(config):
        given = f.name in spec
        items.append((f.name, spec[f.name] if given else f.default, f.metadata.get("help", "") or
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
            _dataclass(key(f), section, out, f.metadata.get("help", ""))
    return "\n".join(out) + "\n"
