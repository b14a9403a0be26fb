"""A whole model as one ``.npz`` file, and back: the export/import format of the service,
readable without the server (standard library, numpy and :mod:`core` only).

The file is ``np.savez`` of named arrays, written and read with ``allow_pickle=False``:

* ``__meta__`` — a 0-d unicode array holding one JSON object: ``{"format": "fcl3-model",
  "file_version": 1, "estimator", "params", "meta", "format_version", "arrays": [names],
  "tasks": [{"id", "meta", "arrays": [names]}, ...], "service": {...}}``;
* ``a/<name>`` — each global array of :class:`core.ModelState` (``arrays``);
* ``t/<i>/<name>`` — the arrays of the ``i``-th task of the ``tasks`` list. Task ids may hold
  any character, so they live in the JSON and the file names use their index.

``service`` is what the server adds (the model's version, summary and each task's counters);
the engine ignores it. A model learned offline is served, and a served one studied offline::

    from core import load_state
    from service.models.state_files import from_npz, to_npz
    learner = load_state(from_npz(open("model.npz", "rb").read()))     # a served model, offline
    open("mine.npz", "wb").write(to_npz(my_learner.get_state()))      # POST it to /models/{name}/state

Every failure to read a file is :class:`StateFileError` (a ``ValueError``) with the reason:
not a zip, truncated, pickled or object arrays, an entry too large once inflated, missing or
extra entries, malformed JSON, an unknown format or state format version.

The size of the arrays is known before any of them is read: :func:`inflated_size` adds up
each entry's ``.npy`` header (shape and dtype) from the zip directory, and :func:`read_npz`
with ``max_inflated`` refuses a larger file (:class:`StateFileTooLarge`) before allocating.
A file may be given as bytes, a path or a binary file object (the server spools an upload to
a temporary file and reads it from there).
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, Union

import numpy as np

import core
from core.state import READABLE_FORMAT_VERSIONS
from fcl3.schemas import storable_id

MAGIC = "fcl3-model"
FILE_VERSION = 1
META = "__meta__"
#: Inflated size allowed per byte of file (an npz written by np.savez is stored, not
#: deflated, so this only stops a "zip bomb").
MAX_INFLATION = 64
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


#: A model file: its bytes, its path, or a binary file object open on it (seekable).
Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", IO[bytes]]


class StateFileError(ValueError):
    """The bytes are not a model file this version can read (the message says why)."""


class StateFileTooLarge(StateFileError):
    """The file's arrays would take more than the allowed bytes once loaded."""

    def __init__(self, inflated: int, limit: int):
        super().__init__(f"the file's arrays take {inflated} bytes once loaded; at most {limit} are allowed")
        self.inflated, self.limit = inflated, limit


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _SAFE_NAME.match(name):
        raise StateFileError(f"array name {name!r} is not 1-100 characters of [A-Za-z0-9_.-]")
    return name


def to_npz(state: core.ModelState, service: dict[str, Any] | None = None) -> bytes:
    """``state`` (and the server's own ``service`` JSON, optional) as ``.npz`` bytes."""
    arrays: dict[str, np.ndarray] = {}
    header: dict[str, Any] = {
        "format": MAGIC,
        "file_version": FILE_VERSION,
        "estimator": state.estimator,
        "params": state.params,
        "meta": state.meta,
        "format_version": int(state.format_version),
        "arrays": [],
        "tasks": [],
        "service": service or {},
    }
    for name, a in state.arrays.items():
        arrays[f"a/{_check_name(name)}"] = np.asarray(a)
        header["arrays"].append(name)
    for i, (task_id, task) in enumerate(state.tasks.items()):
        names = []
        for name, a in task["arrays"].items():
            arrays[f"t/{i}/{_check_name(name)}"] = np.asarray(a)
            names.append(name)
        header["tasks"].append({"id": task_id, "meta": task["meta"], "arrays": names})
    text = json.dumps(header, allow_nan=True, separators=(",", ":"))
    buf = io.BytesIO()
    np.savez(buf, **{META: np.array(text)}, **arrays)  # type: ignore[arg-type]  # np.save(allow_pickle=False) inside: objects refused
    return buf.getvalue()


