"""MovieLens history features: each rating sees only strictly earlier ratings, never its own or later ones."""

import numpy as np
import pytest

from cardinal.data import MovieLensReader
from cardinal.data.movielens import FIELD_CODE
from cardinal.data.movielens_history import FIELDS, genre_affinity, history_features


def reference(key, rating, ts):
    """The definition, one row at a time."""
    out = []
    for i in range(len(key)):
        earlier = (key == key[i]) & (ts < ts[i])
        out.append((earlier.sum(), rating[earlier].sum(), (rating[earlier] >= 4).sum()))
    return [np.array(c) for c in zip(*out)]


@pytest.mark.parametrize("seed", range(5))
def test_history_matches_the_definition_with_ties_in_any_order(seed):
    rng = np.random.default_rng(seed)
    n = 300
    key = rng.integers(0, 7, n)
    ts = rng.integers(0, 40, n).astype(np.float64)  # many ratings share a second
    rating = rng.integers(1, 11, n) / 2
    count, total, clicks = history_features(key, rating, ts)
    want = reference(key, rating, ts)
    np.testing.assert_array_equal(count, want[0])
    np.testing.assert_allclose(total, want[1], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(clicks, want[2])


@pytest.mark.parametrize("seed", range(3))
def test_genre_affinity_matches_the_definition(seed):
    """Per row: the user's strictly earlier ratings, once for each genre they share with this movie."""
    rng = np.random.default_rng(seed)
    n = 200
    user = rng.integers(0, 5, n)
    ts = rng.integers(0, 30, n).astype(np.float64)
    rating = rng.integers(1, 11, n) / 2
    genres = [sorted(set(rng.integers(0, 6, rng.integers(0, 4)).tolist())) for _ in range(n)]
    offsets = np.concatenate([[0], np.cumsum([len(g) for g in genres])])
    count, total = genre_affinity(user, np.array([g for gs in genres for g in gs], np.int64), offsets, rating, ts)
    for i in range(n):
        c = t = 0
        for j in np.flatnonzero((user == user[i]) & (ts < ts[i])):
            shared = len(set(genres[i]) & set(genres[j]))
            c, t = c + shared, t + shared * rating[j]
        assert (count[i], total[i]) == pytest.approx((c, t), abs=1e-9), i


def test_the_docstring_example():
    count, total, _ = history_features(np.zeros(4, np.int64), np.array([4.0, 2.0, 5.0, 3.0]),
                                       np.array([10.0, 20.0, 20.0, 30.0]))
    assert count.tolist() == [0, 1, 1, 3] and total.tolist() == [0, 4, 4, 11]


def _write(d, ratings):
    d.mkdir(exist_ok=True)
    (d / "ratings.csv").write_text("userId,movieId,rating,timestamp\n" + "".join(f"{u},{m},{r},{t}\n" for u, m, r, t in ratings))
    (d / "movies.csv").write_text("movieId,title,genres\n1,A (1990),Drama\n2,B (2010),Comedy|Drama\n3,C,Comedy\n")
    return d


def _fields(reader, n):
    """Each history field's ids per row of the reader's order, -1 where absent."""
    out = {}
    batch = next(iter(reader))
    for name in FIELDS:
        bag = batch.sparse[name]
        sizes = np.diff(bag.offsets)
        assert sizes.max() <= 1
        values = np.full(n, -1, np.int64)
        values[sizes == 1] = bag.values
        assert ((bag.values >> 40) == FIELD_CODE[name]).all()
        out[name] = np.where(values >= 0, values & ((1 << 40) - 1), -1)
    return out


def test_eval_features_come_from_the_past_only(tmp_path):
    """Changing later ratings, or a rating itself, changes no feature of it or of anything earlier;
    a rating from the user's own past does."""
    base = [(1, 1, 5.0, 100), (1, 2, 1.0, 200), (2, 1, 4.0, 300), (1, 3, 2.0, 400),
            (2, 2, 3.0, 500), (1, 1, 4.5, 600), (2, 3, 5.0, 700), (1, 2, 0.5, 800)]
    reader = MovieLensReader(_write(tmp_path / "a", base), "eval", 8, eval_fraction=0.5)
    before = _fields(reader, 4)  # the last 4 ratings by time, in time order
    changed = base[:6] + [(2, 3, 0.5, 700), (1, 2, 5.0, 800)]  # the last two ratings change
    after = _fields(MovieLensReader(_write(tmp_path / "b", changed), "eval", 8, eval_fraction=0.5), 4)
    for name in FIELDS:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    # the first eval rating (user 2, movie 2, t=500) sees user 2's rating 4.0 at t=300 and movie 2's 1.0 at t=200
    assert before["user_mean"][0] == 16 and before["user_count"][0] == 1 and before["user_likes"][0] == 10
    assert before["movie_mean"][0] == 4 and before["movie_count"][0] == 1
    assert before["user_genre_mean"][0] == 16  # movie 2 (Comedy|Drama) shares Drama with user 2's movie 1
    assert before["movie_age"][0] == 0  # rated in 1970, released 2010: clipped at 0
    # the user's own past does count: change user 2's rating at t=300
    past = base[:2] + [(2, 1, 1.0, 300)] + base[3:]
    moved = _fields(MovieLensReader(_write(tmp_path / "c", past), "eval", 8, eval_fraction=0.5), 4)
    assert moved["user_mean"][0] == 4 and moved["user_likes"][0] == 0


def test_a_user_without_history_has_no_history_ids(tmp_path):
    d = _write(tmp_path / "a", [(1, 1, 4.0, 100), (1, 2, 4.0, 100), (2, 3, 4.0, 200), (3, 1, 2.0, 300)])
    f = _fields(MovieLensReader(d, "eval", 8, eval_fraction=0.5), 2)
    assert f["user_mean"].tolist() == [-1, -1] and f["user_count"].tolist() == [0, 0]
    assert f["movie_count"].tolist() == [0, 1] and f["movie_age"][0] == -1  # movie 3 has no year
