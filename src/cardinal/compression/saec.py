"""Saec's clustering: similar ids of a field share one vector, and the clusters are found where
the traffic is.

A field's ids are skewed (a few carry most lookups), so k-means is guided by frequency: the
seeds are the k most frequent rows, a few rounds of count-weighted Lloyd run on the ``head``
most frequent rows only, then one pass sends every row, head and tail, to its nearest centroid.

    values (n, d) float32, counts (n,)      ->   assign (n,) int32, centroids (k', d) float32
    counts [3, 9, 1, 9], k = 2: seeds rows 1, 3 (ties by row number) are clusters 0 and 1

Frequency-aware (``own``, as in the paper): the ``own`` most frequent rows keep a cluster of
their own, their row exactly, and only the tail is clustered, into the k - own others. A lookup
mostly reads a frequent id, so most lookups see no error; the rare ids, trained on few
examples, lose little by sharing (benchmarks/compression.py: the AUC at equal vectors).

The distance is sum_j (x_j - c_j)^2 in float64, added in order of j, so a plain numpy loop gives
the same bits; ties go to the lowest cluster. Brute force is out of reach: 10M rows x 50,000
centroids x 16 is 8e12 multiply-adds, and float32 matmuls of |x|^2 - 2 x.c + |c|^2, bound by
writing their output, ran at 14 GMAC/s on 2 cores (10 minutes). So the search prunes, exactly:

- centroids are grouped (k-means over them, ~12 per group, neighbouring groups numbered
  together); a row measures its distance to every group's centre, scans the nearest group, and
  skips every group whose ball (centre, radius) lies beyond that best; the rest are scanned as
  runs of adjacent columns;
- distances are screened in float32 (twice float64's speed); each centroid whose screened
  distance is within the rounding bound of the least is measured again in float64 (about two
  per row). Values past 1e15 in magnitude are screened in float64 (float32 squares overflow).

On the benchmark's 10M rows (benchmarks/saec.py) a row measures about 1/7 of the distances of
brute force: in 16-d blobs it still scans most centroids of its own blob, which no ball prunes.
Threads take blocks of rows from a shared counter; a block writes its own rows' clusters and its
own part of the inertia, and the parts are added in block order: same bits for any thread count.
The centroid means are summed on one thread, in frequency order.
"""

import itertools
import operator
from typing import NamedTuple

import numba as nb
import numpy as np

from cardinal import parallel

BLOCK = 1024       # rows per task handed to a thread
GROUP_SIZE = 12    # centroids per group, on average
GROUP_ROUNDS = 3   # k-means rounds that shape the groups
EIGHT = np.uint64(0x0101010101010101)  # a word of eight flags set
GAP = 128          # columns between two runs of near groups that are scanned rather than skipped


class Clustering(NamedTuple):
    assign: np.ndarray     # (n,) int32: the cluster of each input row
    centroids: np.ndarray  # (min(k, n), d) float32
    inertia: float         # sum over rows of count * squared distance to its centroid


