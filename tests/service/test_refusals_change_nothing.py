"""Every bad input of :mod:`benchmarks.bad_inputs` is refused with its 4xx, never a 5xx, and
changes nothing (the model's version, its vocabulary, its remembered rows, the list of models),
on the embedded default and on PostgreSQL; the fault suite sends the same cases to a real
server."""
from __future__ import annotations

from benchmarks.bad_inputs import run_cases

WRITE, READ = "w-key-55", "r-key-55"


def test_every_refusal_changes_nothing(backend_app):
    c = backend_app(API_WRITE_KEYS=WRITE, API_READ_KEYS=READ, MAX_REMEMBERED_PER_MODEL=50)
    c.headers["Authorization"] = f"Bearer {WRITE}"
    from fastapi.testclient import TestClient

    reader = TestClient(c.app, headers={"Authorization": f"Bearer {READ}"})
    rows = run_cases(c, reader, remember_cap=50)
    wrong = [r for r in rows if r["status"] != r["expect"] or r["changed"]]
    assert not wrong, "\n".join(f"{r['case']}: {r['status']} (want {r['expect']}), changed {r['changed']}: "
                                f"{r['body']}" for r in wrong)
    assert len(rows) >= 35
