"""A worker whose peer stopped meets torch.distributed's error in its next collective (gloo:
"connection closed by peer"): it exits 2 on one line, as for a dead server, never a traceback."""

import pytest
import torch.distributed as dist

from cardinal import cli


@pytest.mark.parametrize("error", [dist.DistNetworkError, dist.DistBackendError, RuntimeError])  # gloo's, seen
def test_a_collective_that_lost_a_peer_is_one_line_and_exit_2(monkeypatch, capsys, error):
    def train(args):
        raise error("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                    "[127.0.0.1]:47071\nException raised from recvBytes at ...\nframe #0: ...")
    monkeypatch.setattr(cli, "train", train)
    assert cli.main(["train"]) == 2
    err = capsys.readouterr()
    said = [line for line in (err.out + err.err).splitlines() if line.strip()]
    assert len(said) == 1 and "another worker of the job stopped" in said[0] and "Connection closed by peer" in said[0]
    assert "Traceback" not in err.out + err.err


def test_any_other_runtime_error_is_still_a_traceback(monkeypatch):
    def train(args):
        raise RuntimeError("a bug")
    monkeypatch.setattr(cli, "train", train)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train"])
