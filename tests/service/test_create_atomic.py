"""Every multi-statement create is one transaction. A failure injected at each
statement that ``POST /models`` (with a feature schema), a fork and an import write, on
PostgreSQL, leaves no model behind: not its row, not a task, a batch or a column."""
from __future__ import annotations

import pytest
from sqlalchemy import event, func, select

from service.store.tables import batches_t, columns_t, models_t, take_backs_t, tasks_t

from .conftest import unique_name

FEATURES = [{"name": "x", "type": "number", "nullable": True}, {"name": "cat", "type": "category", "levels": ["a"]}]
WRITES = ("INSERT", "UPDATE", "DELETE", "SELECT PG_NOTIFY")


class Injected(RuntimeError):
    """The failure a test injects at one statement."""


class FailAt:
    """A ``before_cursor_execute`` hook on the app's engines: counts the writes, raises at the ``at``-th."""

    def __init__(self, engines, at: int | None):
        self.engines, self.at, self.seen = list(dict.fromkeys(engines)), at, []

    def __call__(self, conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(WRITES):
            self.seen.append(statement.split("(")[0].strip()[:40])
            if self.at is not None and len(self.seen) == self.at:
                raise Injected(f"injected failure at statement {self.at}: {self.seen[-1]}")

    def __enter__(self):
        for e in self.engines:
            event.listen(e, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc):
        for e in self.engines:
            event.remove(e, "before_cursor_execute", self)


def rows_of(c, name: str) -> dict[str, int]:
    with c.app.state.engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t).where(
            (t.c.name if t is models_t else t.c.model_name) == name)).scalar()
            for t in (models_t, tasks_t, batches_t, take_backs_t, columns_t)}


@pytest.fixture
def pg(make_client, request):
    return make_client("postgres", _request=request, FCL3_ESTIMATOR="STL", FCL3_PARAMS={})


def each_statement_fails(c, make) -> list[str]:
    """``make(name)`` (a request creating the model ``name``) run once to count its writes, then
    once per write with a failure there: each time no model is left."""
    reader = c.app.state.model.reader
    engines = [reader.engine, reader.bulk]
    with FailAt(engines, None) as count:
        r = make(unique_name("count"))
    assert r.status_code == 201, r.text
    assert len(count.seen) >= 3, count.seen
    for k in range(1, len(count.seen) + 1):
        name = unique_name(f"fail{k}")
        with FailAt(engines, k):
            r = make(name)
        assert r.status_code >= 500, (k, r.status_code, r.text)
        assert rows_of(c, name) == dict.fromkeys(rows_of(c, name), 0), (k, count.seen[k - 1], rows_of(c, name))
        assert c.get(f"/models/{name}").status_code == 404
    return count.seen


def test_a_failure_at_any_statement_of_create_fork_or_import_leaves_no_model(pg):
    from fastapi.testclient import TestClient

    c = TestClient(pg.app, raise_server_exceptions=False)
    seen = each_statement_fails(c, lambda n: c.post("/models", json={
        "name": n, "kind": "regression", "estimator": "STL", "features": FEATURES}))
    assert any("feature_columns" in s for s in seen), seen  # the vocabulary is written by the same transaction
    parent = unique_name("parent")
    assert c.post("/models", json={"name": parent, "kind": "regression", "estimator": "STL",
                                   "features": FEATURES}).status_code == 201
    for i, level in enumerate(["a", "b", "c"]):
        r = c.post(f"/models/{parent}/tasks/t{i % 2}/data",
                   json={"records": [{"x": 1.0, "cat": level}, {"x": None, "cat": "a"}], "y": [1.0, 0.0]})
        assert r.status_code == 200, r.text
    assert c.delete(f"/models/{parent}/batches/2").status_code == 200
    each_statement_fails(c, lambda n: c.post("/models", json={"name": n, "fork": {"model": parent, "version": 4}}))
    data = c.get(f"/models/{parent}/state").content
    each_statement_fails(c, lambda n: c.post(f"/models/{n}/state", content=data,
                                             headers={"content-type": "application/octet-stream"}))
