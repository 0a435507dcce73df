"""Fixtures and hooks for every test: a temporary CARDINAL_HOME, a MovieLens copy, small TSV data, a
seeded rng, and
the fast tier's guard. What tests share besides fixtures is in ``helpers/``."""

import os
import shutil
import subprocess
from pathlib import Path

# Before torch (and its OpenMP) loads, here and in every process a test starts: threads that wait
# sleep instead of spinning. The suite runs two workers on two cores, so a spinning thread takes a
# core from the other worker (about a fifth of the suite's CPU time); results do not change.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("cardinal", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cardinal")

# The fast tier (`pytest -m "not slow"`) starts no Python or shell process and trains no whole run:
# a test that does is marked slow, and fails here when it is not. True while a fast test (and its
# fixtures) runs. Quick tools a library calls (ldconfig for ctypes, git) are no process start here.
_IN_FAST_TEST = [False]
_HEAVY = ("python", "bash", "sh", "cardinal")


def pytest_collection_modifyitems(items):
    """Everything under tests/e2e/ (whole runs, processes) is slow; elsewhere a test says so itself."""
    e2e = Path(__file__).parent / "e2e"
    for item in items:
        if e2e in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _IN_FAST_TEST[0] = item.get_closest_marker("slow") is None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item):
    _IN_FAST_TEST[0] = False


@pytest.fixture(autouse=True, scope="session")
def fast_tier_starts_no_process_and_trains_no_run():
    from cardinal.train.trainer import Trainer

    def refused(what, original, applies=lambda *args, **kwargs: True):
        def guarded(*args, **kwargs):
            if _IN_FAST_TEST[0] and applies(*args, **kwargs):
                raise AssertionError(f"a test outside the slow tier {what}: mark it @pytest.mark.slow "
                                     "(or put it in tests/e2e/)")
            return original(*args, **kwargs)
        return guarded

    def heavy(popen, args, *rest, **kwargs):
        program = args.split()[0] if isinstance(args, str) else str(list(args)[0])
        return Path(program).name.startswith(_HEAVY)

    popen, fit = subprocess.Popen.__init__, Trainer.fit
    subprocess.Popen.__init__ = refused("starts a process", popen, heavy)
    Trainer.fit = refused("trains a whole run (Trainer.fit)", fit)
    yield
    subprocess.Popen.__init__, Trainer.fit = popen, fit


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
    from helpers.movielens_copy import write_movielens

    return write_movielens(tmp_path_factory.mktemp("movielens") / "movielens-latest-small")


@pytest.fixture(scope="session")
def small_tsv(tmp_path_factory) -> Path:
    """train.tsv and eval.tsv of 1,200 and 400 generated rows in the Criteo layout (30 ids a field),
    written once a session: read it, never write into it."""
    from cardinal.data import SyntheticConfig, generate

    out = tmp_path_factory.mktemp("tsv")
    generate(out, SyntheticConfig(rows=1200, eval_rows=400, vocab=30, seed=1))
    return out


@pytest.fixture
def rng():
    return np.random.default_rng(int(os.environ.get("CARDINAL_TEST_SEED", "0")))
