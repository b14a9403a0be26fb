"""Idempotency keys expire by the database's clock, never this process's (issue 22, row 9):
with the process's clock stepped two days forward no key is purged early and no live claim
expires, and with it stepped back the purge still goes by the database. On SQLite and on
PostgreSQL + Redis.

The process's clock is stepped by replacing ``time.time`` / ``time.time_ns`` and the
``datetime`` class every ``service`` module uses: everything the service computes in Python
sees the step; the database's own clock (PostgreSQL's ``now()``, SQLite's ``'now'``, read by
the C library) does not."""
from __future__ import annotations

import datetime as dt
import sys
import time

import numpy as np
import pytest
from sqlalchemy import func, select, text, update

from service.store.tables import keys_t
from service.writing.idempotent import request_hash

from .conftest import regression_batch

DAY = 86400.0


@pytest.fixture
def clock(monkeypatch):
    """``clock(seconds)`` steps this process's wall clock (cumulative)."""
    import service.main  # noqa: F401 - every service module loaded, so that each is stepped

    shift = {"s": 0.0}
    real_time, real_time_ns = time.time, time.time_ns

    class Stepped(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime.now(tz) + dt.timedelta(seconds=shift["s"])

        @classmethod
        def utcnow(cls):
            return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) + dt.timedelta(seconds=shift["s"])

    monkeypatch.setattr(time, "time", lambda: real_time() + shift["s"])
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + int(shift["s"] * 1e9))
    for name, module in list(sys.modules.items()):
        if (name == "service" or name.startswith("service.")) and getattr(module, "datetime", None) is dt.datetime:
            monkeypatch.setattr(module, "datetime", Stepped)

    def step(seconds: float) -> None:
        shift["s"] += seconds

    return step


@pytest.fixture
def app(backend_app):
    return backend_app


def post(c, X, y, key, task="t"):
    return c.post(f"/tasks/{task}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": key})


def seconds_ago(dialect: str, seconds: float):
    """The database's clock ``seconds`` ago, in SQL written here (not the service's helper)."""
    if dialect == "sqlite":
        return func.strftime("%Y-%m-%d %H:%M:%f000", "now", f"-{seconds} seconds")
    return text(f"now() - interval '{float(seconds)} seconds'")


def age(c, key: str, seconds: float) -> None:
    """Make ``key`` last touched ``seconds`` ago by the database's clock."""
    engine, name = c.app.state.engine, c.app.state.settings.MODEL_NAME
    with engine.begin() as conn:
        conn.execute(update(keys_t).where(keys_t.c.model_name == name, keys_t.c.key == key)
                     .values(touched_at=seconds_ago(engine.dialect.name, seconds)))


def touched(c, key: str) -> dt.datetime | None:
    engine, name = c.app.state.engine, c.app.state.settings.MODEL_NAME
    with engine.connect() as conn:
        t = conn.execute(select(keys_t.c.touched_at).where(keys_t.c.model_name == name, keys_t.c.key == key)).scalar()
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc))


def test_a_clock_stepped_two_days_forward_purges_no_key(app, clock):
    """The key is committed; the clock steps two days forward; a write purges (every write
    may); the retry one second later is answered from the first commit: learned once."""
    c = app(IDEMPOTENCY_PURGE_EVERY=0)
    rng = np.random.default_rng(1)
    X, y = regression_batch(rng)
    first = post(c, X, y, "k")
    assert first.status_code == 200 and first.json()["version"] == 1
    clock(2 * DAY)
    assert post(c, *regression_batch(rng), "other").json()["version"] == 2  # this write purges
    clock(1)
    retry = post(c, X, y, "k")
    assert retry.status_code == 200 and retry.headers.get("Idempotent-Replayed") == "true", retry.text
    assert retry.json() == first.json()
    m = c.get("/model").json()
    assert m["version"] == 2 and m["n_batches"] == 2


def test_a_host_clock_stepped_two_days_forward_purges_no_key(app, clock):
    """The host's clock steps two days forward under a running process, the database's with
    it (SQLite's is the host's): the key's stamp is then two days old by the database's clock
    (made so here), and the process sees its wall clock run two days ahead of its monotonic
    one; a write purges, and the retry a second later is still answered from the first commit."""
    c = app(IDEMPOTENCY_PURGE_EVERY=0)
    rng = np.random.default_rng(5)
    X, y = regression_batch(rng)
    first = post(c, X, y, "k")
    assert first.status_code == 200 and first.json()["version"] == 1
    clock(2 * DAY)
    age(c, "k", 2 * DAY + 1)
    assert post(c, *regression_batch(rng), "other").json()["version"] == 2  # this write purges
    retry = post(c, X, y, "k")
    assert retry.status_code == 200 and retry.headers.get("Idempotent-Replayed") == "true", retry.text
    assert c.get("/model").json()["version"] == 2


def test_a_clock_stepped_two_days_forward_expires_no_live_claim(app, clock):
    """A claim of a request still running is not taken for abandoned after the step."""
    c = app(LOCK_TTL=30)
    name = c.app.state.settings.MODEL_NAME
    X, y = regression_batch(np.random.default_rng(2))
    c.app.state.model.keys.claim(name, "running", request_hash("t", X, y))
    clock(2 * DAY)
    r = post(c, X, y, "running")
    assert r.status_code == 409 and "still running" in r.json()["detail"], r.text
    assert c.get("/model").json()["version"] == 0


def test_keys_are_stamped_and_purged_by_the_database_clock(app, clock):
    """With the process's clock two days behind, a write stamps its key with the database's
    time, and a key the database last touched ``IDEMPOTENCY_TTL`` + 5 s ago is purged."""
    c = app(IDEMPOTENCY_TTL=60, IDEMPOTENCY_PURGE_EVERY=0)
    rng = np.random.default_rng(3)
    X, y = regression_batch(rng)
    assert post(c, X, y, "old").json()["version"] == 1
    clock(-2 * DAY)
    age(c, "old", 65)
    assert post(c, *regression_batch(rng), "new").json()["version"] == 2  # this write purges "old"
    assert touched(c, "old") is None
    stamped = touched(c, "new")
    assert abs((stamped - dt.datetime.now(dt.timezone.utc)).total_seconds()) < 60, stamped  # not 2 days ago
    r = post(c, X, y, "old")  # a new request now
    assert r.status_code == 200 and r.json()["version"] == 3 and "Idempotent-Replayed" not in r.headers


def test_a_claim_expires_after_lock_ttl_by_the_database_clock(app, clock):
    """A claim whose holder cannot be told (an owner of an older version: no holder in it)
    expires ``LOCK_TTL`` after its last touch by the database's clock, whatever the process's
    clock says."""
    from sqlalchemy import insert

    c = app(LOCK_TTL=30)
    engine, name = c.app.state.engine, c.app.state.settings.MODEL_NAME
    X, y = regression_batch(np.random.default_rng(4))
    with engine.begin() as conn:
        conn.execute(insert(keys_t).values(model_name=name, key="legacy", request_hash=request_hash("t", X, y),
                                           owner="0123456789abcdef0123456789abcdef",
                                           touched_at=seconds_ago(engine.dialect.name, 5)))
    clock(2 * DAY)  # forward: still in flight by the database's clock
    assert post(c, X, y, "legacy").status_code == 409
    clock(-4 * DAY)  # backward: expired by the database's clock
    age(c, "legacy", 31)
    r = post(c, X, y, "legacy")
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
