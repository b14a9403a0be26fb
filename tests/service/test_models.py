"""Many named models per server: create, list, describe, learn/predict under /models/{name},
isolation, export/import (.npz), fork at a version, delete; on SQLite and on PostgreSQL + Redis."""
from __future__ import annotations

import io
import json
import pickle
import threading
import time
import zipfile

import numpy as np
import pytest

import core
from service.models.state_files import from_npz, read_npz, to_npz

from .conftest import ESTIMATOR, PARAMS, regression_batch, unique_name

PROBE = np.random.default_rng(123).normal(size=(5, 4)).tolist()


def new_model(c, name=None, kind="regression", **extra):
    name = name or unique_name("nm")
    body = {"name": name, "kind": kind, "estimator": ESTIMATOR, "params": dict(PARAMS), **extra}
    r = c.post("/models", json=body)
    assert r.status_code == 201, r.text
    return name


def learn(c, model, task, X, y):
    r = c.post(f"/models/{model}/tasks/{task}/data", json={"X": X, "y": y})
    assert r.status_code == 200, r.text
    return r.json()


def predict(c, model, task, X=PROBE):
    r = c.post(f"/models/{model}/predict", json={"task_id": task, "X": X})
    assert r.status_code == 200, r.text
    return r.json()


def total(c) -> int:
    return c.get("/models", params={"limit": 1}).json()["total"]


