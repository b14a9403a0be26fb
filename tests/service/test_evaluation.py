"""Online evaluation (issue 13): prequential scores, evaluation sets, the accuracy matrix and
the transfer figures, each checked against an independent computation (``/predict`` answers
just before or after an update, scikit-learn's metrics, numpy, and an independent single-task
learner for the baseline)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, log_loss, mean_absolute_error, roc_auc_score

import core

from .conftest import ESTIMATOR, PARAMS, unique_name


def new_model(client, kind: str = "regression") -> str:
    name = unique_name("ev")
    r = client.post("/models", json={"name": name, "kind": kind, "estimator": ESTIMATOR, "params": PARAMS})
    assert r.status_code == 201, r.text
    return name


def stream(seed: int, n_tasks: int = 3, n_batches: int = 3, rows: int = 15, d: int = 4, kind: str = "regression"):
    """Interleaved batches of ``n_tasks`` related tasks (plus each task's held-out rows)."""
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=d)
    W = [centre + 0.5 * rng.normal(size=d) for _ in range(n_tasks)]

    def rows_of(t, n):
        X = rng.normal(size=(n, d))
        z = X @ W[t] + 0.5 * rng.normal(size=n)
        return X, (z > 0).astype(float) if kind == "classification" else z

    batches = [(f"t{t}", *rows_of(t, rows)) for _ in range(n_batches) for t in range(n_tasks)]
    held_out = {f"t{t}": rows_of(t, 25) for t in range(n_tasks)}
    return batches, held_out


def baseline_learner(kind: str) -> core.LifelongLearner:
    """The task's own single-task model, learned independently: STL predicts with ``w_t``."""
    return core.STL(kind=kind, task_models="paper")


def settle(client, name=None):
    """Wait until the accuracy-matrix rows (computed just after their update) are stored."""
    model = client.app.state.models.get(name) if name else client.app.state.model
    assert model.evaluation.matrix.wait_idle(60)


def predict(client, name, task, X):
    r = client.post(f"/models/{name}/predict", json={"task_id": task, "X": np.asarray(X).tolist()})
    assert r.status_code == 200, r.text
    return r.json()


def expected_scores(kind, y, pred_json, base, n_rows):
    """The Scores JSON from its definition, with scikit-learn's and numpy's metrics."""
    if kind == "regression":
        p = np.asarray(pred_json["predictions"])
        return {"n": n_rows, "rmse": float(np.sqrt(np.mean((y - p) ** 2))), "mae": mean_absolute_error(y, p),
                "baseline_rmse": float(np.sqrt(np.mean((y - base) ** 2))), "baseline_mae": mean_absolute_error(y, base)}
    prob, labels = np.asarray(pred_json["probabilities"]), np.asarray(pred_json["predictions"])
    out = {"n": n_rows, "log_loss": log_loss(y, prob, labels=[0, 1]), "accuracy": accuracy_score(y, labels),
           "baseline_log_loss": log_loss(y, base, labels=[0, 1]), "baseline_accuracy": accuracy_score(y, base >= 0.5)}
    if len(set(y.tolist())) == 2:
        out.update(auc=roc_auc_score(y, prob), baseline_auc=roc_auc_score(y, base))
    return out


def assert_scores(got, want):
    assert got is not None
    assert set(k for k, v in got.items() if v is not None) == set(want), (got, want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-7, abs=1e-10), (k, got, want)


