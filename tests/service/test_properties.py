"""Property tests (hypothesis): the request models, and the engine's input checks — any bad
batch raises ``core.InputError`` and leaves the learner's state exactly as it was."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import core
from fcl3.schemas import UNSTORABLE, Batch, PredictRequest

from .conftest import ESTIMATOR, PARAMS

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
moderate = st.floats(-1e3, 1e3, allow_nan=False)  # values the engine must learn without trouble
any_float = st.floats(width=64)
not_a_number = st.one_of(st.text(max_size=5), st.booleans(), st.none(), st.lists(finite, max_size=2),
                         st.dictionaries(st.text(max_size=3), finite, max_size=2))


@st.composite
def matrices(draw, cells=finite, min_rows=1):
    d = draw(st.integers(1, 6))
    n = draw(st.integers(min_rows, 6))
    return [[draw(cells) for _ in range(d)] for _ in range(n)]


# ----------------------------------------------------------------------------- request models
@given(X=matrices(any_float), y=st.lists(any_float, max_size=8))
def test_batch_keeps_any_numbers_it_is_given(X, y):
    b = Batch(X=X, y=y)
    assert b.X == X or all(math.isnan(a) or a == b_ for r, s in zip(X, b.X) for a, b_ in zip(r, s))
    assert len(b.y) == len(y)


@given(X=matrices(finite), where=st.tuples(st.integers(0, 5), st.integers(0, 5)), bad=not_a_number)
def test_batch_refuses_non_numbers(X, where, bad):
    i, j = where[0] % len(X), where[1] % len(X[0])
    X[i][j] = bad
    with pytest.raises(ValidationError):
        Batch(X=X, y=[0.0] * len(X))
    with pytest.raises(ValidationError):
        PredictRequest(task_id="t", X=X)


@given(X=matrices(finite), extra=st.text(min_size=1, max_size=8).filter(lambda k: k not in ("X", "y", "task_id")))
def test_unknown_fields_are_refused(X, extra):
    with pytest.raises(ValidationError):
        Batch.model_validate({"X": X, "y": [0.0] * len(X), extra: 1})
    with pytest.raises(ValidationError):
        PredictRequest.model_validate({"task_id": "t", "X": X, extra: 1})


@given(task_id=st.text(max_size=250))
def test_predict_request_task_id_length(task_id):
    ok = 1 <= len(task_id) <= 200 and UNSTORABLE.search(task_id) is None  # no control character (issue 22)
    try:
        PredictRequest(task_id=task_id, X=[[1.0]])
        assert ok
    except ValidationError:
        assert not ok


def test_empty_batch_is_refused():
    with pytest.raises(ValidationError):
        Batch(X=[], y=[])


# ----------------------------------------------------------------------------- engine input checks
D = 4


def fitted(kind: str) -> core.LifelongLearner:
    from service.models.learners import make_learner

    m = make_learner({"estimator": ESTIMATOR, "kind": kind, "params": dict(PARAMS)})
    rng = np.random.default_rng(0)
    for t in range(2):
        X = rng.normal(size=(10, D))
        y = X @ np.linspace(-1, 1, D) + 0.1 * rng.normal(size=10)
        m.learn(f"t{t}", X, (y > 0).astype(float) if kind == "classification" else y)
    return m


LEARNERS = {kind: fitted(kind) for kind in ("regression", "classification")}


def same_state(a: core.ModelState, b: core.ModelState) -> bool:
    def eq(x, y):
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(eq(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return isinstance(y, (list, tuple)) and len(x) == len(y) and all(eq(p, q) for p, q in zip(x, y))
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            return np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) and np.asarray(x).dtype == np.asarray(y).dtype
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        return x == y

    return (a.estimator == b.estimator and a.format_version == b.format_version and eq(a.params, b.params)
            and eq(a.meta, b.meta) and eq(a.arrays, b.arrays) and eq(a.tasks, b.tasks))


def rows(n, d, cells=moderate):
    return st.lists(st.lists(cells, min_size=d, max_size=d), min_size=n, max_size=n)


@st.composite
def bad_batches(draw, kind: str):
    """(task_id, X, y) that must be refused, with what is wrong."""
    task = draw(st.sampled_from(["t0", "t1", "new"]))
    n = draw(st.integers(1, 6))
    good_X = draw(rows(n, D))
    good_y = draw(st.lists(st.sampled_from([0.0, 1.0]) if kind == "classification" else moderate, min_size=n, max_size=n))
    what = draw(st.sampled_from(["width", "nan_x", "inf_x", "nan_y", "inf_y", "empty", "lengths", "ragged",
                                 "strings", "dims1", "dims3", "task_id", "labels" if kind == "classification" else "width"]))
    X, y = good_X, good_y
    if what == "width":
        X = draw(rows(n, draw(st.sampled_from([1, 2, 3, 5, 9]))))
    elif what in ("nan_x", "inf_x"):
        i, j = draw(st.integers(0, n - 1)), draw(st.integers(0, D - 1))
        X = [list(r) for r in good_X]
        X[i][j] = float("nan") if what == "nan_x" else draw(st.sampled_from([float("inf"), -float("inf")]))
    elif what in ("nan_y", "inf_y"):
        y = list(good_y)
        y[draw(st.integers(0, n - 1))] = float("nan") if what == "nan_y" else float("inf")
    elif what == "empty":
        X, y = draw(st.sampled_from([([], []), (np.zeros((0, D)), np.zeros(0))]))
    elif what == "lengths":
        y = good_y + [0.0] * draw(st.integers(1, 3)) if draw(st.booleans()) or n == 1 else good_y[:-1]
    elif what == "ragged":
        X = [list(r) for r in good_X] + [[0.0] * draw(st.sampled_from([1, 2, D + 1]))]
        y = good_y + [0.0]
    elif what == "strings":
        X = [list(r) for r in good_X]
        X[0][0] = draw(st.sampled_from(["a", "", "1,2", None, [1.0]]))
    elif what == "dims1":  # a scalar, or one flat row of the wrong width
        X = draw(st.sampled_from([3.0, [1.0] * (D + 1), [1.0] * (D - 1)]))
        y = good_y[:1]
    elif what == "dims3":
        X = [good_X]
    elif what == "task_id":
        task = draw(st.sampled_from(["", None, 3, b"t0"]))
    elif what == "labels":
        y = list(good_y)
        y[0] = draw(st.sampled_from([0.5, 2.0, -3.0]))
    return task, X, y, what


@pytest.mark.parametrize("kind", ["regression", "classification"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_engine_refuses_bad_input_and_changes_nothing(kind, data):
    m = LEARNERS[kind]
    before = core.load_state(m.get_state()).get_state()
    task, X, y, what = data.draw(bad_batches(kind))
    with pytest.raises(core.InputError):
        m.learn(task, X, y)
    assert same_state(core.load_state(m.get_state()).get_state(), before), what


@pytest.mark.parametrize("kind", ["regression", "classification"])
@settings(max_examples=40, deadline=None)
@given(X=st.one_of(rows(2, 3), rows(2, 5), rows(0, D), st.just([[float("nan")] * D]), st.just([["x"] * D])))
def test_engine_predict_refuses_bad_rows(kind, X):
    m = LEARNERS[kind]
    before = m.get_state()
    with pytest.raises(core.InputError):
        m.predict("t0", X)
    assert same_state(m.get_state(), before)


# ----------------------------------------------------------------------------- the service, any magnitude
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(X=rows(3, D, cells=finite), y=st.lists(finite, min_size=3, max_size=3), task=st.sampled_from(["a", "b"]))
def test_service_any_finite_batch_is_learned_or_refused_never_500(make_client, X, y, task):
    """Finite numbers of any magnitude (1e300 included): 200, or 422 with the model unchanged."""
    c = test_service_any_finite_batch_is_learned_or_refused_never_500.client
    if c is None:
        c = test_service_any_finite_batch_is_learned_or_refused_never_500.client = make_client()
        rng = np.random.default_rng(1)
        for t in ("a", "b"):
            Xs = rng.normal(size=(8, D))
            assert c.post(f"/tasks/{t}/data", json={"X": Xs.tolist(), "y": (Xs @ np.ones(D)).tolist()}).status_code == 200
    before = c.get("/model").json()["version"]
    r = c.post(f"/tasks/{task}/data", json={"X": X, "y": y})
    assert r.status_code in (200, 422), r.text
    after = c.get("/model").json()["version"]
    assert after == (before + 1 if r.status_code == 200 else before)
    p = c.post("/predict", json={"task_id": task, "X": X})
    assert p.status_code in (200, 422), p.text


test_service_any_finite_batch_is_learned_or_refused_never_500.client = None
