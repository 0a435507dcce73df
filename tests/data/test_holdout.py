"""A held-out split carved from the training files (data.eval empty): the two sides are disjoint
and together are every row, by time (the last rows) or by a seeded hash, in TSV and Parquet, for
one worker or several."""

import numpy as np
import pytest

from cardinal.data import SyntheticConfig, convert, generate
from cardinal.recipe import load
from cardinal.recipe.data import DataConfig
from cardinal.train import Trainer
from cardinal.train.readers import make_readers


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("holdout")
    generate(out, SyntheticConfig(rows=1000, eval_rows=10, vocab=50, seed=2))
    # two files in time order; the second ends without a newline
    lines = (out / "train.tsv").read_bytes().splitlines(keepends=True)
    (out / "a.tsv").write_bytes(b"".join(lines[:600]))
    (out / "b.tsv").write_bytes(b"".join(lines[600:]).rstrip(b"\n"))
    convert([out / "a.tsv", out / "b.tsv"], out / "ab.parquet")
    return out


def rows(reader) -> list[bytes]:
    """Each example of every batch as bytes (label, dense, every field's ids), in reading order."""
    out = []
    for batch in reader:
        fields = [b for _, b in sorted(batch.sparse.items())]
        for i in range(len(batch)):
            ids = [b.values[b.offsets[i]:b.offsets[i + 1]].tobytes() for b in fields]
            out.append(batch.labels[i].numpy().tobytes() + batch.dense[i].numpy().tobytes() + b"|".join(ids))
    return out


def data_cfg(data, fmt, by, **kw):
    files = [str(data / "ab.parquet")] if fmt == "parquet" else [str(data / "a.tsv"), str(data / "b.tsv")]
    return DataConfig(format=fmt, train=files, batch_size=64, eval_batch_size=100, holdout=0.1,
                      holdout_by=by, **kw)


@pytest.mark.parametrize("fmt", ["criteo", "parquet"])
@pytest.mark.parametrize("by", ["time", "hash"])
def test_the_two_sides_are_disjoint_and_together_all_rows(data, fmt, by):
    every = rows(make_readers(DataConfig(format=fmt, train=data_cfg(data, fmt, by).train,
                                         eval=data_cfg(data, fmt, by).train), progress=False)[1])
    assert len(every) == 1000 and len(set(every)) == 1000  # distinct rows: sides compare as sets
    train, evaluation, info = make_readers(data_cfg(data, fmt, by), seed=7, progress=False)
    seen, held = rows(train), rows(evaluation)
    assert set(seen).isdisjoint(held) and sorted(seen + held) == sorted(every)
    if by == "time":  # the last 10% of the lines, in order
        assert (seen, held) == (every[:900], every[900:])
        assert info["train_steps"] == 15  # ceil(900 / 64)
    else:
        assert 60 < len(held) < 140 and held != every[-len(held):]
        assert info["train_steps"] == 16  # ceil(1000 / 64)
    # several workers: their shares of the train side are that side, and still never a held-out row
    shares = [rows(make_readers(data_cfg(data, fmt, by), seed=7, progress=False, share=(r, 3))[0]) for r in range(3)]
    assert sorted(sum(shares, [])) == sorted(seen)


def test_the_hash_split_depends_on_the_seed(data):
    a = rows(make_readers(data_cfg(data, "criteo", "hash"), seed=1, progress=False)[1])
    b = rows(make_readers(data_cfg(data, "criteo", "hash"), seed=2, progress=False)[1])
    assert a != b


@pytest.mark.slow
def test_a_run_without_eval_files_trains_and_evaluates_on_the_held_out_rows(tmp_path, data):
    recipe = load(None, ['data.format="criteo"', f'data.train=["{data / "a.tsv"}", "{data / "b.tsv"}"]',
                         "data.batch_size=100", "model.hidden=[8]", "embedding.dim=4"])
    assert recipe.data.eval == [] and recipe.data.holdout == 0.1
    summary = Trainer(recipe, tmp_path / "run", progress=False).fit()
    assert summary["eval_rows"] == 100 and summary["steps"] == 9
    with pytest.raises(ValueError, match="data.holdout"):
        load(None, ['data.format="criteo"', f'data.train="{data / "a.tsv"}"', "data.holdout=0"])
    with pytest.raises(ValueError, match="data.holdout_by"):
        load(None, ['data.format="criteo"', f'data.train="{data / "a.tsv"}"', 'data.holdout_by="random"'])


def test_row_hash_is_a_function_of_the_values():
    from cardinal.data.criteo import Rows
    from cardinal.data.holdout import row_hash

    r = Rows(np.array([0, 1, 0], np.float32), np.zeros((3, 13), np.int64), np.ones((3, 13), bool),
             np.array([[5] * 26, [5] * 26, [6] * 26], np.int64), np.ones((3, 26), bool))
    h = row_hash(r, 0)
    assert ((0 <= h) & (h < 1)).all() and len(set(h.tolist())) == 3
    assert (row_hash(r[0:1], 0) == h[0:1]).all()  # the same row, the same side, wherever it is read