def base_predict(stl, kind, task, X):
    return stl.predict(task, X) if kind == "regression" else stl.predict_proba(task, X)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_prequential_scores_equal_predict_just_before_the_update(backend_client, kind):
    c = backend_client
    name = new_model(c, kind)
    stl = baseline_learner(kind)
    batches, _ = stream(1, kind=kind)
    seen, total = set(), {}
    for task, X, y in batches:
        if task in seen:
            before = predict(c, name, task, X)
            base = base_predict(stl, kind, task, X)
            want = expected_scores(kind, y, before, base, len(y))
        r = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()})
        assert r.status_code == 200, r.text
        body = r.json()
        if task in seen:
            assert_scores(body["prequential"], want)
            assert before["version"] == body["version"] - 1
            total.setdefault(task, []).append((y, before, base))
        else:
            assert body["prequential"] is None  # a new task's first batch
        seen.add(task)
        stl.learn(task, X, y)
    # cumulative figures: every scored batch of the task, then of the model
    for task, parts in total.items():
        y = np.concatenate([p[0] for p in parts])
        pred = {k: np.concatenate([p[1][k] for p in parts]).tolist() for k in ("predictions", "probabilities")
                if parts[0][1].get(k) is not None}
        want = expected_scores(kind, y, pred, np.concatenate([p[2] for p in parts]), len(y))
        want.pop("auc", None), want.pop("baseline_auc", None)  # not additive: per batch only
        assert_scores(c.get(f"/models/{name}/tasks/{task}").json()["prequential"], want)
    model = c.get(f"/models/{name}").json()["prequential"]
    assert model["overall"]["n"] == sum(len(p[0]) for parts in total.values() for p in parts)
    assert model["recent"]["n"] == model["overall"]["n"] and model["window"] == 100
    # the default model's routes answer the same way
    X, y = batches[0][1], batches[0][2]
    c.post("/tasks/d0/data", json={"X": X.tolist(), "y": y.tolist()})
    assert c.post("/tasks/d0/data", json={"X": X.tolist(), "y": y.tolist()}).json()["prequential"]["n"] == len(y)


def test_idempotent_replay_returns_the_same_prequential(make_client):
    c = make_client()
    name = new_model(c)
    (t, X, y), *_ = stream(2)[0]
    c.post(f"/models/{name}/tasks/{t}/data", json={"X": X.tolist(), "y": y.tolist()})
    body = {"X": (X + 1).tolist(), "y": y.tolist()}
    first = c.post(f"/models/{name}/tasks/{t}/data", json=body, headers={"Idempotency-Key": "k1"})
    again = c.post(f"/models/{name}/tasks/{t}/data", json=body, headers={"Idempotency-Key": "k1"})
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert first.json()["prequential"] is not None and again.json() == first.json()


def test_evaluation_rows_are_never_learned_and_are_scored_after_every_update(backend_client):
    c = backend_client
    name = new_model(c)
    batches, held = stream(3)
    t0 = "t0"
    # rows for a task not learned yet: stored, no score
    r = c.post(f"/models/{name}/tasks/{t0}/evaluation", json={"X": held[t0][0].tolist(), "y": held[t0][1].tolist()})
    assert r.status_code == 200, r.text
    assert r.json() == {"task_id": t0, "n_rows": 25, "n_received": 25, "version": 0, "score": None}
    for task, X, y in batches[:4]:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    before = c.get(f"/models/{name}/tasks/t1").json()
    version = c.get(f"/models/{name}").json()["version"]
    r = c.post(f"/models/{name}/tasks/t1/evaluation", json={"X": held["t1"][0].tolist(), "y": held["t1"][1].tolist()})
    assert r.status_code == 200
    after = c.get(f"/models/{name}/tasks/t1").json()
    assert (after["n_samples"], after["n_batches"], after["version"]) == (before["n_samples"], before["n_batches"],
                                                                          before["version"])
    assert c.get(f"/models/{name}").json()["version"] == version == r.json()["version"]
    stl = baseline_learner("regression")
    for task, X, y in batches[:4]:
        stl.learn(task, X, y)
    want = expected_scores("regression", held["t1"][1], predict(c, name, "t1", held["t1"][0]),
                           stl.predict("t1", held["t1"][0]), 25)
    assert_scores(r.json()["score"], want)
    for task, X, y in batches[4:]:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
        stl.learn(task, X, y)
        ev = c.get(f"/models/{name}/evaluation").json()
        assert ev["version"] == c.get(f"/models/{name}").json()["version"]
        for t in ev["tasks"]:  # every set rescored (fewer than EVALUATION_RESCORE): what /predict says now
            assert t["scored_version"] == ev["version"]
            Xh, yh = held[t["task_id"]]
            want = expected_scores("regression", yh, predict(c, name, t["task_id"], Xh),
                                   stl.predict(t["task_id"], Xh), 25)
            assert_scores(t["score"], want)
            assert_scores(c.get(f"/models/{name}/tasks/{t['task_id']}").json()["evaluation"], want)