def cluster(values, counts, k: int, *, head: int | None = None, rounds: int = 3, own: int = 0) -> Clustering:
    """Cluster the rows of ``values`` into ``k`` clusters, each row weighted by its count.

    head: rows (most frequent first) that the Lloyd rounds see; default max(20 k, 4096), at most n.
    rounds: Lloyd rounds on the head (0: the seeds are the centroids). If k >= n every row is
    its own cluster. A centroid whose rows have no count keeps its previous value.
    own: the most frequent rows (ties by row number) that are clusters 0..own - 1 on their own,
    the rest clustered into k - own (head and rounds apply to them); at most k - 1.
    """
    x, counts, k, head, rounds = _check(values, counts, k, head, rounds)
    n = x.shape[0]
    if k >= n:
        return Clustering(np.arange(n, dtype=np.int32), x.copy(), 0.0)
    order = np.argsort(-counts, kind="stable")  # most frequent first, ties by row number
    own = operator.index(own)
    if not 0 <= own < k:
        raise ValueError(f"own must be in [0, k) = [0, {k}), got {own}")
    if own:
        tail = np.sort(order[own:])  # in row order, as if they were all the rows
        rest = cluster(x[tail], counts[tail], k - own, head=None if head is None else max(head - own, k - own),
                       rounds=rounds)
        assign = np.empty(n, np.int32)
        assign[order[:own]] = np.arange(own, dtype=np.int32)
        assign[tail] = rest.assign + np.int32(own)
        return Clustering(assign, np.concatenate([x[order[:own]], rest.centroids]), rest.inertia)
    weights = counts.astype(np.float64)
    centroids = x[order[:k]]
    screen = np.float32 if max(-x.min(), x.max()) <= 1e15 else np.float64  # float32 squares stay finite
    *groups, coarse = _group(centroids, screen)
    cell = _nearest_of(x, coarse).astype(np.int16)  # rows near one coarse centre: kept together
    head_rows = order[:head][np.argsort(cell[order[:head]], kind="stable")]
    assign = np.zeros(n, np.int32)
    for _ in range(rounds):
        _assign(x, weights, head_rows, centroids, groups, screen, assign)
        _means(x, weights, order[:head], assign, centroids)
    inertia = _assign(x, weights, np.argsort(cell, kind="stable"), centroids, groups, screen, assign)
    return Clustering(assign, centroids, inertia)


def _check(values, counts, k, head, rounds):
    k, rounds = operator.index(k), operator.index(rounds)
    if k < 1:
        raise ValueError(f"k (clusters) must be >= 1, got {k}")
    if rounds < 0:
        raise ValueError(f"rounds must be >= 0, got {rounds}")
    with np.errstate(over="ignore"):  # past float32's range: inf, refused below
        x = np.ascontiguousarray(values, dtype=np.float32)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"values must be (n, d) with d >= 1, got shape {x.shape}")
    c = np.asarray(counts)
    if c.ndim != 1 or len(c) != len(x):
        raise ValueError(f"counts must be (n,) = ({len(x)},) like values' rows, got shape {c.shape}")
    if c.dtype.kind not in "iu":
        raise TypeError(f"counts must be integers (times each row was seen), got {c.dtype}")
    if len(x) and not np.isfinite([x.min(), x.max()]).all():  # nan and inf reach the min or max
        raise ValueError("values must be finite (no nan or inf after conversion to float32)")
    if len(c) and (c.min() < 0 or c.max() > np.iinfo(np.int64).max):
        raise ValueError("counts must be >= 0 (and fit in int64)")
    n = len(x)
    head = min(n, max(20 * k, 4096)) if head is None else operator.index(head)
    if head < min(k, n):
        raise ValueError(f"head must hold at least the k = {k} seeds, got {head}")
    return x, c.astype(np.int64), k, min(head, n), rounds


