"""The Python client against real services (SQLite, and PostgreSQL + Redis): every method, its
typed results, its errors, and retries that never learn a batch twice."""
from __future__ import annotations

import asyncio
import queue
import threading
import time

import httpx
import numpy as np
import pytest

import fcl3._sync.client as sync_client
from fcl3 import AsyncClient, Client, Conflict, ConnectionFailed, Forbidden, InvalidInput, NotFound, Unauthorized
from fcl3 import schemas
from fcl3.client import TimedOut
from tests.service.conftest import PARAMS

from tests.service.conftest import TcpProxy
from .conftest import READ_KEY, WRITE_KEY

pytestmark = pytest.mark.slow


def batch(rng, n=12, d=4, task=0):
    w = np.linspace(-1, 1, d) * (1 + task % 3)
    X = rng.normal(size=(n, d))
    return X, X @ w + 0.1 * rng.normal(size=n)


def counter(text: str, name: str, **labels) -> float:
    """One sample of the Prometheus text (0 when absent)."""
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


LOCKS = {"sqlite": "ok (file)", "postgres": "ok (redis)"}


class Clock:
    """Stands for the ``time`` module in the sync client (``monkeypatch.setattr(sync_client, "time",
    Clock(wait))``): the client's waits between retries call ``wait(seconds)`` instead of
    sleeping; everything else is the real module."""

    def __init__(self, wait):
        self.sleep = wait

    def __getattr__(self, name):
        return getattr(time, name)


def next_event(events, timeout=20.0):
    """The next event of a (sync) events iterator, read in a thread so a test cannot hang."""
    q: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: q.put(next(events)), daemon=True).start()
    return q.get(timeout=timeout)


def test_every_method(service, model_name, tmp_path):
    rng = np.random.default_rng(0)
    with Client(service.url, api_key=WRITE_KEY) as c:
        assert c.healthz() == {"status": "ok"}
        assert c.ready() == c.health() == {"status": "ready", "database": "ok", "schema": "ok",
                                           "lock": LOCKS[service.backend]}
        m = c.create_model(model_name, "regression", params=PARAMS)
        assert isinstance(m, schemas.ModelOut) and (m.name, m.kind, m.version, m.n_tasks) == (model_name, "regression", 0, 0)
        got = c.get_model(model_name)  # one model: with its prequential scores
        assert got.model_dump(exclude={"prequential"}) == m.model_dump(exclude={"prequential"})
        assert got.prequential is not None and got.prequential.overall is None
        assert model_name in [x.name for x in c.iter_models(page=1)]
        page = c.list_models(limit=1)
        assert isinstance(page, schemas.ModelList) and page.count == 1 and page.total >= 1

        # learn: numpy arrays and plain lists; each batch once per Idempotency-Key
        X, y = batch(rng)
        r = c.learn_batch(model_name, "a", X, y, idempotency_key="batch-1")
        assert isinstance(r.update, schemas.UpdateOut) and r.update.new_task and r.update.version == 1
        assert (r.replayed, r.attempts, r.idempotency_key) == (False, 1, "batch-1")
        again = c.learn_batch(model_name, "a", X, y, idempotency_key="batch-1")
        assert again.replayed and again.update.version == 1 and again.update.n_samples == 12
        with pytest.raises(InvalidInput) as err:
            c.learn(model_name, "a", X, y + 1, idempotency_key="batch-1")
        assert err.value.status == 422 and "Idempotency-Key" in err.value.detail
        X2, y2 = batch(rng, task=1)
        before = c.metrics()
        u = c.learn(model_name, "b", X2.tolist(), list(y2))  # a fresh key of its own
        assert u.version == 2 and u.n_samples == 12
        after = c.metrics()  # Prometheus text: one more committed update
        assert "# TYPE fcl3_updates_total counter" in after
        assert counter(after, "fcl3_updates_total", outcome="committed") == \
            counter(before, "fcl3_updates_total", outcome="committed") + 1

        p = c.predict(model_name, "a", X[:3], min_version=2)
        assert isinstance(p, schemas.PredictOut) and len(p.predictions) == 3 and p.version == 2
        with pytest.raises(Conflict) as err:
            c.predict(model_name, "a", X[:1], min_version=99)
        assert err.value.status == 409
        tasks = c.tasks(model_name)
        assert isinstance(tasks, schemas.TaskList) and [t.task_id for t in tasks.tasks] == ["a", "b"]
        t = c.task(model_name, "a")
        assert isinstance(t, schemas.TaskOut) and (t.n_samples, t.n_batches) == (12, 1)

        # export to a file, import from it: the same predictions
        path = tmp_path / "m.npz"
        assert c.export_model(model_name, path) == 2 and path.stat().st_size > 0
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
        imported = c.import_model(model_name + "-imp", path)
        assert imported.origin == {"import": {"model": model_name, "version": 2}}
        assert c.predict(model_name + "-imp", "a", X[:3]).predictions == pytest.approx(p.predictions)
        # fork at version 1: task a only
        fork = c.fork_model(model_name + "-fork", model_name, version=1)
        assert fork.origin == {"fork": {"model": model_name, "version": 1}} and fork.n_tasks == 1

        # evaluation rows and scores
        Xe, ye = batch(rng, n=6)
        ev_rows = c.add_evaluation(model_name, "a", Xe, ye)
        assert isinstance(ev_rows, schemas.EvaluationRowsOut) and ev_rows.n_rows == 6
        evaluation = c.evaluation(model_name)
        assert isinstance(evaluation, schemas.EvaluationOut)
        assert [t.task_id for t in evaluation.tasks] == ["a"] and evaluation.tasks[0].score.n == 6

        # events: resumed after version 1, then live
        events = c.events(model_name, last_event_id=1)
        try:
            seen = next_event(events)
            while seen.event != "update":
                seen = next_event(events)
            assert seen.version == 2 and isinstance(seen.data, schemas.UpdateEvent) and seen.data.task_id == "b"
            X3, y3 = batch(rng, task=2)
            c.learn(model_name, "a", X3, y3)
            seen = next_event(events)
            while seen.event != "update":
                seen = next_event(events)
            assert seen.version == 3 and seen.data.version == 3
        finally:
            events.close()

        for name in (model_name + "-imp", model_name + "-fork", model_name):
            c.delete_model(name)
        with pytest.raises(NotFound) as err:
            c.get_model(model_name)
        assert err.value.status == 404 and model_name in err.value.detail


