"""ELLA: statistics bookkeeping, re-learning, state round trip, InfoMax (its lasso: test_solvers)."""
import numpy as np
import pytest

from core import load_state
from core.ella import ELLA

from .helpers import basis_tasks


_tasks = basis_tasks


def _stats_from_codes(model):
    d, k = model.L_.shape
    A, b = np.zeros((d * k, d * k)), np.zeros(d * k)
    for tid in model.task_ids:
        r = model.tasks_[tid]
        s = r.arrays["code"]
        A += np.kron(np.outer(s, s), r.omega)
        b += np.outer(r.omega @ r.w, s).ravel(order="F")
    return A, b


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_basis_is_the_closed_form_of_the_statistics(kind):
    model = ELLA(kind=kind, n_components=3)
    for tid, X, y in _tasks(kind=kind):
        model.learn(tid, X, y)
    A, b = _stats_from_codes(model)
    np.testing.assert_allclose(model.A_, A, atol=1e-10)
    np.testing.assert_allclose(model.b_, b, atol=1e-10)
    T = int(model.n_tasks_)
    assert T == 6
    # vec(L) = (A/T + ridge I)^-1 b/T, column-major; minimiser of the ELLA objective in L:
    L = np.linalg.solve(A / T + model.ridge * np.eye(A.shape[0]), b / T).reshape(model.L_.shape, order="F")
    np.testing.assert_allclose(model.L_, L, rtol=1e-8, atol=1e-10)

    def objective(vecL):
        Lm = vecL.reshape(model.L_.shape, order="F")
        tot = 0.0
        for tid in model.task_ids:
            r = model.tasks_[tid]
            e = r.w - Lm @ r.arrays["code"]
            tot += e @ r.omega @ e
        return tot / T + model.ridge * vecL @ vecL

    base = objective(L.ravel(order="F"))
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert objective(L.ravel(order="F") + 1e-3 * rng.normal(size=L.size)) > base


def test_first_tasks_get_initialisation_slots_and_dead_columns_are_redrawn():
    model = ELLA(n_components=3, task_models="paper")
    (t0, X, y), *_ = _tasks()
    model.learn(t0, X, y)
    np.testing.assert_array_equal(model.tasks_[t0].arrays["code"], [1.0, 0.0, 0.0])
    # columns 2 and 3 got no data: solve gives 0, v1.0 re-draws them at random
    assert np.all(np.sum(model.L_[:, 1:] ** 2, axis=0) > 1e-10)
    np.testing.assert_allclose(model.theta(t0), model.L_[:, 0])


def test_relearning_equals_learning_once_on_all_data():
    tasks = _tasks(n_tasks=4)
    tid, X, y = tasks[-1]
    a = ELLA(n_components=2)
    b = ELLA(n_components=2)
    for t, Xt, yt in tasks[:-1]:
        a.learn(t, Xt, yt)
        b.learn(t, Xt, yt)
    a.learn(tid, X[:15], y[:15])
    res = a.learn(tid, X[15:], y[15:])
    b.learn(tid, X, y)
    assert not res.new_task
    assert int(a.n_tasks_) == int(b.n_tasks_) == 4
    np.testing.assert_allclose(a.A_, b.A_, atol=1e-8)
    np.testing.assert_allclose(a.b_, b.b_, atol=1e-8)
    np.testing.assert_allclose(a.L_, b.L_, atol=1e-8)
    for t in a.task_ids:
        np.testing.assert_allclose(a.predict(t, X), b.predict(t, X), atol=1e-8)


def test_relearning_an_early_task_does_not_double_count():
    tasks = _tasks(n_tasks=5)
    model = ELLA(n_components=2)
    for t, X, y in tasks:
        model.learn(t, X[:20], y[:20])
    tid, X, y = tasks[2]
    model.learn(tid, X[20:], y[20:])
    assert int(model.n_tasks_) == 5
    A, b = _stats_from_codes(model)  # exactly one contribution per task, with its current code
    np.testing.assert_allclose(model.A_, A, atol=1e-8)
    np.testing.assert_allclose(model.b_, b, atol=1e-8)
    assert model.tasks_[tid].n_samples == 40


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_state_round_trip_gives_identical_predictions(kind):
    model = ELLA(kind=kind, n_components=2, code_l1=1e-3)
    tasks = _tasks(kind=kind)
    for t, X, y in tasks[:4]:
        model.learn(t, X, y)
    clone = load_state(model.get_state())
    assert type(clone) is ELLA and clone.get_params() == model.get_params()
    for t, X, _ in tasks[:4]:
        np.testing.assert_array_equal(model.decision_function(t, X), clone.decision_function(t, X))
    # and it keeps learning identically
    for t, X, y in tasks[4:]:
        model.learn(t, X, y)
        clone.learn(t, X, y)
    np.testing.assert_array_equal(model.L_, clone.L_)


def test_same_seed_same_result_and_seed_matters_for_random_columns():
    def fit(seed):
        m = ELLA(n_components=4, random_state=seed, init_with_first_tasks=False)
        for t, X, y in _tasks():
            m.learn(t, X, y)
        return m

    a, b, c = fit(3), fit(3), fit(4)
    np.testing.assert_array_equal(a.L_, b.L_)
    assert not np.allclose(a.L_, c.L_)


def test_information_gain_is_d_optimality_and_does_not_change_the_model():
    tasks = _tasks(n_tasks=6)
    model = ELLA(n_components=2, standardize=False)  # a fixed scaling: no warm-up refit in the copies
    for t, X, y in tasks[:3]:
        model.learn(t, X, y)
    before = model.get_state()
    cands = {t: (X, y) for t, X, y in tasks[3:]}
    gains = {t: model.information_gain(X, y) for t, (X, y) in cands.items()}
    after = model.get_state()
    for k, v in before.arrays.items():
        np.testing.assert_array_equal(v, after.arrays[k])
    # independent computation: learn the candidate on a copy, compare log-dets of the precisions
    for t, (X, y) in cands.items():
        copy = load_state(model.get_state())
        copy.learn(t, X, y)
        T = int(model.n_tasks_)
        eye = model.ridge * np.eye(model.A_.shape[0])
        ref = 0.5 * (np.linalg.slogdet(copy.A_ / (T + 1) + eye)[1] - np.linalg.slogdet(model.A_ / T + eye)[1])
        assert gains[t] == pytest.approx(ref, rel=1e-9, abs=1e-9)
    assert model.select_next(cands) == max(gains, key=gains.get)


def test_information_gain_before_first_task():
    (t, X, y), *_ = _tasks()
    model = ELLA(n_components=2)
    g = model.information_gain(X, y)
    assert np.isfinite(g) and not model.is_fitted
