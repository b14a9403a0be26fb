"""One check suite run over FCL3 and every comparator (River/scikit-learn style)."""
import copy

import numpy as np
import pytest

import core
from core import CL3, FCL3, STL, FCL3WithoutDecoder, InputError, UnknownTaskError, load_state
from core.ella import ELLA

LEARNERS = [STL, ELLA, FCL3, CL3, FCL3WithoutDecoder]
KINDS = ["regression", "classification"]


def make(cls, kind, **kw):
    params = {"kind": kind}
    if "n_components" in cls._param_names():
        params["n_components"] = 3
    return cls(**params, **kw)


def stream(kind, n_tasks=6, d=5, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=2.0, size=(2, d))
    out = []
    for t in range(n_tasks):
        w = centres[t % 2] + rng.normal(scale=0.3, size=d)
        X = rng.normal(size=(30, d)) * np.arange(1, d + 1)  # unequal feature scales
        s = (X / np.arange(1, d + 1)) @ w + 1.0
        y = s + rng.normal(scale=0.3, size=30) if kind == "regression" else (s > 0).astype(float)
        out.append((f"t{t}", X, y))
    return out


def fit(model, data):
    return [model.learn(tid, X, y) for tid, X, y in data]


def assert_same_state(a, b):
    sa, sb = a.get_state(), b.get_state()
    assert sa.estimator == sb.estimator and sa.params == sb.params and sa.meta == sb.meta
    assert sa.arrays.keys() == sb.arrays.keys()
    for k in sa.arrays:
        np.testing.assert_array_equal(sa.arrays[k], sb.arrays[k], err_msg=k)
    assert sa.tasks.keys() == sb.tasks.keys()
    for t in sa.tasks:
        assert sa.tasks[t]["meta"] == sb.tasks[t]["meta"]
        for k in sa.tasks[t]["arrays"]:
            np.testing.assert_array_equal(sa.tasks[t]["arrays"][k], sb.tasks[t]["arrays"][k])


params = pytest.mark.parametrize("cls,kind", [(c, k) for c in LEARNERS for k in KINDS],
                                 ids=lambda v: getattr(v, "__name__", v))


@params
def test_init_does_no_work_and_params_round_trip(cls, kind):
    m = make(cls, kind)
    assert not m.is_fitted and m.task_ids == []
    p = m.get_params()
    assert cls(**p).get_params() == p


@params
def test_learning_does_not_mutate_inputs(cls, kind):
    data = stream(kind)
    copies = copy.deepcopy(data)
    fit(make(cls, kind), data)
    for (_, X, y), (_, X0, y0) in zip(data, copies):
        np.testing.assert_array_equal(X, X0)
        np.testing.assert_array_equal(y, y0)


@params
def test_same_seed_same_results(cls, kind):
    data = stream(kind)
    a, b = make(cls, kind), make(cls, kind)
    fit(a, data)
    fit(b, data)
    assert_same_state(a, b)


@params
def test_export_import_is_exact_and_learning_continues_identically(cls, kind):
    data = stream(kind, n_tasks=7)
    a = make(cls, kind)
    fit(a, data[:4])
    b = load_state(a.get_state())
    assert type(b) is cls
    X = np.random.default_rng(9).normal(size=(11, 5))
    for tid in a.task_ids:
        np.testing.assert_array_equal(a.predict(tid, X), b.predict(tid, X))
    # continuing from the restored copy gives bit-identical results, new and known tasks alike
    for tid, Xt, yt in data[4:] + [("t1", data[1][1][:5], data[1][2][:5])]:
        ra, rb = a.learn(tid, Xt, yt), b.learn(tid, Xt, yt)
        assert ra.n_samples == rb.n_samples and ra.new_representative == rb.new_representative
    assert_same_state(a, b)


@params
def test_a_copy_learns_without_touching_the_original(cls, kind):
    data = stream(kind, n_tasks=6)
    a = make(cls, kind)
    fit(a, data[:4])
    frozen = load_state(a.get_state())
    b = a.copy()
    for tid, X, y in data[4:] + [("t0", data[0][1][:6], data[0][2][:6])]:
        b.learn(tid, X, y)
    assert_same_state(a, frozen)
    assert len(b.task_ids) == 6


@params
def test_following_partial_states_equals_loading_the_full_state(cls, kind):
    data = stream(kind, n_tasks=6)
    writer = make(cls, kind)
    fit(writer, data[:2])
    reader = load_state(writer.get_state())
    frozen = load_state(writer.get_state())
    for tid, X, y in data[2:] + [("t0", data[0][1][:5], data[0][2][:5])]:
        writer.learn(tid, X, y)
        reader = reader.with_state(writer.get_state(tasks=[tid]))  # only the touched task
    assert_same_state(reader, writer)
    assert_same_state(frozen, load_state(frozen.get_state()))  # the old reader model is untouched
    assert len(frozen.task_ids) == 2


