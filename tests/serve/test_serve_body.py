"""A large prediction body is parsed in slices (serve/body.py): the same rows as parsed whole, in
every form and JSON layout; a malformed or oversized one is refused with a 4xx naming what to
change, counted before the rest is parsed."""

import asyncio
import json

import numpy as np
import pytest

from cardinal.serve.body import SLICE, read_rows
from cardinal.serve.guard import ServeLimits
from cardinal.serve.requests import COLUMNS, BadRequest, parse_request


class Request:
    """What ``read_rows`` reads of an aiohttp request."""

    def __init__(self, data: bytes):
        self.data, self.content_length = data, len(data)

    async def read(self) -> bytes:
        return self.data


def read(data: bytes, max_examples: int = 4096):
    return asyncio.run(read_rows(Request(data), ServeLimits(), max_examples))


def examples(n: int, rng) -> list[dict]:
    """Named examples with some fields left out or null, ints of any width, hex of any case."""
    out = []
    for _ in range(n):
        e = {c: int(rng.integers(-9, 10 ** int(rng.integers(1, 18)))) if c[0] == "I" else
             f"{int(rng.integers(0, 2**32)):x}" for c in COLUMNS if rng.random() < 0.8}
        e.update({c: None for c in COLUMNS if rng.random() < 0.05})
        out.append(e)
    return out


def line(e: dict) -> str:
    return "\t".join("" if e.get(c) is None else str(e[c]) for c in COLUMNS)


@pytest.mark.parametrize("form", ["rows", "labelled_rows", "examples"])
@pytest.mark.parametrize("indent", [None, 3])
def test_a_body_read_in_slices_parses_as_one_read_whole(form, indent, rng):
    named = examples(2000, rng)
    items = {"examples": named, "rows": [line(e) for e in named],
             "labelled_rows": [f"{i % 2}\t{line(e)}" for i, e in enumerate(named)]}[form]
    body = json.dumps({form: items}, indent=indent).encode()
    assert len(body) > 20 * SLICE
    got, expected = read(body), parse_request(json.loads(body), 4096)
    for name in ("labels", "ints", "int_ok", "cats", "cat_ok"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name), err_msg=name)


def large(key: str, items: list, tail: bytes = b"") -> bytes:
    return json.dumps({key: items}).encode() + tail


def missing_comma(body: bytes) -> bytes:
    at = body.index(b'", "', len(body) // 2)
    return body[:at] + b'" "' + body[at + 4:]


GOOD = {"I1": 3, "C1": "68fd1e64"}


@pytest.mark.parametrize("body, status, says", [
    (b'{"examples": [' + b",".join([b"{}"] * 1_000_000) + b"]}", 413, "more than the 4096 examples"),
    (large("examples", [GOOD] * 4097), 413, "more than the 4096 examples"),
    (large("examples", [GOOD] * 3000 + [{"I1": "x"}] + [GOOD] * 9), 400, "examples[3000]: I1 'x'"),
    (large("examples", [GOOD] * 2000 + [{"I1": [1] * 20000}]), 400, "at most 16 KiB"),
    (large("examples", [GOOD] * 2000 + [{"I1": {"I2": 1}}]), 400, "examples[2000]: I1"),
    (large("rows", [line(GOOD)] * 2000 + [line(GOOD).replace("68fd1e64", '6"8')]), 400, "no quotes"),
    (large("rows", [line(GOOD)] * 500 + [7] * 30000), 400, "at most 16 KiB"),
    (large("rows", [line(GOOD)] * 2000, b" x"), 400, "one key"),
    (b'{"rows": [], "examples": [' + b" " * (SLICE + 100) + b"]}", 400, "not JSON"),
    (b'{"rows": [' + b" " * (2 * SLICE) + b"]}", 400, "non-empty list"),
    (b'{"rows": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", 400, "at most 16 KiB"),
    (missing_comma(large("rows", [line(GOOD)] * 2000)), 400, "not JSON"),
])
def test_a_large_malformed_body_is_refused_naming_what_to_change(body, status, says):
    assert len(body) > SLICE
    with pytest.raises(BadRequest) as refused:
        read(body)
    assert refused.value.status == status and says in str(refused.value), str(refused.value)


def test_a_body_past_max_body_mb_is_refused_before_it_is_read():
    class Unread(Request):
        async def read(self):
            raise AssertionError("read")

    with pytest.raises(BadRequest, match="max_body_mb") as refused:
        asyncio.run(read_rows(Unread(b" " * (4 << 20 | 1)), ServeLimits(), 4096))
    assert refused.value.status == 413


@pytest.mark.parametrize("setting, says", [("max_body=8", "unknown setting serve.max_body"),
                                           ("max_connections=0", "max_connections must be in"),
                                           ("header_timeout_s=-1", "header_timeout_s must be in"),
                                           ("body_timeout_s='x'", "body_timeout_s must be float"),
                                           ("max_body_mb=0", "max_body_mb must be in")])
def test_serve_names_a_limit_it_cannot_take_before_loading_anything(setting, says, tmp_path, capsys):
    from cardinal import cli

    assert cli.main(["serve", str(tmp_path / "no-export"), "--set", setting]) == 2
    assert says in capsys.readouterr().err
