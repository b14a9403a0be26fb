"""Named arrays in a row (``tables.NDArrayDict``): packed bytes, dtype and shape kept, never
pickled; rows written before as an ``np.savez`` zip are read as well."""
from __future__ import annotations

import io

import numpy as np
import pytest

from service.tables import PACKED, NDArrayDict, pack_arrays, unpack_arrays

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
    assert list(a) == list(b)
    for k in a:
        x, y = np.asarray(a[k]), b[k]
        assert y.dtype == x.dtype and y.shape == x.shape and np.array_equal(x, y), k
        assert y.flags.writeable, k


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
