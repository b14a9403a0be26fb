"""A take-back's prequential sums (issue 56): added off the update lock up to the version the
replay ran on, and in the commit only over the batches committed since. With writers committing
while the replay runs and just before the lock is taken, the model's and the task's sums after
it equal, bit for bit, one pass from scratch in version order over the scored batches still
learned; the scored batches read under the lock (counted at the one query that reads them, and
no other read of the log there) are those committed since the last snapshot, not the stream."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from sqlalchemy import event, select

from service.evaluation import store as evaluation_store
from service.evaluation.scores import add_sums, scores, stored, to_json
from service.store.tables import batches_t, log_t, preq_t, state_t
from service.take_back import flows

from .test_take_back import create, model, post
from .test_take_back_checkpoints import every, long_stream  # noqa: F401 - every: a fixture

pytestmark = pytest.mark.usefixtures("every")


def from_scratch(engine, name: str, task_id: str) -> tuple[Any, Any, int]:
    """The model's sums, the task's and its number of scored batches: one pass in version
    order over every stored batch score whose batch is still learned."""
    with engine.connect() as conn:
        taken = set(
            conn.execute(
                select(batches_t.c.version).where(batches_t.c.model_name == name, batches_t.c.taken_back.is_not(None))
            ).scalars()
        )
        rows = conn.execute(
            select(log_t.c.version, log_t.c.task_id, log_t.c.batch)
            .where(log_t.c.model_name == name, log_t.c.batch.is_not(None))
            .order_by(log_t.c.version)
        ).all()
    overall = task = None
    n = 0
    for version, t, batch in rows:
        if version in taken:
            continue
        one = stored("regression", batch)
        overall = add_sums(overall, one)
        if t == task_id:
            task, n = add_sums(task, one), n + 1
    return overall, task, n


def stored_sums(engine, name: str, task_id: str) -> tuple[Any, Any, Any]:
    with engine.connect() as conn:
        overall = conn.execute(select(state_t.c.overall).where(state_t.c.model_name == name)).scalar_one()
        task = conn.execute(
            select(preq_t.c.sums, preq_t.c.n_batches).where(preq_t.c.model_name == name, preq_t.c.task_id == task_id)
        ).one()
    return overall, task.sums, task.n_batches


def bits(sums: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sums JSON with each float as its exact bits (``float.hex``)."""
    return None if sums is None else {k: v.hex() if isinstance(v, float) else v for k, v in sums.items()}


class Writers:
    """Batches posted while a take-back runs: ``during`` after its replay (learned by the
    catch-up off the lock), ``late`` after that catch-up, just before it takes the lock (found
    under the lock: learned off it once it is let go, or under it after ``flows.RELOCKS``
    tries); with ``one_per_lock``, one of ``late`` before each time it takes the lock. Their
    versions are appended to ``versions``."""

    def __init__(self, c, name: str, monkeypatch, during: list, late: list, one_per_lock: bool = False):
        self.c, self.name, self.versions = c, name, []
        real_prepare, real_caught_up = flows.take_back_prepare, flows.caught_up

        def prepare(reader, snap, batch_version):
            prepared = real_prepare(reader, snap, batch_version)
            self.post(during)
            during.clear()
            return prepared

        def caught_up(m, prepared):
            prepared = real_caught_up(m, prepared)
            self.post(late[:1] if one_per_lock else late)
            del late[: 1 if one_per_lock else len(late)]
            return prepared

        monkeypatch.setattr(flows, "take_back_prepare", prepare)
        monkeypatch.setattr(flows, "caught_up", caught_up)

    def post(self, batches: list) -> None:
        for task, X, y in batches:
            self.versions.append(post(self.c, self.name, task, X, y))


class UnderLock:
    """The scored batches read in the take-back's thread while it holds the update lock (rows
    returned by :func:`service.evaluation.store.scored_batches`, the real query on the real
    database), and any other ``SELECT`` of the log made there (``stray``: none expected)."""

    def __init__(self, c, name: str, monkeypatch):
        self.rows: list[int] = []
        self.stray: list[str] = []
        self.holder: int | None = None
        self.inside = threading.local()
        real_locked, real_scored = flows.locked, evaluation_store.scored_batches

        @contextlib.contextmanager
        def locked(m, h):
            with real_locked(m, h) as held:
                self.holder = threading.get_ident()
                try:
                    yield held
                finally:
                    self.holder = None

        def scored_batches(conn, model_name, *args, **kwargs):
            self.inside.on = True
            try:
                rows = real_scored(conn, model_name, *args, **kwargs)
            finally:
                self.inside.on = False
            if self.holder == threading.get_ident():
                self.rows.append(len(rows))
            return rows

        def statement(_conn, _cursor, sql, *_args) -> None:
            if self.holder != threading.get_ident() or getattr(self.inside, "on", False):
                return
            if sql.lstrip().upper().startswith("SELECT") and "evaluation_log" in sql:
                self.stray.append(sql)

        monkeypatch.setattr(flows, "locked", locked)
        monkeypatch.setattr(evaluation_store, "scored_batches", scored_batches)
        reader = c.app.state.models.get(name).reader
        self.engines = list({id(e): e for e in (reader.engine, reader.bulk)}.values())
        for e in self.engines:
            event.listen(e, "before_cursor_execute", statement)
        self._statement = statement

    def close(self) -> None:
        for e in self.engines:
            event.remove(e, "before_cursor_execute", self._statement)