@params
def test_partial_export_holds_only_the_named_tasks(cls, kind):
    m = make(cls, kind)
    fit(m, stream(kind)[:3])
    part = m.get_state(tasks=["t1"])
    assert list(part.tasks) == ["t1"] and part.arrays.keys() == m.get_state().arrays.keys()


@params
def test_more_data_for_a_known_task_is_appended(cls, kind):
    data = stream(kind)
    m = make(cls, kind)
    fit(m, data)
    tid, X, y = data[2]
    r = m.learn(tid, X[:7], y[:7])
    assert not r.new_task and r.n_samples == 37 and len(m.task_ids) == len(data)


@params
def test_a_task_learned_in_batches_has_the_single_task_fit_of_all_its_rows(cls, kind):
    data = stream(kind)
    whole, split = make(cls, kind), make(cls, kind)
    fit(whole, data[:3])
    fit(split, data[:2])
    tid, X, y = data[2]
    for rows in (slice(0, 7), slice(7, 19), slice(19, None)):
        split.learn(tid, X[rows], y[rows])
    a, b = whole.tasks_[tid], split.tasks_[tid]
    assert a.n_samples == b.n_samples == 30
    np.testing.assert_allclose(b.w, a.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.omega, a.omega, rtol=1e-9, atol=1e-12)


@params
def test_a_regression_task_stays_the_same_size_however_many_rows_it_learns(cls, kind):
    """Regression keeps sufficient statistics; classification needs (and keeps) its rows."""
    data = stream(kind)
    m = make(cls, kind)
    fit(m, data)
    tid, X, y = data[1]
    size = lambda: sum(a.nbytes for a in m.tasks_[tid].data.to_arrays().values())  # what it keeps of the rows
    before = size()
    for _ in range(5):
        m.learn(tid, X, y)
    row_bytes = 5 * (X.nbytes + y.nbytes)
    assert size() == before if kind == "regression" else size() == before + row_bytes


@params
def test_max_task_rows_bounds_a_task_and_replays_identically(cls, kind):
    data = stream(kind)
    capped, again, exact = make(cls, kind, max_task_rows=45), make(cls, kind, max_task_rows=45), make(cls, kind)
    for m in (capped, again, exact):
        fit(m, data)
    tid, X, y = data[1]
    for i in range(6):  # 30 + 6 x 30 rows of task t1
        for m in (capped, again):
            m.learn(tid, X[::-1] if i % 2 else X, y[::-1] if i % 2 else y)
    assert capped.tasks_[tid].n_samples == 210
    assert_same_state(capped, again)  # the reservoir's draws are a function of the batches
    kept = capped.tasks_[tid].data.to_arrays()
    if kind == "classification":
        assert kept["X"].shape == (45, X.shape[1]) and kept["y"].shape == (45,)
        assert {tuple(r) for r in kept["X"]} <= {tuple(r) for r in X}  # a sample of what was sent
    else:  # exact statistics: the cap does not apply
        assert kept["gram"].shape == (X.shape[1] + 1,) * 2
    # a cap no task reaches changes nothing
    loose = make(cls, kind, max_task_rows=10_000)
    fit(loose, data)
    for t in exact.task_ids:
        np.testing.assert_array_equal(loose.theta(t), exact.theta(t))
    rebuilt = load_state(capped.get_state())
    assert rebuilt.get_params()["max_task_rows"] == 45
    r1, r2 = rebuilt.learn(tid, X, y), capped.learn(tid, X, y)
    np.testing.assert_array_equal(rebuilt.theta(tid), capped.theta(tid))
    assert r1.n_samples == r2.n_samples == 240


@pytest.mark.parametrize("cap", [0, -1, 2.5, True, "10"])
def test_bad_max_task_rows_is_refused(cap):
    m = STL(max_task_rows=cap)
    with pytest.raises(InputError, match="max_task_rows"):
        m.learn("a", np.ones((3, 2)), np.ones(3))
    assert not m.is_fitted