def read_npz(source: Source, max_inflated: int | None = None) -> tuple[core.ModelState, dict[str, Any]]:
    """The :class:`core.ModelState` in ``source`` and the server's ``service`` JSON;
    :class:`StateFileError` with the reason for anything else, and :class:`StateFileTooLarge`
    when its arrays would take more than ``max_inflated`` bytes (checked before any is read)."""
    with _opened(source) as (fp, length):
        inflated = _inflated_size(fp, length)
        if max_inflated is not None and inflated > max_inflated:
            raise StateFileTooLarge(inflated, max_inflated)
        fp.seek(0)
        try:
            npz = np.load(fp, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - any reader failure is a bad file
            raise StateFileError(f"not a readable .npz file: {type(exc).__name__}: {exc}") from None
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise StateFileError("a single .npy array, not an .npz file of a model")
        with npz:
            files = set(npz.files)
            if META not in files:
                raise StateFileError(
                    f"no {META!r} entry: not a model file written by to_npz / GET /models/{{name}}/state"
                )
            header = _header(_load(npz, META))
            state, expected = _state(header)
            extra = files - expected - {META}
            if extra:
                raise StateFileError(f"unexpected entries in the file: {sorted(extra)[:5]}")
            missing = expected - files
            if missing:
                raise StateFileError(f"entries missing from the file: {sorted(missing)[:5]}")
            state.arrays = {name: _load(npz, f"a/{name}") for name in header["arrays"]}
            for i, task in enumerate(state.tasks.values()):
                task["arrays"] = {name: _load(npz, f"t/{i}/{name}") for name in task["arrays"]}
    return state, header.get("service") or {}


#: A ``.npy`` header read: the array's shape and dtype.
_Header = tuple[tuple[int, ...], "np.dtype[Any]"]


def inflated_size(source: Source) -> int:
    """The bytes the entries of the ``.npz`` file ``source`` take once loaded, read from the
    zip directory and each ``.npy`` header alone (nothing is inflated); :class:`StateFileError`
    for a file that is not a zip of arrays, or an entry whose header claims more than it holds."""
    with _opened(source) as (fp, length):
        return _inflated_size(fp, length)


@contextmanager
def _opened(source: Source) -> Iterator[tuple[IO[bytes], int]]:
    """``source`` as a seekable binary file and its length (a path is opened and closed here)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        fp: IO[bytes] = io.BytesIO(source)
    elif isinstance(source, (str, os.PathLike)):
        fp = open(source, "rb")
    else:
        fp = source
    try:
        length = fp.seek(0, os.SEEK_END)
        fp.seek(0)
        if length == 0:
            raise StateFileError("empty body: send the .npz file of a model (GET /models/{name}/state makes one)")
        yield fp, length
    finally:
        if fp is not source:
            fp.close()


def _inflated_size(fp: IO[bytes], length: int) -> int:
    try:
        zf = zipfile.ZipFile(fp)
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise StateFileError(f"not an .npz file (a zip of .npy arrays): {exc}") from None
    limit = MAX_INFLATION * length + 65536
    if sum(i.file_size for i in infos) > limit:
        raise StateFileError(f"the file inflates to more than {limit} bytes: refused")
    parsed: dict[bytes, _Header] = {}  # the tasks' entries share a few headers
    return sum((_entry_size(zf, fp, info, parsed) for info in infos), 0)


def _entry_start(zf: zipfile.ZipFile, fp: IO[bytes], info: zipfile.ZipInfo, n: int) -> bytes:
    """The first ``n`` bytes of an entry's data: read in place for a stored entry (as np.savez
    writes them; its local header says where the data starts), through zipfile otherwise."""
    if info.compress_type != zipfile.ZIP_STORED:
        with zf.open(info) as member:
            return member.read(n)
    fp.seek(info.header_offset)
    local = fp.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise ValueError("bad local file header")
    fp.seek(info.header_offset + 30 + int.from_bytes(local[26:28], "little") + int.from_bytes(local[28:30], "little"))
    return fp.read(min(n, info.file_size))


def _entry_size(
    zf: zipfile.ZipFile,
    fp: IO[bytes],
    info: zipfile.ZipInfo,
    parsed: dict[bytes, tuple[tuple[int, ...], np.dtype[Any]]],
) -> int:
    """The bytes numpy allocates to load one entry: its array's, from the ``.npy`` header, or
    the entry's own size for one that is not an array (numpy returns those as bytes)."""
    fmt = np.lib.format
    try:
        start = _entry_start(zf, fp, info, 12)
        if start[: len(fmt.MAGIC_PREFIX)] != fmt.MAGIC_PREFIX:
            return info.file_size
        version = (start[6], start[7])
        if version not in ((1, 0), (2, 0)):
            raise ValueError(f".npy format version {version} is not supported")
        width = 2 if version == (1, 0) else 4
        if len(start) < 8 + width:
            raise ValueError("truncated .npy header")
        offset = 8 + width + int.from_bytes(start[8 : 8 + width], "little")
        head = _entry_start(zf, fp, info, offset)
        if len(head) < offset:
            raise ValueError("truncated .npy header")
        if head not in parsed:
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            stream = io.BytesIO(head)
            fmt.read_magic(stream)
            shape, _, dtype = read(stream)
            parsed[head] = (shape, dtype)
        shape, dtype = parsed[head]
    except Exception as exc:  # noqa: BLE001 - a truncated member, a bad header...
        raise StateFileError(f"entry {info.filename!r} is unreadable: {type(exc).__name__}: {exc}") from None
    if dtype.hasobject:
        raise StateFileError(f"entry {info.filename!r} holds Python objects: refused")
    size: int = math.prod(int(n) for n in shape) * dtype.itemsize
    if offset + size > info.file_size:
        raise StateFileError(
            f"entry {info.filename!r} claims {size} bytes of data but holds {max(info.file_size - offset, 0)}"
        )
    return size


