"""Conformance checks every learner of :mod:`core` passes (as scikit-learn's
``check_estimator`` and River's ``river.checks``).

Each check is a plain function ``check_...(make)`` that raises :class:`AssertionError` when
the learner breaks a rule of the :class:`core.LifelongLearner` contract. ``make`` is a
learner factory: ``make()`` returns a new, unfitted learner and ``make(**params)`` one with
those hyper-parameters changed (a learner instance may be passed instead: it is rebuilt from
its class and :meth:`~core.LifelongLearner.get_params`). The learner's ``kind`` decides the
synthetic stream the checks learn (5 features, two clusters of tasks, unequal feature
scales).

* :data:`LEARNING_CHECKS`: learning, copies, export and import, task data.
* :data:`INPUT_CHECKS`: bad batches, huge values, bad labels and unknown tasks are refused
  with :class:`core.InputError` / :class:`core.UnknownTaskError`, leaving the model unchanged.
* :func:`check_learner` runs them all.
"""
from __future__ import annotations

import contextlib
import copy
import re
from typing import Any, Callable, Iterator

import numpy as np

from .base import LifelongLearner
from .exceptions import InputError, UnknownTaskError
from .registry import LEARNERS, load_state
from .state import ModelState

Factory = Callable[..., LifelongLearner]

N_FEATURES = 5


# ----------------------------------------------------------------------------- helpers
def as_factory(learner: LifelongLearner | Factory) -> Factory:
    """``learner`` as a factory: a callable already is one; an instance is rebuilt from its
    class and parameters (keyword arguments override them)."""
    if isinstance(learner, LifelongLearner):
        cls, params = type(learner), learner.get_params()
        return lambda **kw: cls(**{**copy.deepcopy(params), **kw})
    return learner