def test_every_method_async(service, model_name, tmp_path):
    async def scenario():
        rng = np.random.default_rng(1)
        async with AsyncClient(service.url, api_key=WRITE_KEY) as c:
            assert await c.healthz() == {"status": "ok"}
            assert (await c.ready()) == (await c.health()) == {"status": "ready", "database": "ok", "schema": "ok",
                                                               "lock": LOCKS[service.backend]}
            assert "# TYPE fcl3_updates_total counter" in await c.metrics()
            m = await c.create_model(model_name, "regression", params=PARAMS)
            assert isinstance(m, schemas.ModelOut)
            assert (await c.get_model(model_name)).name == model_name
            assert model_name in [x.name async for x in c.iter_models()]
            assert (await c.list_models(limit=1)).count == 1
            X, y = batch(rng)
            r = await c.learn_batch(model_name, "a", X, y)
            again = await c.learn_batch(model_name, "a", X, y, idempotency_key=r.idempotency_key)
            assert again.replayed and again.update.version == r.update.version == 1
            assert (await c.learn(model_name, "b", X, y)).version == 2
            p = await c.predict(model_name, "a", X[:2], min_version=2)
            assert len(p.predictions) == 2
            assert (await c.tasks(model_name)).count == 2
            assert (await c.task(model_name, "b")).n_samples == 12
            path = tmp_path / "a.npz"
            assert await c.export_model(model_name, path) == 2
            assert (await c.import_model(model_name + "-imp", path)).version == 2
            assert (await c.fork_model(model_name + "-fork", model_name, 1)).n_tasks == 1
            assert (await c.add_evaluation(model_name, "a", X[:4], y[:4])).n_rows == 4
            assert [t.task_id for t in (await c.evaluation(model_name)).tasks] == ["a"]
            events = c.events(model_name, last_event_id=0)
            try:
                seen = []
                while len(seen) < 2:
                    ev = await asyncio.wait_for(events.__anext__(), 20)
                    if ev.event == "update":
                        seen.append(ev.version)
                assert seen == [1, 2]
            finally:
                await events.aclose()
            for name in (model_name + "-imp", model_name + "-fork", model_name):
                await c.delete_model(name)
            with pytest.raises(NotFound):
                await c.delete_model(model_name)

    asyncio.run(scenario())


