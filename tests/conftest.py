import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("cardinal", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cardinal")

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def adversarial_ids(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Ids that stress a hash index: all equal, sequential, sharing low bits, extremes."""
    if kind == "equal":
        return np.full(n, 12345, np.int64)
    if kind == "sequential":
        return np.arange(n, dtype=np.int64) - n // 2
    if kind == "low_bits":  # differ only above bit 32
        return (np.arange(n, dtype=np.int64) << 32) | 0x7
    if kind == "extremes":
        base = np.array([INT64_MIN, INT64_MAX, 0, -1, 1, INT64_MIN + 1, INT64_MAX - 1], np.int64)
        return rng.choice(base, n)
    if kind == "random":
        return rng.integers(INT64_MIN, INT64_MAX, n, dtype=np.int64, endpoint=True)
    raise ValueError(kind)


ID_KINDS = ["equal", "sequential", "low_bits", "extremes", "random"]


def tiny_recipe(tmp_path, *extra):
    """The default recipe shrunk to seconds: 3,000 generated rows (12 steps of 256), small model.
    Later ``extra`` values override earlier ones."""
    from cardinal.recipe import load

    return load(None, [f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=3000",
                       "data.synthetic.eval_rows=1000", "data.synthetic.vocab=300", "data.batch_size=256",
                       "data.eval_batch_size=1000", "model.hidden=[16]", "embedding.dim=4",
                       "metrics.log_every=2", *extra])


@pytest.fixture(autouse=True, scope="session")
def cardinal_home(tmp_path_factory):
    """The tests never write into the user's real cache (~/.cache/cardinal): CARDINAL_HOME, read
    by this process and inherited by every process a test starts, is a temporary folder."""
    old = os.environ.get("CARDINAL_HOME")
    home = tmp_path_factory.mktemp("cardinal-home")
    os.environ["CARDINAL_HOME"] = str(home)
    yield home
    shutil.rmtree(home, ignore_errors=True)  # generated data sets are large: none left in /tmp
    if old is None:
        del os.environ["CARDINAL_HOME"]
    else:
        os.environ["CARDINAL_HOME"] = old


@pytest.fixture(scope="session")
def movielens_folder(tmp_path_factory) -> Path:
    """A small MovieLens folder in ml-latest-small's layout and format (``movielens_copy.py``),
    written once a session: read it, never write into it."""
    from movielens_copy import write_movielens

    return write_movielens(tmp_path_factory.mktemp("movielens") / "movielens-latest-small")


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("CARDINAL_TEST_SEED", "0")))
