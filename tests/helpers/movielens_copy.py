"""A small MovieLens folder the tests write themselves, so that they run in any clone: the shared
copy of ml-latest-small (``../shared/data/movielens-latest-small``) is not in every one.

It has the real folder's files and format, which ``MovieLensReader`` and ``cardinal data
movielens`` read:

    ratings.csv   userId,movieId,rating,timestamp      1,3,4.0,964981247   (half stars 0.5..5.0,
                                                        Unix seconds; the ids ascending per user)
    movies.csv    movieId,title,genres                 3,Grumpier Old Men (1995),Comedy|Romance
                  a title holding a comma is quoted   11,"American President, The (1995)",Drama
                  some have no year, some no genres    7,Movie 7,(no genres listed)
    README.txt    a few lines, as the real one has

Ratings carry a planted signal (a taste of each user for each genre, a quality of each movie,
a bias of each user), so a model trained on the oldest ratings ranks the newest ones better
than chance. ``SHARED`` is where the real folder is looked for; ``CARDINAL_SHARED_DATA``
points elsewhere (``CARDINAL_SHARED_DATA=/nowhere pytest`` runs as a clone without it).
"""

import os
from pathlib import Path

import numpy as np

SHARED = Path(os.environ.get("CARDINAL_SHARED_DATA", Path(__file__).resolve().parents[3] / "shared" / "data")) \
    / "movielens-latest-small"
GENRES = ["Action", "Adventure", "Animation", "Children", "Comedy", "Crime", "Documentary", "Drama", "Fantasy",
          "Film-Noir", "Horror", "IMAX", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western"]
START = 828_124_615  # 1996-03-29, the first rating of ml-latest-small


def write_movielens(folder: Path, users: int = 40, movies: int = 60, ratings: int = 1200, seed: int = 0) -> Path:
    """``folder`` holding ``ratings`` ratings of ``movies`` movies by ``users`` users (each user
    rates each movie at most once, as in the real set); returns it."""
    assert ratings <= users * movies
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    genres = [sorted(rng.choice(len(GENRES), rng.integers(1, 4), replace=False)) for _ in range(movies)]
    with open(folder / "movies.csv", "w", newline="\n") as f:
        f.write("movieId,title,genres\n")
        for m in range(movies):
            title = f"Movie {m + 1}" + (", The" if m % 7 == 3 else "") + (f" ({1950 + m % 60})" if m % 11 else "")
            names = "(no genres listed)" if m % 13 == 12 else "|".join(GENRES[g] for g in genres[m])
            quoted = f'"{title}"' if "," in title else title
            f.write(f"{m + 1},{quoted},{names}\n")
    taste, quality, bias = rng.normal(size=(users, len(GENRES))), rng.normal(size=movies), rng.normal(0, 0.5, users)
    pairs = rng.choice(users * movies, ratings, replace=False)
    user, movie = pairs // movies, pairs % movies
    score = quality[movie] + bias[user] + np.array([taste[u, genres[m]].mean() for u, m in zip(user, movie)])
    stars = np.clip(np.round(2 * (4.1 + 0.8 * score + rng.normal(0, 0.5, ratings))) / 2, 0.5, 5.0)
    when = START + np.sort(rng.integers(0, 22 * 365 * 86400, ratings))  # 22 years, rated in this order...
    rows = sorted(zip(user, movie, stars, when))  # ...listed by user, then movie
    with open(folder / "ratings.csv", "w", newline="\n") as f:
        f.write("userId,movieId,rating,timestamp\n")
        f.writelines(f"{u + 1},{m + 1},{r:.1f},{t}\n" for u, m, r, t in rows)
    (folder / "README.txt").write_text("A small copy in the layout of MovieLens ml-latest-small, written by the "
                                       "tests (tests/helpers/movielens_copy.py): the ratings are made up.\n")
    return folder
