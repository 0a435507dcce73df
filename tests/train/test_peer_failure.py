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


class _GoneServer:
    def health(self, timeout):
        from cardinal.ps.transport.grpc_transport import ShardUnreachable
        raise ShardUnreachable("shard 1 at 127.0.0.1:7001: Stats failed: UNAVAILABLE: connection refused")


class _LiveServers:
    def health(self, timeout):
        return [{}, {}]


@pytest.mark.parametrize("client, named", [(_GoneServer(), "cardinal train: error: shard 1 at 127.0.0.1:7001: "),
                                           (_LiveServers(), "cardinal train: error: another worker of the job stopped")])
def test_a_rank_whose_peer_stopped_names_the_dead_server_if_there_is_one(monkeypatch, capsys, tmp_path, client, named):
    """The rank that met only the collective asks the servers before blaming its peer: when the peer
    stopped because a server died, every rank names that server (CI saw rank 1 blame rank 0)."""
    import cardinal.train

    class Trainer:
        def __init__(self, recipe, run_dir, stop):
            self.client = client

        def fit(self, resume):
            raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")

        def close(self):
            pass
    monkeypatch.setattr(cardinal.train, "Trainer", Trainer)
    assert cli.main(["train", "--set", f'train.run_dir="{tmp_path}"']) == 2
    err = capsys.readouterr()
    said = [line for line in err.err.splitlines() if "error" in line]
    assert len(said) == 1 and said[0].startswith(named), said
