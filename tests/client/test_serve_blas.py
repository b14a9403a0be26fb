"""``fcl3 serve`` runs BLAS with one thread per worker unless the user says otherwise: the
engine's matrices are small, and a thread per core in each worker made some updates 50x slower."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.launcher import Server
from fcl3.cli.commands import BLAS_THREADS, one_blas_thread

from .conftest import WRITE_KEY


class FcL3Serve(Server):
    """``fcl3 serve --workers N`` as the launcher's server process."""

    def command(self) -> list[str]:
        return [str(Path(sys.executable).with_name("fcl3")), "serve", "--port", str(self.port),
                "--workers", str(self.workers), "--log-level", "warning"]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_one_blas_thread_sets_only_what_is_unset():
    env = {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": ""}
    assert one_blas_thread(env) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert env == {"OPENBLAS_NUM_THREADS": "4", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert one_blas_thread(env) == {}  # all set now


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
@pytest.mark.parametrize("user", [{}, {"OPENBLAS_NUM_THREADS": "2"}])
def test_fcl3_serve_workers_run_one_blas_thread_unless_told(user, tmp_path, monkeypatch):
    for name in BLAS_THREADS:
        monkeypatch.delenv(name, raising=False)
    env = {"DATABASE_URL": "", "REDIS_URL": "", "SQLITE_PATH": str(tmp_path / "fcl3.db"),
           "API_WRITE_KEYS": WRITE_KEY, **user}
    with FcL3Serve(env, workers=2, log_path=tmp_path / "serve.log") as server:
        workers = server.wait_workers()
        assert len(workers) == 2
        for pid in workers:  # each worker's environment, as it was started
            seen = {name: environ_of(pid).get(name) for name in BLAS_THREADS}
            assert seen == {**BLAS_THREADS, **user}, seen
