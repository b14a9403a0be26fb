"""Online evaluation and the event stream on a real uvicorn with two workers, on PostgreSQL +
Redis: the updates land on both workers, the stream (served by either) is dropped and resumed,
and every figure is checked against a direct computation from ``/predict`` answers."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import numpy as np
import pytest

from .test_evaluation import assert_scores, baseline_learner, expected_scores, reference_transfer, stream
from .test_events import UPDATE_FIELDS, Listener, last_is_evaluation_of

pytestmark = pytest.mark.slow


def call(url: str, method: str, path: str, **kwargs) -> httpx.Response:
    """One request on a connection of its own: either worker may take it."""
    with httpx.Client(base_url=url, timeout=60) as client:
        return client.request(method, path, **kwargs)


def client_on(url: str, workers: list[int], pid: int, tries: int = 200) -> httpx.Client:
    """A client whose (keep-alive) connection the worker ``pid`` accepted: new connections are
    opened until that worker takes one (the workers accept on one shared socket)."""
    port = int(url.rsplit(":", 1)[1])
    for _ in range(tries):
        client = httpx.Client(base_url=url, timeout=60)
        r = client.get("/healthz")
        client_port = r.extensions["network_stream"].get_extra_info("client_addr")[1]
        if r.status_code == 200 and serving_worker(workers, port, client_port) == pid:
            return client
        client.close()
    raise AssertionError(f"worker {pid} took none of {tries} connections")


@contextmanager
def on_worker(url: str, workers: list[int], pid: int) -> Iterator[httpx.Client]:
    client = client_on(url, workers, pid)
    try:
        yield client
    finally:
        client.close()


def serving_worker(pids: list[int], port: int, client_port: int) -> int | None:
    """The process among ``pids`` that holds the server end of the loopback TCP connection
    ``client_port`` -> ``port`` (from /proc/net/tcp and the processes' descriptors)."""
    inodes = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, remote = fields[1], fields[2]
            if int(local.rsplit(":", 1)[1], 16) == port and int(remote.rsplit(":", 1)[1], 16) == client_port:
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return pid
            except OSError:
                continue
    return None


def test_two_workers_evaluation_and_events_on_postgres_and_redis(server_env, tmp_path, spawn):
    env = {**server_env, "LOCK_WAIT": "10"}
    server = spawn(env, workers=2, log_path=tmp_path / "uvicorn.log").start()
    workers = server.wait_workers()
    assert len(workers) == 2
    url, name = server.url, env["MODEL_NAME"]
    base = f"/models/{name}"
    kind = "regression"
    batches, held = stream(31, n_tasks=3, n_batches=4)
    for t, (Xh, yh) in held.items():  # evaluation rows first: never learned
        r = call(url, "POST", f"{base}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()})
        assert r.status_code == 200 and r.json()["version"] == 0, r.text
    assert call(url, "GET", base).json()["version"] == 0

    n = len(batches)
    drop, back = 4, 8
    # the stream is served by one worker, then resumed on the other; the updates alternate
    listeners = [Listener(client_on(url, workers, workers[0]), name, last_event_id=0,
                          until=last_is_evaluation_of(drop))]
    stl = baseline_learner(kind)
    answers, scored, R, B, learned = [], [], [], [], []
    version = 0
    for i, (task, X, y) in enumerate(batches):
        if i == back:  # reconnect, to the other worker, with the last id the first stream got
            listeners[0].close_wait()
            listeners.append(Listener(client_on(url, workers, workers[1]), name,
                                      last_event_id=listeners[0].updates()[-1]["id"],
                                      until=last_is_evaluation_of(n)))
        known = task in learned
        # the updates alternate between the workers; /predict just before each one is asked of
        # the worker that did not commit the previous update (read-your-writes: min_version)
        writer = workers[i % 2]
        if known:
            with on_worker(url, workers, writer) as client:
                before = client.post(f"{base}/predict", params={"min_version": version},
                                     json={"task_id": task, "X": X.tolist()})
            assert before.status_code == 200 and before.json()["version"] == version, before.text
            want = expected_scores(kind, y, before.json(), stl.predict(task, X), len(y))
        with on_worker(url, workers, writer) as client:
            r = client.post(f"{base}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()})
        assert r.status_code == 200, r.text
        answer = r.json()
        answers.append(answer)
        version += 1
        assert answer["version"] == version and answer["new_task"] == (not known)
        stl.learn(task, X, y)
        if known:
            assert_scores(answer["prequential"], want)
            scored.append(want)
        else:
            assert answer["prequential"] is None
            learned.append(task)
            row, brow = [], []
            for t in held:  # the accuracy matrix's row, directly: /predict of this version
                if t not in learned:
                    row.append(np.nan), brow.append(np.nan)
                    continue
                p = call(url, "POST", f"{base}/predict", params={"min_version": version},
                         json={"task_id": t, "X": held[t][0].tolist()})
                assert p.json()["version"] == version
                s = expected_scores(kind, held[t][1], p.json(), stl.predict(t, held[t][0]), len(held[t][1]))
                row.append(s["rmse"]), brow.append(s["baseline_rmse"])
            R.append(row), B.append(brow)

    # the events: complete, in order, once each, across the reconnect
    first, resumed = listeners
    resumed.close_wait(60)
    for listener in listeners:
        listener.client.close()
    updates = first.updates() + resumed.updates()
    assert [int(e["id"]) for e in updates] == list(range(1, n + 1))
    assert [int(e["id"]) for e in resumed.updates()] == list(range(drop + 1, n + 1))
    for e, a in zip(updates, answers):
        assert e["data"] == {k: a[k] for k in UPDATE_FIELDS}
    kinds = [(e["event"], e["data"]["version"]) for e in first.events + resumed.events
             if e["data"].get("reason") != "matrix"]
    assert kinds == [k for v in range(1, n + 1) for k in (("update", v), ("evaluation", v))]

    # evaluation rows never learned: the model holds the batches' rows only
    tasks = {t["task_id"]: t for t in call(url, "GET", f"{base}/tasks").json()["tasks"]}
    for t in held:
        assert tasks[t]["n_samples"] == sum(len(y) for task, _, y in batches if task == t)
    model = call(url, "GET", base).json()
    assert model["version"] == n and model["n_batches"] == n

    # prequential figures: the model's overall one from every scored batch's /predict answer
    overall = model["prequential"]["overall"]
    n_scored = sum(s["n"] for s in scored)
    assert overall["n"] == n_scored
    assert overall["rmse"] == pytest.approx(np.sqrt(sum(s["rmse"] ** 2 * s["n"] for s in scored) / n_scored),
                                            rel=1e-9)

    # the accuracy matrix (rows computed in the background by the worker that learned each
    # new task) and the transfer figures, against the direct computation
    deadline = time.monotonic() + 60
    while True:
        ev = call(url, "GET", f"{base}/evaluation").json()
        if len(ev["accuracy_matrix"]["rows"]) == len(learned) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    m = ev["accuracy_matrix"]
    assert [r["task_id"] for r in m["rows"]] == learned and m["tasks"] == list(held)
    got = np.array([[np.nan if v is None else v for v in r["scores"]] for r in m["rows"]])
    gotb = np.array([[np.nan if v is None else v for v in r["baseline"]] for r in m["rows"]])
    R, B = np.array(R), np.array(B)
    np.testing.assert_allclose(got, R, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(gotb, B, rtol=1e-7, atol=1e-10)
    want = reference_transfer(R, B, [learned.index(t) for t in held], False)
    for k, v in want.items():
        assert ev[k] == pytest.approx(v, rel=1e-7, abs=1e-12), k
    # every set's current score is of the last version (3 sets, EVALUATION_RESCORE=8), and is
    # what /predict answers now
    for t in ev["tasks"]:
        assert t["scored_version"] == n
        p = call(url, "POST", f"{base}/predict", params={"min_version": n},
                 json={"task_id": t["task_id"], "X": held[t["task_id"]][0].tolist()}).json()
        Xh, yh = held[t["task_id"]]
        assert_scores(t["score"], expected_scores(kind, yh, p, stl.predict(t["task_id"], Xh), len(yh)))
    server.stop()
