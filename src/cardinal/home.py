"""Where Cardinal keeps what it downloads and generates: one folder, movable with CARDINAL_HOME.

    $CARDINAL_HOME                      default: $XDG_CACHE_HOME/cardinal, else ~/.cache/cardinal
    $CARDINAL_HOME/data/                generated data sets (data.cache_dir) and downloads
    $CARDINAL_HOME/data/movielens-latest-small/     `cardinal data movielens`

A cache, not a work folder: everything in it can be made again (generated, or downloaded
and checked), so it lives under the user's cache directory rather than the current folder,
and runs started from any folder find the same copy. Recipes name it as ``$CARDINAL_HOME``
in paths (``data.train = ["$CARDINAL_HOME/data/movielens-latest-small"]``); ``expand`` turns
that, and a leading ``~``, into a real path when the recipe is loaded.
"""

import os
from pathlib import Path

VARIABLE = "CARDINAL_HOME"


def home() -> Path:
    """CARDINAL_HOME, else $XDG_CACHE_HOME/cardinal, else ~/.cache/cardinal (read on each call)."""
    if os.environ.get(VARIABLE):
        return Path(os.environ[VARIABLE]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "cardinal"


def data_dir() -> Path:
    return home() / "data"


def expand(path: str) -> str:
    """``$CARDINAL_HOME/x`` -> ``<home>/x`` and ``~/x`` -> ``<user home>/x``; other paths unchanged."""
    prefix = "$" + VARIABLE
    if path == prefix or path.startswith(prefix + "/"):
        return str(home()) + path[len(prefix):]
    return os.path.expanduser(path) if path.startswith("~") else path
