"""Every reader checks what it reads as the TSV reader does: bad rows are skipped and named
(file:row: reason) or stop the run with strict; a share of bad rows above the recipe's
threshold stops it; broken files are ValueErrors naming the file and the column."""

import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cardinal.data import CriteoReader, MovieLensReader, ParquetReader, SyntheticConfig, convert, generate
from cardinal.data.criteo import DENSE, SPARSE
from cardinal.recipe import load
from cardinal.recipe.data import DataConfig


@pytest.fixture(scope="module")
def tsv(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad_input")
    generate(out, SyntheticConfig(rows=2000, eval_rows=10, vocab=100, seed=5))
    return out / "train.tsv"


def _columns(batches):
    return (np.concatenate([b.labels.numpy() for b in batches]), np.concatenate([b.dense.numpy() for b in batches]),
            {f: np.concatenate([b.sparse[f].values for b in batches]) for f in batches[0].sparse},
            {f: np.concatenate([np.diff(b.sparse[f].offsets) for b in batches]) for f in batches[0].sparse})


# row (1-based) -> (column, value, reason shown)
PARQUET_BAD = {2: ("label", 2.0, "bad label (2.0)"), 4: ("label", 0.7, "bad label (0.7)"),
               6: ("I3", np.nan, "bad integer I3 (nan)"), 8: ("I5", 1e30, "bad integer I5 (1e+30)"),
               9: ("I1", 1.5, "bad integer I1 (1.5)"), 10: ("C1", -5, "categorical C1 outside [0, 2**32) (-5)"),
               12: ("C2", 2**32, "categorical C2 outside [0, 2**32) (4294967296)")}


def test_parquet_skips_and_names_bad_values_and_keeps_fields_apart(tmp_path, tsv):
    lines = tsv.read_text().splitlines()[:30]
    (tmp_path / "a.tsv").write_text("\n".join(lines) + "\n")
    convert([tmp_path / "a.tsv"], tmp_path / "a.parquet")
    table = pq.read_table(tmp_path / "a.parquet")
    columns = {n: table[n].cast(pa.float64() if n == "label" or n in DENSE else pa.int64()).to_pylist()
               for n in table.column_names}
    for row, (name, value, _) in PARQUET_BAD.items():
        columns[name][row - 1] = value
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(columns), path)
    good = [line for i, line in enumerate(lines, 1) if i not in PARQUET_BAD]
    (tmp_path / "good.tsv").write_text("\n".join(good) + "\n")

    reader = ParquetReader([path], 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy cast warnings: bad values never reach a cast
        got = _columns(list(reader))
    want = _columns(list(CriteoReader([tmp_path / "good.tsv"], 7)))
    for a, b in zip(got[:2], want[:2]):
        np.testing.assert_array_equal(a, b)
    for f in SPARSE:
        np.testing.assert_array_equal(got[2][f], want[2][f])
        np.testing.assert_array_equal(got[3][f], want[3][f])
        assert ((got[2][f] >> 32) == SPARSE.index(f) + 1).all()  # each field in its own id space
    assert reader.bad_examples == [f"{path}:{row}: {reason}" for row, (_, _, reason) in PARQUET_BAD.items()]
    with pytest.raises(ValueError, match=r"bad.parquet:2: bad label \(2.0\)"):
        list(ParquetReader([path], 7, strict=True))


def test_parquet_missing_or_text_columns_name_the_file_and_column(tmp_path, tsv):
    convert([tsv], tmp_path / "a.parquet")
    table = pq.read_table(tmp_path / "a.parquet")
    pq.write_table(table.drop_columns(["C7"]), tmp_path / "no_c7.parquet")
    with pytest.raises(ValueError, match=r"no_c7.parquet: no column 'C7'"):
        list(ParquetReader([tmp_path / "no_c7.parquet"], 100))
    text = table.set_column(table.schema.get_field_index("I3"), "I3", table["I3"].cast(pa.string()))
    pq.write_table(text, tmp_path / "text.parquet")
    with pytest.raises(ValueError, match=r"text.parquet: column 'I3' holds string"):
        list(ParquetReader([tmp_path / "text.parquet"], 100))


def _movielens(tmp_path, ratings: list[str], header="userId,movieId,rating,timestamp"):
    (tmp_path / "movies.csv").write_text("movieId,title,genres\n1,A (1999),Comedy\n2,B,Drama|Comedy\n")
    (tmp_path / "ratings.csv").write_text("\n".join([header, *ratings]) + "\n")
    return tmp_path


def test_movielens_skips_and_names_bad_ratings_and_ids(tmp_path):
    good = [f"{u},{1 + u % 2},{r},{1000 + u}" for u, r in zip(range(1, 9), [4, 2.5, 5, 0.5, 3, 4.5, 1, 4])]
    bad = ["9,1,NaN,1100", "9,2,-7,1101", "10,1,99,1102", "-1,1,4,1103", f"11,{2**41},4,1104", "12,1,4,"]
    d = _movielens(tmp_path, good[:4] + bad + good[4:])
    train = MovieLensReader(d, "train", 4, eval_fraction=0.25)
    evaluation = MovieLensReader(d, "eval", 4, eval_fraction=0.25)
    assert sorted(train.user.tolist() + evaluation.user.tolist()) == list(range(1, 9))
    ratings = tmp_path / "ratings.csv"
    assert train.bad.examples == [f"{ratings}:6: bad rating (missing)", f"{ratings}:7: bad rating (-7.0)",
                                  f"{ratings}:8: bad rating (99.0)", f"{ratings}:9: bad userId (-1)",
                                  f"{ratings}:10: bad movieId ({2**41})", f"{ratings}:11: bad timestamp (missing)"]
    with pytest.raises(ValueError, match=r"ratings.csv:6: bad rating"):
        MovieLensReader(d, "train", 4, strict=True)


def test_movielens_wrong_columns_name_the_file_and_column(tmp_path):
    d = _movielens(tmp_path, ["1,1,4,1000"], header="user,movieId,rating,timestamp")
    with pytest.raises(ValueError, match=r"ratings.csv: no column 'userId'"):
        MovieLensReader(d, "train", 4)
    _movielens(tmp_path, ["1,1,4,1000", "x,2,4,1001"])
    with pytest.raises(ValueError, match=r"ratings.csv: column 'userId' holds string"):
        MovieLensReader(d, "train", 4)


def test_a_share_of_bad_lines_above_the_threshold_stops_reading_early(tmp_path, tsv):
    lines = tsv.read_text().splitlines()
    for i in range(0, len(lines), 25):  # 4% bad
        lines[i] += "\tsurplus"
    path = tmp_path / "four_percent.tsv"
    path.write_text("\n".join(lines) + "\n")
    reader = CriteoReader([path], 100, chunk_bytes=20_000, max_bad_fraction=0.01)
    batches = 0
    with pytest.raises(ValueError, match=rf"input rows read are bad \(4.0%\), more than data.max_bad_fraction = 0.01; "
                                         rf"first: {path}:1: wrong column count; {path}:26: wrong"):
        for _ in reader:
            batches += 1
    assert batches < 19  # stopped after about 1,000 lines, not at the end of 2,000
    tolerant = CriteoReader([path], 100, max_bad_fraction=0.05)
    assert sum(len(b) for b in tolerant) == 1920 and tolerant.bad_lines == 80


def test_a_short_file_of_garbage_fails_at_its_end(tmp_path):
    path = tmp_path / "garbage.tsv"
    path.write_bytes(b"\x00\xff\x10\n" * 20)
    with pytest.raises(ValueError, match=rf"20 of 20 input rows read are bad .* first: {path}:1: bad label"):
        list(CriteoReader([path], 10, max_bad_fraction=0.01))


def test_data_files_as_a_plain_string_and_the_threshold_in_a_recipe():
    recipe = load(None, ['data.format="criteo"', "data.train=/d/day_0.tsv", "data.eval=/d/day_1.tsv"])
    assert recipe.data.train == ["/d/day_0.tsv"] and recipe.data.eval == ["/d/day_1.tsv"]
    assert recipe.data.max_bad_fraction == 0.01
    assert DataConfig(format="criteo", train="a.tsv", eval="b.tsv").train == ["a.tsv"]
    with pytest.raises(ValueError, match=r"data.max_bad_fraction must be in \[0, 1\], got 1.5"):
        load(None, ["data.max_bad_fraction=1.5"])
