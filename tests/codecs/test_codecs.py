"""Row codecs (cardinal/codecs): each against a slow reference, with error bounds as properties."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from cardinal import codecs

F32_MAX = float(np.finfo(np.float32).max)


def special_rows(dim: int = 7) -> np.ndarray:
    """Edge values: zeros of both signs, subnormals, ties at the rounding point, the largest floats, inf."""
    bits = np.array([0x00000000, 0x80000000, 0x00000001, 0x807FFFFF, 0x3F808000, 0x3F818000, 0x3F80FFFF,
                     0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x477FF000, 0x477FE000, 0x33800000], np.uint32)
    rng = np.random.default_rng(0)
    values = np.concatenate([bits.view(np.float32), rng.standard_normal(dim * 3).astype(np.float32) * 1e3])
    return np.resize(values, (len(values) // dim + 1) * dim).reshape(-1, dim)


def finite_rows(max_rows=20, max_dim=9, elements=None):
    big = float(np.float32(1e38))  # past it, bf16 may round up to inf
    elements = elements if elements is not None else st.floats(-big, big, width=32)
    return st.tuples(st.integers(0, max_rows), st.integers(1, max_dim)).flatmap(
        lambda s: arrays(np.float32, s, elements=elements))


# --- references -------------------------------------------------------------------------------

def test_bf16_is_torch_bfloat16_bitwise():
    x = np.concatenate([special_rows(), np.random.default_rng(1).standard_normal((500, 7)).astype(np.float32)])
    ours = codecs.get("bf16").encode(x).view(np.uint16)
    theirs = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).reshape(-1)
    np.testing.assert_array_equal(ours, theirs)
    back = codecs.get("bf16").roundtrip(x)
    np.testing.assert_array_equal(back.view(np.uint32),
                                  torch.from_numpy(x).to(torch.bfloat16).float().numpy().view(np.uint32))


def test_fp16_is_torch_float16_bitwise():
    x = np.concatenate([special_rows(), np.random.default_rng(2).standard_normal((500, 7)).astype(np.float32)])
    ours = codecs.get("fp16").encode(x).view(np.uint16)
    theirs = torch.from_numpy(x).to(torch.float16).view(torch.int16).numpy().view(np.uint16).reshape(-1)
    with np.errstate(over="ignore"):
        numpys = x.astype(np.float16)  # a second reference: numpy's IEEE conversion, the same bits
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, numpys.view(np.uint16).reshape(-1))
    np.testing.assert_array_equal(codecs.get("fp16").roundtrip(x).view(np.uint32),
                                  numpys.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_nan_stays_nan_and_inf_stays_inf(name):
    x = np.array([[np.nan, -np.nan, np.inf, -np.inf, 1.0]], np.float32)
    x[0, 1] = np.uint32(0xFF800001).view(np.float32)  # a signalling NaN, whose top 16 bits alone read as -inf
    back = codecs.get(name).roundtrip(x)
    assert np.isnan(back[0, :2]).all()
    np.testing.assert_array_equal(back[0, 2:], [np.inf, -np.inf, 1.0])


def int8_reference(x: np.ndarray) -> np.ndarray:
    """Row by row, value by value, in float32 as the codec promises."""
    out = np.empty_like(x)
    for r, row in enumerate(x):
        top = np.float32(max((abs(v) for v in row), default=np.float32(0)))
        scale = top / np.float32(127) if top == 0 or top / np.float32(127) > 0 else np.float32(1e-45)
        if 0 < scale < np.finfo(np.float32).tiny and top / scale > 127:  # a subnormal scale rounded down: one up
            scale = np.nextafter(scale, np.float32(np.inf))
        for j, v in enumerate(row):
            q = 0.0 if scale == 0 else min(max(np.rint(np.float32(v) / scale), -127), 127)
            out[r, j] = np.float32(np.int8(q)) * scale
    return out


def test_int8_matches_reference_bitwise():
    x = np.random.default_rng(3).standard_normal((50, 9)).astype(np.float32) * 10
    x[4] = 0
    x[5, 3] = -1e-38
    x[6] = [127, -127, 63.5, 0.5, -0.5, 1.5, 254, 0, 1]
    x[7] = np.array([1, 0x80000003, 0, 50, 7, 1, 1, 2, 0], np.uint32).view(np.float32)  # the scale underflows
    x[8] = [2.574e-42, 0, 0, 0, 0, 0, 0, 0, 1e-43]  # a subnormal scale that rounds down
    np.testing.assert_array_equal(codecs.get("int8").roundtrip(x), int8_reference(x))


def test_int8_zero_row_stays_zero_and_max_keeps_its_magnitude():
    x = np.array([[0, 0, 0], [-0.0, 0, 0], [3, -1, 0.5], [-2e-30, 1e-30, 0]], np.float32)
    back = codecs.get("int8").roundtrip(x)
    np.testing.assert_array_equal(back[:2], 0)
    assert back[2, 0] == pytest.approx(3, rel=1e-6) and back[3, 0] == pytest.approx(-2e-30, rel=1e-6)


def test_int8_refuses_non_finite_rows():
    x = np.ones((3, 4), np.float32)
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match="row 2 holds inf or NaN"):
        codecs.get("int8").encode(x)


# --- properties -------------------------------------------------------------------------------

@given(finite_rows())
def test_bf16_relative_error_at_most_2_to_minus_8(x):
    back = codecs.get("bf16").roundtrip(x)
    normal = np.abs(x) >= np.finfo(np.float32).tiny
    assert (np.abs(back - x)[normal] <= np.abs(x)[normal] * 2.0**-8).all()


@given(finite_rows(elements=st.floats(-65000.0, 65000.0, width=32)))
def test_fp16_relative_error_at_most_2_to_minus_11(x):
    back = codecs.get("fp16").roundtrip(x)
    normal = np.abs(x) >= 2.0**-14
    assert (np.abs(back - x)[normal] <= np.abs(x)[normal] * 2.0**-11).all()
    assert (np.abs(back - x)[~normal] <= 2.0**-25).all()  # subnormal halves: an absolute step


@given(finite_rows())
def test_int8_error_within_half_a_step(x):
    back = codecs.get("int8").roundtrip(x).astype(np.float64)
    scale = np.maximum(np.abs(x).max(axis=1, initial=0).astype(np.float64) / 127, 2.0**-149)
    assert (np.abs(back - x) <= (scale[:, None] + 2.0**-149) * (0.5 + 1e-4)).all()  # a subnormal: one step up
    normal = scale >= np.finfo(np.float32).tiny  # a subnormal scale is itself rounded: only the bound above holds
    assert (np.abs(back).max(axis=1, initial=0) <= np.abs(x).max(axis=1, initial=0) * (1 + 1e-6))[normal].all()


@given(finite_rows())
def test_fp32_is_exact_and_copies_nothing(x):
    codec = codecs.get("fp32")
    data = codec.encode(x)
    assert np.shares_memory(data, x) or x.size == 0
    np.testing.assert_array_equal(codec.decode(data, *x.shape).view(np.uint32), x.view(np.uint32))
    assert codec.roundtrip(x) is x


@pytest.mark.parametrize("name", codecs.NAMES)
@pytest.mark.parametrize("shape", [(0, 1), (0, 16), (1, 1), (5, 1), (3, 64)])
def test_shapes_sizes_and_determinism(name, shape):
    codec = codecs.get(name)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    data = codec.encode(x)
    assert data.dtype == np.uint8 and data.size == shape[0] * codec.row_bytes(shape[1])
    back = codec.decode(bytes(data), *shape)  # from bytes, as off the wire
    assert back.shape == shape and back.dtype == np.float32
    np.testing.assert_array_equal(codec.encode(x), data)
    np.testing.assert_array_equal(codec.decode(data, *shape), back)


@pytest.mark.parametrize("name", codecs.NAMES)
def test_encoding_and_decoding_into_given_arrays_write_the_same_bits_there(name):
    """``out=``: what a server's reply and a client's destination are written with (wire.py)."""
    codec = codecs.get(name)
    x = np.concatenate([special_rows(), np.random.default_rng(6).standard_normal((9, 7)).astype(np.float32)])
    x = x if name != "int8" else x[np.isfinite(x).all(axis=1)]
    data = codec.encode(x)
    into = np.full(data.size + 3, 7, np.uint8)
    assert codec.encode(x, out=into[1:-2]) is not None and into[0] == 7 and into[-2:].tolist() == [7, 7]
    np.testing.assert_array_equal(into[1:-2], data)
    rows = np.full((len(x) + 2, 7), 5.0, np.float32)
    assert codec.decode(bytes(data), *x.shape, out=rows[1:-1]).base is rows  # from bytes, as off the wire
    np.testing.assert_array_equal(rows[1:-1].view(np.uint32), codec.decode(data, *x.shape).view(np.uint32))
    assert (rows[[0, -1]] == 5).all()
    for bad in (np.empty(data.size + 1, np.uint8), np.empty(data.size, np.int8), np.empty(2 * data.size, np.uint8)[::2]):
        with pytest.raises(ValueError, match=f"codec {name}: out must be a contiguous"):
            codec.encode(x, out=bad)
    for bad in (np.empty((len(x), 8), np.float32), np.empty(x.shape, np.float64), np.empty((7, len(x)), np.float32).T):
        with pytest.raises(ValueError, match=f"codec {name}: out must be a contiguous"):
            codec.decode(data, *x.shape, out=bad)


@pytest.mark.parametrize("name", codecs.NAMES)
def test_decode_refuses_a_wrong_size(name):
    codec = codecs.get(name)
    data = codec.encode(np.ones((3, 4), np.float32))
    for bad in (data[:-1], np.concatenate([data, data[:1]])):
        with pytest.raises(ValueError, match=f"codec {name}: {bad.size} bytes for 3 rows of dim 4"):
            codec.decode(bad, 3, 4)


@pytest.mark.parametrize("name", codecs.NAMES)
def test_encode_refuses_other_arrays(name):
    for bad in (np.ones((2, 3), np.float64), np.ones(3, np.float32), [[1.0]]):
        with pytest.raises(TypeError, match="float32 array"):
            codecs.get(name).encode(bad)


def test_encode_takes_non_contiguous_rows():
    x = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)[::2, 1:5]
    for name in codecs.NAMES:
        np.testing.assert_array_equal(codecs.get(name).roundtrip(x), codecs.get(name).roundtrip(x.copy()))


def test_unknown_codec_names_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown codec 'zstd'; the codecs are \['fp32', 'fp16', 'bf16', 'int8'\]"):
        codecs.get("zstd")
    assert [codecs.get(n).name for n in codecs.NAMES] == ["fp32", "fp16", "bf16", "int8"]
