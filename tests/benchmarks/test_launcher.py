"""The shared uvicorn launcher (benchmarks.launcher), on the real app over SQLite."""
import os
import signal
import socket
import time

import pytest

from benchmarks.launcher import Server, free_port, http_status, worker_pids

pytestmark = pytest.mark.slow


def sqlite_env(tmp_path) -> dict:
    return {"SQLITE_PATH": str(tmp_path / "fcl3.db"), "DATABASE_URL": "", "REDIS_URL": "", "MODEL_NAME": "launcher",
            "FCL3_ESTIMATOR": "STL", "FCL3_KIND": "regression", "FCL3_PARAMS": "{}", "API_WRITE_KEYS": "",
            "API_READ_KEYS": "", "PROMETHEUS_MULTIPROC_DIR": ""}


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_free_port_is_bindable():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_start_answers_stop_frees_the_port(tmp_path):
    log = tmp_path / "uvicorn.log"
    server = Server(sqlite_env(tmp_path), log_path=log)
    assert server.start(timeout=60) is server
    try:
        assert http_status(server.url + "/healthz") == 200
        assert http_status(server.url + "/readyz") == 200
        assert http_status(server.url + "/tasks/nope") == 404  # a real answer, not "nothing there"
        assert (tmp_path / "fcl3.db").exists() and log.exists()
    finally:
        server.stop()
    assert server.proc.returncode is not None and not server.running()
    assert http_status(server.url + "/healthz") is None
    server.stop()  # stopping twice is harmless


def test_restart_on_the_same_port_then_kill9_takes_every_worker(tmp_path):
    env = sqlite_env(tmp_path)
    with Server(env, workers=2, log_path=tmp_path / "uvicorn.log", ready_path="/healthz") as server:
        port = server.port
        pids = server.wait_workers(timeout=30)
        assert len(pids) == 2 and server.proc.pid not in pids
        assert sorted(pids) == sorted(worker_pids(server.proc.pid))
        try:
            server.kill9()
            assert server.proc.returncode == -9
            deadline = time.monotonic() + 10
            while any(alive(p) for p in pids) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not any(alive(p) for p in pids), "kill9 left workers behind"
        finally:
            for p in pids:  # never leave orphans, even when the check fails
                if alive(p):
                    os.kill(p, signal.SIGKILL)
        assert http_status(server.url + "/healthz") is None
        server.start(timeout=60)  # the same port, the same database
        assert server.port == port and http_status(server.url + "/healthz") == 200
    assert not server.running()


def test_a_server_that_exits_is_reported_with_its_log(tmp_path):
    log = tmp_path / "bad.log"
    server = Server(sqlite_env(tmp_path), app="no_such_module_here:app", log_path=log)
    with pytest.raises(RuntimeError, match="exited") as exc:
        server.start(timeout=60)
    assert str(log) in str(exc.value) and "no_such_module_here" in log.read_text()


def test_a_server_never_ready_is_stopped(tmp_path):
    server = Server(sqlite_env(tmp_path), ready_path="/no-such-route")
    # "did not become ready", not "exited": the process was alive for the whole timeout
    # (whether it got as far as opening its database in 3 s depends on the machine's load)
    with pytest.raises(RuntimeError, match="did not become ready"):
        server.start(timeout=3)
    assert not server.running()
