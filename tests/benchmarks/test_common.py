import asyncio
import json

import numpy as np

from benchmarks.common import blas_threads, http_request, json_clean, pct, percentile, write_json


def test_percentiles():
    assert percentile([1, 2, 3, 4], 50) == 2.5 and isinstance(percentile([1.0], 99), float)
    assert pct([1.0, 2.0, 4.0], 50) == 2.0 and pct([0.0, 1.0], 33.333) == 0.33
    assert pct([], 50) is None


def test_json_clean_and_write(tmp_path):
    data = {"a": np.float64(1.5), "b": [np.int64(2), np.array([1.0, np.nan])], "_raw": object(),
            "c": (float("inf"), "x"), 3: {"_skip": 1, "keep": np.float32(0.25)}}
    clean = json_clean(data)
    assert clean == {"a": 1.5, "b": [2, [1.0, None]], "c": [None, "x"], "3": {"keep": 0.25}}
    path = write_json(tmp_path / "sub" / "out.json", data)
    assert json.loads(open(path).read()) == clean


def test_blas_threads_names_the_variable(monkeypatch):
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert blas_threads() is None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert blas_threads() == "OMP_NUM_THREADS=2"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert blas_threads() == "OPENBLAS_NUM_THREADS=1"


def test_http_request_reads_keep_alive_responses():
    """Two responses on one connection, each read exactly by its Content-Length."""
    bodies = [b'{"ok": 1}', b""]

    async def handler(reader, writer):
        for body in bodies:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (200 if body else 404, len(body), body))
            await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        out = [await http_request(reader, writer, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") for _ in bodies]
        writer.close()
        server.close()
        return out

    assert asyncio.run(main()) == [(200, b'{"ok": 1}'), (404, b"")]