def test_errors_carry_the_status_and_the_server_detail(service, model_name):
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
        with pytest.raises(Conflict) as err:
            c.create_model(model_name, "regression")
        assert err.value.status == 409 and "already exists" in err.value.detail
        assert str(err.value).startswith("409 on POST /models: ")
        c.learn(model_name, "a", [[1.0, 2.0, 3.0], [0.0, 1.0, 2.0]], [1.0, 2.0])
        with pytest.raises(InvalidInput) as err:
            c.learn(model_name, "a", [[1.0, 2.0]], [1.0])
        assert err.value.status == 422 and "3" in err.value.detail and "features" in err.value.detail
        with pytest.raises(InvalidInput) as err:
            c.learn(model_name, "a", [["x", 2.0, 3.0]], [1.0])
        assert "X[0][0]: Input should be a valid number" in err.value.message  # the error envelope
        assert err.value.field == "X" and err.value.row == 0
        with pytest.raises(NotFound) as err:
            c.predict(model_name, "nope", [[1.0, 2.0, 3.0]])
        assert err.value.status == 404
        with pytest.raises(ValueError, match="NaN"):
            c.learn(model_name, "a", [[float("nan"), 1.0, 2.0]], [1.0])
    with Client(service.url) as anonymous, pytest.raises(Unauthorized) as err:
        anonymous.get_model(model_name)
    assert err.value.status == 401
    with Client(service.url, api_key=READ_KEY) as reader:
        assert reader.get_model(model_name).version == 1
        with pytest.raises(Forbidden) as err:
            reader.learn(model_name, "a", [[1.0, 2.0, 3.0]], [1.0])
        assert err.value.status == 403 and err.value.detail
        assert reader.task(model_name, "a").n_samples == 2  # nothing learned
    with Client(service.url, api_key=WRITE_KEY) as c, pytest.raises(NotFound) as err:
        c.delete_model(model_name + "-missing")
    assert type(err.value) is NotFound and err.value.status == 404 and err.value.path == f"/models/{model_name}-missing"
    assert err.value.detail == f"unknown model '{model_name}-missing': create it with POST /models"


