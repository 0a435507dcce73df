"""``import cardinal`` makes torch's idle OpenMP threads sleep (``cardinal/omp_wait.py``), unless the
environment chose a policy already: checked in fresh interpreters, since libgomp reads it once."""

import os
import subprocess
import sys

import pytest


def _policy(env: dict) -> str:
    code = "import os, cardinal, torch; print(os.environ['OMP_WAIT_POLICY'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.slow  # fresh interpreters
def test_import_cardinal_sets_a_passive_wait_and_keeps_one_the_environment_chose():
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _policy(env) == "PASSIVE"
    assert _policy({**env, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