def from_npz(source: Source) -> core.ModelState:
    """The :class:`core.ModelState` in ``source`` (for :func:`core.load_state`)."""
    return read_npz(source)[0]


def _load(npz: Any, key: str) -> np.ndarray:
    try:
        a = npz[key]
    except Exception as exc:  # noqa: BLE001 - truncated member, pickled/object array, bad header...
        raise StateFileError(f"entry {key!r} is unreadable: {type(exc).__name__}: {exc}") from None
    if not isinstance(a, np.ndarray):  # numpy returns an entry that is not a .npy array as its bytes
        raise StateFileError(f"entry {key!r} is not a .npy array")
    if a.dtype.hasobject:
        raise StateFileError(f"entry {key!r} holds Python objects: refused")
    return np.asarray(a)


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON (Python's json reads them; PostgreSQL does not)."""
    raise ValueError(f"{name} is not a JSON value")


def _header(a: np.ndarray) -> dict[str, Any]:
    if a.shape != () or a.dtype.kind != "U":
        raise StateFileError(f"{META!r} must be a 0-d unicode array holding JSON")
    try:
        header = json.loads(str(a[()]), parse_constant=_no_constant)
    except ValueError as exc:
        raise StateFileError(f"{META!r} is not JSON: {exc}") from None
    if not isinstance(header, dict) or header.get("format") != MAGIC:
        raise StateFileError(f"{META!r} does not describe an {MAGIC!r} file")
    if header.get("file_version") != FILE_VERSION:
        raise StateFileError(
            f"file version {header.get('file_version')!r} is not supported (this version reads {FILE_VERSION})"
        )
    fv = header.get("format_version")
    if fv not in READABLE_FORMAT_VERSIONS:
        raise StateFileError(f"state format {fv!r} is not supported (this version reads {READABLE_FORMAT_VERSIONS})")
    return header


def _state(header: dict[str, Any]) -> tuple[core.ModelState, set[str]]:
    """The state's settings from the header (arrays still to read) and the entries it names."""
    try:
        estimator, params, meta = header["estimator"], header["params"], header["meta"]
        names, tasks = header["arrays"], header["tasks"]
        if not isinstance(estimator, str) or not isinstance(params, dict) or not isinstance(meta, dict):
            raise TypeError("estimator, params and meta must be a string and two objects")
        if not isinstance(names, list) or not isinstance(tasks, list):
            raise TypeError("arrays and tasks must be lists")
        expected = {f"a/{_check_name(n)}" for n in names}
        out: dict[str, dict[str, Any]] = {}
        for i, t in enumerate(tasks):
            tid, tmeta, tnames = t["id"], t["meta"], t["arrays"]
            if not isinstance(tid, str) or not isinstance(tmeta, dict) or not isinstance(tnames, list):
                raise TypeError(f"task {i} needs a string id, an object meta and a list of arrays")
            if tid in out:
                raise ValueError(f"task {tid!r} is listed twice")
            try:
                storable_id(tid)  # only the ids the API accepts: storable on every backend
            except ValueError as exc:
                raise ValueError(f"task {i}'s id {exc}") from None
            expected |= {f"t/{i}/{_check_name(n)}" for n in tnames}
            out[tid] = {"arrays": list(tnames), "meta": tmeta}
        if len(expected) != len(names) + sum(len(t["arrays"]) for t in tasks):
            raise ValueError("an array is listed twice")
    except StateFileError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFileError(f"{META!r} is malformed: {type(exc).__name__}: {exc}") from None
    state = core.ModelState(
        estimator=estimator,
        params=params,
        meta=meta,
        arrays={},
        tasks=out,
        format_version=int(header["format_version"]),
    )
    return state, expected
