"""Compiled parser and formatter of the Criteo TSV layout.

One line: label, 13 integers, 26 categorical values of up to 8 hex digits, tab-separated;
an empty field is a missing value, integers may be negative:

    1\t5\t\t-2\t...\t68fd1e64\t\t...\n

The parser reads a buffer of whole lines and fills arrays; a bad line is skipped and
reported by its index in the buffer and a reason code (``REASONS``). It parses only one
worker's share of every global batch: the line with global index ``g`` is parsed when
``lo <= g % batch_size < hi``; any other line is passed over by scanning to its newline, so a
worker of ``world`` spends about ``1/world`` of the parse time plus one scan of the bytes.
"""

import numba as nb
import numpy as np

N_INT, N_CAT = 13, 26
REASONS = {1: "wrong column count", 2: "bad label", 3: "non-numeric integer", 4: "bad hex value"}
_HEX = np.full(256, -1, np.int64)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8).copy()


@nb.njit(nogil=True, cache=True)
def parse(buf, first_line, batch_size, lo, hi, stop_line, labels, ints, int_ok, cats, cat_ok, row_line,
          bad_line, bad_reason):
    """Parse the share's lines of ``buf`` (uint8, whole lines); returns (rows, bad lines, stop).

    The buffer's first line has global index ``first_line``; a line ``g`` is parsed when
    ``lo <= g % batch_size < hi``, others are skipped unparsed. Parsing stops before the line
    ``g == stop_line`` (-1: at the end of ``buf``); ``stop`` is that line's byte offset.
    labels (L,) float32; ints (L, 13) int64 + int_ok (L, 13) bool; cats (L, 26) int64 +
    cat_ok (L, 26) bool; row_line (L,) int64: the global index of each good row; bad_line,
    bad_reason (L,) int64: index in ``buf`` of each bad line -- L >= lines parsed.
    """
    hex_table = _HEX
    n, line, rows, bad = buf.shape[0], 0, 0, 0
    pos = 0
    while pos < n:
        g = first_line + line
        if g == stop_line:
            break
        end = pos
        while end < n and buf[end] != 10:
            end += 1
        if not lo <= g % batch_size < hi:  # another worker's line: only its newline was looked for
            line += 1
            pos = end + 1
            continue
        if rows + bad == labels.shape[0]:  # sized by shares.count_in: never, unless the two disagree
            raise IndexError("tsv_kernels.parse: more lines in the share than its output arrays hold")
        stop = end - 1 if end > pos and buf[end - 1] == 13 else end  # tolerate \r\n
        reason = 0
        col = 0
        start = pos
        for k in range(pos, stop + 1):
            if k < stop and buf[k] != 9:
                continue
            if col >= 1 + N_INT + N_CAT:
                reason = 1
                break
            if col == 0:
                if k - start == 1 and (buf[start] == 48 or buf[start] == 49):
                    labels[rows] = buf[start] - 48
                else:
                    reason = 2
            elif col <= N_INT:
                j = col - 1
                if k == start:
                    int_ok[rows, j] = False
                    ints[rows, j] = 0
                else:
                    neg = buf[start] == 45
                    first = start + 1 if neg else start
                    if first == k or k - first > 18:
                        reason = 3
                    v = 0
                    for q in range(first, k):
                        d = buf[q] - 48
                        if d < 0 or d > 9:
                            reason = 3
                            break
                        v = v * 10 + d
                    ints[rows, j] = -v if neg else v
                    int_ok[rows, j] = True
            else:
                j = col - 1 - N_INT
                if k == start:
                    cat_ok[rows, j] = False
                    cats[rows, j] = 0
                elif k - start > 8:
                    reason = 4
                else:
                    v = 0
                    for q in range(start, k):
                        d = hex_table[buf[q]]
                        if d < 0:
                            reason = 4
                            break
                        v = v * 16 + d
                    cats[rows, j] = v
                    cat_ok[rows, j] = True
            if reason:
                break
            col += 1
            start = k + 1
        if reason == 0 and col != 1 + N_INT + N_CAT:
            reason = 1
        if reason:
            bad_line[bad] = line
            bad_reason[bad] = reason
            bad += 1
        else:
            row_line[rows] = g
            rows += 1
        line += 1
        pos = end + 1
    return rows, bad, min(pos, n)


@nb.njit(nogil=True, cache=True)
def format_lines(labels, ints, int_ok, cats, cat_ok, out):
    """Write rows as TSV lines into ``out`` (uint8, large enough); returns bytes written."""
    p = 0
    digits = _DIGITS
    tmp = np.empty(20, np.uint8)
    for r in range(labels.shape[0]):
        out[p] = 48 + labels[r]
        p += 1
        for j in range(N_INT):
            out[p] = 9
            p += 1
            if not int_ok[r, j]:
                continue
            v = ints[r, j]
            if v < 0:
                out[p] = 45
                p += 1
                v = -v
            t = 0
            while True:
                tmp[t] = digits[v % 10]
                t += 1
                v //= 10
                if v == 0:
                    break
            for q in range(t - 1, -1, -1):
                out[p] = tmp[q]
                p += 1
        for j in range(N_CAT):
            out[p] = 9
            p += 1
            if not cat_ok[r, j]:
                continue
            v = cats[r, j]
            for q in range(7, -1, -1):
                out[p + q] = digits[v & 15]
                v >>= 4
            p += 8
        out[p] = 10
        p += 1
    return p