def test_bad_evaluation_rows_get_the_batch_errors_and_change_nothing(make_client):
    c = make_client(MAX_ROWS_PER_BATCH=50)
    name = new_model(c, "classification")
    X = np.random.default_rng(0).normal(size=(10, 3))
    y = (X[:, 0] > 0).astype(float)
    c.post(f"/models/{name}/tasks/a/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    url = f"/models/{name}/tasks/a/evaluation"
    cases = [
        ({"X": X[:, :2].tolist(), "y": y.tolist()}, 422, "features"),
        ({"X": X.tolist(), "y": y[:5].tolist()}, 422, "rows"),
        ({"X": X.tolist(), "y": (y * 2).tolist()}, 422, "labels"),
        ({"X": X.tolist(), "y": (2 * y - 1).tolist()}, 422, "convention"),  # the task's labels are 0/1
        ({"X": [], "y": []}, 422, "empty"),
        ({"X": X.tolist(), "y": y.tolist(), "extra": 1}, 422, "extra"),
        ({"X": [["1", 2, 3]], "y": [1]}, 422, ""),
        ({"X": np.zeros((51, 3)).tolist(), "y": [0.0] * 51}, 413, "MAX_ROWS_PER_BATCH"),
    ]
    for body, status, word in cases:
        r = c.post(url, json=body)
        assert r.status_code == status, (body, r.text)
        assert word in r.text
    r = c.post(url, content=b'{"X": [[NaN, 1, 2]], "y": [1]}', headers={"content-type": "application/json"})
    assert r.status_code == 422
    ev = c.get(f"/models/{name}/evaluation").json()
    assert ev["tasks"] == [] and c.get(f"/models/{name}").json()["version"] == 1
    assert c.post(f"/models/missing-{name}/tasks/a/evaluation", json={"X": X.tolist(), "y": y.tolist()}).status_code == 404


def test_evaluation_rows_are_bounded_by_a_reservoir(make_client):
    c = make_client(EVALUATION_MAX_ROWS=20)
    name = new_model(c)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(45, 3))
    y = X.sum(axis=1)
    c.post(f"/models/{name}/tasks/a/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    for i in range(3):
        r = c.post(f"/models/{name}/tasks/a/evaluation", json={"X": X[15 * i:15 * (i + 1)].tolist(),
                                                                "y": y[15 * i:15 * (i + 1)].tolist()})
        assert r.status_code == 200
    assert (r.json()["n_rows"], r.json()["n_received"], r.json()["score"]["n"]) == (20, 45, 20)
    from service.evaluation.scores import reservoir

    kept, ky = None, None
    for i in range(3):  # the same draws from the same posts; every kept row is one that was sent
        kept, ky = reservoir(kept, ky, 15 * i, X[15 * i:15 * (i + 1)], y[15 * i:15 * (i + 1)], 20, "a")
    assert kept.shape == (20, 3) and all(any(np.array_equal(k, x) for x in X) for k in kept)


def test_reservoir_is_uniform():
    from service.evaluation.scores import reservoir

    hits = np.zeros(100)
    for seed in range(400):
        X = np.arange(100, dtype=float).reshape(-1, 1)
        kept, _ = reservoir(None, None, 0, X[:10], X[:10, 0], 10, f"t{seed}")
        for start in range(10, 100, 30):  # posts of 30 rows
            kept, _ = reservoir(kept, kept[:, 0], start, X[start:start + 30], X[start:start + 30, 0], 10, f"t{seed}")
        hits[kept[:, 0].astype(int)] += 1
    # every row kept with probability 10/100: 40 expected of 400 runs; a loose binomial bound
    assert hits.sum() == 4000 and hits.min() > 15 and hits.max() < 70


def reference_transfer(R: np.ndarray, B: np.ndarray, first: list[int], higher: bool) -> dict:
    """BWT (Lopez-Paz & Ranzato 2017), forgetting (Chaudhry et al. 2018), FWT against the task's
    own model, written out from their definitions for a matrix with NaN where undefined."""
    s = 1.0 if higher else -1.0
    T = R.shape[0]
    bwt = [s * (R[T - 1, j] - R[i, j]) for j, i in enumerate(first) if i < T - 1]
    fgt = [np.max(s * R[:T - 1, j][~np.isnan(R[:T - 1, j])]) - s * R[T - 1, j]
           for j in range(R.shape[1]) if (~np.isnan(R[:T - 1, j])).any()]
    fwt = [s * (R[i, j] - B[i, j]) for j, i in enumerate(first) if i >= 1]
    return {"backward_transfer": np.mean(bwt), "forgetting": np.mean(fgt), "forward_transfer": np.mean(fwt)}


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_accuracy_matrix_and_transfer_follow_their_definitions(make_client, kind):
    c = make_client(EVALUATION_RESCORE=0)
    name = new_model(c, kind)
    batches, held = stream(7, n_tasks=4, n_batches=2, kind=kind)
    stl = baseline_learner(kind)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()}).raise_for_status()
    metric = "rmse" if kind == "regression" else "accuracy"
    R, B, versions, learned = [], [], [], []
    for task, X, y in batches:
        body = c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).json()
        stl.learn(task, X, y)
        if body["new_task"]:  # a matrix row: every task's score right after it, from /predict now
            learned.append(task)
            versions.append(body["version"])
            row, brow = [], []
            for t in held:
                if t not in learned:
                    row.append(np.nan), brow.append(np.nan)
                    continue
                Xh, yh = held[t]
                s = expected_scores(kind, yh, predict(c, name, t, Xh), base_predict(stl, kind, t, Xh), 25)
                row.append(s[metric]), brow.append(s["baseline_" + metric])
            R.append(row), B.append(brow)
    R, B = np.array(R), np.array(B)
    settle(c, name)
    ev = c.get(f"/models/{name}/evaluation").json()
    m = ev["accuracy_matrix"]
    assert (m["metric"], m["higher_is_better"], m["tasks"]) == (metric, kind == "classification", list(held))
    assert [r["version"] for r in m["rows"]] == versions and [r["task_id"] for r in m["rows"]] == learned
    got = np.array([[np.nan if v is None else v for v in r["scores"]] for r in m["rows"]])
    gotb = np.array([[np.nan if v is None else v for v in r["baseline"]] for r in m["rows"]])
    np.testing.assert_allclose(got, R, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(gotb, B, rtol=1e-7, atol=1e-10)
    want = reference_transfer(R, B, [learned.index(t) for t in held], kind == "classification")
    for k, v in want.items():
        assert ev[k] == pytest.approx(v, rel=1e-9, abs=1e-12), k
    # series over versions: one point per update, the last one the model's overall figure
    series = ev["prequential"]
    assert [p["version"] for p in series] == list(range(1, len(batches) + 1))
    assert series[-1]["overall"] == c.get(f"/models/{name}").json()["prequential"]["overall"]
    # the figures the next update's evaluation event carries are the same
    task, X, y = batches[0]
    c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    r = c.get(f"/models/{name}/events", params={"max_seconds": 0.2}, headers={"Last-Event-ID": str(len(batches))})
    evals = [json.loads(b.split("data: ", 1)[1]) for b in r.text.split("\n\n") if b.startswith("event: evaluation")]
    assert len(evals) == 1
    for k, v in want.items():
        assert evals[-1][k] == pytest.approx(v, rel=1e-9, abs=1e-12), k


def test_transfer_of_a_hand_made_matrix():
    from service.evaluation.scores import MatrixRow, transfer

    tasks = ["a", "b", "c"]
    rows = [MatrixRow("a", {"a": 0.6}, {"a": 0.5}),
            MatrixRow("b", {"a": 0.8, "b": 0.7}, {"a": 0.5, "b": 0.6}),
            MatrixRow("c", {"a": 0.7, "b": 0.75, "c": 0.9}, {"a": 0.5, "b": 0.6, "c": 0.7})]
    # BWT: a 0.7-0.6, b 0.75-0.7 -> 0.075; forgetting: a max(0.6,0.8)-0.7 = 0.1, b 0.7-0.75 = -0.05 -> 0.025
    # FWT: b 0.7-0.6, c 0.9-0.7 -> 0.15
    want = {"backward_transfer": 0.075, "forgetting": 0.025, "forward_transfer": 0.15}
    got = transfer(tasks, rows, True).as_dict()
    for k, v in want.items():
        assert got[k] == pytest.approx(v)
    # lower is better (rmse): the signs flip so that positive stays good
    low = transfer(tasks, rows, False).as_dict()
    assert low["backward_transfer"] == pytest.approx(-0.075) and low["forward_transfer"] == pytest.approx(-0.15)
    assert low["forgetting"] == pytest.approx(np.mean([0.7 - 0.6, 0.75 - 0.7]))


def test_rescoring_is_bounded_and_oldest_first(make_client):
    c = make_client(EVALUATION_RESCORE=1)
    name = new_model(c)
    batches, held = stream(9, n_tasks=4, n_batches=3)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()})
    for task, X, y in batches[:4]:  # new tasks: every learned set rescored (for the matrix, just after)
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    settle(c, name)
    assert {t["scored_version"] for t in c.get(f"/models/{name}/evaluation").json()["tasks"]} == {4}
    c.post("/models/%s/tasks/t2/data" % name, json={"X": batches[0][1].tolist(), "y": batches[0][2].tolist()})
    scored = {t["task_id"]: t["scored_version"] for t in c.get(f"/models/{name}/evaluation").json()["tasks"]}
    assert scored == {"t0": 5, "t1": 4, "t2": 5, "t3": 4}  # its own task, and one other (oldest, then by id)