def assert_sums_from_scratch(c, name: str, task_id: str) -> None:
    engine = c.app.state.models.get(name).reader.bulk
    overall, task, n = from_scratch(engine, name, task_id)
    got_overall, got_task, got_n = stored_sums(engine, name, task_id)
    assert bits(got_overall) == bits(to_json(overall))
    assert (bits(got_task), got_n) == (bits(to_json(task)), n)
    assert model(c, name)["prequential"]["overall"] == scores(overall)


def test_the_sums_after_a_take_back_with_writers_equal_one_pass_from_scratch(backend_app, monkeypatch):
    """30 batches of 3 tasks, batch 7 taken back (the prefix skips it), 5 more; then batch 20
    taken back while 2 batches are posted during its replay and 2 just before its lock: the
    model's and the task's sums are one pass from scratch over what is still learned, bit for bit."""
    c = backend_app()
    name = create(c)
    for task, X, y in long_stream(21, 30):
        post(c, name, task, X, y)
    assert c.delete(f"/models/{name}/batches/7").status_code == 200
    assert_sums_from_scratch(c, name, "t0")
    for task, X, y in long_stream(22, 5):
        post(c, name, task, X, y)
    writers = Writers(c, name, monkeypatch, long_stream(23, 2), long_stream(24, 2))
    r = c.delete(f"/models/{name}/batches/20")
    assert r.status_code == 200, r.text
    assert writers.versions == [37, 38, 39, 40]
    assert (r.json()["version"], r.json()["task_id"]) == (41, "t1")
    assert_sums_from_scratch(c, name, "t1")
    for task in ("t0", "t2"):  # the other tasks' sums are the ones the stream gave them
        assert_sums_from_scratch(c, name, task)


def test_the_scored_batches_read_under_the_lock_are_those_committed_since_the_snapshot(
    backend_app, monkeypatch, caplog
):
    """40 batches; a take-back with 3 batches posted during its replay and 2 just before its
    lock finds them under the lock, lets go of it and learns them off it: it reads no scored
    batch under the lock. One with a batch posted before each time it takes the lock learns the
    last under it, after ``RELOCKS`` tries: it reads that one scored batch there, not the
    stream's. A take-back with no writer reads none there. The sums stay exact."""
    c = backend_app()
    name = create(c)
    for task, X, y in long_stream(31, 40):
        post(c, name, task, X, y)
    under = UnderLock(c, name, monkeypatch)
    try:
        writers = Writers(c, name, monkeypatch, long_stream(32, 3), long_stream(33, 2))
        r = c.delete(f"/models/{name}/batches/12")
        assert r.status_code == 200, r.text
        assert writers.versions == [41, 42, 43, 44, 45] and r.json()["version"] == 46
        assert sum(under.rows) == 0, under.rows  # 44 and 45: learned off the lock, once let go
        line = [x for x in caplog.records if getattr(x, "event", None) == "take_back"][-1]
        assert line.lock_holds == 2
        assert under.stray == []
        assert_sums_from_scratch(c, name, r.json()["task_id"])
        writers = Writers(c, name, monkeypatch, [], long_stream(34, flows.RELOCKS + 1), one_per_lock=True)
        r = c.delete(f"/models/{name}/batches/20")
        assert r.status_code == 200, r.text
        assert writers.versions == [47, 48, 49, 50] and r.json()["version"] == 51
        assert under.rows[-1:] == [1] and sum(under.rows) == 1, under.rows  # 50: learned under the lock
        line = [x for x in caplog.records if getattr(x, "event", None) == "take_back"][-1]
        assert line.lock_holds == flows.RELOCKS + 1
        assert_sums_from_scratch(c, name, r.json()["task_id"])
        under.rows.clear()
        r = c.delete(f"/models/{name}/batches/30")  # no writer: the sums are whole off the lock
        assert r.status_code == 200, r.text
        assert sum(under.rows) == 0, under.rows
        assert under.stray == []
        assert_sums_from_scratch(c, name, r.json()["task_id"])
    finally:
        under.close()
