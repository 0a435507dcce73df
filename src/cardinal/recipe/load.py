"""Reading a recipe: a TOML file (a shipped name or a path) or a dict (a run's recipe.json),
``--set section.key=value`` overrides on top, then old keys refused (``moved.py``), unknown
sections and keys named, and each section built and checked (``build.py``).

An override's value is TOML, else a string (``--set model.hidden=[256,128]``,
``--set data.format=criteo``). ``--set model.name=...`` naming another model starts that model
from its own defaults, and ``--set sparse_optimizer.name=...`` another optimizer from its own
(hyper-parameters differ per optimizer); a warning names the settings left behind, so that a
run never trains, say, another MLP width unnoticed."""

import copy
import tomllib
import warnings
from dataclasses import fields
from pathlib import Path

from cardinal.recipe.build import build, key
from cardinal.recipe.moved import refuse_moved
from cardinal.recipe.recipe import Recipe
from cardinal.recipe.shipped import RECIPES, shipped


def parse_override(text: str) -> tuple[list[str], object]:
    """``section.key=value`` -> (["section", "key"], value); the value is TOML, else a string."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise ValueError(f"--set takes section.key=value, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return path.strip().split("."), value


def load(path: str | Path | None = None, overrides: list[str] = ()) -> Recipe:
    """A recipe from a TOML file (a name from the shipped recipes, or a path) plus overrides."""
    raw = {}
    if path is not None:
        p = Path(path)
        if not p.exists() and (RECIPES / f"{path}.toml").exists():
            p = RECIPES / f"{path}.toml"
        if not p.exists():
            raise ValueError(f"recipe {path!r} not found (a path, or one of {shipped()})")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"recipe {p} is not valid TOML: {e}") from None
    return load_dict(raw, overrides)


def load_dict(raw: dict, overrides: list[str] = ()) -> Recipe:
    """A recipe from a dict (a parsed TOML file, a run's recipe.json) plus overrides."""
    raw = copy.deepcopy(raw)
    parsed = [parse_override(text) + (text,) for text in overrides]
    # a new model or sparse optimizer name first: the recipe's settings for the old one do not carry over
    named = (["model", "name"], ["sparse_optimizer", "name"])
    parsed.sort(key=lambda p: p[0] not in named)
    for keys, value, text in parsed:
        if keys in named and raw.get(keys[0], {}).get("name") != value:
            given = {p[0][1] for p in parsed if len(p[0]) > 1 and p[0][0] == keys[0]}  # set again: not left behind
            left = {k: v for k, v in raw.get(keys[0], {}).items() if k != "name" and k not in given}
            if left:
                settings = ", ".join(f"{k}={v!r}" for k, v in left.items())
                warnings.warn(f"--set {text}: the recipe's {keys[0]} settings of {raw[keys[0]].get('name')!r} are not "
                              f"carried over ({settings}); the new one starts from its own defaults (set them again "
                              f"with --set {keys[0]}.KEY=VALUE)", stacklevel=3)
            raw[keys[0]] = {}
        node = raw
        for k in keys[:-1]:
            node = node.setdefault(k, {})
            if not isinstance(node, dict):
                raise ValueError(f"--set {text}: {k} is a value, not a section")
        node[keys[-1]] = value
    return from_dict(raw)


def from_dict(raw: dict) -> Recipe:
    """A recipe from its sections as dicts; a key that moved is refused, naming its new place."""
    refuse_moved(raw)
    sections = {key(f): f for f in fields(Recipe)}
    for name in raw:
        if name not in sections:
            raise ValueError(f"unknown recipe section [{name}]; sections are {sorted(sections)}")
    kwargs = {}
    for name, f in sections.items():
        if name not in raw:
            continue
        value = raw[name]
        if name in ("model", "sparse_optimizer"):
            if not isinstance(value, dict):
                raise ValueError(f"[{name}] must be a table")
            kwargs[f.name] = {**f.default_factory(), **value}
        else:
            kwargs[f.name] = build(type(f.default_factory()), value, name)
    return Recipe(**kwargs)
