"""A prediction request's body, parsed into the rows the readers make, by the readers' own parser.

Three forms of the same Criteo layout as training input:

    {"rows": ["\\t3\\t\\t...\\t68fd1e64\\t...", ...]}      TSV lines of the 39 feature columns (test.txt's)
    {"labelled_rows": ["0\\t\\t3\\t...", ...]}             training lines: the label first (not used), 40
    {"examples": [{"I1": 3, "C1": "68fd1e64"}, ...]}    named fields; a field left out is missing

The two line forms are separate keys, not told apart by counting columns: a labelled line that
lost a trailing empty field would otherwise be read as an unlabelled one, shifted a column.

Each becomes one buffer of TSV lines parsed by ``criteo.parse_buffer`` (the compiled kernel the
readers run), so a value means in serving what it meant in training. A request that breaks a
rule is refused whole with ``BadRequest`` naming the example and the field (``rows[3]: C7
'xyz' is not a hex value of at most 8 digits``); nothing of it is predicted.
"""

import re

import numpy as np

from cardinal.data import criteo
from cardinal.data import tsv_kernels as K
from cardinal.ps.validate import quote

COLUMNS = criteo.DENSE + criteo.SPARSE
KEYS = ("rows", "labelled_rows", "examples")
_INT = re.compile(r"-?[0-9]{1,18}")
_HEX = re.compile(r"[0-9a-fA-F]{1,8}")


class BadRequest(ValueError):
    """A request the client must change: ``status`` 400 (malformed), 408 (too slow) or 413 (too large)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def parse_request(body, max_examples: int) -> criteo.Rows:
    key, items = request_list(body)
    if len(items) > max_examples:
        raise too_many(key, max_examples)
    return to_rows(key, to_lines(key, items))


def request_list(body) -> tuple[str, list]:
    """The body's one key and its list of examples (not yet checked)."""
    if not isinstance(body, dict) or len(body) != 1 or not set(body) <= set(KEYS):
        raise BadRequest('the body must be a JSON object with one key: "rows" (TSV lines of I1..I13, C1..C26), '
                         '"labelled_rows" (the same with the label first) or "examples" (objects of named fields)')
    key, items = next(iter(body.items()))
    if not isinstance(items, list) or not items:
        raise BadRequest(f'"{key}" must be a non-empty list')
    return key, items


def too_many(key: str, max_examples: int) -> BadRequest:
    return BadRequest(f'"{key}" holds more than the {max_examples} examples a request may (the server\'s '
                      f"--max-batch)", 413)


def to_lines(key: str, items: list, first: int = 0) -> list[str]:
    """The TSV lines (label first) of ``items``, the examples ``first``, ``first + 1``... of the request."""
    if key == "examples":
        return [_named(i, x) for i, x in enumerate(items, first)]
    return [_line(key, i, x) for i, x in enumerate(items, first)]


def to_rows(key: str, lines: list[str], first: int = 0) -> criteo.Rows:
    rows, bad_line, _ = criteo.parse_buffer("\n".join(lines).encode())
    if len(bad_line):
        i = int(bad_line[0])
        raise BadRequest(f"{key}[{first + i}]: {_why(lines[i])}")
    assert len(rows) == len(lines)
    return rows


def _line(key: str, i: int, line) -> str:
    if not isinstance(line, str):
        raise BadRequest(f"{key}[{i}]: must be a string (a TSV line), got {type(line).__name__}")
    if "\n" in line or "\r" in line:
        raise BadRequest(f"{key}[{i}]: one line per row: it holds a line break")
    columns, labelled = line.count("\t") + 1, key == "labelled_rows"
    if columns != len(COLUMNS) + labelled:
        other = "rows" if labelled else "labelled_rows"
        raise BadRequest(f"{key}[{i}]: {columns} tab-separated columns; {key} have {len(COLUMNS) + labelled} "
                         f"({'the label, then ' if labelled else ''}I1..I13, C1..C26; keep empty fields), "
                         f"{other} {len(COLUMNS) + (not labelled)}")
    return line if labelled else "0\t" + line  # the parser's label column is not used


def _named(i: int, example) -> str:
    if not isinstance(example, dict):
        raise BadRequest(f"examples[{i}]: must be an object of named fields, got {type(example).__name__}")
    unknown = sorted(set(example) - set(COLUMNS), key=str)
    if unknown:
        raise BadRequest(f"examples[{i}]: unknown field {quote(str(unknown[0]))}; the fields are I1..I13 and C1..C26")
    values = []
    for name in COLUMNS:
        v = example.get(name)
        if v is None:
            values.append("")
        elif name[0] == "I" and isinstance(v, int) and not isinstance(v, bool) and abs(v) < criteo.INT_LIMIT:
            values.append(str(v))
        elif name[0] == "C" and isinstance(v, str) and _HEX.fullmatch(v):
            values.append(v)
        else:
            raise BadRequest(f"examples[{i}]: {_rule(name, v)}")
    return "0\t" + "\t".join(values)


def _why(line: str) -> str:
    """The first field of a line the parser refused, and the rule it breaks (the error path only)."""
    values = line.split("\t")[1:]
    for name, v in zip(COLUMNS, values):
        if v and not (_INT if name[0] == "I" else _HEX).fullmatch(v):
            return _rule(name, v)
    return K.REASONS[2] if len(values) == len(COLUMNS) else K.REASONS[1]


def _rule(name: str, v) -> str:
    shown = quote(v) if isinstance(v, str) else r if len(r := repr(v)) <= 64 else f"of type {type(v).__name__}"
    if name[0] == "I":
        return f"{name} {shown} is not an integer of at most 18 digits (or null)"
    return f"{name} {shown} is not a hex value of at most 8 digits (or null)"


def batch_rows(parts: list[criteo.Rows]) -> criteo.Rows:
    return parts[0] if len(parts) == 1 else criteo.Rows.concat(parts)


def split_points(parts: list[criteo.Rows]) -> np.ndarray:
    return np.cumsum([len(p) for p in parts])[:-1]
