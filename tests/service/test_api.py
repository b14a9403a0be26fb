"""End-to-end through HTTP on the real app (embedded SQLite and PostgreSQL + Redis)."""
from __future__ import annotations

import numpy as np
import pytest

from .conftest import ESTIMATOR, regression_batch


def post(client, task, X, y):
    return client.post(f"/tasks/{task}/data", json={"X": X, "y": y})


def test_health_ready_docs(backend_client):
    c = backend_client
    assert c.get("/healthz").json() == {"status": "ok"}
    r = c.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json()["database"] == "ok" and r.json()["schema"] == "ok"
    assert c.get("/docs").status_code == 200
    paths = c.get("/openapi.json").json()["paths"]
    for p in ("/tasks/{task_id}/data", "/predict", "/tasks", "/tasks/{task_id}", "/model", "/healthz", "/readyz"):
        assert p in paths


def test_learn_predict_inspect(backend_client):
    c = backend_client
    rng = np.random.default_rng(0)
    m0 = c.get("/model").json()
    assert m0["version"] == 0 and m0["estimator"] == ESTIMATOR and m0["kind"] == "regression"
    assert m0["n_tasks"] == 0 and m0["d"] is None

    versions = []
    for i, task in enumerate(["t1", "t2", "t3", "t1"]):
        X, y = regression_batch(rng, task=i)
        r = post(c, task, X, y)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["task_id"] == task
        assert body["new_task"] is (i < 3)
        assert body["n_samples"] == (24 if i == 3 else 12)
        versions.append(body["version"])
        if ESTIMATOR == "FCL3":
            assert len(body["code"]) == 3
            a = body["assignment"]
            assert a[-1]["outlier"] is True and a[-1]["representative"] is None
            assert abs(sum(e["weight"] for e in a) - 1.0) < 1e-6
            assert body["outlier_probability"] == a[-1]["weight"]
            assert all(e["representative"] for e in a[:-1])
            assert body["n_representatives"] >= 1
    assert versions == [1, 2, 3, 4]

    rows = [[0.1, 0.2, 0.3, 0.4], [1.0, -1.0, 0.5, 2.0]]
    g = c.get("/predict", params={"task_id": "t2", "x": [",".join(map(str, r)) for r in rows]})
    assert g.status_code == 200, g.text
    p = c.post("/predict", json={"task_id": "t2", "X": rows})
    assert p.status_code == 200
    assert g.json() == p.json()
    assert g.json()["version"] == 4 and len(g.json()["predictions"]) == 2
    assert "probabilities" not in g.json()

    tasks = c.get("/tasks").json()
    assert tasks["count"] == 3 and tasks["version"] == 4
    assert [t["task_id"] for t in tasks["tasks"]] == ["t1", "t2", "t3"]
    t1 = c.get("/tasks/t1").json()
    assert t1["n_samples"] == 24 and t1["n_batches"] == 2 and t1["version"] == 4
    assert t1["last_update"]["n_samples"] == 24

    m = c.get("/model").json()
    assert m["version"] == 4 and m["d"] == 4 and m["n_tasks"] == 3 and m["n_batches"] == 4
    assert m["created_with"]["estimator"] == ESTIMATOR
    assert m["hyperparameters"]["kind"] == "regression"
    if ESTIMATOR == "FCL3":
        assert m["p"] == 3 and m["hyperparameters"]["n_components"] == 3
        assert m["n_representatives"] == len(m["representatives"]) >= 1
        assert set(m["representatives"]) <= {"t1", "t2", "t3"}


def test_classification_labels_and_probabilities(make_client):
    c = make_client(FCL3_KIND="classification")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 3))
    y01 = (X[:, 0] > 0).astype(int)
    assert post(c, "zero-one", X.tolist(), y01.tolist()).status_code == 200
    assert post(c, "plus-minus", X.tolist(), (2 * y01 - 1).tolist()).status_code == 200
    for task, allowed in (("zero-one", {0.0, 1.0}), ("plus-minus", {-1.0, 1.0})):
        r = c.post("/predict", json={"task_id": task, "X": X[:10].tolist()}).json()
        assert set(r["predictions"]) <= allowed
        assert len(r["probabilities"]) == 10 and all(0 <= q <= 1 for q in r["probabilities"])
    assert c.get("/model").json()["kind"] == "classification"


def test_model_keeps_the_settings_it_was_created_with(make_client, tmp_path):
    c = make_client(SQLITE_PATH=str(tmp_path / "keep.db"), MODEL_NAME="keep", FCL3_PARAMS={**_params(), "mu": 0.05})
    assert c.get("/model").json()["hyperparameters"]["mu"] == 0.05
    # Same model, restarted with other settings: the stored ones win.
    c2 = make_client(SQLITE_PATH=str(tmp_path / "keep.db"), MODEL_NAME="keep", FCL3_PARAMS={**_params(), "mu": 0.5})
    m = c2.get("/model").json()
    assert m["hyperparameters"]["mu"] == 0.05 and m["created_with"]["params"]["mu"] == 0.05


