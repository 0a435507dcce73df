"""Readers: the compiled TSV parser against a slow reference, bad lines, Parquet, MovieLens, the generator."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cardinal.data.movielens_history import FIELDS as HISTORY
from cardinal.data import CriteoReader, MovieLensReader, ParquetReader, SyntheticConfig, convert, generate
from cardinal.data.criteo import parse_buffer
from helpers.movielens_copy import SHARED


ints = st.one_of(st.just(""), st.integers(-10**6, 10**12).map(str))
hexes = st.one_of(st.just(""), st.integers(0, 2**32 - 1).map(lambda v: f"{v:08x}"), st.integers(0, 255).map(lambda v: f"{v:x}"))
good_line = st.tuples(st.sampled_from("01"), st.lists(ints, min_size=13, max_size=13),
                      st.lists(hexes, min_size=26, max_size=26)).map(lambda t: "\t".join([t[0], *t[1], *t[2]]))
bad_line = st.one_of(
    good_line.map(lambda s: s + "\textra"),                       # too many columns
    good_line.map(lambda s: s.rsplit("\t", 1)[0]),                 # too few
    good_line.map(lambda s: s.replace("\t", "\tx", 1)),            # non-numeric integer
    good_line.map(lambda s: s[: s.rfind("\t") + 1] + "zz"),       # bad hex
    good_line.map(lambda s: "2" + s[1:]),                          # bad label
)


def reference_parse(text: str):
    """Slow reference: (rows as tuples, bad line indices)."""
    rows, bad = [], []
    for i, line in enumerate(text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")):
        cols = line.rstrip("\r").split("\t")
        try:
            assert len(cols) == 40 and cols[0] in ("0", "1")
            dense = [int(c) if c else None for c in cols[1:14]]
            assert all(c == "" or c.lstrip("-").isdigit() for c in cols[1:14])
            assert all(len(c) <= 8 for c in cols[14:])
            cats = [int(c, 16) if c else None for c in cols[14:]]
            rows.append((int(cols[0]), dense, cats))
        except (AssertionError, ValueError):
            bad.append(i)
    return rows, bad


@given(lines=st.lists(st.one_of(good_line, good_line, bad_line), min_size=1, max_size=30))
def test_parser_matches_reference(lines):
    text = "\n".join(lines) + "\n"
    rows, bad_line, _ = parse_buffer(text.encode())
    ref_rows, ref_bad = reference_parse(text)
    assert bad_line.tolist() == ref_bad
    assert len(rows) == len(ref_rows)
    for i, (label, dense, cats) in enumerate(ref_rows):
        assert rows.labels[i] == label
        assert [int(v) if ok else None for v, ok in zip(rows.ints[i], rows.int_ok[i])] == dense
        assert [int(v) if ok else None for v, ok in zip(rows.cats[i], rows.cat_ok[i])] == cats


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("synthetic")
    report = generate(out, SyntheticConfig(rows=3000, eval_rows=1000, vocab=500, seed=3))
    return out, report


def test_generator_writes_the_criteo_layout_with_a_meaningful_teacher(synthetic):
    out, report = synthetic
    lines = (out / "train.tsv").read_text().splitlines()
    assert len(lines) == 3000 and all(len(line.split("\t")) == 40 for line in lines)
    assert any(c.startswith("-") for line in lines for c in line.split("\t")[1:14])  # negative integers
    assert any(c == "" for line in lines for c in line.split("\t")[14:])              # missing values
    assert 0.15 < report["train"]["click_rate"] < 0.35
    assert report["eval"]["teacher_auc"] > 0.75


def test_generator_is_deterministic(tmp_path):
    cfg = SyntheticConfig(rows=500, eval_rows=100, vocab=100, seed=9)
    generate(tmp_path / "a", cfg)
    generate(tmp_path / "b", cfg)
    assert (tmp_path / "a" / "train.tsv").read_bytes() == (tmp_path / "b" / "train.tsv").read_bytes()


def _all(reader):
    batches = list(reader)
    return (np.concatenate([b.labels.numpy() for b in batches]),
            np.concatenate([b.dense.numpy() for b in batches]),
            {f: np.concatenate([b.sparse[f].values for b in batches]) for f in batches[0].sparse})


def test_reader_streams_across_chunk_boundaries(synthetic):
    out, _ = synthetic
    whole = _all(CriteoReader([out / "train.tsv"], 512))
    chunked = CriteoReader([out / "train.tsv"], 700, chunk_bytes=1000)
    batches = list(chunked)
    assert [len(b) for b in batches] == [700] * 4 + [200]
    parts = _all(chunked)
    np.testing.assert_array_equal(parts[0], whole[0])
    np.testing.assert_array_equal(parts[1], whole[1])
    for f in whole[2]:
        np.testing.assert_array_equal(parts[2][f], whole[2][f])


def test_sparse_ids_carry_their_field_and_missing_is_an_empty_bag(synthetic):
    out, _ = synthetic
    batch = next(iter(CriteoReader([out / "train.tsv"], 3000)))
    for j in range(26):
        bag = batch.sparse[f"C{j + 1}"]
        assert ((bag.values >> 32) == j + 1).all()
        sizes = np.diff(bag.offsets)
        assert set(sizes.tolist()) <= {0, 1} and (sizes == 0).any()


def test_bad_lines_are_counted_with_file_and_line_or_fail_in_strict_mode(tmp_path, synthetic):
    out, _ = synthetic
    lines = (out / "train.tsv").read_text().splitlines()[:10]
    lines[3] = lines[3] + "\tsurplus"
    lines[7] = lines[7].replace("\t", "\tabc", 1)
    path = tmp_path / "bad.tsv"
    path.write_text("\n".join(lines) + "\n")
    reader = CriteoReader([path], 4)
    assert sum(len(b) for b in reader) == 8
    assert reader.bad_lines == 2
    assert reader.bad_examples == [f"{path}:4: wrong column count", f"{path}:8: non-numeric integer"]
    with pytest.raises(ValueError, match=r"bad.tsv:4: wrong column count"):
        list(CriteoReader([path], 4, strict=True))


def test_parquet_round_trip_gives_the_same_batches(tmp_path, synthetic):
    out, _ = synthetic
    report = convert([out / "train.tsv"], tmp_path / "train.parquet")
    assert report["rows"] == 3000
    a, b = _all(CriteoReader([out / "train.tsv"], 1000)), _all(ParquetReader([tmp_path / "train.parquet"], 1000))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for f in a[2]:
        np.testing.assert_array_equal(a[2][f], b[2][f])


def test_missing_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="nope.tsv"):
        CriteoReader([tmp_path / "nope.tsv"], 10)


MOVIELENS_LINES = {  # ml-latest-small's header and the form of every other line (a quoted title may hold "")
    "ratings.csv": ("userId,movieId,rating,timestamp", r"[1-9]\d*,[1-9]\d*,[0-5]\.[05],\d+"),
    "movies.csv": ("movieId,title,genres",
                   r'[1-9]\d*,("([^"]|"")+"|[^",]+),([A-Za-z-]+(\|[A-Za-z-]+)*|\(no genres listed\))'),
}


def test_the_tests_movielens_copy_has_the_real_folders_format(movielens_folder):
    """The copy the tests write (``movielens_copy.py``) and, where a clone has it, the shared real folder."""
    for folder in [movielens_folder, *([SHARED] if SHARED.is_dir() else [])]:
        for name, (header, line) in MOVIELENS_LINES.items():
            lines = (folder / name).read_text(encoding="utf-8").splitlines()
            assert lines[0] == header and len(lines) > 1, (folder, name)
            assert [x for x in lines[1:] if not re.fullmatch(line, x)] == [], (folder, name)


def test_movielens_splits_by_time_and_encodes_fields(movielens_folder):
    """The reader's own rows: the oldest 80% train (shuffled), the newest 20% evaluate."""
    train = MovieLensReader(movielens_folder, "train", 256)
    evaluation = MovieLensReader(movielens_folder, "eval", 256)
    assert len(train.labels) + len(evaluation.labels) == 1200
    assert len(train.labels) == int(1200 * 0.8) and 0.4 < train.labels.mean() < 0.6
    # the time of each rating the reader yields, found by its (user, movie) pair (unique in the file)
    import pyarrow.csv as pcsv
    ratings = pcsv.read_csv(movielens_folder / "ratings.csv")
    keys = (ratings["userId"].to_numpy().astype(np.int64) << 32) | ratings["movieId"].to_numpy()
    by_key = np.argsort(keys)
    assert len(np.unique(keys)) == len(keys)
    times = ratings["timestamp"].to_numpy()[by_key]

    def time_of(reader):
        return times[np.searchsorted(keys[by_key], (reader.user << 32) | reader.movie)]

    train_times, eval_times = time_of(train), time_of(evaluation)
    assert train_times.max() <= eval_times.min()  # every training rating is older than every eval one
    assert not (np.diff(train_times) >= 0).all()  # ...and training order is shuffled
    batch = next(iter(train))
    assert set(batch.sparse) == {"user", "movie", "genres", "year", *HISTORY} and batch.dense.shape == (256, 0)
    sizes = np.diff(batch.sparse["genres"].offsets)
    assert sizes.max() > 1  # multi-hot
    assert ((batch.sparse["genres"].values >> 40) == 3).all()