def test_evaluation_survives_a_restart_and_goes_with_the_model(make_client, tmp_path):
    name = unique_name("default")
    c = make_client(MODEL_NAME=name)
    batches, held = stream(11)
    c.post("/tasks/t0/evaluation", json={"X": held["t0"][0].tolist(), "y": held["t0"][1].tolist()})
    for task, X, y in batches:
        c.post(f"/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    settle(c)
    ev, model, task = c.get("/evaluation").json(), c.get("/model").json(), c.get("/tasks/t0").json()
    c.__exit__(None, None, None)
    c2 = make_client(MODEL_NAME=name)  # same SQLite file (tmp_path), a new process state
    assert c2.get("/evaluation").json() == ev
    assert c2.get("/model").json()["prequential"] == model["prequential"]
    assert c2.get("/tasks/t0").json()["prequential"] == task["prequential"]
    # a named model's evaluation is deleted with it
    other = new_model(c2)
    c2.post(f"/models/{other}/tasks/a/evaluation", json={"X": [[1.0, 2.0]], "y": [1.0]})
    assert c2.delete(f"/models/{other}").status_code == 204
    from sqlalchemy import create_engine, text

    engine = create_engine(f"sqlite:///{tmp_path / 'fcl3.db'}")
    with engine.connect() as conn:
        for table in ("evaluation_sets", "evaluation_state", "evaluation_log", "prequential_tasks"):
            assert conn.execute(text(f"SELECT count(*) FROM {table} WHERE model_name = :m"), {"m": other}).scalar() == 0
    engine.dispose()


def test_prometheus_gauges_and_engine_time(make_client):
    c = make_client()
    name = new_model(c)
    batches, held = stream(13)
    c.post(f"/models/{name}/tasks/t0/evaluation", json={"X": held["t0"][0].tolist(), "y": held["t0"][1].tolist()})
    c.post(f"/models/{name}/tasks/t1/evaluation", json={"X": held["t1"][0].tolist(), "y": held["t1"][1].tolist()})
    for task, X, y in batches:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    settle(c, name)
    text_ = c.get("/metrics").text
    overall = c.get(f"/models/{name}").json()["prequential"]["overall"]
    bwt = c.get(f"/models/{name}/evaluation").json()["backward_transfer"]

    def value(line_start):
        line = next(line for line in text_.splitlines() if line.startswith(line_start))
        return float(line.rsplit(" ", 1)[1])

    assert value(f'fcl3_prequential_error{{metric="rmse",model="{name}"}}') == pytest.approx(overall["rmse"])
    assert value(f'fcl3_prequential_baseline_error{{metric="rmse",model="{name}"}}') == pytest.approx(
        overall["baseline_rmse"])
    assert value(f'fcl3_backward_transfer{{model="{name}"}}') == pytest.approx(bwt)
    assert value("fcl3_update_engine_seconds_count") >= len(batches)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_migration_0004_upgrade_and_downgrade(backend, tmp_path, request):
    from .conftest import create_pg_database, drop_pg_database, pg_url
    from .test_persistence import alembic, tables

    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        db = create_pg_database("fcl3_mig4")
        url = pg_url(db)
    else:
        url = f"sqlite:///{tmp_path / 'mig4.db'}"
    ours = {"evaluation_sets", "evaluation_state", "evaluation_log", "prequential_tasks"}
    try:
        assert alembic("upgrade", "0003", url=url).returncode == 0
        assert not ours & tables(url)
        r = alembic("upgrade", "head", url=url)
        assert r.returncode == 0, r.stderr
        assert ours <= tables(url)
        r = alembic("downgrade", "0003", url=url)
        assert r.returncode == 0, r.stderr
        assert not ours & tables(url) and {"models", "tasks", "batches", "idempotency_keys"} <= tables(url)
        assert alembic("upgrade", "head", url=url).returncode == 0
    finally:
        if backend == "postgres":
            drop_pg_database(db)


def test_without_the_matrix_a_new_task_rescores_like_any_update(make_client):
    c = make_client(EVALUATION_RESCORE=0, EVALUATION_MATRIX=False)
    name = new_model(c)
    batches, held = stream(17, n_tasks=3, n_batches=1)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()})
    for task, X, y in batches:
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    ev = c.get(f"/models/{name}/evaluation").json()
    assert ev["accuracy_matrix"]["rows"] == [] and ev["backward_transfer"] is None
    assert {t["task_id"]: t["scored_version"] for t in ev["tasks"]} == {"t0": 1, "t1": 2, "t2": 3}  # its own only


