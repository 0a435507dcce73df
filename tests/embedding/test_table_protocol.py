"""The table protocol (embedding/protocol.py): both kinds of table implement it, and ps/ uses tables
through it alone (no import of compression/, whose algorithms the clustered table uses)."""

import ast
from pathlib import Path

import numpy as np

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


def test_ps_imports_nothing_of_compression():
    for path in sorted((SRC / "ps").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith("cardinal.compression") for n in names), f"{path} imports {names}"
