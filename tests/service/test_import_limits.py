"""Model imports have their own limits (issue 22, rows 2 and 11): the upload is streamed to a
temporary file up to MAX_IMPORT_BYTES (not MAX_BODY_BYTES, not held in memory), and a file
whose arrays would take more than MAX_IMPORT_INFLATED_BYTES once loaded is refused with 413
before any of them is allocated (sizes from the zip directory and the .npy headers); an entry
whose header claims more data than it holds is 422, unallocated. Nothing is stored on a
refusal. Both backends."""
from __future__ import annotations

import io
import tempfile
import tracemalloc
import zipfile

import numpy as np
import pytest

from service.models.state_files import read_npz, to_npz

from .conftest import regression_batch, unique_name

NPZ = {"content-type": "application/octet-stream"}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, make_client):
    """``client(**settings)`` on one backend (every client of a test shares its store)."""
    def client(**settings):
        extra = {"_request": request} if request.param == "postgres" else {}
        return make_client(request.param, **settings, **extra)
    return client


@pytest.fixture
def spool(tmp_path, monkeypatch):
    """The directory temporary files go to, for this test."""
    path = tmp_path / "spool"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def learned_export(c) -> bytes:
    """The default model of ``c``, learned on three tasks, as an exported file."""
    rng = np.random.default_rng(3)
    for i, task in enumerate(("a", "b", "c")):
        X, y = regression_batch(rng, task=i)
        assert c.post(f"/tasks/{task}/data", json={"X": X, "y": y}).status_code == 200
    return c.get(f"/models/{c.get('/model').json()['name']}/state").content


def loaded_bytes(data: bytes) -> int:
    """What numpy allocates to load every entry of ``data`` (measured by loading them)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return sum(npz[k].nbytes for k in npz.files)


def deflated(data: bytes, replace: dict[str, bytes] | None = None) -> bytes:
    """``data`` rewritten with every entry deflated, entries in ``replace`` swapped for new bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, (replace or {}).get(info.filename, src.read(info)))
    return out.getvalue()


def imported(c, data, **kwargs):
    name = unique_name("imp")
    return name, c.post(f"/models/{name}/state", content=data, headers=NPZ, **kwargs)


def absent(c, name: str, models_before: int) -> None:
    assert c.get(f"/models/{name}").status_code == 404
    assert c.get("/models").json()["total"] == models_before


def traced_peak(fn):
    """``fn()`` and the peak of memory allocated (Python and numpy) while it ran."""
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ----------------------------------------------------------------------------- row 11: size, spooling
def test_an_export_over_max_body_bytes_imports_under_its_own_limit(backend, spool):
    c = backend(MAX_BODY_BYTES=4096)
    good = learned_export(c)
    assert len(good) > 4096
    name, r = imported(c, good)
    assert r.status_code == 201, r.text
    x = {"task_id": "a", "X": [[0.5, -1.0, 2.0, 0.0]]}
    assert c.post(f"/models/{name}/predict", json=x).json()["predictions"] == c.post("/predict", json=x).json()["predictions"]
    assert list(spool.iterdir()) == []  # the temporary file is gone


def test_a_file_over_max_import_bytes_is_413_and_nothing_stored(backend, spool):
    c = backend(MAX_BODY_BYTES=1_000_000)
    good = learned_export(c)
    c = backend(MAX_IMPORT_BYTES=len(good) - 1)
    before = c.get("/models").json()["total"]
    name, r = imported(c, good)  # declared: refused unread
    assert r.status_code == 413 and "MAX_IMPORT_BYTES" in r.json()["detail"], r.text
    absent(c, name, before)
    name, r = imported(c, (good[i:i + 1000] for i in range(0, len(good), 1000)))  # chunked: refused on the way
    assert r.status_code == 413 and "MAX_IMPORT_BYTES" in r.json()["detail"], r.text
    absent(c, name, before)
    assert list(spool.iterdir()) == []
    c = backend(MAX_IMPORT_BYTES=len(good))
    assert imported(c, good)[1].status_code == 201


