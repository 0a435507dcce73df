"""Each worker reads only its share of every global batch: the shares of batch b, joined in rank
order, are batch b of one whole reader, row for row; bad lines never move a batch boundary; an
empty share still yields its batch; and a worker never parses (nor counts) another's lines."""

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cardinal.data import CriteoReader, MovieLensReader, ParquetReader, SyntheticConfig, convert, generate
from cardinal.data.criteo import Rows, parse_buffer, parse_share
from cardinal.data.shares import count_in
from cardinal.recipe.data import DataConfig
from cardinal.train.readers import make_readers

BATCH = 7         # divisible by neither 2 nor 3
LINES, SPLIT = 227, 97   # 227 = 32 * 7 + 3: a last short batch; batch 13 (lines 91..97) spans the two files
RANK0_OF_2 = 32 * 3 + 1  # lines rank 0 of 2 owns: 3 of each full batch, 1 of the last (3 // 2)
CHUNK = 1500      # a few lines per read: batches span reads too


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    out = tmp_path_factory.mktemp("shares")
    generate(out, SyntheticConfig(rows=LINES, eval_rows=10, vocab=50, seed=7))
    lines = (out / "train.tsv").read_bytes().splitlines(keepends=True)
    (out / "a.tsv").write_bytes(b"".join(lines[:SPLIT]))
    (out / "b.tsv").write_bytes(b"".join(lines[SPLIT:]))
    convert([out / "a.tsv"], out / "a.parquet")
    convert([out / "b.tsv"], out / "b.parquet")
    ratings = [f"{u},{1 + u % 3},{[4, 2.5, 5, 1][u % 4]},{1000 + u}" for u in range(1, 41)]
    (out / "ratings.csv").write_text("\n".join(["userId,movieId,rating,timestamp", *ratings]) + "\n")
    (out / "movies.csv").write_text("movieId,title,genres\n1,A (1999),Comedy\n2,B,Drama|Comedy\n3,C (2001),\n")
    return out


def reader(kind, files, share, batch_size=BATCH, **kw):
    if kind == "tsv":
        return CriteoReader([files / "a.tsv", files / "b.tsv"], batch_size, share=share, **{"chunk_bytes": CHUNK, **kw})
    if kind == "tsv-whole-files":  # each file in one read
        return CriteoReader([files / "a.tsv", files / "b.tsv"], batch_size, share=share, chunk_bytes=1 << 20, **kw)
    if kind == "parquet":
        return ParquetReader([files / "a.parquet", files / "b.parquet"], batch_size, share=share, **kw)
    return MovieLensReader(files, "train", batch_size, eval_fraction=0.25, share=share, **kw)


def flat(batch):
    """A batch as plain arrays: labels, dense, then values and offsets of every field."""
    out = [batch.labels.numpy(), batch.dense.numpy()]
    for name in sorted(batch.sparse):
        out += [batch.sparse[name].values, batch.sparse[name].offsets]
    return out


def join(batches):
    """Shares of one batch, joined in rank order, as ``flat`` arrays."""
    parts = [flat(b) for b in batches]
    out = [np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])]
    for k in range(2, len(parts[0]), 2):
        out.append(np.concatenate([p[k] for p in parts]))
        offsets, end = [parts[0][k + 1][:1]], parts[0][k + 1][0]
        for p in parts:
            offsets.append(p[k + 1][1:] - p[k + 1][0] + end)
            end += p[k + 1][-1] - p[k + 1][0]
        out.append(np.concatenate(offsets))
    return out


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def today(files, batch_size=BATCH):
    """The batches of one whole reader before shares: batch_size good rows of all lines, in order."""
    rows, bad, _ = parse_buffer((files / "a.tsv").read_bytes() + (files / "b.tsv").read_bytes())
    assert len(bad) == 0
    return [rows[s:s + batch_size].to_batch() for s in range(0, len(rows), batch_size)]


def test_one_worker_yields_todays_batches(files):
    want = today(files)
    for kind in ("tsv", "parquet"):
        got = list(reader(kind, files, (0, 1)))
        assert len(got) == math.ceil(LINES / BATCH) == len(want)
        for g, w in zip(got, want):
            assert_same(flat(g), flat(w))


