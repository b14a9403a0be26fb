"""Helpers shared by the benchmarks: percentiles, JSON output, machine notes, progress bars,
and a minimal keep-alive HTTP/1.1 client for load generation."""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

#: The repository root (the benchmarks run from a checkout).
ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- statistics
def percentile(values, q: float) -> float:
    """The ``q``-th percentile of ``values`` (numpy's linear interpolation)."""
    return float(np.percentile(np.asarray(values), q))


def pct(values, q: float, ndigits: int = 2) -> float | None:
    """:func:`percentile` rounded to ``ndigits``, or ``None`` when there are no values."""
    return round(percentile(values, q), ndigits) if len(values) else None


# ----------------------------------------------------------------------------- output
def json_clean(obj):
    """A JSON-able copy: keys starting with ``_`` dropped, numpy scalars and arrays converted,
    non-finite floats as ``None``."""
    if isinstance(obj, dict):
        return {str(k): json_clean(v) for k, v in obj.items() if not str(k).startswith("_")}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.ndarray):
        return json_clean(obj.tolist())
    return obj


def write_json(path: str | os.PathLike, data: Any, indent: int = 1, clean: bool = True) -> str:
    """Write ``data`` (cleaned with :func:`json_clean` unless ``clean=False``) to ``path``,
    making its directory; returns the path."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(json_clean(data) if clean else data, fh, indent=indent)
    return path


def blas_threads() -> str | None:
    """The BLAS thread setting the timings ran under (set ``OPENBLAS_NUM_THREADS`` before
    starting Python: with several threads, small matrices spend their time synchronising)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return f"{var}={os.environ[var]}"
    return None


def machine() -> dict[str, Any]:
    """Where a timing ran: cores, Python, platform, BLAS thread setting."""
    return {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "blas_threads": blas_threads()}


def progress_bar(iterable=None, *, total: int | float | None = None, desc: str | None = None,
             enabled: bool = True, unit: str = "it"):
    """A tqdm progress bar on stderr (disabled, but still usable, when ``enabled`` is false)."""
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, disable=not enabled, unit=unit)


def matplotlib_pyplot():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported only when plotting)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ----------------------------------------------------------------------------- HTTP/1.1 load client
async def http_request(reader, writer, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send one request on a keep-alive asyncio connection; returns (status, body).

    A minimal client (Content-Length bodies only) that costs the load generator little CPU:
    it shares the machine with the server it measures."""
    writer.write(head + body)
    raw = await reader.readuntil(b"\r\n\r\n")
    status = int(raw.split(b" ", 2)[1])
    length = 0
    for line in raw.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return status, await reader.readexactly(length)


def add_backend_options(ap) -> None:
    """The ``--pg-admin-url`` and ``--redis-url`` options of a benchmark that can run on
    PostgreSQL and Redis (the local servers by default)."""
    ap.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/test",
                    help="a libpq URL of the PostgreSQL server on which the run makes its throwaway database")
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