def test_503_is_retried_after_its_retry_after_and_the_batch_learned_once(fault_service, model_name, monkeypatch):
    """Batch A is held at the gate before its commit, holding the update lock; batch B, sent
    then, gets 503 + ``Retry-After: 1`` (``LOCK_WAIT=0``), waits that long (here: until A has
    committed), and is learned on its second attempt. Each is learned once."""
    gate, rng = fault_service.gate, np.random.default_rng(2)
    with Client(fault_service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
        c.learn(model_name, "a", *batch(rng, n=5))
        busy_before = counter(c.metrics(), "fcl3_updates_total", outcome="lock_busy")
        first: dict = {}
        waits: list[float] = []

        def wait(seconds):  # B's wait for the Retry-After: A commits meanwhile
            waits.append(seconds)
            gate.release()
            a.join(30)

        monkeypatch.setattr(sync_client, "time", Clock(wait))
        gate.hold()
        a = threading.Thread(target=lambda: first.update(r=c.learn_batch(model_name, "a", *batch(rng, n=3))))
        a.start()
        gate.wait_held()  # A holds the lock
        b = c.learn_batch(model_name, "b", *batch(rng, n=4, task=1))
        assert not a.is_alive() and waits == [1.0]
        assert (first["r"].attempts, first["r"].replayed, first["r"].update.version) == (1, False, 2)
        assert (b.attempts, b.replayed, b.update.version, b.update.new_task) == (2, False, 3, True)
        assert counter(c.metrics(), "fcl3_updates_total", outcome="lock_busy") == busy_before + 1
        assert (c.task(model_name, "a").n_samples, c.task(model_name, "b").n_samples) == (5 + 3, 4)
        assert c.get_model(model_name).n_batches == 3


def test_a_batch_that_times_out_is_retried_with_its_key_and_learned_once(fault_service, model_name, monkeypatch):
    """The service holds the batch (at the gate, before its commit) past the client's 1 s
    timeout: the client resends it with the same Idempotency-Key once the first request has
    committed, and gets the first answer (``replayed``): learned once. With no retries left,
    the error says it timed out, and how long it waited."""
    gate, rng = fault_service.gate, np.random.default_rng(6)
    url = fault_service.url
    with Client(url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
    waits: list[float] = []

    def wait(seconds):  # after the timeout: let the first request commit, then resend
        waits.append(seconds)
        gate.wait_held()
        gate.release()
        gate.wait_committed()

    with monkeypatch.context() as m, Client(url, api_key=WRITE_KEY, timeout=1.0, retries=3) as c:
        m.setattr(sync_client, "time", Clock(wait))
        gate.hold()
        t0 = time.monotonic()
        r = c.learn_batch(model_name, "a", *batch(rng))
        assert time.monotonic() - t0 >= 1.0
        assert len(waits) == 1 and (r.attempts, r.replayed, r.update.version, r.update.n_samples) == (2, True, 1, 12)

    X, y = batch(rng)
    gate.hold()
    with Client(url, api_key=WRITE_KEY, timeout=1.0, retries=0) as c, pytest.raises(TimedOut) as err:
        c.learn(model_name, "a", X, y, idempotency_key="timed-out")
    assert isinstance(err.value, ConnectionFailed) and (err.value.timeout, err.value.phase) == (1.0, "read")
    assert str(err.value) == (f"POST {url}/models/{model_name}/tasks/a/data: timed out: no answer within 1 s, "
                              "after 1 attempt(s)")
    assert isinstance(err.value.__cause__, httpx.ReadTimeout)
    gate.wait_held()
    gate.release()
    gate.wait_committed()
    with Client(url, api_key=WRITE_KEY) as c:  # it went through after all: sent again, answered from its commit
        again = c.learn_batch(model_name, "a", X, y, idempotency_key="timed-out")
        assert (again.replayed, again.attempts, again.update.version, again.update.n_samples) == (True, 1, 2, 24)
        assert (c.task(model_name, "a").n_batches, c.get_model(model_name).version) == (2, 2)


def test_a_lost_answer_is_retried_with_its_key_and_learned_once(service, model_name):
    """The service applies the batch but the connection drops before its answer: the client
    sends it again with the same Idempotency-Key and gets the first answer, applied once."""
    rng = np.random.default_rng(3)
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
    proxy = TcpProxy("127.0.0.1", service.server.port, drop=1).start()
    try:
        with Client(proxy.url, api_key=WRITE_KEY, retries=3) as c:
            r = c.learn_batch(model_name, "a", *batch(rng))
            assert r.attempts == 2 and r.replayed and r.update.version == 1
            assert c.task(model_name, "a").n_batches == 1
            assert c.get_model(model_name).version == 1
    finally:
        proxy.stop()


def test_a_refused_connection_is_retried_with_backoff(service, model_name, monkeypatch):
    """Nothing listens: the connection is refused, the client backs off (0.5 s with jitter)
    and tries again — by then the service is there (the proxy opened during the wait)."""
    proxy = TcpProxy("127.0.0.1", service.server.port)  # not listening yet
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, "regression", params=PARAMS)
    waits: list[float] = []

    def wait(seconds):
        waits.append(seconds)
        proxy.start()

    monkeypatch.setattr(sync_client, "time", Clock(wait))
    try:
        with Client(proxy.url, api_key=WRITE_KEY, retries=6) as c:
            r = c.learn_batch(model_name, "a", *batch(np.random.default_rng(4)))
            assert (r.attempts, r.replayed, r.update.version) == (2, False, 1)
        assert len(waits) == 1 and 0.25 <= waits[0] <= 0.5
    finally:
        proxy.stop()
    refused = TcpProxy("127.0.0.1", service.server.port)  # never opened: the retries run out
    monkeypatch.setattr(sync_client, "time", Clock(lambda s: None))
    with Client(refused.url, api_key=WRITE_KEY, retries=2) as c, pytest.raises(ConnectionFailed) as err:
        c.learn(model_name, "a", *batch(np.random.default_rng(4)))
    assert type(err.value) is ConnectionFailed and "could not connect after 3 attempt(s)" in str(err.value)


def test_a_create_whose_answer_is_lost_is_not_resent(service, model_name):
    """Not idempotent: the client says so instead of sending it again."""
    proxy = TcpProxy("127.0.0.1", service.server.port, drop=1).start()
    try:
        with Client(proxy.url, api_key=WRITE_KEY, retries=3) as c, pytest.raises(ConnectionFailed, match="not resent"):
            c.create_model(model_name, "regression", params=PARAMS)
    finally:
        proxy.stop()
    with Client(service.url, api_key=WRITE_KEY) as c:
        assert c.get_model(model_name).version == 0  # it was created, once