def stream(kind: str, n_tasks: int = 6, d: int = N_FEATURES, seed: int = 0) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``n_tasks`` batches ``(task_id, X, y)`` of 30 rows from two clusters of task models."""
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


def fit(model: LifelongLearner, data) -> list:
    return [model.learn(tid, X, y) for tid, X, y in data]


def reload(model: LifelongLearner, state: ModelState) -> LifelongLearner:
    """:func:`core.load_state` for a registered learner; a learner outside the registry (a
    subclass under test) is rebuilt by its own class."""
    if LEARNERS.get(state.estimator) is type(model):
        return load_state(state)
    return type(model)._from_state(state)


def assert_same_state(a: LifelongLearner, b: LifelongLearner) -> None:
    """``a`` and ``b`` export the same state, every array bit for bit."""
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


@contextlib.contextmanager
def raises(expected: type[BaseException] | tuple[type[BaseException], ...], match: str | None = None) -> Iterator[list]:
    """Assert that the block raises ``expected`` whose text matches the regex ``match``; the
    yielded list receives the exception."""
    caught: list[BaseException] = []
    try:
        yield caught
    except expected as exc:
        if match is not None and not re.search(match, str(exc)):
            raise AssertionError(f"{type(exc).__name__}: {exc!s} does not match {match!r}") from exc
        caught.append(exc)
        return
    names = expected.__name__ if isinstance(expected, type) else " or ".join(e.__name__ for e in expected)
    raise AssertionError(f"did not raise {names}")


# ----------------------------------------------------------------------------- learning
def check_init_does_no_work_and_params_round_trip(make: Factory) -> None:
    m = as_factory(make)()
    assert not m.is_fitted and m.task_ids == []
    p = m.get_params()
    assert type(m)(**p).get_params() == p


def check_learning_does_not_mutate_inputs(make: Factory) -> None:
    m = as_factory(make)()
    data = stream(m.kind)
    copies = copy.deepcopy(data)
    fit(m, data)
    for (_, X, y), (_, X0, y0) in zip(data, copies):
        np.testing.assert_array_equal(X, X0)
        np.testing.assert_array_equal(y, y0)


def check_same_seed_same_results(make: Factory) -> None:
    make = as_factory(make)
    a, b = make(), make()
    data = stream(a.kind)
    fit(a, data)
    fit(b, data)
    assert_same_state(a, b)


def check_export_import_is_exact_and_learning_continues_identically(make: Factory) -> None:
    a = as_factory(make)()
    data = stream(a.kind, n_tasks=7)
    fit(a, data[:4])
    b = reload(a, a.get_state())
    assert type(b) is type(a)
    assert_same_state(a, b)
    X = np.random.default_rng(9).normal(size=(11, N_FEATURES))
    for tid in a.task_ids:
        np.testing.assert_array_equal(a.predict(tid, X), b.predict(tid, X))
    # continuing from the restored copy gives bit-identical results, new and known tasks alike
    for tid, Xt, yt in data[4:] + [("t1", data[1][1][:5], data[1][2][:5])]:
        ra, rb = a.learn(tid, Xt, yt), b.learn(tid, Xt, yt)
        assert ra.n_samples == rb.n_samples and ra.new_representative == rb.new_representative
    assert_same_state(a, b)


def check_a_copy_learns_without_touching_the_original(make: Factory) -> None:
    a = as_factory(make)()
    data = stream(a.kind, n_tasks=6)
    fit(a, data[:4])
    frozen = reload(a, a.get_state())
    b = a.copy()
    for tid, X, y in data[4:] + [("t0", data[0][1][:6], data[0][2][:6])]:
        b.learn(tid, X, y)
    assert_same_state(a, frozen)
    assert len(b.task_ids) == 6


def check_following_partial_states_equals_loading_the_full_state(make: Factory) -> None:
    writer = as_factory(make)()
    data = stream(writer.kind, n_tasks=6)
    fit(writer, data[:2])
    reader = reload(writer, writer.get_state())
    frozen = reload(writer, writer.get_state())
    for tid, X, y in data[2:] + [("t0", data[0][1][:5], data[0][2][:5])]:
        result = writer.learn(tid, X, y)
        # only the touched task, and those the update changed (learned again, evidence measured again)
        reader = reader.with_state(writer.get_state(tasks=[tid, *result.changed_tasks]))
    assert_same_state(reader, writer)
    assert_same_state(frozen, reload(frozen, frozen.get_state()))  # the old reader model is untouched
    assert len(frozen.task_ids) == 2


def check_partial_export_holds_only_the_named_tasks(make: Factory) -> None:
    m = as_factory(make)()
    fit(m, stream(m.kind)[:3])
    part = m.get_state(tasks=["t1"])
    assert list(part.tasks) == ["t1"] and part.arrays.keys() == m.get_state().arrays.keys()


def check_more_data_for_a_known_task_is_appended(make: Factory) -> None:
    m = as_factory(make)()
    data = stream(m.kind)
    fit(m, data)
    tid, X, y = data[2]
    r = m.learn(tid, X[:7], y[:7])
    assert not r.new_task and r.n_samples == 37 and len(m.task_ids) == len(data)


def check_a_task_learned_in_batches_has_the_single_task_fit_of_all_its_rows(make: Factory) -> None:
    make = as_factory(make)
    whole, split = make(), make()
    data = stream(whole.kind)
    fit(whole, data[:3])
    fit(split, data[:2])
    tid, X, y = data[2]
    for rows in (slice(0, 7), slice(7, 19), slice(19, None)):
        split.learn(tid, X[rows], y[rows])
    a, b = whole.tasks_[tid], split.tasks_[tid]
    assert a.n_samples == b.n_samples == 30
    np.testing.assert_allclose(b.w, a.w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.omega, a.omega, rtol=1e-9, atol=1e-12)


def check_a_regression_task_stays_the_same_size_however_many_rows_it_learns(make: Factory) -> None:
    """Regression keeps sufficient statistics; classification needs (and keeps) its rows."""
    m = as_factory(make)()
    data = stream(m.kind)
    fit(m, data)
    tid, X, y = data[1]

    def size():  # what the task keeps of its rows
        return sum(a.nbytes for a in m.tasks_[tid].data.to_arrays().values())

    before = size()
    for _ in range(5):
        m.learn(tid, X, y)
    row_bytes = 5 * (X.nbytes + y.nbytes)
    assert size() == before if m.kind == "regression" else size() == before + row_bytes


def check_max_task_rows_bounds_a_task_and_replays_identically(make: Factory) -> None:
    make = as_factory(make)
    capped, again, exact = make(max_task_rows=45), make(max_task_rows=45), make(max_task_rows=None)
    kind = exact.kind
    data = stream(kind)
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
    loose = make(max_task_rows=10_000)
    fit(loose, data)
    for t in exact.task_ids:
        np.testing.assert_array_equal(loose.theta(t), exact.theta(t))
    rebuilt = reload(capped, capped.get_state())
    assert rebuilt.get_params()["max_task_rows"] == 45
    r1, r2 = rebuilt.learn(tid, X, y), capped.learn(tid, X, y)
    np.testing.assert_array_equal(rebuilt.theta(tid), capped.theta(tid))
    assert r1.n_samples == r2.n_samples == 240


def check_a_format_1_state_with_raw_rows_still_loads(make: Factory) -> None:
    m = as_factory(make)()
    kind = m.kind
    data = stream(kind)
    fit(m, data)
    tid, X, y = data[0]
    m.learn(tid, X[:9], y[:9])
    state = m.get_state()
    rows = {t: (X_, y_) for t, X_, y_ in data}
    rows[tid] = (np.vstack([X, X[:9]]), np.concatenate([y, y[:9]]))
    for t, task in state.tasks.items():  # a format-1 task holds its raw rows
        arrays = {k: v for k, v in task["arrays"].items() if k not in ("gram", "moment", "n", "X", "y")}
        X_, y_ = rows[t]
        task["arrays"] = {"X": X_, "y": (y_ == 1.0).astype(float) if kind == "classification" else y_, **arrays}
    state.format_version = 1
    old = reload(m, state)
    probe = data[3][1]
    for t in m.task_ids:
        np.testing.assert_allclose(old.decision_function(t, probe), m.decision_function(t, probe), rtol=1e-12)
        for k, v in m.task_state(t)["arrays"].items():
            np.testing.assert_allclose(old.task_state(t)["arrays"][k], v, rtol=1e-10, atol=1e-10, err_msg=k)
    r_old, r_new = old.learn("t9", *data[4][1:]), m.learn("t9", *data[4][1:])
    np.testing.assert_allclose(old.theta("t9"), m.theta("t9"), rtol=1e-8, atol=1e-10)
    assert r_old.n_samples == r_new.n_samples


# ----------------------------------------------------------------------------- bad input
#: Batches every learner refuses, each made from a good batch ``(X, y)``.
BAD_BATCHES: dict[str, Callable[[np.ndarray, np.ndarray], tuple[Any, Any]]] = {
    "wrong width": lambda X, y: (X[:, :3], y),
    "nan": lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 4, np.nan, X), y),
    "inf in y": lambda X, y: (X, np.where(np.arange(y.size) == 1, np.inf, y)),
    "empty": lambda X, y: (X[:0], y[:0]),
    "mismatched lengths": lambda X, y: (X, y[:-1]),
    "non-numeric": lambda X, y: ([["a"] * X.shape[1]] * len(y), y),
    "1-D X": lambda X, y: (X[:, 0], y),
}

#: Finite scales that break the arithmetic of some learners.
HUGE_SCALES = (1e16, 1e150, 1e300)


def check_bad_batches_are_refused_and_change_nothing(make: Factory, cases=None) -> None:
    """Every batch of :data:`BAD_BATCHES` (or those named in ``cases``) is refused with a
    message, and the model is left as it was."""
    make = as_factory(make)
    for case in BAD_BATCHES if cases is None else cases:
        m = make()
        data = stream(m.kind)
        fit(m, data[:3])
        before = reload(m, m.get_state())
        X, y = BAD_BATCHES[case](data[3][1], data[3][2])
        with raises(InputError) as err:
            m.learn("t1", X, y)
        assert str(err[0]), case
        assert_same_state(m, before)


def check_huge_finite_values_are_learned_or_refused_cleanly(make: Factory, scales=HUGE_SCALES) -> None:
    """A finite batch of any magnitude is learned (finite parameters) or refused with
    :class:`InputError`, leaving the model as it was; predictions are finite or refused."""
    make = as_factory(make)
    for scale in scales:
        m = make()
        kind = m.kind
        data = stream(kind)
        fit(m, data[:3])
        before = reload(m, m.get_state())
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


def check_invalid_labels_are_refused_and_change_nothing(make: Factory) -> None:
    """Classification only (a regression learner passes): labels outside ``{0, 1}`` and
    ``{-1, 1}``, or in the other convention than a task's first batch, are refused."""
    m = as_factory(make)()
    if m.kind != "classification":
        return
    data = stream("classification")
    fit(m, data[:3])
    before = reload(m, m.get_state())
    X = data[3][1]
    for y, msg in [(np.full(30, 2.0), "labels"), (np.r_[np.zeros(15), -np.ones(15)], "labels")]:
        with raises(InputError, match=msg):
            m.learn("t0", X, y)
    with raises(InputError, match="convention"):
        m.learn("t0", X, 2 * data[0][2] - 1)  # t0 came in {0,1}; now {-1,1}
    assert_same_state(m, before)