def _params():
    from .conftest import PARAMS

    return dict(PARAMS)


def test_configured_d_is_enforced(make_client):
    c = make_client(FCL3_D=3)
    r = post(c, "a", [[1.0, 2.0]], [1.0])
    assert r.status_code == 422 and "expects 3" in r.json()["detail"]
    assert post(c, "a", [[1.0, 2.0, 3.0], [0.0, 1.0, 2.0]], [1.0, 2.0]).status_code == 200
    assert c.get("/model").json()["d"] == 3


def test_two_models_in_one_database_are_independent(make_client, tmp_path):
    db = str(tmp_path / "shared.db")
    a = make_client(SQLITE_PATH=db, MODEL_NAME="alpha")
    b = make_client(SQLITE_PATH=db, MODEL_NAME="beta")
    rng = np.random.default_rng(2)
    X, y = regression_batch(rng)
    assert post(a, "t", X, y).json()["version"] == 1
    assert b.get("/model").json()["version"] == 0
    assert b.get("/predict", params={"task_id": "t", "x": "1,2,3,4"}).status_code == 404


@pytest.mark.parametrize("params", [{"max_task_rows": 0}, {"lambda2": -1.0}, {"no_such_setting": 1}])
def test_bad_model_settings_stop_the_service_at_start_up(make_client, params):
    """A bad FCL3_PARAMS is the operator's error: the service refuses to start and says why,
    rather than starting and answering every client's first update with an error."""
    from service.models.learners import ModelConfigError

    with pytest.raises(ModelConfigError, match="bad FCL3_PARAMS"):
        make_client(FCL3_PARAMS={**_params(), **params})


def test_classification_rows_can_be_capped_per_task(make_client):
    c = make_client(FCL3_KIND="classification", FCL3_PARAMS={**_params(), "max_task_rows": 25})
    rng = np.random.default_rng(4)
    for _ in range(4):
        X = rng.normal(size=(20, 3))
        r = c.post("/tasks/a/data", json={"X": X.tolist(), "y": (X[:, 0] > 0).astype(float).tolist()})
        assert r.status_code == 200, r.text
    assert c.get("/tasks/a").json()["n_samples"] == 80
    assert c.get("/model").json()["hyperparameters"]["max_task_rows"] == 25
    assert c.app.state.model.reader.snapshot().learner.tasks_["a"].data.X.shape == (25, 3)


def test_a_read_of_a_missing_model_writes_nothing_and_the_first_update_creates_it(make_client):
    """Start-up creates the model; if its row goes away, reads answer 503 (Retry-After) and
    leave the database alone, and the next update creates the model again."""
    from sqlalchemy import delete

    from service.store.tables import ModelRow

    c = make_client()
    reader = c.app.state.model.reader
    with c.app.state.engine.begin() as conn:
        conn.execute(delete(ModelRow).where(ModelRow.name == reader.name))
    for r in (c.get("/model"), c.get("/predict", params={"task_id": "t", "x": "1,2,3,4"})):
        assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
        assert "is not in the database" in r.json()["detail"]
    assert c.get("/tasks").json() == {"model": reader.name, "version": None, "count": 0, "tasks": []}
    assert reader.stored_version() is None  # nothing was written by the reads
    assert post(c, "t", *regression_batch(np.random.default_rng(3))).json()["version"] == 1
    assert c.get("/model").json()["version"] == 1


@pytest.mark.parametrize("estimator", ["STL", "ELLA", "FCL3"])
def test_p_is_the_code_length_hyperparameter(make_client, estimator):
    params = {"n_components": 2} if estimator != "STL" else {}
    c = make_client(FCL3_ESTIMATOR=estimator, FCL3_PARAMS=params)
    assert c.get("/model").json()["p"] == (None if estimator == "STL" else 2)
    r = post(c, "t", *regression_batch(np.random.default_rng(4)))
    assert r.status_code == 200, r.text
    code = r.json()["code"]
    m = c.get("/model").json()
    assert m["p"] == (None if code is None else len(code)) == (None if estimator == "STL" else 2)


def test_every_core_learner_can_be_configured_and_nothing_else():
    import core
    from service.models.learners import ModelConfigError, learner_class, make_learner

    for name, cls in core.LEARNERS.items():
        assert learner_class(name) is cls
        assert type(make_learner({"estimator": name, "kind": "regression", "params": {}})) is cls
    for name in ("LifelongLearner", "InputError", "load_state", "nope"):
        with pytest.raises(ModelConfigError, match="is not a learner in core"):
            learner_class(name)
