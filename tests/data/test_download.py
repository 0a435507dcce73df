"""`cardinal data movielens`: download, checksum, atomic unpack, and what a failure leaves (nothing).

Never the internet: the archive is built here from a small copy in ml-latest-small's layout
(``movielens_copy.py``), zipped as GroupLens does, and served
by a file:// URL or by an http.server on 127.0.0.1 (port 0, stopped by the test); the known URL
and checksum are replaced through ``download.DATASETS``.
"""

import hashlib
import http.server
import ssl
import threading
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from cardinal import cli
from cardinal.data import download


@pytest.fixture
def archive(tmp_path, movielens_folder) -> tuple[Path, str]:
    """ml-latest-small.zip as GroupLens lays it out (one ml-latest-small/ folder), and its SHA-256."""
    zip_path = tmp_path / "served" / "ml-latest-small.zip"
    zip_path.parent.mkdir()
    with zipfile.ZipFile(zip_path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(movielens_folder.iterdir()):
            z.write(f, f"ml-latest-small/{f.name}")
    return zip_path, hashlib.sha256(zip_path.read_bytes()).hexdigest()


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CARDINAL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def serve(monkeypatch, url: str, sha256: str) -> None:
    monkeypatch.setitem(download.DATASETS, "movielens", replace(download.DATASETS["movielens"], url=url, sha256=sha256))


class Server:
    """An http.server on 127.0.0.1:0 answering every GET with ``body``, optionally cut short."""

    def __init__(self, body: bytes, send: int | None = None):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:send])  # send=None: all of it
                self.close_connection = True

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/ml-latest-small.zip"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def leftovers(home: Path) -> list[str]:
    """Everything under $CARDINAL_HOME/data: a failed fetch must leave no data folder and no partial one."""
    d = home / "data"
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_downloads_verifies_unpacks_then_finds_it(archive, movielens_folder, home, monkeypatch, capsys):
    zip_path, sha = archive
    with Server(zip_path.read_bytes()) as server:
        serve(monkeypatch, server.url, sha)
        assert cli.main(["data", "movielens"]) == 0
    out = capsys.readouterr().out
    dest = home / "data" / "movielens-latest-small"
    assert "downloaded and checked" in out and str(dest) in out and "cardinal train movielens" in out
    for name in ("ratings.csv", "movies.csv"):  # the very bytes, in the folder the recipe reads
        assert (dest / name).read_bytes() == (movielens_folder / name).read_bytes()
    assert leftovers(home) == ["movielens-latest-small"]  # no partial folder or zip beside it
    # a second call finds it and does nothing: the server is gone, and it still succeeds
    serve(monkeypatch, "http://127.0.0.1:9/gone.zip", sha)
    assert cli.main(["data", "movielens"]) == 0
    assert "already there; nothing to do" in capsys.readouterr().out


def test_a_folder_given_is_used_and_named_in_the_train_command(archive, tmp_path, home, monkeypatch, capsys):
    zip_path, sha = archive
    serve(monkeypatch, zip_path.as_uri(), sha)  # file:// works too
    assert cli.main(["data", "movielens", str(tmp_path / "mine")]) == 0
    assert (tmp_path / "mine" / "ratings.csv").is_file()
    assert f'--set data.train="{tmp_path / "mine"}"' in capsys.readouterr().out
    assert leftovers(home) == []


def test_a_wrong_checksum_keeps_nothing(archive, home, monkeypatch, capsys):
    zip_path, sha = archive
    serve(monkeypatch, zip_path.as_uri(), "0" * 64)
    assert cli.main(["data", "movielens"]) == 2
    err = capsys.readouterr().err
    assert f"SHA-256 is {sha}, expected {'0' * 64}" in err and "nothing was kept" in err
    assert leftovers(home) == []