@pytest.mark.parametrize("kind", ["tsv", "tsv-whole-files", "parquet", "movielens"])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_the_shares_of_a_batch_joined_are_that_batch(files, kind, world):
    whole = list(reader(kind, files, (0, 1)))
    shares = [list(reader(kind, files, (rank, world))) for rank in range(world)]
    for rank, got in enumerate(shares):
        assert len(got) == len(whole)  # every worker takes the same number of steps
        for b, batch in enumerate(got):
            n = len(whole[b])
            assert len(batch) == n * (rank + 1) // world - n * rank // world
    for b, batch in enumerate(whole):
        assert_same(join([got[b] for got in shares]), flat(batch))


def dirty(files, tmp_path, bad: dict[int, bytes]):
    """The two files with the global lines in ``bad`` replaced; returns their paths."""
    lines = ((files / "a.tsv").read_bytes() + (files / "b.tsv").read_bytes()).splitlines(keepends=True)
    for g, text in bad.items():
        lines[g] = text
    (tmp_path / "a.tsv").write_bytes(b"".join(lines[:SPLIT]))
    (tmp_path / "b.tsv").write_bytes(b"".join(lines[SPLIT:]))
    return tmp_path


# global line -> bad text; with world 2 and batches of 7, rank 0 owns lines 7b + {0, 1, 2}, rank 1 7b + {3..6}
BAD = {3: b"2" + b"\t" * 39 + b"\n", 4: b"\x00\xff\n", 5: b"1\t\t\n",            # rank 1's whole share of batch 0
       6: b"1" + b"\t" * 13 + b"\tzzz" + b"\t" * 25 + b"\n",
       94: b"1\tabc" + b"\t" * 38 + b"\n",                                         # rank 1, batch 13, in a.tsv
       101: b"0" + b"\t" * 40 + b"\n"}                                             # rank 1, batch 14, b.tsv line 5


