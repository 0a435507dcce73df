"""The CLI stays small: every knob is a recipe value (``--set section.key=value``), so a new
flag is a decision, not a drive-by. This freezes the commands and their options (as torchtitan's
test_no_new_cli_options); change it here, on purpose, with the flag."""

import argparse

from cardinal import cli

FROZEN = {
    "convert": ["--out", "--strict", "tsv"],
    "data": ["dir", "name"],
    "eval": ["--checkpoint", "--set", "run_dir"],
    "export": ["--checkpoint", "--out", "--ratio", "--tables", "run_dir"],
    "generate": ["--set", "out_dir"],
    "launch": ["--servers", "--workers", "train_args"],
    "plan": ["--out", "--set", "--stats", "recipe"],
    "recipe": ["list: -", "show: --resume", "show: --set", "show: recipe"],
    "serve": ["--follow", "--host", "--max-batch", "--poll", "--port", "--set", "--threads", "export_dir"],
    "server": ["--data-dir", "--host", "--port", "--set", "--shard", "recipe"],
    "sweep": ["--grid", "--out", "--parallel", "--set", "recipe"],
    "top": ["--interval", "--once", "addresses"],
    "train": ["--resume", "--set", "recipe"],
}


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Its flags, its positional arguments, and its sub-commands' options as "sub: option"."""
    flags = sorted(s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help"))
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return flags + sorted(a.dest for a in parser._actions if not a.option_strings and a not in subs) + \
        [f"{name}: {o}" for a in subs for name, sp in sorted(a.choices.items()) for o in options(sp) or ["-"]]


def test_the_commands_and_their_options_are_the_frozen_ones():
    p = cli.parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert options(p)[0] == "--version"
    assert {name: options(sp) for name, sp in sub.choices.items()} == FROZEN
