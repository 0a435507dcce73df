"""Child processes in tests: waited for with a deadline, and killed whatever happens."""

import contextlib
import subprocess


@contextlib.contextmanager
def reaped(procs: list[subprocess.Popen]):
    """Kill what is still running when the block ends, failed or not."""
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def succeeded(procs: list[subprocess.Popen], timeout: float = 240) -> list[str]:
    """Each process's stdout once every one exited 0 (else the end of the failed one's stderr)."""
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [out for out, _ in outs]