@pytest.mark.parametrize("chunk", [CHUNK, 1 << 20])  # a few lines per read; each file in one read
def test_bad_lines_in_another_share_move_no_batch(files, tmp_path, chunk):
    bad_dir = dirty(files, tmp_path, BAD)
    clean = [list(reader("tsv", files, (r, 2), chunk_bytes=chunk)) for r in range(2)]
    got = [list(reader("tsv", bad_dir, (r, 2), chunk_bytes=chunk)) for r in range(2)]
    assert len(got[0]) == len(got[1]) == len(clean[0]) == math.ceil(LINES / BATCH)
    for b in range(len(clean[0])):
        assert_same(flat(got[0][b]), flat(clean[0][b]))  # rank 0 sees nothing of rank 1's bad lines
    for b in (0, 13, 14):
        lost = sum(1 for g in BAD if g // BATCH == b)
        assert len(got[1][b]) == len(clean[1][b]) - lost
    for b in set(range(len(clean[1]))) - {0, 13, 14}:
        assert_same(flat(got[1][b]), flat(clean[1][b]))
    # one whole reader: the same boundaries, each batch without its bad lines
    whole = list(reader("tsv", bad_dir, (0, 1), chunk_bytes=chunk))
    clean_whole = list(reader("tsv", files, (0, 1), chunk_bytes=chunk))
    assert [len(b) for b in whole] == [len(b) - sum(1 for g in BAD if g // BATCH == i)
                                       for i, b in enumerate(clean_whole)]
    assert_same(flat(whole[1]), flat(clean_whole[1]))


def assert_empty(batch, dense_width):
    assert batch.dense.shape == (0, dense_width) and batch.labels.shape == (0,)
    assert all(bag.values.shape == (0,) and bag.offsets.tolist() == [0] for bag in batch.sparse.values())


@pytest.mark.parametrize("kind", ["tsv", "parquet", "movielens"])
def test_an_empty_share_still_yields_every_batch(files, kind):
    # batches of 2 among 3 workers: rank 0 owns lines [0, 0) of each, rank 1 one line, rank 2 one
    empty, whole = list(reader(kind, files, (0, 3), batch_size=2)), list(reader(kind, files, (0, 1), batch_size=2))
    assert len(empty) == len(whole) > 0
    for batch in empty:
        assert_empty(batch, 0 if kind == "movielens" else 13)


def test_an_all_bad_share_yields_an_empty_batch(files, tmp_path):
    got = list(reader("tsv", dirty(files, tmp_path, BAD), (1, 2)))
    assert_empty(got[0], 13)
    assert len(got[1]) == 4


def test_a_worker_parses_and_counts_only_its_own_lines(files, tmp_path):
    bad_dir = dirty(files, tmp_path, BAD)
    mine = reader("tsv", bad_dir, (0, 2), strict=True)   # strict: a single bad line it parsed would stop it
    assert sum(len(b) for b in mine) == RANK0_OF_2
    assert mine.bad_lines == 0 and mine.bad.rows == RANK0_OF_2
    theirs = reader("tsv", bad_dir, (1, 2))
    list(theirs)
    a, b = bad_dir / "a.tsv", bad_dir / "b.tsv"
    assert theirs.bad_lines == len(BAD)
    assert theirs.bad_examples == [f"{a}:4: bad label", f"{a}:5: bad label", f"{a}:6: wrong column count",
                                   f"{a}:7: bad hex value", f"{a}:95: non-numeric integer",
                                   f"{b}:5: wrong column count"]
    assert theirs.bad.rows == LINES - mine.bad.rows


def test_a_parquet_worker_converts_and_counts_only_its_own_rows(files, tmp_path):
    table = pq.read_table(files / "a.parquet")
    labels = table["label"].to_numpy().copy()
    labels[[4, 94]] = 2  # rank 1's rows (batches of 7, 2 workers)
    path = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(0, "label", pa.array(labels)), path)
    mine = ParquetReader([path, files / "b.parquet"], BATCH, strict=True, share=(0, 2))
    want = list(reader("parquet", files, (0, 2)))
    for got, w in zip(list(mine), want, strict=True):
        assert_same(flat(got), flat(w))
    assert mine.bad_lines == 0 and mine.bad.rows == RANK0_OF_2
    theirs = ParquetReader([path, files / "b.parquet"], BATCH, share=(1, 2))
    assert [len(b) for b in theirs] == [len(b) - (i in (0, 13)) for i, b in enumerate(reader("parquet", files, (1, 2)))]
    assert theirs.bad_examples == [f"{path}:5: bad label (2)", f"{path}:95: bad label (2)"]
    assert theirs.bad.rows == LINES - RANK0_OF_2


lines = st.lists(st.sampled_from([b"1" + b"\t" * 39, b"0\t5" + b"\t" * 38, b"2\t", b"", b"0" + b"\t" * 38 + b"\tff"]),
                 min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(lines=lines, first=st.integers(0, 50), size=st.integers(1, 9), data=st.data())
def test_parsing_a_share_is_parsing_everything_then_keeping_the_share(lines, first, size, data):
    lo = data.draw(st.integers(0, size))
    hi = data.draw(st.integers(lo, size))
    buf = b"\n".join(lines) + b"\n"
    rows, row_line, bad_line, _, stop = parse_share(buf, len(lines), first, size, lo, hi)
    everything, bad_all, _ = parse_buffer(buf)
    line_of_row = np.setdiff1d(np.arange(len(lines)), bad_all) + first
    keep = (line_of_row % size >= lo) & (line_of_row % size < hi)
    assert row_line.tolist() == line_of_row[keep].tolist() and stop == len(buf)
    assert bad_line.tolist() == [i for i in bad_all.tolist() if lo <= (first + i) % size < hi]
    assert len(row_line) + len(bad_line) == count_in(first, first + len(lines), size, lo, hi)  # its lines, no more
    for f in ("labels", "ints", "int_ok", "cats", "cat_ok"):
        np.testing.assert_array_equal(getattr(rows, f), getattr(everything, f)[keep])


def test_share_is_checked_and_applies_to_the_train_reader_only(files):
    with pytest.raises(ValueError, match=r"0 <= rank < world, got \(2, 2\)"):
        CriteoReader([files / "a.tsv"], 4, share=(2, 2))
    with pytest.raises(ValueError, match=r"world >= 1"):
        MovieLensReader(files, "train", 4, share=(0, 0))
    with pytest.raises(TypeError, match="two integers"):
        ParquetReader([files / "a.parquet"], 4, share=("0", 1))
    data = DataConfig(format="criteo", train=[str(files / "a.tsv")], eval=[str(files / "b.tsv")],
                      batch_size=BATCH, eval_batch_size=BATCH)
    train, evaluation, info = make_readers(data, share=(1, 3))
    assert train.share == (1, 3) and evaluation.share == (0, 1)
    assert info == make_readers(data)[2]
    ml = DataConfig(format="movielens", train=[str(files)], batch_size=BATCH)
    train, evaluation, info = make_readers(ml, share=(2, 3))
    assert train.share == (2, 3) and evaluation.share == (0, 1) and info["train_steps"] == math.ceil(30 / BATCH)


def test_rows_empty_makes_an_empty_batch():
    assert_empty(Rows.empty().to_batch(), 13)
