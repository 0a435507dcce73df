"""The recipes that come with Cardinal (``cardinal train NAME``, ``cardinal recipe list``)."""

from pathlib import Path

RECIPES = Path(__file__).resolve().parent.parent / "recipes"


def shipped() -> list[str]:
    """The names of the shipped recipes."""
    return sorted(q.stem for q in RECIPES.glob("*.toml"))


def describe(name: str) -> str:
    """A shipped recipe's first comment line (what it trains)."""
    for line in (RECIPES / f"{name}.toml").read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""
