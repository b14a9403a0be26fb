"""Arrays as bytes for the database's binary columns, dtype and shape kept, never pickled.

One array is ``np.save`` bytes (:func:`array_to_bytes`: a batch's rows). Named arrays (a
model's or a task's) are one packed buffer (:func:`pack_arrays`): a header listing each
array's name, dtype and shape, then the arrays' bytes. An array that is symmetric in its last
two axes, bit for bit (a model's ``A``, ``C`` and environment weights; a task's ``omega`` and
``X'X``), is stored as the upper triangles of those axes, about half its bytes, and given back
exactly. Rows stored as an ``np.savez`` zip are read as well.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile

import numpy as np

#: The first bytes of a packed ``dict[str, ndarray]`` (:func:`pack_arrays`); an ``np.savez``
#: zip, the format written before, starts with ``PK``.
PACKED = b"\x93FCL3ARRAYS1"
#: The header's fourth field of an array stored as its upper triangles.
UPPER = "upper"


def array_to_bytes(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return buf.getvalue()


def array_from_bytes(b: bytes) -> np.ndarray:
    a: np.ndarray = np.load(io.BytesIO(b), allow_pickle=False)
    return a


def pack_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    """Named arrays as one buffer: :data:`PACKED`, a 4-byte little-endian length, a JSON list
    of ``[name, dtype, shape]`` (and :data:`UPPER` for a symmetric array stored as its upper
    triangles), then each array's bytes in C order, in that list's order. Arrays of other
    dtypes than plain ones (structured, sub-arrays) are written as an ``np.savez`` zip; object
    arrays are refused (``ValueError``), as ``np.save`` refuses them."""
    head, parts = [], []
    for name, a in arrays.items():
        a = np.asarray(a)
        if a.dtype.hasobject:
            raise ValueError("Object arrays cannot be saved when allow_pickle=False")
        if np.dtype(a.dtype.str) != a.dtype:
            return _zip_arrays(arrays)
        if _symmetric(a):
            head.append([name, a.dtype.str, list(a.shape), UPPER])
            parts.append(_to_upper(a).tobytes())
        else:
            head.append([name, a.dtype.str, list(a.shape)])
            parts.append(a.tobytes())
    text = json.dumps(head, separators=(",", ":")).encode()
    return b"".join([PACKED, len(text).to_bytes(4, "little"), text, *parts])


def unpack_arrays(data: bytes) -> dict[str, np.ndarray]:
    """The named arrays of :func:`pack_arrays` bytes, or of an ``np.savez`` zip (no pickle)."""
    if not data.startswith(PACKED):
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    start = len(PACKED) + 4
    end = start + int.from_bytes(data[len(PACKED) : start], "little")
    out, at = {}, end
    for entry in json.loads(data[start:end]):
        name, descr, shape, *how = entry
        dtype = np.dtype(descr)
        if dtype.hasobject:
            raise ValueError("Object arrays cannot be loaded when allow_pickle=False")
        if how not in ([], [UPPER]) or (how and (len(shape) < 2 or shape[-1] != shape[-2])):
            raise ValueError(f"packed arrays: array {name!r} has an unknown layout {how!r} for shape {shape}")
        stored = shape if not how else [*shape[:-2], shape[-1] * (shape[-1] + 1) // 2]
        count = int(np.prod(stored, dtype=np.int64))
        values = np.frombuffer(data, dtype=dtype, count=count, offset=at).reshape(stored)
        out[name] = values.copy() if not how else _from_upper(values, shape, dtype)
        at += count * dtype.itemsize
    if at != len(data):
        raise ValueError(f"packed arrays: {len(data) - at} bytes left over")
    return out


def _symmetric(a: np.ndarray) -> bool:
    """Whether ``a`` equals its transpose in the last two axes bit for bit (signed zeros and
    every bit of each value), so that its upper triangles give it back exactly."""
    n = a.shape[-1] if a.ndim >= 2 else 0
    if n < 2 or a.shape[-2] != n or a.dtype.kind not in "biuf" or a.dtype.itemsize not in (1, 2, 4, 8):
        return False
    bits = a.view(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(bits, np.swapaxes(bits, -1, -2)))


def _to_upper(a: np.ndarray) -> np.ndarray:
    """The upper triangles of ``a``'s last two axes, row by row: shape ``(..., n (n + 1) / 2)``."""
    n = a.shape[-1]
    upper, _ = _triangle(n)
    return a.reshape(-1, n * n).take(upper, axis=-1).reshape(*a.shape[:-2], upper.size)


def _from_upper(values: np.ndarray, shape: list[int], dtype: np.dtype) -> np.ndarray:
    """The array of ``shape`` whose upper triangles (last two axes, row by row) are
    ``values``, its lower triangles their mirror."""
    n = shape[-1]
    upper, mask = _triangle(n)
    out = np.empty((int(np.prod(shape[:-2], dtype=np.int64)), n * n), dtype=dtype)
    out[:, upper] = values.reshape(out.shape[0], upper.size)
    out = out.reshape(shape)
    # np.where gives native byte order: astype restores the stored dtype's
    return np.where(mask, out, np.swapaxes(out, -1, -2)).astype(dtype, copy=False)


@functools.lru_cache(maxsize=8)
def _triangle(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The flat (row-major) positions of an ``n x n`` upper triangle, diagonal included, and
    its mask (read-only, shared)."""
    mask = np.triu(np.ones((n, n), dtype=bool))
    upper = np.flatnonzero(mask).astype(np.int32 if n * n < 2**31 else np.int64)
    mask.flags.writeable = upper.flags.writeable = False
    return upper, mask


def _zip_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, arr in arrays.items():
            zf.writestr(f"{name}.npy", array_to_bytes(arr))
    return buf.getvalue()