def test_keys_evaluation_rows_need_the_write_key_the_reports_a_read_key(make_client):
    c = make_client(API_WRITE_KEYS="wkey", API_READ_KEYS="rkey")
    w, r = {"Authorization": "Bearer wkey"}, {"Authorization": "Bearer rkey"}
    body = {"X": [[1.0, 2.0]], "y": [1.0]}
    assert c.post("/tasks/a/evaluation", json=body).status_code == 401
    assert c.post("/tasks/a/evaluation", json=body, headers=r).status_code == 403
    assert c.post("/tasks/a/evaluation", json=body, headers=w).status_code == 200
    for path in ("/evaluation", "/events?max_seconds=0.1"):
        assert c.get(path).status_code == 401
        assert c.get(path, headers=r).status_code == 200


def _client(request, make_client, backend, **settings):
    return make_client(backend, _request=request, **settings) if backend == "postgres" else make_client(**settings)


def _sums(kind, y, pred_json):
    """The additive prequential sums of one batch, from a /predict answer (no baseline)."""
    if kind == "regression":
        e = y - np.asarray(pred_json["predictions"])
        return {"n": len(y), "se": float(e @ e), "ae": float(np.abs(e).sum())}
    p = np.clip(np.asarray(pred_json["probabilities"]), np.finfo(float).eps, 1 - np.finfo(float).eps)
    return {"n": len(y), "ll": float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).sum()),
            "hit": int((np.asarray(pred_json["predictions"]) == y).sum())}