@params
def test_a_format_1_state_with_raw_rows_still_loads(cls, kind):
    data = stream(kind)
    m = make(cls, kind)
    fit(m, data)
    tid, X, y = data[0]
    m.learn(tid, X[:9], y[:9])
    state = m.get_state()
    rows = {t: (X_, y_) for t, X_, y_ in data}
    rows[tid] = (np.vstack([X, X[:9]]), np.concatenate([y, y[:9]]))
    for t, task in state.tasks.items():  # format 1 stored every task's raw rows
        arrays = {k: v for k, v in task["arrays"].items() if k not in ("gram", "moment", "n", "X", "y")}
        X_, y_ = rows[t]
        task["arrays"] = {"X": X_, "y": (y_ == 1.0).astype(float) if kind == "classification" else y_, **arrays}
    state.format_version = 1
    old = load_state(state)
    probe = data[3][1]
    for t in m.task_ids:
        np.testing.assert_allclose(old.decision_function(t, probe), m.decision_function(t, probe), rtol=1e-12)
        for k, v in m.task_state(t)["arrays"].items():
            np.testing.assert_allclose(old.task_state(t)["arrays"][k], v, rtol=1e-10, atol=1e-10, err_msg=k)
    r_old, r_new = old.learn("t9", *data[4][1:]), m.learn("t9", *data[4][1:])
    np.testing.assert_allclose(old.theta("t9"), m.theta("t9"), rtol=1e-8, atol=1e-10)
    assert r_old.n_samples == r_new.n_samples


BAD_BATCHES = {
    "wrong width": lambda X, y: (X[:, :3], y),
    "nan": lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 4, np.nan, X), y),
    "inf in y": lambda X, y: (X, np.where(np.arange(y.size) == 1, np.inf, y)),
    "empty": lambda X, y: (X[:0], y[:0]),
    "mismatched lengths": lambda X, y: (X, y[:-1]),
    "non-numeric": lambda X, y: ([["a"] * X.shape[1]] * len(y), y),
    "1-D X": lambda X, y: (X[:, 0], y),
}


@params
@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_bad_input_is_refused_and_changes_nothing(cls, kind, case):
    data = stream(kind)
    m = make(cls, kind)
    fit(m, data[:3])
    before = load_state(m.get_state())
    X, y = BAD_BATCHES[case](data[3][1], data[3][2])
    with pytest.raises(InputError) as err:
        m.learn("t1", X, y)
    assert str(err.value)
    assert_same_state(m, before)


@params
@pytest.mark.parametrize("scale", [1e16, 1e150, 1e300])
def test_huge_finite_values_are_learned_or_refused_cleanly(cls, kind, scale):
    data = stream(kind)
    m = make(cls, kind)
    fit(m, data[:3])
    before = load_state(m.get_state())
    X, y = data[3][1] * scale, data[3][2] * (scale if kind == "regression" else 1.0)
    try:
        m.learn("t1", X, y)
    except InputError as err:
        assert "Nothing was changed" in str(err) or str(err)
        assert_same_state(m, before)
    else:
        assert all(np.all(np.isfinite(a)) for a in m.get_state().arrays.values())
    try:
        out = m.predict("t0", X)
    except InputError:
        pass
    else:
        assert np.all(np.isfinite(out))


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_invalid_labels_are_refused_and_change_nothing(cls):
    data = stream("classification")
    m = make(cls, "classification")
    fit(m, data[:3])
    before = load_state(m.get_state())
    X = data[3][1]
    for y, msg in [(np.full(30, 2.0), "labels"), (np.r_[np.zeros(15), -np.ones(15)], "labels")]:
        with pytest.raises(InputError, match=msg):
            m.learn("t0", X, y)
    with pytest.raises(InputError, match="convention"):
        m.learn("t0", X, 2 * data[0][2] - 1)  # t0 came in {0,1}; now {-1,1}
    assert_same_state(m, before)


@params
def test_unknown_task_and_bad_prediction_input(cls, kind):
    m = make(cls, kind)
    fit(m, stream(kind)[:2])
    with pytest.raises(UnknownTaskError, match="nope"):
        m.predict("nope", np.zeros((1, 5)))
    with pytest.raises(InputError, match="features"):
        m.predict("t0", np.zeros((1, 4)))


def test_every_exported_learner_is_in_the_suite():
    exported = {getattr(core, n) for n in core.__all__ if isinstance(getattr(core, n), type)
                and issubclass(getattr(core, n), core.LifelongLearner) and getattr(core, n) is not core.LifelongLearner}
    assert exported <= set(LEARNERS)


def test_bad_hyper_parameters_are_refused_before_any_work():
    m = FCL3(lambda2=-1.0)
    with pytest.raises(InputError, match="lambda2"):
        m.learn("a", np.ones((3, 2)), np.ones(3))
    assert not m.is_fitted


def test_state_format_version_is_checked():
    m = FCL3()
    fit(m, stream("regression")[:2])
    s = m.get_state()
    s.format_version = 999
    with pytest.raises(ValueError, match="format"):
        load_state(s)
