"""Saec's clustering against a plain numpy reference of the same algorithm: the same clusters
bit for bit, the same centroids, for any thread count; and the properties it is for: planted
clusters are found, frequent rows seed clusters, inputs are left alone, bad inputs are refused.

The fast search prunes groups of centroids (``GROUP_SIZE`` per group); the property tests
shrink the groups so that small inputs take every pruning path.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cardinal.compression import Clustering, cluster, saec
from cardinal import parallel


def reference(values, counts, k, head=None, rounds=3):
    """The algorithm written plainly: every distance to every centroid, float64, added over j."""
    x = np.asarray(values, np.float32)
    n, d = x.shape
    if k >= n:
        return np.arange(n), x.copy(), 0.0
    w = np.asarray(counts).astype(np.float64)
    order = np.argsort(-w, kind="stable")
    head = min(n, max(20 * k, 4096) if head is None else head)
    centroids = x[order[:k]].copy()

    def nearest(rows):
        d2 = np.zeros((len(rows), k))
        for j in range(d):
            d2 += (x[rows, j, None].astype(np.float64) - centroids[None, :, j].astype(np.float64)) ** 2
        return d2.argmin(1), d2.min(1)  # argmin: the first of equal minima, the lowest cluster

    assign = np.zeros(n, np.int64)
    for _ in range(rounds):
        rows = order[:head]
        assign[rows] = nearest(rows)[0]
        sums, mass = np.zeros((k, d)), np.zeros(k)
        for r in rows:  # most frequent first
            sums[assign[r]] += w[r] * x[r].astype(np.float64)
            mass[assign[r]] += w[r]
        centroids[mass > 0] = (sums[mass > 0] / mass[mass > 0, None]).astype(np.float32)
    assign, d2 = nearest(np.arange(n))
    return assign, centroids, float((w * d2).sum())


def check_same(got: Clustering, values, counts, k, **kw):
    want_assign, want_centroids, want_inertia = reference(values, counts, k, **kw)
    assert got.assign.dtype == np.int32 and got.centroids.dtype == np.float32
    assert np.array_equal(got.assign, want_assign)
    assert got.centroids.shape == want_centroids.shape
    np.testing.assert_allclose(got.centroids, want_centroids, rtol=1e-5, atol=1e-5 * np.abs(want_centroids).max())
    assert got.inertia == pytest.approx(want_inertia, rel=1e-9, abs=1e-300)


@st.composite
def inputs(draw):
    n, d = draw(st.integers(1, 300)), draw(st.integers(1, 8))
    grid = st.integers(-2, 2).map(float)  # many equal distances: ties go to the lowest cluster
    values = draw(arrays(np.float32, (n, d), elements=st.one_of(grid, st.floats(-100, 100, width=32))))
    scale = draw(st.sampled_from([1.0, 1e-20, 1e20]))  # 1e20: screened in float64; 1e-20: underflows
    counts = draw(arrays(np.int64, n, elements=st.integers(0, 6)))
    k = draw(st.integers(1, 20))
    head = draw(st.one_of(st.none(), st.integers(min(k, n), n + 5)))
    return (values * np.float32(scale)).astype(np.float32), counts, k, head, draw(st.integers(0, 3))


@settings(max_examples=25, deadline=None)
@given(case=inputs(), group_size=st.integers(1, 4))
def test_matches_the_reference(case, group_size):
    values, counts, k, head, rounds = case
    default, saec.GROUP_SIZE = saec.GROUP_SIZE, group_size
    try:
        got = cluster(values, counts, k, head=head, rounds=rounds)
    finally:
        saec.GROUP_SIZE = default
    check_same(got, values, counts, k, head=head, rounds=rounds)


@pytest.mark.parametrize("kind", ["blobs", "grid", "huge"])
def test_matches_the_reference_with_many_groups(kind):
    rng = np.random.default_rng(1)
    values = (rng.normal(size=(40, 6)) * 4)[rng.integers(0, 40, 3000)] + rng.normal(size=(3000, 6))
    values = {"blobs": values, "grid": np.round(values / 2), "huge": values * 1e18}[kind].astype(np.float32)
    counts = rng.zipf(1.3, 3000) % 1000
    check_same(cluster(values, counts, 200, head=1000), values, counts, 200, head=1000)


def test_float64_settles_what_float32_screening_cannot():
    """The last row is nearer the second seed in float64 (the distance) but nearer the first in
    float32 (the screening precision): 7.5421473 against 7.5421483, float32 7.542148 > 7.5421476."""
    values = np.array([[-3.02876615524292, -1.48421311378479, -1.869185447692871, -0.6909413933753967],
                       [-0.9225268363952637, -3.590452194213867, -1.3555418252944946, -1.204585075378418],
                       [-0.7037352323532104, -1.2654215097427368, -0.6232744455337524, 0.04132597893476486]],
                      np.float32)
    got = cluster(values, [9, 8, 1], 2, rounds=0)
    assert got.assign.tolist() == [0, 1, 1]
    check_same(got, values, [9, 8, 1], 2, rounds=0)


def test_planted_blobs_are_found():
    rng = np.random.default_rng(2)
    blob = np.repeat(np.arange(10), 500)
    values = (rng.normal(size=(10, 8)) * 10)[blob] + rng.normal(size=(5000, 8)) * 0.1
    counts = rng.integers(1, 6, 5000)
    counts[::500] = 1000  # every blob has a popular id: the ten seeds
    got = cluster(values.astype(np.float32), counts, 10)
    pairs = set(zip(blob.tolist(), got.assign.tolist(), strict=True))
    assert len(pairs) == 10 and len({c for _, c in pairs}) == 10  # one cluster per blob, none shared


def test_a_heavy_row_far_away_keeps_its_own_centroid():
    rng = np.random.default_rng(3)
    values = rng.normal(size=(2000, 4)).astype(np.float32)
    values[1234] = 30
    counts = rng.integers(1, 4, 2000)
    counts[1234] = 10**6
    got = cluster(values, counts, 2)
    assert got.assign[1234] == 0 and np.sum(got.assign == 0) == 1
    assert np.array_equal(got.centroids[0], values[1234])
    counts[1234] = 1  # seen once, it is no seed: it joins a cluster of near rows
    assign = cluster(values, counts, 2).assign
    assert np.sum(assign == assign[1234]) > 1


def test_frequent_rows_keep_their_own_and_the_tail_is_clustered_alone():
    rng = np.random.default_rng(4)
    values = rng.normal(size=(3000, 6)).astype(np.float32)
    counts = rng.integers(1, 5, 3000)
    top = rng.choice(3000, 40, replace=False)
    counts[top] = 1000 + np.arange(40)[::-1]  # top[0] the most frequent
    got = cluster(values, counts, 100, own=40)
    assert np.array_equal(got.assign[top], np.arange(40))  # in order of frequency, one row each, exact
    assert np.array_equal(got.centroids[:40], values[top]) and np.bincount(got.assign)[:40].tolist() == [1] * 40
    tail = np.setdiff1d(np.arange(3000), top)
    alone = cluster(values[tail], counts[tail], 60)  # the tail, clustered as if it were all the rows
    assert np.array_equal(got.assign[tail], alone.assign + 40) and np.array_equal(got.centroids[40:], alone.centroids)
    assert got.inertia == alone.inertia
    with pytest.raises(ValueError, match="own"):
        cluster(values, counts, 100, own=100)


def test_k_at_least_n_keeps_every_row():
    values = np.arange(24, dtype=np.float32).reshape(6, 4)[:, ::2]  # not C-contiguous
    values[3] = values[1]
    for k in (6, 7):
        got = cluster(values, [5, 1, 9, 9, 0, 2], k)
        assert np.array_equal(got.assign, np.arange(6)) and np.array_equal(got.centroids, values)
        assert got.inertia == 0.0


def test_same_bits_for_any_thread_count(monkeypatch):
    monkeypatch.setattr(saec, "BLOCK", 64)  # many blocks, on every thread
    rng = np.random.default_rng(4)  # scales and counts far apart: sums in another order round differently
    values = (rng.normal(size=(5000, 5)) * 10.0 ** rng.normal(size=(5000, 1))).astype(np.float32)
    counts = rng.zipf(1.2, 5000)
    before = parallel.threads()
    try:
        runs = []
        for threads in (1, 2, 3, 8):
            parallel.set_threads(threads)
            runs.append(cluster(values, counts, 100, head=2000))
    finally:
        parallel.set_threads(before)
    for got in runs[1:]:
        assert got.assign.tobytes() == runs[0].assign.tobytes()
        assert got.centroids.tobytes() == runs[0].centroids.tobytes() and got.inertia == runs[0].inertia


def test_inputs_are_left_alone():
    rng = np.random.default_rng(5)
    for values in (rng.normal(size=(3000, 4)).astype(np.float32), rng.normal(size=(3000, 8))[:, ::2]):
        counts = rng.integers(0, 9, 3000)
        v, c = values.copy(), counts.copy()
        cluster(values, counts, 50)
        assert np.array_equal(values, v) and np.array_equal(counts, c)


@pytest.mark.parametrize("values, counts, k, head, error", [
    (np.zeros((3, 2)), [1, 1, 1], 0, None, "k"),
    (np.zeros((3, 2)), [1, 1], 2, None, "counts must be"),
    (np.zeros(3), [1, 1, 1], 2, None, "values must be"),
    (np.zeros((3, 0)), [1, 1, 1], 2, None, "values must be"),
    (np.zeros((3, 2)), [[1, 1, 1]], 2, None, "counts must be"),
    (np.array([[0, np.nan], [0, 0], [1, 1]]), [1, 1, 1], 2, None, "finite"),
    (np.array([[0, np.inf], [0, 0], [1, 1]]), [1, 1, 1], 2, None, "finite"),
    (np.array([[0, 1e39], [0, 0], [1, 1]]), [1, 1, 1], 2, None, "finite"),  # inf as float32
    (np.zeros((3, 2)), [1, -1, 1], 2, None, ">= 0"),
    (np.zeros((3, 2)), [1, 1, 1], 2, 1, "head"),
])
def test_bad_input_is_refused(values, counts, k, head, error):
    with pytest.raises(ValueError, match=error):
        cluster(values, counts, k, head=head)


def test_counts_must_be_integers():
    with pytest.raises(TypeError, match="integers"):
        cluster(np.zeros((3, 2)), [1.0, 2.0, 3.0], 2)