def _group(centroids, screen):
    """Nearby centroids in groups (k-means over the centroids): (columns, start, coarse), group g
    being centroids[columns[start[g]:start[g + 1]]]. Neighbouring groups get neighbouring numbers
    (``_tree_order``), so that a row's candidates lie in long runs of columns; ``coarse``, every
    sqrt(G)-th centre in that order, sorts rows the same way. Made once, from the seeds: Lloyd
    moves centroids little, and any grouping gives the same answers."""
    c = centroids.astype(screen)
    k, d = c.shape
    centre = c[np.arange(max(1, k // GROUP_SIZE)) * k // max(1, k // GROUP_SIZE)]
    for i in range(GROUP_ROUNDS + 1):
        label = _nearest_of(c, centre)
        sizes = np.bincount(label, minlength=len(centre))
        centre = centre[sizes > 0]
        if i < GROUP_ROUNDS:
            sums = np.stack([np.bincount(label, c[:, j], len(sizes)) for j in range(d)], 1)
            centre = (sums[sizes > 0] / sizes[sizes > 0, None]).astype(screen)
    rank = np.empty(len(centre), np.int64)
    rank[_tree_order(centre)] = np.arange(len(centre))
    label = rank[np.cumsum(sizes > 0)[label] - 1]
    step = len(centre) / round(len(centre) ** 0.5)
    coarse = centre[np.argsort(rank)][(np.arange(round(len(centre) ** 0.5)) * step).astype(np.int64)]
    return np.argsort(label, kind="stable"), np.concatenate([[0], np.cumsum(np.bincount(label))]), coarse


def _tree_order(points) -> np.ndarray:
    """An order of the points in which near ones are mostly adjacent: the leaves, left to right,
    of splitting the points in two (2-means from the farthest pair) again and again."""
    out, stack = [], [np.arange(len(points))]
    while stack:
        idx = stack.pop()
        p = points[idx].astype(np.float64)
        a = p[np.argmax(((p - p.mean(0)) ** 2).sum(1))]
        b = p[np.argmax(((p - a) ** 2).sum(1))]
        for _ in range(4):
            right = ((p - a) ** 2).sum(1) > ((p - b) ** 2).sum(1)
            if right.all() or not right.any():
                break
            a, b = p[~right].mean(0), p[right].mean(0)
        if right.all() or not right.any():  # one point, or all equal
            out.append(idx)
        else:
            stack += [idx[right], idx[~right]]
    return np.concatenate(out)


def _nearest_of(points, centres) -> np.ndarray:
    """(n,) int32: the nearest of ``centres`` to each point, in their precision, on the kernel threads
    (only to group and order: overflow or rounding cost speed, never answers)."""
    out = np.empty(len(points), np.int32)
    ct = np.ascontiguousarray(centres.T)
    parallel.over_rows(0, len(points), lambda lo, hi: _cells(points, ct, lo, hi, out))
    return out


def _assign(x, weights, rows, centroids, groups, screen, assign) -> float:
    """assign[r] = the nearest centroid of x[r] for r in rows, on the kernel threads; returns
    the sum of weights[r] * squared distance."""
    columns, start = groups
    c = centroids[columns].astype(np.float64)
    sizes = np.diff(start)
    centre = (np.add.reduceat(c, start[:-1]) / sizes[:, None]).astype(screen)
    far = np.sqrt(((c - np.repeat(centre.astype(np.float64), sizes, axis=0)) ** 2).sum(1))
    radius = np.maximum.reduceat(far, start[:-1]) * (1 + 1e-9)
    u, low = (2.0**-24, 2.0**-126) if screen == np.float32 else (2.0**-53, 2.0**-1022)
    d = x.shape[1]
    index = (np.ascontiguousarray(c.T, dtype=screen), columns.astype(np.int32), start,
             np.ascontiguousarray(centre.T), radius, 2 * (d + 4) * u, 4 * (d + 4) * low)
    n_blocks = -(-len(rows) // BLOCK)
    parts = np.zeros(n_blocks)
    blocks = itertools.count()  # next() on a count is atomic: each block goes to one thread

    def work(_part, _n_parts):
        while (b := next(blocks)) < n_blocks:
            parts[b] = _nearest(x, weights, rows, b * BLOCK, min(len(rows), (b + 1) * BLOCK), *index, assign)

    parallel.each(parallel.parts(len(rows), BLOCK), work)
    return float(parts.sum())


@nb.njit(nogil=True, cache=True)
def _cells(x, ct, lo, hi, out):
    """out[r] = the nearest column of ct to x[r] for r in lo:hi, in ct's precision."""
    xr = np.empty(x.shape[1], ct.dtype)
    dist = np.empty(ct.shape[1], ct.dtype)
    for r in range(lo, hi):
        xr[:] = x[r]
        _sq_dist(xr, ct, 0, ct.shape[1], dist)
        out[r] = _first_min(dist, ct.shape[1])


@nb.njit(nogil=True, cache=True)
def _nearest(x, weights, rows, lo, hi, cs, members, start, gct, radius, eps, tiny, assign):
    """assign[r] = the nearest centroid of x[r] (lowest cluster on ties) for r in rows[lo:hi];
    returns the sum of weights[r] * its squared distance.

    x,        # (n, d) float32
    rows,     # (m,) int64
    cs,       # (d, k) screening float: centroids by column, group g in columns start[g]:start[g + 1]
    members,  # (k,) int32: the cluster of each column
    gct,      # (d, G) screening float: the groups' centres; radius (G,) float64 their reach
    eps, tiny: relative and absolute error bounds of a screened squared distance (2x the worst)
    Pruning: a member m of a skipped group has screened s_m > T; a centroid whose float64
    distance is the smallest has s <= T = s*(1 + 4 eps) + 4 tiny, s* the least screened.
    """
    d, n_groups = gct.shape
    k = cs.shape[1]
    xr = np.empty(d, cs.dtype)
    dc2 = np.empty(n_groups, cs.dtype)
    words = np.zeros(n_groups // 8 + 1, np.uint64)
    near = words.view(np.uint8)  # a flag per group, skipped 8 at a time when all are 0
    runs = np.empty((n_groups, 2), np.int64)
    acc = np.empty(k, cs.dtype)
    cand = np.empty(2 * k, np.int64)  # columns to measure in float64 (group g0 may come twice)
    shrink = (1 - 2 * eps) ** 2
    total = 0.0
    for i in range(lo, hi):
        r = rows[i]
        for j in range(d):
            xr[j] = x[r, j]
        _sq_dist(xr, gct, 0, n_groups, dc2)
        g0 = _first_min(dc2, n_groups)
        s, n_cand = _scan(xr, cs, start[g0], start[g0 + 1], acc, np.inf, cand, 0, eps, tiny)
        reach = _reach(s, eps, tiny)
        for g in range(n_groups):  # near[g]: group g may hold a centroid within reach
            near[g] = dc2[g] * shrink <= (reach + radius[g]) ** 2
        near[g0] = 0
        n_runs = 0  # runs of columns to scan: near groups, merged across gaps of <= GAP columns
        for w in range(words.shape[0]):
            if words[w]:
                step = 8 if words[w] == EIGHT else 1  # eight near groups: one run of their columns
                for g in range(8 * w, min(8 * w + 8, n_groups), step):
                    if near[g]:
                        if n_runs and start[g] - runs[n_runs - 1, 1] <= GAP:
                            runs[n_runs - 1, 1] = start[g + step]
                        else:
                            runs[n_runs, 0], runs[n_runs, 1] = start[g], start[g + step]
                            n_runs += 1
        for q in range(n_runs):
            s, n_cand = _scan(xr, cs, runs[q, 0], runs[q, 1], acc, s, cand, n_cand, eps, tiny)
        best, bi = np.inf, -1
        for c in cand[:n_cand]:
            e = 0.0
            for j in range(d):
                t = np.float64(x[r, j]) - np.float64(cs[j, c])
                e += t * t
            if e < best or (e == best and members[c] < bi):
                best, bi = e, members[c]
        assign[r] = bi
        total += weights[r] * best
    return total


@nb.njit(inline="always")
def _scan(xr, cs, a, b, acc, s, cand, n_cand, eps, tiny):
    """Screen columns a:b of cs: (the least screened distance so far, candidates kept)."""
    n = b - a
    _sq_dist(xr, cs, a, b, acc)
    t = s * (1 + 4 * eps) + 4 * tiny
    close = 0
    for m in range(n):
        close += acc[m] <= t
    if close:  # rare: most runs hold nothing near the best
        first = _first_min(acc, n)
        s = min(s, np.float64(acc[first]))
        t = s * (1 + 4 * eps) + 4 * tiny
        within = 0
        for m in range(n):
            within += acc[m] <= t
        if within == 1 and acc[first] <= t:  # the usual case: only the least is near
            cand[n_cand] = a + first
            n_cand += 1
        elif within:
            for m in range(n):
                if acc[m] <= t:
                    cand[n_cand] = a + m
                    n_cand += 1
    return s, n_cand


@nb.njit(inline="always")
def _reach(s, eps, tiny):
    """How far a group's centroids may lie and still be screened within T of s: groups whose
    centre is farther than reach + radius are skipped."""
    return np.sqrt(s * (1 + 4 * eps) + 5 * tiny) * (1 + 2 * eps) + 2 * np.sqrt(tiny)


@nb.njit(inline="always")
def _first_min(a, n):
    """The first index of the least of a[:n] >= 0, found on the values' bits as integers (same
    order for floats >= 0; the compiler vectorizes an integer min, not a float one)."""
    if a.itemsize == 4:
        return _first_least(a[:n].view(np.int32))
    return _first_least(a[:n].view(np.int64))


@nb.njit(inline="always")
def _first_least(bits):
    least = bits[0]
    for i in range(len(bits)):
        least = min(least, bits[i])
    first = len(bits)
    for i in range(len(bits)):
        first = min(first, i if bits[i] == least else len(bits))
    return first


@nb.njit(inline="always")
def _sq_dist(xr, ct, a, b, out):
    """out[:b - a] = squared distances from xr to columns a:b of ct, added in order of j; eight or
    four coordinates per pass over out, in one expression (same order, fewer loads and stores)."""
    n, d = b - a, ct.shape[0]
    out[:n] = 0
    j = 0
    while j + 8 <= d:
        x0, x1, x2, x3 = xr[j], xr[j + 1], xr[j + 2], xr[j + 3]
        x4, x5, x6, x7 = xr[j + 4], xr[j + 5], xr[j + 6], xr[j + 7]
        c0, c1, c2, c3 = ct[j, a:b], ct[j + 1, a:b], ct[j + 2, a:b], ct[j + 3, a:b]
        c4, c5, c6, c7 = ct[j + 4, a:b], ct[j + 5, a:b], ct[j + 6, a:b], ct[j + 7, a:b]
        for m in range(n):
            t0, t1, t2, t3 = x0 - c0[m], x1 - c1[m], x2 - c2[m], x3 - c3[m]
            t4, t5, t6, t7 = x4 - c4[m], x5 - c5[m], x6 - c6[m], x7 - c7[m]
            out[m] = ((((((((out[m] + t0 * t0) + t1 * t1) + t2 * t2) + t3 * t3) + t4 * t4) + t5 * t5)
                       + t6 * t6) + t7 * t7)
        j += 8
    while j + 4 <= d:
        x0, x1, x2, x3 = xr[j], xr[j + 1], xr[j + 2], xr[j + 3]
        c0, c1, c2, c3 = ct[j, a:b], ct[j + 1, a:b], ct[j + 2, a:b], ct[j + 3, a:b]
        for m in range(n):
            t0, t1, t2, t3 = x0 - c0[m], x1 - c1[m], x2 - c2[m], x3 - c3[m]
            out[m] = (((out[m] + t0 * t0) + t1 * t1) + t2 * t2) + t3 * t3
        j += 4
    while j < d:
        xj, cj = xr[j], ct[j, a:b]
        for m in range(n):
            t = xj - cj[m]
            out[m] += t * t
        j += 1


@nb.njit(nogil=True, cache=True)
def _means(x, weights, rows, assign, centroids):
    """centroids[c] = the weighted mean of the rows in ``rows`` assigned to c, summed in the order
    of ``rows`` in float64; unchanged where those rows' weights add to 0.

    centroids,  # (k, d) float32, in place
    """
    k, d = centroids.shape
    sums = np.zeros((k, d))
    mass = np.zeros(k)
    for r in rows:
        c = assign[r]
        mass[c] += weights[r]
        for j in range(d):
            sums[c, j] += weights[r] * x[r, j]
    for c in range(k):
        if mass[c] > 0:
            for j in range(d):
                centroids[c, j] = sums[c, j] / mass[c]
