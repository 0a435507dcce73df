"""Public data sets a user can fetch with one command: download, verify, unpack atomically.

    cardinal data movielens [DIR]     # DIR: $CARDINAL_HOME/data/movielens-latest-small

    fetch("movielens")  ->  (Path(".../movielens-latest-small"), True)    # downloaded now
    fetch("movielens")  ->  (Path(".../movielens-latest-small"), False)   # already there

The archive goes to a temporary folder beside DIR, its SHA-256 is checked against the value
known here (TensorFlow Datasets publishes the same one, with the size, in its
``url_checksums/movielens.txt``), it is unpacked there, and the data folder is renamed to DIR
last: DIR exists only complete, a failure or Ctrl-C at any point leaves nothing behind, and
two concurrent fetches end with one copy (the second rename loses and finds the first's).
The checksum is what makes the file trustworthy, so when the server's TLS certificate does
not verify (files.grouplens.org has served an expired one), the plain-HTTP address is tried,
with a warning, and checked the same way.
"""

import hashlib
import http.client
import os
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from cardinal.home import data_dir


@dataclass(frozen=True)
class Archive:
    title: str
    url: str
    sha256: str
    folder: str                 # the folder inside the zip that becomes DIR
    files: tuple[str, ...]      # what a complete DIR holds (checked after unpacking and on later calls)
    dir_name: str               # DIR's name under $CARDINAL_HOME/data
    fallback_url: str = ""      # tried when the url's TLS certificate does not verify (the SHA-256 still guards)


DATASETS = {
    "movielens": Archive(
        title="MovieLens ml-latest-small (GroupLens; research use, see its README.txt)",
        url="https://files.grouplens.org/datasets/movielens/ml-latest-small.zip",
        sha256="696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436",  # 978,202 bytes
        folder="ml-latest-small", files=("ratings.csv", "movies.csv"), dir_name="movielens-latest-small",
        # files.grouplens.org has served an expired certificate at times; the file is public and pinned
        fallback_url="http://files.grouplens.org/datasets/movielens/ml-latest-small.zip"),
}
CHUNK = 1 << 16


class DownloadError(ValueError):
    """A data set could not be fetched; the message says how to place it by hand."""


def default_dir(name: str) -> Path:
    return data_dir() / _archive(name).dir_name


def is_complete(name: str, path: str | Path) -> bool:
    return all((Path(path) / f).is_file() for f in _archive(name).files)


def fetch(name: str, dest: str | Path | None = None, *, url: str | None = None, sha256: str | None = None,
          progress: bool = True, timeout_s: float = 60.0) -> tuple[Path, bool]:
    """(the data set's folder, whether it was downloaded now). ``url`` and ``sha256`` replace the
    known values (a mirror; tests serve a local copy)."""
    archive = _archive(name)
    url, sha256 = url or archive.url, (sha256 or archive.sha256).lower()
    dest = Path(dest) if dest is not None else default_dir(name)
    if is_complete(name, dest):
        return dest, False
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise DownloadError(f"{dest} exists but does not hold {', '.join(archive.files)}: "
                            f"remove it or choose another folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}.partial-") as tmp:
        zip_path = Path(tmp) / "archive.zip"
        try:
            digest = _download(url, zip_path, progress, timeout_s, _by_hand(archive, url, dest))
        except DownloadError as e:
            if not (archive.fallback_url and url == archive.url and _certificate_failed(e.__cause__)):
                raise
            print(f"warning: the certificate of {url} did not verify ({e.__cause__.reason}); downloading "
                  f"{archive.fallback_url} instead (its SHA-256 is checked all the same)", file=sys.stderr)
            url = archive.fallback_url
            digest = _download(url, zip_path, progress, timeout_s, _by_hand(archive, url, dest))
        if digest != sha256:
            raise DownloadError(f"{url}: the download's SHA-256 is {digest}, expected {sha256}; nothing was kept. "
                                f"The file changed or was corrupted on the way: try again, or "
                                f"{_by_hand(archive, url, dest)}")
        unpacked = _unpack(zip_path, Path(tmp) / "unpacked", archive, url)
        if dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()  # an empty folder the user made for it
        try:
            os.rename(unpacked, dest)  # the commit: DIR appears complete or not at all
        except OSError:
            if not is_complete(name, dest):
                raise
            return dest, False  # another fetch finished first
    return dest, True


def _archive(name: str) -> Archive:
    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; known: {sorted(DATASETS)}")
    return DATASETS[name]


def _certificate_failed(error: BaseException | None) -> bool:
    return isinstance(error, urllib.error.URLError) and isinstance(error.reason, ssl.SSLCertVerificationError)


def _by_hand(archive: Archive, url: str, dest: Path) -> str:
    return (f"place it by hand: download {url}, check its SHA-256 ({archive.sha256} for the known file), unzip it "
            f"and move its {archive.folder}/ folder to {dest} (or anywhere, then --set data.train=\"THAT_FOLDER\")")


def _download(url: str, out: Path, progress: bool, timeout_s: float, by_hand: str) -> str:
    """Write ``url`` to ``out``; its SHA-256 (hex). Any failure is a DownloadError naming ``url``."""
    h, done = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply, open(out, "wb") as f:
            length = reply.headers.get("Content-Length") if hasattr(reply, "headers") else None
            total = int(length) if length and length.isdigit() else None
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"downloading {url.rsplit('/', 1)[-1]}",
                      disable=not progress) as bar:
                while chunk := reply.read(CHUNK):
                    f.write(chunk)
                    h.update(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise DownloadError(f"could not download {url} ({type(e).__name__}: {reason}; {done:,} bytes received); "
                            f"check the network and try again, or {by_hand}") from e
    if total is not None and done != total:
        raise DownloadError(f"the download of {url} stopped after {done:,} of {total:,} bytes; nothing was kept. "
                            f"Try again, or {by_hand}")
    return h.hexdigest()


def _unpack(zip_path: Path, out: Path, archive: Archive, url: str) -> Path:
    """Extract the archive's data folder under ``out``; the path of that folder."""
    try:
        with zipfile.ZipFile(zip_path) as z:
            for member in z.namelist():  # stay inside `out` whatever the names say
                if member.startswith("/") or ".." in Path(member).parts:
                    raise DownloadError(f"{url}: the archive holds an unsafe path {member!r}; nothing was kept")
            z.extractall(out)
    except zipfile.BadZipFile as e:
        raise DownloadError(f"{url}: not a readable zip archive ({e}); nothing was kept") from e
    except OSError as e:
        raise DownloadError(f"could not unpack {url} into {out.parent} ({e}); nothing was kept") from e
    folder = out / archive.folder
    missing = [f for f in archive.files if not (folder / f).is_file()]
    if missing:
        raise DownloadError(f"{url}: the archive has no {archive.folder}/{missing[0]}; nothing was kept")
    return folder


def command(name: str, dest: str | Path | None = None) -> str:
    """``cardinal data NAME [DIR]``: fetch, then say where the data is and how to train on it."""
    path, downloaded = fetch(name, dest)
    done = "downloaded and checked (SHA-256)" if downloaded else "already there; nothing to do"
    train = f"cardinal train {name}"
    if path.resolve() != default_dir(name).resolve():
        train += f' --set data.train="{path}"'
    return f"{_archive(name).title}: {done}\n  {path.resolve()}\ntrain on it: {train}"