def _from_sums(kind, parts):
    n = sum(p["n"] for p in parts)
    if kind == "regression":
        return {"n": n, "rmse": float(np.sqrt(sum(p["se"] for p in parts) / n)), "mae": sum(p["ae"] for p in parts) / n}
    return {"n": n, "log_loss": sum(p["ll"] for p in parts) / n, "accuracy": sum(p["hit"] for p in parts) / n}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_recent_prequential_covers_exactly_the_window_of_latest_scored_batches(make_client, request, backend, kind):
    """PREQUENTIAL_WINDOW=3: "recent" is the last 3 scored batches (a new task's first batch is
    not scored and does not count), "overall" every scored batch; both from /predict answers."""
    c = _client(request, make_client, backend, PREQUENTIAL_WINDOW=3)
    name = new_model(c, kind)
    batches, _ = stream(21, n_tasks=2, n_batches=4, kind=kind)
    # a new task's first batch in the middle: the window must skip it, not count it
    rng = np.random.default_rng(4)
    Xn = rng.normal(size=(15, 4))
    yn = (Xn[:, 0] > 0).astype(float) if kind == "classification" else Xn @ np.ones(4)
    batches.insert(6, ("late", Xn, yn))
    scored, seen = [], set()
    for task, X, y in batches:
        if task in seen:
            scored.append(_sums(kind, y, predict(c, name, task, X)))
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
        seen.add(task)
        got = c.get(f"/models/{name}").json()["prequential"]
        assert got["window"] == 3
        if not scored:
            assert got["overall"] is None and got["recent"] is None
            continue
        for key, parts in (("overall", scored), ("recent", scored[-3:])):
            want = _from_sums(kind, parts)
            assert {k: got[key][k] for k in want} == pytest.approx(want, rel=1e-9, abs=1e-12), (key, got)
    assert len(scored) == len(batches) - 3  # three tasks' first batches were not scored
    got = c.get(f"/models/{name}").json()["prequential"]
    assert got["recent"]["n"] == sum(p["n"] for p in scored[-3:]) < got["overall"]["n"]
    metric = "rmse" if kind == "regression" else "log_loss"
    assert got["recent"][metric] != pytest.approx(got["overall"][metric], rel=1e-6)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_matrix_row_lost_with_its_process_is_computed_by_the_next_update(make_client, request, backend, monkeypatch):
    """A new task's accuracy-matrix row is computed after its commit, in the background: the
    process dying in between (here: the job dropped, then a new process on the same database)
    leaves the row due, and the model's next update computes it with the learner of that
    version, equal to a direct computation from /predict answers at that version."""
    from service.evaluation.matrix import AccuracyMatrix

    settings = dict(EVALUATION_RESCORE=0, MODEL_NAME=unique_name("lost"))
    c = _client(request, make_client, backend, **settings)
    name = new_model(c)
    batches, held = stream(23, n_tasks=3, n_batches=2)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()}).raise_for_status()
    stl = baseline_learner("regression")

    def learn(client, task, X, y):
        body = client.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()})
        assert body.status_code == 200, body.text
        stl.learn(task, X, y)
        return body.json()

    def row_now(client, learned):
        out = []
        for t in held:
            if t in learned:
                Xh, yh = held[t]
                s = expected_scores("regression", yh, predict(client, name, t, Xh), stl.predict(t, Xh), 25)
                out.append((s["rmse"], s["baseline_rmse"]))
            else:
                out.append((None, None))
        return out

    def matrix(rows_json, key):
        return np.array([[np.nan if v is None else v for v in r[key]] for r in rows_json])

    (t0, X0, y0), (t1, X1, y1), (t2, X2, y2), (t3, X3, y3) = batches[:4]  # t0, t1, t2 new; then t0 again
    learn(c, t0, X0, y0)
    settle(c, name)
    rows = [row_now(c, {t0})]
    with monkeypatch.context() as m:  # the process dies between the commit and the row
        m.setattr(AccuracyMatrix, "submit", lambda self, job, done=None, wait=60.0: None)
        assert learn(c, t1, X1, y1)["new_task"]
    assert [r["version"] for r in c.get(f"/models/{name}/evaluation").json()["accuracy_matrix"]["rows"]] == [1]
    c.__exit__(None, None, None)

    c2 = _client(request, make_client, backend, **settings)  # a new process, the same database
    assert [r["version"] for r in c2.get(f"/models/{name}/evaluation").json()["accuracy_matrix"]["rows"]] == [1]
    rows.append(row_now(c2, {t0, t1}))  # /predict of version 2, the lost row's version
    assert predict(c2, name, t0, held[t0][0])["version"] == 2
    learn(c2, t0, X3, y3)  # the next update (a known task) computes the lost row
    settle(c2, name)
    m = c2.get(f"/models/{name}/evaluation").json()["accuracy_matrix"]
    assert [(r["version"], r["task_id"]) for r in m["rows"]] == [(1, t0), (2, t1)]
    R, B = np.array(rows, dtype=float)[..., 0], np.array(rows, dtype=float)[..., 1]
    np.testing.assert_allclose(matrix(m["rows"], "scores"), R, rtol=1e-7)
    np.testing.assert_allclose(matrix(m["rows"], "baseline"), B, rtol=1e-7)
    # then a new task as usual: three rows, and the transfer figures of all three
    assert learn(c2, t2, X2, y2)["new_task"]
    rows.append(row_now(c2, {t0, t1, t2}))
    settle(c2, name)
    ev = c2.get(f"/models/{name}/evaluation").json()
    assert [r["version"] for r in ev["accuracy_matrix"]["rows"]] == [1, 2, 4]
    R, B = np.array(rows, dtype=float)[..., 0], np.array(rows, dtype=float)[..., 1]
    np.testing.assert_allclose(matrix(ev["accuracy_matrix"]["rows"], "scores"), R, rtol=1e-7)
    np.testing.assert_allclose(matrix(ev["accuracy_matrix"]["rows"], "baseline"), B, rtol=1e-7)
    want = reference_transfer(R, B, [0, 1, 2], False)
    for k, v in want.items():
        assert ev[k] == pytest.approx(v, rel=1e-7), k
    # nothing is left due
    from service.evaluation import store

    with c2.app.state.engine.connect() as conn:
        assert store.due(conn, name) == []