# ----------------------------------------------------------------------------- lifecycle
def test_lifecycle_end_to_end(backend_client):
    c = backend_client
    name = unique_name("life")
    before = total(c)
    r = c.post("/models", json={"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS, "d": 4})
    assert r.status_code == 201, r.text
    m = r.json()
    assert (m["name"], m["kind"], m["estimator"], m["version"], m["n_tasks"], m["n_batches"], m["d"]) == \
        (name, "regression", ESTIMATOR, 0, 0, 0, 4)
    assert m["created_with"] == {"estimator": ESTIMATOR, "kind": "regression", "params": PARAMS, "d": 4}
    assert m["origin"] is None
    dup = c.post("/models", json={"name": name, "kind": "classification"})
    assert dup.status_code == 409 and name in dup.json()["detail"]

    # refused before anything is stored
    for body, words in [
        ({"name": "bad name", "kind": "regression"}, "name"),
        ({"name": "x" * 101, "kind": "regression"}, "name"),
        ({"name": "", "kind": "regression"}, "name"),
        ({"name": "é", "kind": "regression"}, "name"),
        ({"name": unique_name(), "kind": "ranking"}, "kind"),
        ({"name": unique_name(), "kind": "regression", "estimator": "NoSuchLearner"}, "NoSuchLearner"),
        ({"name": unique_name(), "kind": "regression", "params": {"no_such_param": 1}}, "no_such_param"),
        ({"name": unique_name(), "kind": "regression", "params": {"mu": -1.0}}, "mu"),
        ({"name": unique_name(), "kind": "regression", "d": 0}, "d"),
        ({"name": unique_name(), "kind": "regression", "unknown": 1}, "unknown"),
    ]:
        r = c.post("/models", json=body)
        assert r.status_code == 422, (body, r.text)
        assert words in json.dumps(r.json()["detail"]), (body, r.json())
    assert total(c) == before + 1

    # the routes of today, under the model
    rng = np.random.default_rng(1)
    versions = [learn(c, name, t, *regression_batch(rng, task=i))["version"] for i, t in enumerate(["a", "b", "a"])]
    assert versions == [1, 2, 3]
    g = c.get(f"/models/{name}/predict", params={"task_id": "a", "x": [",".join(map(str, r)) for r in PROBE]})
    assert g.status_code == 200 and g.json() == predict(c, name, "a")
    tasks = c.get(f"/models/{name}/tasks").json()
    assert tasks["model"] == name and tasks["version"] == 3 and [t["task_id"] for t in tasks["tasks"]] == ["a", "b"]
    assert c.get(f"/models/{name}/tasks/a").json()["n_batches"] == 2
    m = c.get(f"/models/{name}").json()
    assert (m["version"], m["n_tasks"], m["n_batches"], m["d"]) == (3, 2, 3, 4)
    assert m["hyperparameters"]["kind"] == "regression" and m["created_at"] <= m["updated_at"]
    if ESTIMATOR == "FCL3":
        assert m["p"] == 3 and m["n_representatives"] == len(m["representatives"]) >= 1

    # unknown model / unknown task: 404 saying which
    r = c.post(f"/models/{name}/predict", json={"task_id": "zz", "X": PROBE})
    assert r.status_code == 404 and "task 'zz'" in r.json()["detail"] and name in r.json()["detail"]
    assert c.get(f"/models/{name}/tasks/zz").status_code == 404
    ghost = unique_name("ghost")
    for method, path, kw in [("post", f"/models/{ghost}/predict", {"json": {"task_id": "a", "X": PROBE}}),
                             ("post", f"/models/{ghost}/tasks/a/data", {"json": {"X": [[1.0] * 4], "y": [1.0]}}),
                             ("get", f"/models/{ghost}/tasks", {}), ("get", f"/models/{ghost}/tasks/a", {}),
                             ("get", f"/models/{ghost}", {}), ("get", f"/models/{ghost}/state", {}),
                             ("delete", f"/models/{ghost}", {})]:
        r = getattr(c, method)(path, **kw)
        assert r.status_code == 404, (path, r.text)
        assert f"unknown model '{ghost}'" in r.json()["detail"]
    assert c.get(f"/models/{ghost}").status_code == 404  # reads never create
    assert c.get("/models/bad%20name").status_code == 422

    # list, paginated
    other = new_model(c)
    names = []
    offset = 0
    while True:
        page = c.get("/models", params={"offset": offset, "limit": 2}).json()
        assert page["count"] == len(page["models"]) <= 2
        names += [x["name"] for x in page["models"]]
        if page["count"] < 2:
            break
        offset += 2
    assert names == sorted(names) and {name, other} <= set(names) and len(names) == page["total"]
    listed = next(x for x in c.get("/models", params={"limit": 1000}).json()["models"] if x["name"] == name)
    assert listed == {**m, "prequential": None}  # a listing leaves the prequential figures out (one query per page)

    # delete: 204, then 404 everywhere; the other model is untouched
    assert c.post(f"/models/{name}/tasks/a/evaluation", json={"X": PROBE, "y": [0.0] * len(PROBE)}).status_code == 200
    r = c.delete(f"/models/{name}")
    assert r.status_code == 204 and r.content == b""
    for path in (f"/models/{name}", f"/models/{name}/tasks", f"/models/{name}/tasks/a", f"/models/{name}/state"):
        assert c.get(path).status_code == 404, path
    r = c.post(f"/models/{name}/predict", json={"task_id": "a", "X": PROBE})
    assert r.status_code == 404 and f"unknown model '{name}'" in r.json()["detail"]
    assert c.post(f"/models/{name}/tasks/a/data", json={"X": [[1.0] * 4], "y": [1.0]}).status_code == 404
    assert c.delete(f"/models/{name}").status_code == 404
    assert c.get(f"/models/{other}").status_code == 200
    # its rows are gone
    from sqlalchemy import func, select

    from service.store.tables import Base

    with c.app.state.engine.connect() as conn:  # every table keyed by the model (the cascades)
        for table in Base.metadata.sorted_tables:
            if "model_name" not in table.c:
                continue
            n = conn.execute(select(func.count()).select_from(table).where(table.c.model_name == name)).scalar()
            assert n == 0, table.name
    # the name can be used again: a new model, version 0
    new_model(c, name)
    assert c.get(f"/models/{name}").json()["version"] == 0
    assert c.post(f"/models/{name}/predict", json={"task_id": "a", "X": PROBE}).status_code == 404


def test_default_model_routes_are_the_model_named_model_name(backend_client):
    c = backend_client
    default = c.app.state.settings.MODEL_NAME
    rng = np.random.default_rng(2)
    X, y = regression_batch(rng)
    assert c.post("/tasks/t/data", json={"X": X, "y": y}).json()["version"] == 1
    X, y = regression_batch(rng)
    assert learn(c, default, "t", X, y)["version"] == 2
    assert c.post("/predict", json={"task_id": "t", "X": PROBE}).json() == predict(c, default, "t")
    assert c.get("/tasks").json() == c.get(f"/models/{default}/tasks").json()
    assert c.get("/model").json() == c.get(f"/models/{default}").json()
    assert default in [m["name"] for m in c.get("/models", params={"limit": 1000}).json()["models"]]
    assert c.post("/models", json={"name": default, "kind": "regression"}).status_code == 409


def test_isolation_same_task_id_and_separate_versions(backend_client):
    c = backend_client
    a, b = new_model(c), new_model(c)
    rng = np.random.default_rng(3)
    Xa, ya = regression_batch(rng, task=0)
    Xb, yb = regression_batch(rng, task=2)
    learn(c, a, "shared", Xa, ya)
    assert c.get(f"/models/{b}").json()["version"] == 0  # a's update does not move b
    assert c.post(f"/models/{b}/predict", json={"task_id": "shared", "X": PROBE}).status_code == 404
    learn(c, b, "shared", Xb, yb)
    pa, pb = predict(c, a, "shared"), predict(c, b, "shared")
    assert pa["version"] == pb["version"] == 1 and pa["predictions"] != pb["predictions"]
    for _ in range(3):
        learn(c, a, "shared", *regression_batch(rng, task=0))
    assert c.get(f"/models/{a}").json()["version"] == 4 and c.get(f"/models/{b}").json()["version"] == 1
    assert predict(c, b, "shared") == pb  # b answers exactly as before
    assert c.get(f"/models/{b}/tasks/shared").json()["n_samples"] == 12
    assert c.get(f"/models/{a}/tasks/shared").json()["n_samples"] == 48
    assert c.get("/model").json()["version"] == 0  # nor the default model


def test_updates_of_two_models_do_not_share_a_lock(backend_client):
    """While one model's update lock is held, another model learns at once; the held one gets 503."""
    c = backend_client
    a, b = new_model(c), new_model(c)
    held, release = threading.Event(), threading.Event()

    def hold():
        with c.app.state.locks.hold(a, ttl=30, wait=5):
            held.set()
            release.wait(20)

    th = threading.Thread(target=hold)
    th.start()
    assert held.wait(10)
    try:
        t0 = time.perf_counter()
        assert learn(c, b, "t", *regression_batch(np.random.default_rng(4)))["version"] == 1
        assert time.perf_counter() - t0 < c.app.state.settings.LOCK_WAIT
        r = c.post(f"/models/{a}/tasks/t/data", json=dict(zip("Xy", regression_batch(np.random.default_rng(4)))))
        assert r.status_code == 503 and "Retry-After" in r.headers
    finally:
        release.set()
        th.join()
    assert c.get(f"/models/{a}").json()["version"] == 0


def test_model_cache_is_bounded_least_recently_used_first(make_client):
    c = make_client(MODEL_CACHE_SIZE=2)
    registry = c.app.state.models
    rng = np.random.default_rng(5)
    names = [new_model(c) for _ in range(4)]
    answers = {}
    for n in names:
        learn(c, n, "t", *regression_batch(rng))
        answers[n] = predict(c, n, "t")
        assert len(list(registry._lru)) <= 2
    assert list(registry._lru) == names[-2:]
    predict(c, names[2], "t")
    assert list(registry._lru) == [names[3], names[2]]
    for n in names:  # evicted models are reloaded from the database, exactly
        assert predict(c, n, "t") == answers[n]
    assert len(list(registry._lru)) == 2
    assert registry.default.reader.cached is not None  # the default model is always held


def test_unknown_model_names_never_push_a_stored_model_out_of_the_cache(make_client):
    c = make_client(MODEL_CACHE_SIZE=2)
    registry = c.app.state.models
    rng = np.random.default_rng(15)
    names = [new_model(c) for _ in range(2)]
    for n in names:
        learn(c, n, "t", *regression_batch(rng))
        predict(c, n, "t")
    assert list(registry._lru) == names
    for i in range(5):  # reads of names that are not stored: 404, and not cached
        r = c.get(f"/models/nope-{i}/predict", params={"task_id": "t", "x": "1,2,3,4"})
        assert r.status_code == 404 and "unknown model" in r.json()["detail"]
        assert c.get(f"/models/nope-{i}/tasks").status_code == 404
    assert list(registry._lru) == names
    created = unique_name("later")  # a model created after a miss is cached from then on
    assert c.get(f"/models/{created}/tasks").status_code == 404
    new_model(c, created)
    learn(c, created, "t", *regression_batch(rng))
    predict(c, created, "t")
    assert list(registry._lru)[-1] == created


# ----------------------------------------------------------------------------- export / import
def _learn_some(c, name, seed=6, tasks=("a", "b", "a", "c", "tâche ☃ x:y;z")):
    rng = np.random.default_rng(seed)
    for i, t in enumerate(tasks):
        learn(c, name, t, *regression_batch(rng, n=8 + i, task=i))
    return list(dict.fromkeys(tasks))


def test_export_import_gives_identical_predictions(backend_client):
    c = backend_client
    src = new_model(c)
    tasks = _learn_some(c, src)
    r = c.get(f"/models/{src}/state")
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-model-version"] == "5" and f'{src}.npz' in r.headers["content-disposition"]
    data = r.content
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:  # plain np.savez, no pickle
        assert "__meta__" in npz.files and all(f.startswith(("a/", "t/", "__meta__")) for f in npz.files)
    dst = unique_name("imp")
    r = c.post(f"/models/{dst}/state", content=data, headers={"content-type": "application/octet-stream"})
    assert r.status_code == 201, r.text
    m, orig = r.json(), c.get(f"/models/{src}").json()
    for k in ("estimator", "kind", "d", "p", "hyperparameters", "created_with", "version", "n_tasks",
              "n_representatives", "representatives"):
        assert m[k] == orig[k], k
    # batches learned, as the original counts them (the import stores none to replay)
    assert m["origin"] == {"import": {"model": src, "version": 5}} and m["n_batches"] == orig["n_batches"] == 5
    at_export = {t: predict(c, src, t) for t in tasks}
    for t in tasks:
        assert predict(c, dst, t) == at_export[t]  # exactly, and the same version
    ta, tb = c.get(f"/models/{src}/tasks").json()["tasks"], c.get(f"/models/{dst}/tasks").json()["tasks"]
    assert [(t["task_id"], t["n_samples"], t["n_batches"], t["last_update"]) for t in ta] == \
        [(t["task_id"], t["n_samples"], t["n_batches"], t["last_update"]) for t in tb]
    # the imported model goes on learning like the original
    rng = np.random.default_rng(7)
    X, y = regression_batch(rng)
    ra, rb = learn(c, src, "a", X, y), learn(c, dst, "a", X, y)
    assert ra == rb and predict(c, src, "a") == predict(c, dst, "a")
    # the same name again: 409, nothing changed
    r = c.post(f"/models/{dst}/state", content=data)
    assert r.status_code == 409 and c.get(f"/models/{dst}").json()["version"] == 6

    # the engine reads the file on its own, and a model learned offline is served
    learner = core.load_state(from_npz(data))
    for t in tasks:
        assert learner.predict(t, np.array(PROBE)).tolist() == at_export[t]["predictions"]
    offline = core.learner_class(ESTIMATOR)(kind="regression", **PARAMS)
    rng = np.random.default_rng(8)
    for i in range(4):
        offline.learn(f"o{i % 2}", *map(np.asarray, regression_batch(rng, task=i)))
    served = unique_name("offline")
    r = c.post(f"/models/{served}/state", content=to_npz(offline.get_state()))
    assert r.status_code == 201, r.text
    assert r.json()["version"] == 1 and r.json()["origin"] == {"import": {"model": None, "version": 1}}
    for t in ("o0", "o1"):
        assert predict(c, served, t)["predictions"] == offline.predict(t, np.array(PROBE)).tolist()
    back = core.load_state(from_npz(c.get(f"/models/{served}/state").content))
    assert back.predict("o1", np.array(PROBE)).tolist() == offline.predict("o1", np.array(PROBE)).tolist()


def test_exported_file_loads_offline_bit_for_bit(make_client):
    c = make_client()
    src = new_model(c)
    tasks = _learn_some(c, src, seed=9)
    served = c.app.state.models.get(src).reader.snapshot().learner
    learner = core.load_state(from_npz(c.get(f"/models/{src}/state").content))
    for t in tasks:
        assert learner.predict(t, np.array(PROBE)).tolist() == predict(c, src, t)["predictions"]
    a, b = served.get_state(), learner.get_state()
    assert (a.estimator, a.params, a.meta, a.format_version) == (b.estimator, b.params, b.meta, b.format_version)
    assert a.arrays.keys() == b.arrays.keys() and all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)
    assert list(a.tasks) == list(b.tasks)


def _npz(entries: dict, compress=False) -> bytes:
    buf = io.BytesIO()
    (np.savez_compressed if compress else np.savez)(buf, **entries)
    return buf.getvalue()


def _rewrite(data: bytes, edit) -> bytes:
    """The file with its __meta__ JSON edited by ``edit(header)``."""
    with np.load(io.BytesIO(data)) as npz:
        entries = {k: npz[k] for k in npz.files}
    header = json.loads(str(entries["__meta__"][()]))
    edit(header, entries)
    entries["__meta__"] = np.array(json.dumps(header))
    return _npz(entries)


def _bad_files(good: bytes) -> dict[str, bytes]:
    def drop_array(h, e):
        del e["a/" + h["arrays"][0]]

    def extra_entry(h, e):
        e["junk"] = np.zeros(3)

    def wrong_magic(h, e):
        h["format"] = "something-else"

    def future_state_format(h, e):
        h["format_version"] = 99

    def future_file_version(h, e):
        h["file_version"] = 2

    def unknown_estimator(h, e):
        h["estimator"] = "os.system"

    def bad_params(h, e):
        h["params"]["no_such_param"] = 1

    def wrong_shape(h, e):
        name = next(k for k in e if k.startswith("a/") and e[k].ndim == 2)
        e[name] = np.zeros((1, 1))

    def task_list_lies(h, e):
        h["tasks"] = h["tasks"][:-1]

    def path_name(h, e):
        h["arrays"][0] = "../../etc/passwd"

    def object_array_inside(h, e):
        pass

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__meta__.npy", b"\x00" * (50 * 1024 * 1024))  # 50 MB of zeros in ~50 KB
    bomb = buf.getvalue()
    obj = io.BytesIO()
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with np.load(io.BytesIO(good)) as npz:
        entries = {k: npz[k] for k in npz.files}
    pickled_member = io.BytesIO()
    first = "a/" + json.loads(str(entries["__meta__"][()]))["arrays"][0]
    with zipfile.ZipFile(pickled_member, "w") as zf:
        for k, v in entries.items():
            if k == first:
                continue
            b = io.BytesIO()
            np.save(b, v)
            zf.writestr(k + ".npy", b.getvalue())
        zf.writestr(first + ".npy", obj.getvalue())
    return {
        "empty": b"",
        "garbage": b"this is not a model",
        "truncated": good[: len(good) // 2],
        "truncated_tail": good[:-10],
        "pickle": pickle.dumps({"estimator": "FCL3"}),
        "pickled_object_array_member": pickled_member.getvalue(),
        "single_npy": obj.getvalue(),
        "npz_without_meta": _npz({"a": np.zeros(3)}),
        "meta_not_json": _npz({"__meta__": np.array("{not json")}),
        "meta_not_text": _npz({"__meta__": np.zeros(3)}),
        "zip_bomb": bomb,
        "drop_array": _rewrite(good, drop_array),
        "extra_entry": _rewrite(good, extra_entry),
        "wrong_magic": _rewrite(good, wrong_magic),
        "future_state_format": _rewrite(good, future_state_format),
        "future_file_version": _rewrite(good, future_file_version),
        "unknown_estimator": _rewrite(good, unknown_estimator),
        "bad_params": _rewrite(good, bad_params),
        "wrong_shape": _rewrite(good, wrong_shape),
        "task_list_lies": _rewrite(good, task_list_lies),
        "path_name": _rewrite(good, path_name),
    }


def test_each_malformed_file_is_refused_with_its_reason_and_nothing_stored(backend_client):
    c = backend_client
    src = new_model(c)
    _learn_some(c, src, seed=10)
    good = c.get(f"/models/{src}/state").content
    before = total(c)
    for case, data in _bad_files(good).items():
        name = unique_name("bad")
        r = c.post(f"/models/{name}/state", content=data)
        assert r.status_code == 422, (case, r.status_code, r.text)
        assert r.json()["detail"].startswith("bad model file: "), (case, r.json())
        assert c.get(f"/models/{name}").status_code == 404, case
    assert total(c) == before
    r = c.post(f"/models/{unique_name()}/state", content=good)  # the good one still goes in
    assert r.status_code == 201


def test_an_oversized_file_gets_413_and_nothing_stored(make_client):
    c = make_client(MAX_IMPORT_BYTES=4096)  # an import's own limit (issue 22, row 11)
    src = new_model(c)
    _learn_some(c, src, seed=11)
    good = c.get(f"/models/{src}/state").content
    assert len(good) > 4096
    name = unique_name()
    r = c.post(f"/models/{name}/state", content=good)
    assert r.status_code == 413 and "MAX_IMPORT_BYTES" in r.json()["detail"]
    assert c.get(f"/models/{name}").status_code == 404


def test_state_file_round_trip_in_python_only():
    """service.models.state_files needs no server: offline learner -> bytes -> the same learner."""
    learner = core.learner_class(ESTIMATOR)(kind="classification", **PARAMS)
    rng = np.random.default_rng(12)
    for i in range(3):
        X = rng.normal(size=(20, 3))
        learner.learn(f"odd id #{i}/é", X, (X[:, 0] > 0).astype(float))
    state, service = read_npz(to_npz(learner.get_state(), {"note": "x"}))
    assert service == {"note": "x"}
    back = core.load_state(state)
    X = rng.normal(size=(4, 3))
    for t in learner.task_ids:
        assert back.predict_proba(t, X).tolist() == learner.predict_proba(t, X).tolist()
    empty = core.load_state(from_npz(to_npz(core.learner_class(ESTIMATOR)(kind="regression").get_state())))
    assert not empty.is_fitted


# ----------------------------------------------------------------------------- fork
def test_fork_equals_the_old_models_earlier_answers(backend_client):
    c = backend_client
    old = new_model(c)
    rng = np.random.default_rng(13)
    answers = {}
    for i, t in enumerate(["a", "b", "a", "c", "b", "d"]):
        learn(c, old, t, *regression_batch(rng, n=8 + i, task=i))
        answers[i + 1] = {t2: predict(c, old, t2) for t2 in "abcd"
                          if c.get(f"/models/{old}/tasks/{t2}").status_code == 200}
    for v in (2, 4):
        fork = unique_name("fork")
        r = c.post("/models", json={"name": fork, "fork": {"model": old, "version": v}})
        assert r.status_code == 201, r.text
        m = r.json()
        assert m["version"] == v and m["n_batches"] == v and m["origin"] == {"fork": {"model": old, "version": v}}
        assert m["created_with"] == c.get(f"/models/{old}").json()["created_with"]
        for t, ans in answers[v].items():
            got = predict(c, fork, t)
            assert got == ans, (v, t)  # predictions and version, exactly
        assert c.get(f"/models/{fork}/tasks").json()["count"] == len(answers[v])
        # the fork lives its own life: learning on it leaves the old model as it is
        learn(c, fork, "a", *regression_batch(rng))
        assert c.get(f"/models/{old}").json()["version"] == 6
    # default version: the current one
    fork = unique_name("fork")
    r = c.post("/models", json={"name": fork, "fork": {"model": old}})
    assert r.status_code == 201 and r.json()["version"] == 6
    assert all(predict(c, fork, t) == a for t, a in answers[6].items())
    # a fork of a fork
    r = c.post("/models", json={"name": unique_name("ff"), "fork": {"model": fork, "version": 3}})
    assert r.status_code == 201 and all(predict(c, r.json()["name"], t) == a for t, a in answers[3].items())
    # version 0: an empty model with the same settings
    r = c.post("/models", json={"name": unique_name("f0"), "fork": {"model": old, "version": 0}})
    assert r.status_code == 201 and r.json()["version"] == 0 and r.json()["n_tasks"] == 0

    # refused, each with a clear reason, nothing stored
    before = total(c)
    r = c.post("/models", json={"name": unique_name(), "fork": {"model": old, "version": 7}})
    assert r.status_code == 409 and "version 6" in r.json()["detail"] and "no version 7" in r.json()["detail"]
    ghost = unique_name("ghost")
    r = c.post("/models", json={"name": unique_name(), "fork": {"model": ghost, "version": 1}})
    assert r.status_code == 404 and ghost in r.json()["detail"]
    r = c.post("/models", json={"name": unique_name(), "fork": {"model": old, "version": -1}})
    assert r.status_code == 422
    r = c.post("/models", json={"name": unique_name(), "kind": "regression", "fork": {"model": old, "version": 1}})
    assert r.status_code == 422 and "kind" in json.dumps(r.json()["detail"])
    r = c.post("/models", json={"name": old, "fork": {"model": old, "version": 1}})
    assert r.status_code == 409
    imported = unique_name("imp")
    assert c.post(f"/models/{imported}/state", content=c.get(f"/models/{old}/state").content).status_code == 201
    r = c.post("/models", json={"name": unique_name(), "fork": {"model": imported, "version": 3}})
    assert r.status_code == 409 and "batches 1..3 are missing" in r.json()["detail"]
    assert total(c) == before + 1  # only the import


def test_fork_of_a_model_whose_early_batches_are_gone_is_refused(make_client):
    c = make_client()
    old = new_model(c)
    rng = np.random.default_rng(14)
    for t in "abc":
        learn(c, old, t, *regression_batch(rng))
    from sqlalchemy import delete

    from service.store.tables import BatchRow

    with c.app.state.engine.begin() as conn:
        conn.execute(delete(BatchRow).where(BatchRow.model_name == old, BatchRow.version == 1))
    r = c.post("/models", json={"name": unique_name(), "fork": {"model": old, "version": 2}})
    assert r.status_code == 409 and "batches 1 are missing" in r.json()["detail"]


# ----------------------------------------------------------------------------- access
def test_write_key_for_lifecycle_and_learning_read_key_for_the_rest(make_client):
    W, R = "models-write-key-0123456789", "models-read-key-0123456789"
    c = make_client(API_WRITE_KEYS=W, API_READ_KEYS=R)
    w, r_ = {"Authorization": f"Bearer {W}"}, {"Authorization": f"Bearer {R}"}
    name = unique_name()
    body = {"name": name, "kind": "regression", "estimator": ESTIMATOR, "params": PARAMS}
    assert c.post("/models", json=body).status_code == 401
    assert c.post("/models", json=body, headers=r_).status_code == 403
    assert c.post("/models", json=body, headers=w).status_code == 201
    X, y = regression_batch(np.random.default_rng(15))
    assert c.post(f"/models/{name}/tasks/t/data", json={"X": X, "y": y}, headers=r_).status_code == 403
    assert c.post(f"/models/{name}/tasks/t/data", json={"X": X, "y": y}, headers=w).status_code == 200
    for path in ("/models", f"/models/{name}", f"/models/{name}/tasks", f"/models/{name}/tasks/t",
                 f"/models/{name}/state"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers=r_).status_code == 200, path
        assert c.get(path, headers=w).status_code == 200, path
    assert c.post(f"/models/{name}/predict", json={"task_id": "t", "X": PROBE}, headers=r_).status_code == 200
    data = c.get(f"/models/{name}/state", headers=r_).content
    other = unique_name()
    assert c.post(f"/models/{other}/state", content=data, headers=r_).status_code == 403
    assert c.post("/models", json={"name": other, "fork": {"model": name}}, headers=r_).status_code == 403
    assert c.delete(f"/models/{name}", headers=r_).status_code == 403
    assert c.get(f"/models/{other}", headers=r_).status_code == 404
    assert c.delete(f"/models/{name}", headers=w).status_code == 204


# ----------------------------------------------------------------------------- replicas
def two_replicas(make_client, request):
    """Two replicas (clients of two apps) on one PostgreSQL database and one Redis, and a model
    created on the first: (a, b, name)."""
    a = make_client("postgres", _request=request)
    s = a.app.state.settings
    b = make_client("postgres", _request=request, MODEL_NAME=s.MODEL_NAME, REDIS_PREFIX=s.REDIS_PREFIX)
    return a, b, new_model(a)


def test_a_model_deleted_and_recreated_by_another_replica_is_never_served_stale(make_client, request):
    a, b, name = two_replicas(make_client, request)
    rng = np.random.default_rng(16)
    for _ in range(2):
        learn(a, name, "t", *regression_batch(rng, task=0))
    first = predict(a, name, "t")
    assert predict(b, name, "t") == first
    assert b.delete(f"/models/{name}").status_code == 204
    assert a.post(f"/models/{name}/predict", json={"task_id": "t", "X": PROBE}).status_code == 404
    new_model(b, name)
    for _ in range(2):  # the same version number, other data
        learn(b, name, "t", *regression_batch(rng, task=2))
    again = predict(a, name, "t")
    assert again["version"] == first["version"] == 2 and again["predictions"] != first["predictions"]
    assert again == predict(b, name, "t")


def test_a_writer_learns_on_a_model_deleted_and_recreated_by_another_replica(make_client, request):
    """A writer whose cached model was deleted and created again elsewhere, at the very
    version number it caches, learns on the new model's stored state, not on its cache."""
    a, b, name = two_replicas(make_client, request)
    rng = np.random.default_rng(17)
    for _ in range(2):
        learn(a, name, "t", *regression_batch(rng, task=0))
    assert b.delete(f"/models/{name}").status_code == 204
    new_model(b, name)
    alone = core.learner_class(ESTIMATOR)(kind="regression", **PARAMS)
    batches = [("u", *regression_batch(rng, task=2)) for _ in range(2)] + [("t", *regression_batch(rng, task=1))]
    for task, X, y in batches[:2]:
        learn(b, name, task, X, y)
    task, X, y = batches[2]
    assert learn(a, name, task, X, y)["version"] == 3  # a's cache is of the deleted model's version 2
    for task, X, y in batches:
        alone.learn(task, np.asarray(X), np.asarray(y))
    served = predict(b, name, "t")
    assert served["version"] == 3 and served["predictions"] == alone.predict("t", np.asarray(PROBE)).tolist()
    assert predict(a, name, "u") == predict(b, name, "u")

# ----------------------------------------------------------------------------- schema upgrade
def _write_release_0001_database(url: str, rng) -> dict:
    """A database at revision 0001 holding two models written as the single-model release
    wrote them (model row, task rows, batches with their surrogate id); returns each model's
    learner for comparison."""
    from datetime import datetime, timezone

    from alembic import command
    from sqlalchemy import MetaData, create_engine

    from service.db import alembic_config
    from service.store.packed_arrays import array_to_bytes
    from service.store.tables import NDArrayDict
    from service.store.results import result_json

    command.upgrade(alembic_config(url), "0001")
    engine = create_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    models_t, tasks_t, batches_t = meta.tables["models"], meta.tables["tasks"], meta.tables["batches"]
    pack = NDArrayDict().process_bind_param
    learners = {}
    with engine.begin() as conn:
        for name, kind in (("default", "regression"), ("other-model", "classification")):
            settings = {"estimator": ESTIMATOR, "kind": kind, "params": dict(PARAMS), "d": None}
            learner = core.learner_class(ESTIMATOR)(kind=kind, **PARAMS)
            tasks, batches = {}, []
            now = datetime.now(timezone.utc)
            for v, t in enumerate(["a", "b", "a", "c"], start=1):
                X = rng.normal(size=(10, 4))
                y = X @ np.linspace(-1, 1, 4) if kind == "regression" else (X[:, 0] > 0).astype(float)
                r = learner.learn(t, X, y)
                info = tasks.setdefault(t, {"n_batches": 0})
                info.update(version=v, n_batches=info["n_batches"] + 1, last=result_json(r))
                batches.append(dict(model_name=name, task_id=t, version=v, n_samples=10,
                                    X=array_to_bytes(X), y=array_to_bytes(y), created_at=now))
            state = learner.get_state()
            conn.execute(models_t.insert().values(
                name=name, version=4, estimator=ESTIMATOR, kind=kind, settings=settings, params=state.params,
                meta=state.meta, arrays=pack(state.arrays, None), format_version=state.format_version,
                summary={"representatives": [], "n_representatives": 0}, created_at=now, updated_at=now))
            for b in batches:
                conn.execute(batches_t.insert().values(**b))
            for t, task in state.tasks.items():
                conn.execute(tasks_t.insert().values(
                    model_name=name, task_id=t, version=tasks[t]["version"], n_samples=learner.tasks_[t].n_samples,
                    n_batches=tasks[t]["n_batches"], arrays=pack(task["arrays"], None), meta=task["meta"],
                    last_update=tasks[t]["last"], created_at=now, updated_at=now))
            learners[name] = learner
    engine.dispose()
    return learners


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_single_model_database_is_upgraded_in_place_keeping_everything(backend, tmp_path, request, make_client):
    from alembic import command
    from sqlalchemy import create_engine, inspect

    from service.db import alembic_config

    from .conftest import create_pg_database, drop_pg_database, pg_url

    if backend == "postgres":
        request.getfixturevalue("postgres_server")
        db = create_pg_database("fcl3_up")
        url = pg_url(db)
    else:
        url = f"sqlite:///{tmp_path / 'release.db'}"
    try:
        learners = _write_release_0001_database(url, np.random.default_rng(20))
        command.upgrade(alembic_config(url), "head")
        engine = create_engine(url)
        with engine.connect() as conn:
            insp = inspect(conn)
            assert insp.get_pk_constraint("batches")["constrained_columns"] == ["model_name", "version"]
            assert insp.get_pk_constraint("tasks")["constrained_columns"] == ["model_name", "task_id"]
            assert "id" not in {c["name"] for c in insp.get_columns("batches")}
            assert [fk["referred_table"] for fk in insp.get_foreign_keys("batches")] == ["models"]
        engine.dispose()
        if backend == "postgres":
            c = make_client("postgres", _request=request, DATABASE_URL=url, MODEL_NAME="default")
        else:
            c = make_client(SQLITE_PATH=str(tmp_path / "release.db"), MODEL_NAME="default")
        listed = {m["name"]: m for m in c.get("/models").json()["models"]}
        assert set(listed) == {"default", "other-model"}
        for name, learner in learners.items():
            m = listed[name]
            assert (m["version"], m["n_tasks"], m["n_batches"], m["kind"]) == (4, 3, 4, learner.kind)
            for t in "abc":
                assert predict(c, name, t)["predictions"] == learner.predict(t, np.array(PROBE)).tolist()
            assert c.get(f"/models/{name}/tasks/a").json()["n_batches"] == 2
        assert c.post("/predict", json={"task_id": "b", "X": PROBE}).json() == predict(c, "default", "b")
        # the kept batches rebuild the old versions, and the models go on learning
        r = c.post("/models", json={"name": "fork-of-other", "fork": {"model": "other-model", "version": 4}})
        assert r.status_code == 201, r.text
        assert predict(c, "fork-of-other", "c")["predictions"] == predict(c, "other-model", "c")["predictions"]
        X = np.random.default_rng(21).normal(size=(10, 4))
        assert learn(c, "default", "d", X.tolist(), (X @ np.ones(4)).tolist())["version"] == 5
    finally:
        if backend == "postgres":
            drop_pg_database(db)