def test_a_truncated_download_keeps_nothing(archive, home, monkeypatch):
    zip_path, sha = archive
    body = zip_path.read_bytes()
    with Server(body, send=len(body) // 2) as server:
        serve(monkeypatch, server.url, sha)
        with pytest.raises(download.DownloadError, match=f"{server.url}.*place it by hand") as e:
            download.fetch("movielens", progress=False, timeout_s=10)
    assert "stopped after" in str(e.value) or "IncompleteRead" in str(e.value)
    assert leftovers(home) == []


def test_an_interrupted_download_keeps_nothing(archive, home, monkeypatch):
    """Ctrl-C in the middle of the transfer: the partial folder is removed on the way out."""
    zip_path, sha = archive
    serve(monkeypatch, zip_path.as_uri(), sha)
    monkeypatch.setattr(download, "CHUNK", 4096)

    received = []

    class Interrupting(download.tqdm):
        def update(self, n=1):
            received.append(n)
            if len(received) == 2:  # the second chunk: the first is already on disk
                raise KeyboardInterrupt
            super().update(n)

    monkeypatch.setattr(download, "tqdm", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        download.fetch("movielens", progress=False)
    assert received == [4096, 4096] and leftovers(home) == []


def test_a_failure_while_unpacking_keeps_nothing(archive, home, monkeypatch):
    """The disk fills up after the first file: no half-unpacked data folder appears."""
    zip_path, sha = archive
    serve(monkeypatch, zip_path.as_uri(), sha)
    extract = zipfile.ZipFile._extract_member
    done = []

    def fill_up(self, member, *args):
        if done:
            raise OSError(28, "No space left on device")
        done.append(extract(self, member, *args))
        return done[-1]

    monkeypatch.setattr(zipfile.ZipFile, "_extract_member", fill_up)
    with pytest.raises(download.DownloadError, match="could not unpack .*No space left on device.*nothing was kept"):
        download.fetch("movielens", progress=False)
    assert len(done) == 1 and leftovers(home) == []


def test_the_data_folder_appears_only_by_the_final_rename(archive, home, monkeypatch):
    """A crash at the commit (the rename) leaves nothing: the folder is never filled in place."""
    zip_path, sha = archive
    serve(monkeypatch, zip_path.as_uri(), sha)

    def crash(src, dst):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(download.os, "rename", crash)
    with pytest.raises(OSError, match="Input/output error"):
        download.fetch("movielens", progress=False)
    assert leftovers(home) == []


def test_a_certificate_that_does_not_verify_falls_back_to_the_checked_http_address(archive, home, monkeypatch, capsys):
    zip_path, sha = archive
    opened, urlopen = [], download.urllib.request.urlopen

    def expired(url, *args, **kwargs):
        opened.append(url)
        if url.startswith("https://"):
            raise download.urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate has expired"))
        return urlopen(url, *args, **kwargs)

    monkeypatch.setattr(download.urllib.request, "urlopen", expired)
    with Server(zip_path.read_bytes()) as server:
        known = replace(download.DATASETS["movielens"], url="https://127.0.0.1:9/ml-latest-small.zip", sha256=sha,
                        fallback_url=server.url)
        monkeypatch.setitem(download.DATASETS, "movielens", known)
        assert download.fetch("movielens", progress=False) == (home / "data" / "movielens-latest-small", True)
        assert opened == [known.url, server.url]
        assert "certificate has expired" in capsys.readouterr().err
        # the same failure on an address the caller chose is an error: no silent change of address
        with pytest.raises(download.DownloadError, match="certificate has expired"):
            download.fetch("movielens", home / "other", url="https://127.0.0.1:9/mine.zip", progress=False)


def test_an_unreachable_url_names_it_and_how_to_place_the_files(home, monkeypatch, capsys):
    with Server(b"") as server:  # a port that was just listening and is now closed
        url = server.url
    serve(monkeypatch, url, "0" * 64)
    assert cli.main(["data", "movielens"]) == 2
    err = capsys.readouterr().err
    dest = home / "data" / "movielens-latest-small"
    assert f"could not download {url}" in err
    assert f"move its ml-latest-small/ folder to {dest}" in err and "--set data.train=" in err
    assert leftovers(home) == []


def test_a_folder_holding_something_else_is_not_touched(home, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(download.DownloadError, match="exists but does not hold ratings.csv"):
        download.fetch("movielens", other, url="http://127.0.0.1:9/x.zip", progress=False)
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_the_known_checksum_is_the_published_one():
    """TensorFlow Datasets' url_checksums/movielens.txt: 978202 bytes, this SHA-256."""
    a = download.DATASETS["movielens"]
    assert a.url == "https://files.grouplens.org/datasets/movielens/ml-latest-small.zip"
    assert a.sha256 == "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436"