def check_unknown_task_and_bad_prediction_input(make: Factory) -> None:
    m = as_factory(make)()
    fit(m, stream(m.kind)[:2])
    with raises(UnknownTaskError, match="nope"):
        m.predict("nope", np.zeros((1, N_FEATURES)))
    with raises(InputError, match="features"):
        m.predict("t0", np.zeros((1, N_FEATURES - 1)))


LEARNING_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_init_does_no_work_and_params_round_trip,
    check_learning_does_not_mutate_inputs,
    check_same_seed_same_results,
    check_export_import_is_exact_and_learning_continues_identically,
    check_a_copy_learns_without_touching_the_original,
    check_following_partial_states_equals_loading_the_full_state,
    check_partial_export_holds_only_the_named_tasks,
    check_more_data_for_a_known_task_is_appended,
    check_a_task_learned_in_batches_has_the_single_task_fit_of_all_its_rows,
    check_a_regression_task_stays_the_same_size_however_many_rows_it_learns,
    check_max_task_rows_bounds_a_task_and_replays_identically,
    check_a_format_1_state_with_raw_rows_still_loads,
)

INPUT_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_bad_batches_are_refused_and_change_nothing,
    check_huge_finite_values_are_learned_or_refused_cleanly,
    check_invalid_labels_are_refused_and_change_nothing,
    check_unknown_task_and_bad_prediction_input,
)

ALL_CHECKS = LEARNING_CHECKS + INPUT_CHECKS


def check_learner(make: LifelongLearner | Factory) -> None:
    """Run every check on ``make``; the first failure raises :class:`AssertionError` naming
    the check."""
    for check in ALL_CHECKS:
        try:
            check(make)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__} failed: {exc}") from exc
