"""What is known about a rating before it is made: the user's and the movie's earlier ratings.

In a time split most evaluated ratings come from users the training period never saw (on
ml-latest-small, 90% of the latest 20%), so a user-id embedding cannot help them; what a
recommender does know when it predicts is the history so far. Each rating gets, from the
ratings strictly earlier in time (ratings of the same second do not see each other, nor is a
rating ever part of its own history):

    user_mean     the user's mean rating so far, in quarter stars (2..20); absent without history
    user_count    how many ratings the user made so far, log2 buckets (0, 1, 2-3, 4-7, ...)
    user_likes    the share of them that were clicks (>= 4), in tenths (0..10); absent without history
    movie_mean    the movie's mean rating so far, as user_mean
    movie_count   the movie's ratings so far, as user_count
    movie_age     years from the movie's release to the rating (0..50, later clipped); absent without a year
    user_genre_mean  the user's mean rating so far of movies sharing a genre with this one (each
                  earlier rating counted once per shared genre), as user_mean; absent without one

Example, one user (ratings in time order, t = timestamp):
    t:      10   20   20   30
    rating: 4.0  2.0  5.0  3.0
    count:  0    1    1    3        (the two ratings at t=20 see only t=10)
    mean:   -    4.0  4.0  3.67
"""

import numpy as np

FIELDS = ["user_mean", "user_count", "user_likes", "movie_mean", "movie_count", "movie_age", "user_genre_mean"]
MAX_AGE = 50


def history_features(key: np.ndarray, rating: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each row, (count, sum of ratings, clicks) over the rows with the same ``key`` and a
    strictly smaller ``ts``. All arrays (n,), any order; results in the input order."""
    n = len(key)
    order = np.lexsort((ts, key))                      # by key, then time
    k, t, r = key[order], ts[order], rating[order]
    i = np.arange(n)
    new_key = np.ones(n, bool)
    new_key[1:] = k[1:] != k[:-1]
    new_time = new_key.copy()
    new_time[1:] |= t[1:] != t[:-1]
    key_start = np.maximum.accumulate(np.where(new_key, i, 0))
    time_start = np.maximum.accumulate(np.where(new_time, i, 0))  # first row of the same (key, second)
    rsum = np.concatenate([[0.0], np.cumsum(r, dtype=np.float64)])
    csum = np.concatenate([[0], np.cumsum(r >= 4.0)])
    out = np.empty((3, n), np.float64)
    out[0, order] = time_start - key_start
    out[1, order] = rsum[time_start] - rsum[key_start]
    out[2, order] = csum[time_start] - csum[key_start]
    return out[0].astype(np.int64), out[1], out[2].astype(np.int64)


def genre_affinity(user: np.ndarray, genres: np.ndarray, offsets: np.ndarray, rating: np.ndarray,
                   ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each row, (count, sum of ratings) of the user's earlier ratings of movies sharing a genre
    with this one, summed over this movie's genres (``genres[offsets[i]:offsets[i+1]]``, codes < 1024)."""
    per_row = np.diff(offsets)
    row = np.repeat(np.arange(len(user)), per_row)
    count, total, _ = history_features(user[row] * 1024 + genres, rating[row], ts[row])
    return (np.bincount(row, count, len(user)).astype(np.int64), np.bincount(row, total, len(user)))


def encode(user: np.ndarray, movie: np.ndarray, rating: np.ndarray, ts: np.ndarray,
           movie_year: np.ndarray, seconds: np.ndarray, genres: tuple[np.ndarray, np.ndarray]) -> dict[str, np.ndarray]:
    """Each field of ``FIELDS`` as an int64 bucket per row, -1 where absent. ``movie_year`` -1:
    unknown; ``seconds``: ``ts`` as whole Unix seconds (for the year of the rating)."""
    out = {}
    for who, key in (("user", user), ("movie", movie)):
        count, total, clicks = history_features(key, rating, ts)
        seen = count > 0
        safe = np.maximum(count, 1)
        out[f"{who}_mean"] = np.where(seen, np.rint(total / safe * 4), -1).astype(np.int64)
        out[f"{who}_count"] = np.floor(np.log2(count + 1)).astype(np.int64)
        if who == "user":
            out["user_likes"] = np.where(seen, np.rint(clicks / safe * 10), -1).astype(np.int64)
    count, total = genre_affinity(user, *genres, rating, ts)
    out["user_genre_mean"] = np.where(count > 0, np.rint(total / np.maximum(count, 1) * 4), -1).astype(np.int64)
    year = seconds.astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64) + 1970
    out["movie_age"] = np.where(movie_year >= 0, np.clip(year - movie_year, 0, MAX_AGE), -1).astype(np.int64)
    return {f: out[f] for f in FIELDS}
