"""New feature columns (``grow_features``, :meth:`core.LifelongLearner.add_features`): a wider
batch appends columns that enter every stored task with weight 0 and exact statistics."""
from __future__ import annotations

import numpy as np
import pytest

import core
from core import InputError, load_state

from .helpers import KINDS, learners, make

K = 2  # columns added


def stream(kind, d=3, seed=0):
    """Six tasks from two environments, one of them in two batches."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(6):
        for _ in range(2 if t % 3 == 0 else 1):
            X = rng.normal(size=(15, d))
            y = X @ ((1 if t % 2 else -1) * np.arange(1.0, d + 1)) + 0.3 * rng.normal(size=15)
            out.append((f"t{t}", X, (y > 0).astype(float) if kind == "classification" else y))
    return out


def later(kind, d, seed=9):
    """Batches that use every column: a known task, a new task and another known one."""
    rng = np.random.default_rng(seed)
    out = []
    for tid in ("t1", "new", "t2"):
        X = rng.normal(size=(20, d))
        y = X @ np.ones(d) + 0.1 * rng.normal(size=20)
        out.append((tid, X, (y > 0).astype(float) if kind == "classification" else y))
    return out


def scores(model, X):
    return {t: model.decision_function(t, X) for t in model.task_ids}


def pad(X, k=K):
    return np.hstack([X, np.zeros((X.shape[0], k))])


@learners
def test_a_new_column_changes_no_stored_task_prediction(cls, kind):
    model = make(cls, kind, grow_features=True)
    for tid, X, y in stream(kind):
        model.learn(tid, X, y)
    rng = np.random.default_rng(5)
    X_old = rng.normal(size=(7, 3))
    before = scores(model, X_old)
    grown = model.copy()
    grown.add_features(K)
    assert grown.n_features_in_ == 3 + K and model.n_features_in_ == 3  # the original untouched
    X_new = np.hstack([X_old, rng.normal(size=(7, K))])  # any value in the new columns: weight 0
    after = scores(grown, X_new)
    # the mixed model's prediction inverts the population's covariance (condition ~1e6 here),
    # whose padded form LAPACK factorises in another order: rounding at 1e-9, no more
    population = kind == "regression" and issubclass(cls, core.FCL3)
    tol = 1e-9 if population else 1e-12
    for t in before:
        np.testing.assert_allclose(after[t], before[t], rtol=tol, atol=tol)
        assert np.all(grown.theta(t)[3:3 + K] == 0.0)


@learners
def test_padded_statistics_are_what_zero_columns_give(cls, kind):
    """Every stored task's data, single-task fit and half-Hessian equal those of the same
    rows with zero columns, computed independently (the shared single-task fit on them)."""
    model = make(cls, kind, grow_features=True)
    for tid, X, y in stream(kind):
        model.learn(tid, X, y)
    rows = {}
    for tid, X, y in stream(kind):
        rows.setdefault(tid, []).append((X, y))
    grown = model.copy()
    grown.add_features(K)
    for tid, batches in rows.items():
        X = pad(np.vstack([b[0] for b in batches]))
        y = np.concatenate([b[1] for b in batches])
        record = grown.tasks_[tid]
        want = grown._summarise(X, y)
        w, omega = grown._single_task(want)
        if kind == "regression":
            np.testing.assert_allclose(record.data.gram, want.gram, rtol=1e-12, atol=1e-10)
            np.testing.assert_allclose(record.data.moment, want.moment, rtol=1e-12, atol=1e-10)
        else:
            np.testing.assert_array_equal(record.data.X, X)
        np.testing.assert_allclose(record.w, w, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(record.omega, omega, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [core.STL, core.ELLA], ids=lambda c: c.__name__)
@pytest.mark.parametrize("kind", KINDS)
def test_grown_model_equals_one_with_the_zero_columns_from_the_start(cls, kind):
    grown, start = make(cls, kind, grow_features=True), make(cls, kind, grow_features=True)
    for tid, X, y in stream(kind):
        grown.learn(tid, X, y)
        start.learn(tid, pad(X), y)
    for tid, X, y in later(kind, 3 + K):  # the first of these grows the model
        grown.learn(tid, X, y)
        start.learn(tid, X, y)
    X = np.random.default_rng(3).normal(size=(6, 3 + K))
    for t in start.task_ids:
        np.testing.assert_allclose(grown.decision_function(t, X), start.decision_function(t, X), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cls", [core.FCL3, core.CL3, core.FCL3WithoutDecoder], ids=lambda c: c.__name__)
@pytest.mark.parametrize("kind", KINDS)
def test_grown_fcl3_equals_one_with_the_zero_columns_from_the_start(cls, kind):
    """FCL3's library (``D``, ``A``, codes, representatives) and its paper predictions ``D s_t``
    equal those of a model that had the zero columns from the start and whose random initial
    decoder has zero rows there (the grown model's new rows are zero: it never drew them).
    The empirical-Bayes predictions are not compared: from the start, EM fits the population's
    variance of a coordinate no task has data on to a degenerate value."""

    class ZeroRows(cls):
        def _init_learned(self, n_features):
            super()._init_learned(n_features)
            D = self.D_.copy()
            D[3:3 + K] = 0.0
            self.D_ = D / np.linalg.norm(D, axis=0)

    grown = make(cls, kind, grow_features=True, task_models="paper")
    start = make(ZeroRows, kind, grow_features=True, task_models="paper")
    for tid, X, y in stream(kind):
        grown.learn(tid, X, y)
        start.learn(tid, pad(X), y)
    for tid, X, y in later(kind, 3 + K):
        grown.learn(tid, X, y)
        start.learn(tid, X, y)
    assert grown.representatives == start.representatives
    np.testing.assert_allclose(grown.D_, start.D_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(grown.A_, start.A_, rtol=1e-9, atol=1e-9)
    X = np.random.default_rng(3).normal(size=(6, 3 + K))
    for t in start.task_ids:
        np.testing.assert_allclose(grown.decision_function(t, X), start.decision_function(t, X), rtol=1e-10, atol=1e-10)


@learners
def test_replaying_the_batches_gives_the_same_model(cls, kind):
    """What taking a batch back does: the same batches, widths included, learned again."""
    batches = stream(kind) + later(kind, 3 + K)
    first, again = make(cls, kind, grow_features=True), make(cls, kind, grow_features=True)
    for tid, X, y in batches:
        first.learn(tid, X, y)
    for tid, X, y in batches:
        again.learn(tid, X, y)
    a, b = first.get_state(), again.get_state()
    assert a.meta == b.meta and a.params == b.params
    for name in a.arrays:
        np.testing.assert_array_equal(a.arrays[name], b.arrays[name])
    restored = load_state(a)
    assert restored.grow_features and restored.n_features_in_ == 3 + K
    X = np.random.default_rng(2).normal(size=(4, 3 + K))
    for t in first.task_ids:
        np.testing.assert_array_equal(restored.decision_function(t, X), first.decision_function(t, X))


@learners
def test_widths_the_learner_refuses(cls, kind):
    fixed = make(cls, kind)
    grows = make(cls, kind, grow_features=True)
    tid, X, y = stream(kind)[0]
    fixed.learn(tid, X, y)
    grows.learn(tid, X, y)
    with pytest.raises(InputError, match="expects 3"):  # the default refuses another width
        fixed.learn(tid, pad(X), y)
    with pytest.raises(InputError, match="expects 3"):
        fixed.predict(tid, pad(X))
    # a narrower row holds 0 in the columns it lacks
    X0 = X.copy()
    X0[:, 2] = 0.0
    np.testing.assert_array_equal(grows.predict(tid, X[:, :2]), grows.predict(tid, X0))
    narrow, zeros = grows.copy(), grows.copy()
    narrow.learn(tid, X[:, :2], y)
    zeros.learn(tid, X0, y)
    np.testing.assert_array_equal(narrow.predict(tid, X), zeros.predict(tid, X))
    np.testing.assert_array_equal(grows.predict(tid, pad(X)), grows.predict(tid, X))
    assert grows.n_features_in_ == 3  # predicting never grows
    with pytest.raises(InputError):
        make(cls, kind, grow_features=True).add_features(1)  # nothing learned yet
    with pytest.raises(InputError):
        grows.add_features(0)


@learners
def test_a_refused_wider_batch_changes_nothing(cls, kind):
    model = make(cls, kind, grow_features=True)
    for tid, X, y in stream(kind):
        model.learn(tid, X, y)
    before = model.get_state()
    X = pad(np.ones((3, 3)))
    X[1, 4] = np.nan
    with pytest.raises(InputError):
        model.learn("t1", X, np.ones(3))
    after = model.get_state()
    assert model.n_features_in_ == 3 and after.meta == before.meta
    for name in before.arrays:
        np.testing.assert_array_equal(after.arrays[name], before.arrays[name])


def test_grow_features_is_a_declared_parameter():
    for cls in core.LEARNERS.values():
        assert cls().grow_features is False
        with pytest.raises(InputError, match="grow_features"):
            cls(grow_features=1).check_params()
