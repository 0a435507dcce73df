"""The table protocol (embedding/protocol.py): both kinds of table implement it, and ps/ uses tables
through it alone (no import of compression/, whose algorithms the clustered table uses)."""

import ast
from pathlib import Path

import numpy as np
import pytest

from cardinal.embedding import EmbeddingTable, TableConfig
from cardinal.embedding.clustered_table import SaecTable
from cardinal.embedding.protocol import RowTable, Table
from cardinal.embedding.table_config import SaecSpec
from cardinal.optim import make_optimizer

SRC = Path(__file__).resolve().parents[2] / "src" / "cardinal"


def members(protocol) -> set[str]:
    names = set()
    for cls in protocol.__mro__:
        if cls.__module__ == "cardinal.embedding.protocol":
            names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names | {"__len__"}


def test_both_tables_have_every_member_of_the_protocol():
    table = EmbeddingTable(TableConfig("t", 4, saec=SaecSpec(2.0, 1)), make_optimizer({"name": "adagrad"}))
    ids = (np.int64(1) << 32) | np.arange(40, dtype=np.int64)
    table.pull(ids, step=1)
    clustered = SaecTable.cluster(table, table.config.saec, 1)
    for t, protocol in ((table, RowTable), (clustered, Table)):
        missing = sorted(n for n in members(protocol) if not hasattr(t, n))
        assert not missing, f"{type(t).__name__} lacks {missing}"
    assert clustered.checkpoint_files() is not None and table.checkpoint_files() is None
    assert not clustered.tiered and not table.tiered and clustered.delta_refused() and table.delta_refused() is None
    assert set(clustered.stats()) - {"clusters"} == set(table.stats())


def test_both_tables_pull_into_a_given_array_as_into_their_own():
    """``out=``: a server writes a pull's rows straight into its reply (ps/server/servicer.py)."""
    table = EmbeddingTable(TableConfig("t", 4, saec=SaecSpec(2.0, 1)), make_optimizer({"name": "adagrad"}))
    ids = (np.int64(1) << 32) | np.arange(40, dtype=np.int64)
    table.pull(ids, step=1)
    clustered = SaecTable.cluster(table, table.config.saec, 1)
    asked = np.concatenate([ids[::3], [7, 8]])  # two ids no table has: zeros
    for t in (table, clustered):
        out = np.full((len(asked) + 1, 4), np.nan, np.float32)
        assert t.pull(asked, create=False, out=out[1:]) is not None
        np.testing.assert_array_equal(out[1:], t.pull(asked, create=False))
        assert np.isnan(out[0]).all() and (out[-2:] == 0).all()
        for bad in (np.empty((len(asked), 5), np.float32), np.empty((len(asked), 4)), np.empty((4, len(asked)), np.float32).T):
            with pytest.raises(ValueError, match=f"out: a pull of {len(asked)} rows of dim 4"):
                t.pull(asked, create=False, out=bad)


def test_ps_imports_nothing_of_compression():
    for path in sorted((SRC / "ps").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith("cardinal.compression") for n in names), f"{path} imports {names}"
