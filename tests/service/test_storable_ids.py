"""Ids that some backend cannot store (a NUL, any control character) are refused with 422 by
every route, the same on SQLite and on PostgreSQL, and change nothing (issue 22, row 4)."""
from __future__ import annotations

import numpy as np
import pytest

from service.models.state_files import from_npz, to_npz

from .conftest import regression_batch
from .test_bad_input import fingerprint

BAD_IDS = ["a%00b", "a%01b", "tab%09", "del%7F", "c1%C2%85"]  # NUL, SOH, TAB, DEL, U+0085 (as in a URL)
ROW = "0.1,0.2,0.3,0.4"


@pytest.fixture
def seeded(backend_client):
    c = backend_client
    X, y = regression_batch(np.random.default_rng(3))
    assert c.post("/tasks/t/data", json={"X": X, "y": y}).status_code == 200
    name = c.get("/model").json()["name"]
    return c, name, X, y


def _refused(r) -> None:
    assert r.status_code == 422, (r.status_code, r.text)
    assert "control character" in r.text, r.text


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_task_id_with_a_control_character_is_422_on_every_route(seeded, bad):
    c, name, X, y = seeded
    before = fingerprint(c)
    for prefix in ("", f"/models/{name}"):
        _refused(c.post(f"{prefix}/tasks/{bad}/data", json={"X": X, "y": y}))
        _refused(c.post(f"{prefix}/tasks/{bad}/data", json={"X": X, "y": y}, headers={"Idempotency-Key": "k-" + bad}))
        _refused(c.post(f"{prefix}/tasks/{bad}/evaluation", json={"X": X, "y": y}))
        _refused(c.get(f"{prefix}/tasks/{bad}"))
        _refused(c.get(f"{prefix}/predict?task_id={bad}&x={ROW}"))
    assert fingerprint(c) == before


@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f", "\x9f"])
def test_a_task_id_with_a_control_character_in_a_json_body_is_422(seeded, char):
    c, name, X, y = seeded
    before = fingerprint(c)
    for path in ("/predict", f"/models/{name}/predict"):
        _refused(c.post(path, json={"task_id": f"t{char}", "X": [[0.1, 0.2, 0.3, 0.4]]}))
    r = c.post("/models", json={"name": "forked", "fork": {"model": f"m{char}"}})
    assert r.status_code == 422, r.text
    assert c.get("/models/forked").status_code == 404
    assert fingerprint(c) == before


def test_an_imported_task_id_with_a_nul_is_422_and_nothing_stored(seeded):
    c, name, X, y = seeded
    state = from_npz(c.get(f"/models/{name}/state").content)
    state.tasks["a\x00b"] = state.tasks.pop("t")
    r = c.post("/models/nul-import/state", content=to_npz(state), headers={"content-type": "application/octet-stream"})
    assert r.status_code == 422 and "control character" in r.text, r.text
    assert c.get("/models/nul-import").status_code == 404


def test_ids_that_every_backend_stores_are_still_accepted(seeded):
    """Spaces, slashes (quoted), quotes, non-ASCII letters and emoji stay valid task ids."""
    c, name, X, y = seeded
    for task in ("a b", "o'neil", "école", "\U0001F600", "%C2%A0nbsp"):
        r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X, "y": y})
        assert r.status_code == 200, (task, r.text)
        assert c.get(f"/models/{name}/tasks/{task}").status_code == 200

