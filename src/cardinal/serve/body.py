"""A prediction request's body, read within bounds and parsed in slices that leave the event loop free.

    rows = await read_rows(request, limits, max_examples)      # criteo.Rows, or BadRequest (400, 408, 413)

A Content-Length past ``max_body_mb`` is refused (413) before a byte is read, and the body must
arrive within ``body_timeout_s`` (408). ``json.loads`` holds the GIL for a whole body (26 ms for
4,096 named examples, 190 ms for 4 MiB of ``{}``), so neither the loop nor a thread can parse a
large body in one go without stalling every other request. A body past ``SLICE`` bytes is cut
into pieces of about ``SLICE`` bytes at example boundaries, each parsed and checked on its own
(~1 ms), the loop answering other requests in between; examples are counted as they come, so the
4,097th is refused before the rest is parsed. The cuts are sound because a valid body holds "{"
only where an example starts ("examples") and '"' only around its lines ("rows"): a cut in the
wrong place can only fail a body that is no valid request anyway. A smaller body is parsed whole.
"""

import asyncio
import json
import re

from cardinal.data import criteo
from cardinal.serve.requests import (KEYS, BadRequest, batch_rows, parse_request, request_list, to_lines, to_rows,
                                     too_many)

SLICE = 16 << 10    # bytes of JSON parsed between two turns of the event loop (~1 ms)
EXAMPLE = 16 << 10  # the most bytes of JSON one example may take in a sliced body (a real one: under 1.1 KiB)
_WS = " \t\n\r"     # JSON's whitespace
_SPACE = re.compile(r"[ \t\n\r]*")
_HEAD = re.compile(r'[ \t\n\r]*\{[ \t\n\r]*"(%s)"[ \t\n\r]*:[ \t\n\r]*\[' % "|".join(KEYS))


async def read_rows(request, limits, max_examples: int) -> criteo.Rows:
    body = await read_body(request, limits)
    if len(body) <= SLICE:
        return parse_request(_loads(body), max_examples)
    return await _sliced(_text(body), max_examples)


async def read_body(request, limits) -> bytes:
    size = request.content_length
    if size is not None and size > limits.max_body:
        raise BadRequest(f"the body is {size:,} bytes, past max_body_mb ({limits.max_body_mb:g} MiB): send fewer "
                         f"examples a request, or raise it (cardinal serve --set max_body_mb=...)", 413)
    try:
        return await asyncio.wait_for(request.read(), limits.body_timeout_s)
    except TimeoutError:
        raise BadRequest(f"the body did not arrive within body_timeout_s ({limits.body_timeout_s:g} s)", 408) from None


async def _sliced(text: str, max_examples: int) -> criteo.Rows:
    head, tail = _HEAD.match(text), text.rstrip(_WS)
    if head is None or not tail.endswith("}") or not tail[:-1].rstrip(_WS).endswith("]"):
        request_list(None)  # raises: the body must be one key and its list
    key, start, end = head.group(1), head.end(), len(tail[:-1].rstrip(_WS)) - 1  # the list: text[start:end]
    parts: list[criteo.Rows] = []
    n, start = 0, _SPACE.match(text, start).end()
    while start < end:
        cut = _cut(text, start, end, "{" if key == "examples" else '"')
        piece = text[start:cut].rstrip(_WS)
        if cut < end:
            if not piece.endswith(","):
                raise BadRequest(f"the body is not JSON this server reads: no comma after {key}[{n}]")
            piece = piece[:-1]
        items = _loads("[" + piece + "]")
        if n + len(items) > max_examples:
            raise too_many(key, max_examples)
        lines = to_lines(key, items, n)
        if key != "examples" and any('"' in line for line in lines):  # the cuts took '"' for a line's bounds
            raise BadRequest(f"{key}: a TSV line holds no quotes")
        parts.append(to_rows(key, lines, n))
        n, start = n + len(items), cut
        await asyncio.sleep(0)  # other requests' turn
    if not n:
        request_list({key: []})  # raises: a non-empty list
    return batch_rows(parts)


def _cut(text: str, start: int, end: int, marker: str) -> int:
    """Where the piece from ``start`` (an example's start) ends: at the first example starting ``SLICE`` on."""
    if end - start <= SLICE + EXAMPLE:
        return end
    at = text.find(marker, start + SLICE, start + SLICE + EXAMPLE)
    if marker == '"' and at >= 0 and text.count('"', start, at) % 2:  # a line's closing quote: the next opens one
        at = text.find('"', at + 1, start + SLICE + EXAMPLE)
    if at < 0:
        raise BadRequest(f"an example takes at most {EXAMPLE >> 10} KiB of JSON (none starts in characters "
                         f"{start + SLICE:,}..{start + SLICE + EXAMPLE:,} of the body)")
    return at


def _loads(body: bytes | str):
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, a 5,000-digit number, deep nesting
        raise BadRequest(f"the body is not JSON this server reads: {str(e)[:200]}") from None


def _text(body: bytes) -> str:
    try:
        return body.decode(json.detect_encoding(body), "surrogatepass")  # as json.loads reads bytes
    except UnicodeDecodeError as e:
        raise BadRequest(f"the body is not JSON this server reads: {str(e)[:200]}") from None
