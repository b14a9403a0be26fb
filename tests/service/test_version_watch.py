"""Predictions without a database round trip per request (service.store.watch), and read-your-writes
across processes with ``min_version``."""
from __future__ import annotations

import time

import httpx
import numpy as np
import pytest
from sqlalchemy import event

from service.learning.predictions import predict
from service.learning.updates import learn_batch
from service.models.lifecycle import start
from service.db import make_engine, upgrade_schema
from service.writing.locks import LocalLocks
from service.store.reads import VersionBehind
from service.hosting import HostedModel
from service.store.watch import NoWatch, PostgresWatch, SqliteWatch, make_watch

from .conftest import make_settings, regression_batch
from .test_embedded_processes import embedded_env


def listening(watch: PostgresWatch, timeout: float = 10.0) -> bool:
    """Whether ``watch``'s listener connects within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not watch.listening and time.monotonic() < end:
        time.sleep(0.01)
    return watch.listening


def count_version_selects(engine) -> list[str]:
    """Every statement run on ``engine`` that reads the model's stored version: a reader's
    ``SELECT version``, or a writer's read of the version with what changed since the cached
    one (appended as they run)."""
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _count(conn, cursor, statement, parameters, context, executemany):
        s = " ".join(statement.split())
        if s.startswith("SELECT") and "models.version" in s.partition(" FROM ")[0]:
            seen.append(s)

    return seen


def two_processes(settings, poll: float = 30.0):
    """Two hosted copies of one model, as two processes would hold them: their own engines and
    version watches. Returns (a, b, watch_a, watch_b, engines)."""
    engines, watches, hosted = [], [], []
    for _ in range(2):
        engine = make_engine(settings)
        watch = make_watch(engine, poll)
        if isinstance(watch, PostgresWatch):
            assert listening(watch)
        engines.append(engine)
        watches.append(watch)
        hosted.append(HostedModel.open(engine, LocalLocks(30, 5), settings.MODEL_NAME,
                                       settings.model_settings(), watch=watch))
    return hosted[0], hosted[1], watches, engines


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request, tmp_path):
    if request.param == "postgres":
        s = make_settings(DATABASE_URL=request.getfixturevalue("pg_database"))
    else:
        s = make_settings(SQLITE_PATH=str(tmp_path / "fcl3.db"))
        upgrade_schema(make_engine(s))
    return s


@pytest.fixture
def pair(settings):
    a, b, watches, engines = two_processes(settings)
    yield settings, a, b
    for w in watches:
        w.close()
    for e in engines:
        e.dispose()


def served_after_b_learns(a, b, rng) -> tuple[np.ndarray, int]:
    """B learns task ``t0``; A serves that version and has heard B's notification: the rows
    of the batch and the version."""
    X, y = regression_batch(rng)
    start(a)
    start(b)
    _, v1 = learn_batch(b, "t0", X, y)
    assert predict(a, "t0", X, min_version=v1)[2] == v1
    time.sleep(0.2)  # PostgreSQL: B's notification arrives (A checks once more after it)
    predict(a, "t0", X)
    return X, v1


def test_repeated_predictions_run_no_version_select_until_another_process_writes(pair):
    settings, a, b = pair
    rng = np.random.default_rng(0)
    X, v1 = served_after_b_learns(a, b, rng)
    selects = count_version_selects(a.reader.engine)
    for _ in range(50):
        assert predict(a, "t0", X)[2] == v1
    assert selects == []  # nothing changed: no round trip at all

    _, v2 = learn_batch(b, "t0", *regression_batch(rng))
    deadline = time.monotonic() + 5  # SQLite: the next request; PostgreSQL: the notification delay
    while predict(a, "t0", X)[2] != v2:
        assert time.monotonic() < deadline, "the other process's commit was never seen"
        time.sleep(0.005)
    n = len(selects)
    assert 1 <= n <= 3
    for _ in range(20):
        predict(a, "t0", X)
    assert len(selects) == n  # and none again once the new version is served


def test_min_version_refreshes_at_once_and_refuses_a_version_not_reached(pair):
    settings, a, b = pair
    rng = np.random.default_rng(1)
    X, y = regression_batch(rng)
    start(a)
    start(b)
    _, v1 = learn_batch(b, "t0", X, y)
    # No waiting for a notification: min_version makes A read the stored version now.
    assert predict(a, "t0", X, min_version=v1)[2] == v1
    with pytest.raises(VersionBehind, match=f"at version {v1} < min_version {v1 + 1}"):
        predict(a, "t0", X, min_version=v1 + 1)


def test_a_lost_notification_is_covered_by_the_fallback_poll(settings, monkeypatch):
    a, b, watches, engines = two_processes(settings, poll=0.5)
    try:
        rng = np.random.default_rng(2)
        X, y = regression_batch(rng)
        start(a)
        start(b)
        _, v1 = learn_batch(b, "t0", X, y)
        assert predict(a, "t0", X, min_version=v1)[2] == v1
        frozen = a.reader.watch.token(a.name)
        monkeypatch.setattr(a.reader.watch, "token", lambda name: frozen)  # A hears of nothing more
        _, v2 = learn_batch(b, "t0", *regression_batch(rng))
        t0 = time.monotonic()
        while predict(a, "t0", X)[2] != v2:
            assert time.monotonic() - t0 < 2.0, "the fallback poll did not pick the commit up"
            time.sleep(0.01)
        assert time.monotonic() - t0 <= 0.5 + 0.2  # within the poll interval
        # Writers never trust a watch that is not exact: A's update right after B's is computed
        # on B's version. (SQLite's data_version misses no commit: there is no lost
        # notification to simulate, and a writer relies on it; see the test below.)
        if not a.reader.watch.exact:
            _, v3 = learn_batch(b, "t0", *regression_batch(rng))
            _, v4 = learn_batch(a, "t0", *regression_batch(rng))
            assert v4 == v3 + 1
    finally:
        for w in watches:
            w.close()
        for e in engines:
            e.dispose()


def test_an_sqlite_writer_relies_on_the_exact_watch(tmp_path):
    """On SQLite, a writer whose own commit is the file's last runs no ``SELECT version``
    (``data_version`` unchanged since its commit: nothing else was committed), nor do the
    predictions after it; another process's commit changes the token, and the next writer
    reads the stored version and learns on it."""
    settings = make_settings(SQLITE_PATH=str(tmp_path / "fcl3.db"))
    upgrade_schema(make_engine(settings))
    a, b, watches, engines = two_processes(settings)
    try:
        assert a.reader.watch.exact
        rng = np.random.default_rng(3)
        X, y = regression_batch(rng)
        start(a)
        start(b)
        _, v1 = learn_batch(a, "t0", X, y)
        selects = count_version_selects(a.reader.engine)
        _, v2 = learn_batch(a, "t0", *regression_batch(rng))
        assert predict(a, "t0", X)[2] == v2 == v1 + 1
        assert selects == []  # its own commit vouched for the cached version
        _, v3 = learn_batch(b, "t0", *regression_batch(rng))
        _, v4 = learn_batch(a, "t0", *regression_batch(rng))
        assert v4 == v3 + 1 and len(selects) == 1  # B's commit seen: learned on B's version
    finally:
        for w in watches:
            w.close()
        for e in engines:
            e.dispose()


def test_postgres_listener_reconnect_means_every_request_checks(request):
    settings = make_settings(DATABASE_URL=request.getfixturevalue("pg_database"))
    engine = make_engine(settings)
    watch = make_watch(engine, 30.0)
    try:
        assert isinstance(watch, PostgresWatch) and listening(watch)
        t = watch.token("x")
        watch._listening = False  # as while reconnecting
        assert watch.token("x") is None
        watch._listening = True
        assert watch.token("x") == t
    finally:
        watch.close()
        engine.dispose()
    assert not watch.listening


def test_watch_kinds(tmp_path):
    assert isinstance(make_watch(make_engine(make_settings(SQLITE_PATH=str(tmp_path / "a.db")))), SqliteWatch)
    assert isinstance(make_watch(make_engine(make_settings(SQLITE_PATH=":memory:"))), NoWatch)
    assert isinstance(make_watch(make_engine(make_settings(SQLITE_PATH=str(tmp_path / "b.db"))), poll=0), NoWatch)


def test_min_version_over_http(backend_client):
    client = backend_client
    X, y = regression_batch(np.random.default_rng(3))
    v = client.post("/tasks/t0/data", json={"X": X, "y": y}).json()["version"]
    r = client.get("/predict", params={"task_id": "t0", "x": ",".join(map(str, X[0])), "min_version": v})
    assert r.status_code == 200 and r.json()["version"] == v
    r = client.post("/predict", params={"min_version": v + 1}, json={"task_id": "t0", "X": X[:2]})
    assert r.status_code == 409 and f"< min_version {v + 1}" in r.json()["detail"]
    assert client.post("/predict", params={"min_version": -1}, json={"task_id": "t0", "X": X[:2]}).status_code == 422


def _write_on_a_then_read_on_b(a_url: str, b_url: str, rng) -> None:
    with httpx.Client(timeout=20) as http:
        for i in range(10):
            X, y = regression_batch(rng)
            r = http.post(f"{a_url}/tasks/t0/data", json={"X": X, "y": y})
            assert r.status_code == 200, r.text
            v = r.json()["version"]
            p = http.post(f"{b_url}/predict", params={"min_version": v}, json={"task_id": "t0", "X": X[:3]})
            assert p.status_code == 200, p.text
            assert p.json()["version"] >= v
            g = http.get(f"{b_url}/predict", params={"task_id": "t0", "x": ",".join(map(str, X[0])), "min_version": v})
            assert g.status_code == 200 and g.json()["version"] >= v


@pytest.mark.slow
def test_postgres_write_on_one_process_then_min_version_prediction_on_another(server_env, tmp_path, spawn):
    a = spawn(server_env, log_path=tmp_path / "a.log").start()
    b = spawn(server_env, log_path=tmp_path / "b.log").start()
    _write_on_a_then_read_on_b(a.url, b.url, np.random.default_rng(4))


@pytest.mark.slow
def test_sqlite_write_on_one_process_then_min_version_prediction_on_another(tmp_path, spawn):
    env = embedded_env(tmp_path)
    a = spawn(env, log_path=tmp_path / "a.log").start(timeout=60)
    b = spawn(env, log_path=tmp_path / "b.log").start(timeout=60)
    _write_on_a_then_read_on_b(a.url, b.url, np.random.default_rng(5))
    # The embedded default needs no min_version at all: the next request sees every commit.
    with httpx.Client(timeout=20) as http:
        X, y = regression_batch(np.random.default_rng(6))
        v = http.post(f"{a.url}/tasks/t0/data", json={"X": X, "y": y}).json()["version"]
        assert http.post(f"{b.url}/predict", json={"task_id": "t0", "X": X[:1]}).json()["version"] == v


def test_a_task_another_process_just_learned_is_predicted_not_404_before_the_watch_says(pair, monkeypatch):
    """A's watch has not yet heard of B's commit (a PostgreSQL notification on its way; held
    here by freezing A's token): a task A's cached version knows is served from the cache
    without a query, but a task it has not learned is looked for at the stored version (one
    query) and predicted, not answered 404; a task nobody learned is still unknown."""
    import core

    settings, a, b = pair
    rng = np.random.default_rng(3)
    X, v1 = served_after_b_learns(a, b, rng)
    frozen = a.reader.watch.token(settings.MODEL_NAME)
    monkeypatch.setattr(a.reader.watch, "token", lambda name: frozen)
    _, v2 = learn_batch(b, "t1", *regression_batch(rng, task=1))
    selects = count_version_selects(a.reader.engine)
    assert predict(a, "t0", X)[2] == v1 and selects == []  # the cache, as the watch says
    preds, _, version = predict(a, "t1", X)
    assert version == v2 and len(preds) == len(X) and 1 <= len(selects) <= 3
    with pytest.raises(core.UnknownTaskError):
        predict(a, "nobody", X)
