"""Named arrays in a row (``tables.NDArrayDict``): packed bytes, dtype and shape kept, never
pickled, symmetric arrays as their upper triangles; rows written before as an ``np.savez`` zip
are read as well."""
from __future__ import annotations

import io

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from service.store.packed_arrays import PACKED, UPPER, pack_arrays, unpack_arrays
from service.store.tables import NDArrayDict

ARRAYS = {
    "A": np.arange(12.0).reshape(3, 4).T,  # not C-contiguous
    "empty": np.zeros((0, 3)),
    "scalar": np.array(2.5),
    "ints": np.arange(5, dtype=">i4"),
    "flags": np.array([True, False]),
    "text": np.array(["ab", "c"]),
    "last_empty": np.zeros(0),
}


def _same(a: dict, b: dict) -> None:
    """The same names, dtypes, shapes and values, bit for bit (signed zeros and NaNs too)."""
    assert list(a) == list(b)
    for k in a:
        x, y = np.asarray(a[k]), b[k]
        assert y.dtype == x.dtype and y.shape == x.shape, k
        assert x.tobytes() == np.ascontiguousarray(y).tobytes(), k
        assert y.flags.writeable, k


def _head(data: bytes) -> list:
    end = len(PACKED) + 4 + int.from_bytes(data[len(PACKED):len(PACKED) + 4], "little")
    return json.loads(data[len(PACKED) + 4:end])


def _symmetric(a: np.ndarray) -> np.ndarray:
    """``a`` (..., n, n) made symmetric by copying its upper triangles onto the lower ones."""
    upper = np.triu(np.ones(a.shape[-2:], dtype=bool))
    return np.where(upper, a, np.swapaxes(a, -1, -2)).astype(a.dtype)


def test_packed_arrays_round_trip():
    data = pack_arrays(ARRAYS)
    assert data.startswith(PACKED)
    _same(ARRAYS, unpack_arrays(data))
    t = NDArrayDict()
    _same(ARRAYS, t.process_result_value(t.process_bind_param(ARRAYS, None), None))


def test_rows_written_as_a_savez_zip_are_read():
    buf = io.BytesIO()
    np.savez(buf, **ARRAYS)
    _same(ARRAYS, unpack_arrays(buf.getvalue()))


def test_structured_arrays_are_written_as_a_zip_and_objects_refused():
    rec = {"r": np.zeros(2, dtype=[("x", "f8"), ("y", "i4")]), "a": np.ones(3)}
    data = pack_arrays(rec)
    assert data.startswith(b"PK")
    _same(rec, unpack_arrays(data))
    with pytest.raises(ValueError):
        pack_arrays({"o": np.array([{"a": 1}], dtype=object)})


def test_packed_bytes_naming_an_object_dtype_or_left_over_bytes_are_refused():
    data = pack_arrays({"a": np.ones(2)})
    forged = data.replace(b'"<f8"', b'"|O8"')
    with pytest.raises(ValueError):
        unpack_arrays(forged)
    with pytest.raises(ValueError):
        unpack_arrays(data + b"\0")


def test_symmetric_arrays_are_stored_as_upper_triangles_and_read_back_exactly():
    rng = np.random.default_rng(0)
    G = rng.normal(size=(6, 4))
    A = G @ G.T  # symmetric bit for bit (numpy computes X X' so)
    A[0, 1] = A[1, 0] = -0.0
    A[2, 3] = A[3, 2] = np.nan
    stack = _symmetric(rng.normal(size=(3, 5, 5)))
    arrays = {"A": A, "stack": stack, "ints": _symmetric(rng.integers(-9, 9, size=(4, 4))).astype(">i4"),
              "nearly": A + np.triu(np.full_like(A, 1e-300), 1),  # one ulp off: not symmetric
              "one": np.ones((1, 1)), "rect": np.ones((2, 3)), "T": np.asfortranarray(A),
              "no_environments": np.zeros((0, 5, 5))}  # a model's environment weights before its first
    data = pack_arrays(arrays)
    head = {entry[0]: entry[3:] for entry in _head(data)}
    assert head == {"A": [UPPER], "stack": [UPPER], "ints": [UPPER], "nearly": [], "one": [], "rect": [], "T": [UPPER],
                    "no_environments": [UPPER]}
    _same(arrays, unpack_arrays(data))
    head_bytes = len(PACKED) + 4 + len(json.dumps(_head(data), separators=(",", ":")))
    lower = {"A": 15 * 8, "T": 15 * 8, "stack": 3 * 10 * 8, "ints": 6 * 4}  # the strictly lower triangles
    assert len(data) == head_bytes + sum(np.asarray(a).nbytes for a in arrays.values()) - sum(lower.values())


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(dtype=st.sampled_from([np.float64, np.float32, np.int64, np.uint8, np.bool_]),
                  shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=6)),
       st.booleans())
def test_any_array_round_trips_bit_for_bit_symmetric_or_not(a, make_symmetric):
    if make_symmetric and a.shape[-1] == a.shape[-2]:
        a = _symmetric(a)
    _same({"a": a}, unpack_arrays(pack_arrays({"a": a})))


def test_a_forged_layout_is_refused():
    data = pack_arrays({"A": np.eye(3)})
    with pytest.raises(ValueError):
        unpack_arrays(data.replace(b'"upper"', b'"lower"'))
    flat = pack_arrays({"v": np.ones(6)})
    with pytest.raises(ValueError):  # a 1-D array cannot be a triangle
        unpack_arrays(flat.replace(b'[6]]', b'[6],"upper"]').replace(flat[len(PACKED):len(PACKED) + 4],
                      (int.from_bytes(flat[len(PACKED):len(PACKED) + 4], "little") + 8).to_bytes(4, "little")))