def test_background_rows_give_way_to_updates_for_a_bounded_time():
    """Foreground.give_way waits while an update runs, returns as soon as none does, and never
    waits past its bound (a steady stream of updates cannot stop the rows)."""
    import threading

    from service.evaluation.worker import Foreground

    gate = Foreground()
    gate.give_way(most=30)  # nothing running: no wait (a hang here fails by the suite's timeout)
    returned = threading.Event()
    waiter = threading.Thread(target=lambda: (gate.give_way(most=30), returned.set()))
    with gate:
        waiter.start()
        assert not returned.wait(0.2)  # waits while the update runs
    assert returned.wait(5)  # and goes on when it ends
    waiter.join(5)
    with gate:
        bounded = threading.Thread(target=gate.give_way, kwargs={"most": 0.05})
        bounded.start()
        bounded.join(5)
        assert not bounded.is_alive()  # the bound, with the update still running


def test_updates_are_foreground_and_matrix_rows_give_way_per_set(make_client, monkeypatch):
    c = make_client()
    name = new_model(c)
    batches, held = stream(4, n_tasks=3, n_batches=1)
    for t, (Xh, yh) in held.items():
        c.post(f"/models/{name}/tasks/{t}/evaluation", json={"X": Xh.tolist(), "y": yh.tolist()}).raise_for_status()
    model = c.app.state.models.get(name)
    foreground = model.shared.foreground
    running, gave_way = [], []
    commit = model.writer.commit
    monkeypatch.setattr(model.writer, "commit", lambda *a, **k: (running.append(foreground.running),
                                                                 commit(*a, **k))[1])
    monkeypatch.setattr(foreground, "give_way", lambda most=0.02: gave_way.append(most))
    sets_per_row = []
    row = model.evaluation.matrix.store_row
    monkeypatch.setattr(model.evaluation.matrix, "store_row",
                        lambda job: (sets_per_row.append(len(job.sets)), row(job))[1])
    for task, X, y in batches:  # three new tasks: matrix rows of 1, 2 and 3 learned sets
        c.post(f"/models/{name}/tasks/{task}/data", json={"X": X.tolist(), "y": y.tolist()}).raise_for_status()
    settle(c, name)
    assert running == [1, 1, 1]  # every commit runs as the process's foreground
    assert foreground.running == 0
    assert len(sets_per_row) >= 2 and min(sets_per_row) > 0
    assert len(gave_way) == sum(sets_per_row)  # each row gives way before each of its sets