def test_the_upload_is_spooled_to_a_temporary_file_not_memory(make_client, spool):
    c = make_client()
    piece, pieces = b"\x01" * 65536, 64  # 4 MB, not a model file
    seen: list[int] = []
    sent: list[dict] = []

    async def run():
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/models/spooled/state", "raw_path": b"/models/spooled/state",
                 "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1), "server": ("t", 80), "state": {},
                 "headers": [(b"content-length", str(len(piece) * pieces).encode())]}
        left = pieces

        async def receive():
            nonlocal left
            if left == pieces // 2:  # half-way: the first half is on disk
                seen.extend(f.stat().st_size for f in spool.glob("fcl3-import-*"))
            left -= 1
            return {"type": "http.request", "body": bytes(piece), "more_body": left > 0}

        async def send(message):
            sent.append(message)

        await c.app(scope, receive, send)

    _, peak = traced_peak(lambda: c.portal.call(run))
    assert sent[0]["status"] == 422 and b"not an .npz file" in sent[1]["body"]
    assert len(seen) == 1 and seen[0] >= 1024 * 1024, seen
    assert peak < 2 * 1024 * 1024, peak  # 4 MB went through; the old path held all of it
    assert list(spool.iterdir()) == []


# ----------------------------------------------------------------------------- row 2: inflated size
def test_a_file_whose_arrays_exceed_the_inflated_limit_is_413_and_nothing_stored(backend, spool):
    c = backend()
    good = learned_export(c)
    size = loaded_bytes(good)
    c = backend(MAX_IMPORT_INFLATED_BYTES=size - 1)
    before = c.get("/models").json()["total"]
    name, r = imported(c, good)
    assert r.status_code == 413, r.text
    assert f"take {size} bytes" in r.json()["detail"] and "MAX_IMPORT_INFLATED_BYTES" in r.json()["detail"]
    absent(c, name, before)
    c = backend(MAX_IMPORT_INFLATED_BYTES=size)
    assert imported(c, good)[1].status_code == 201


def _with_big_task_array(good: bytes) -> tuple[bytes, int]:
    """``good`` with one of task a's float arrays swapped for a 40 MB one (2.7 MB deflated,
    within the 64x rule), and that array's size."""
    state, service = read_npz(good)
    task = state.tasks["a"]
    key = next(k for k, a in task["arrays"].items() if a.dtype == np.float64)
    big = np.random.default_rng(0).integers(0, 4, size=5_000_000).astype(np.float64)
    tasks = {**state.tasks, "a": {**task, "arrays": {**task["arrays"], key: big}}}
    return deflated(to_npz(type(state)(**{**vars(state), "tasks": tasks}), service)), big.nbytes


def test_the_inflated_size_is_refused_before_any_array_is_allocated(backend, spool):
    c = backend()
    data, big = _with_big_task_array(learned_export(c))
    assert big > 10 * len(data)
    c = backend(MAX_IMPORT_INFLATED_BYTES=big // 4)
    before = c.get("/models").json()["total"]
    (name, r), peak = traced_peak(lambda: imported(c, data))
    assert r.status_code == 413 and "MAX_IMPORT_INFLATED_BYTES" in r.json()["detail"], r.text
    assert peak < big // 4, peak  # the 40 MB array never existed
    absent(c, name, before)


def test_an_entry_claiming_more_data_than_it_holds_is_422_unallocated(backend, spool):
    c = backend()
    good = learned_export(c)
    with zipfile.ZipFile(io.BytesIO(good)) as z:
        member = next(n for n in z.namelist() if n.startswith("t/"))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (25_000_000,)})
    lie = header.getvalue() + b"\0" * 80  # says 200 MB, holds 80 bytes
    before = c.get("/models").json()["total"]
    (name, r), peak = traced_peak(lambda: imported(c, deflated(good, {member: lie})))
    assert r.status_code == 422 and "claims 200000000 bytes of data but holds 80" in r.json()["detail"], r.text
    assert peak < 50 * 1024 * 1024, peak
    absent(c, name, before)


def test_inflated_size_is_what_loading_allocates(make_client):
    """Stored or deflated entries, .npy headers 1.0 and 2.0, entries that are not arrays."""
    from service.models.state_files import StateFileError, inflated_size

    good = learned_export(make_client())
    assert inflated_size(good) == inflated_size(deflated(good)) == loaded_bytes(good)
    v2 = io.BytesIO()
    np.lib.format.write_array(v2, np.zeros((3, 5), dtype=np.float32), version=(2, 0))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("x.npy", v2.getvalue())
        z.writestr("raw", b"12345")
    assert inflated_size(out.getvalue()) == 3 * 5 * 4 + 5
    cut = io.BytesIO()
    with zipfile.ZipFile(cut, "w") as z:
        z.writestr("x.npy", v2.getvalue()[:20])  # the header cut short
    with pytest.raises(StateFileError, match="unreadable"):
        inflated_size(cut.getvalue())
