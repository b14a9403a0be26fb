"""Bad input to the engine: refused with InputError (or UnknownTaskError, or ValueError for a
bad state), leaving the model exactly as it was.

The checks of :data:`core.checks.INPUT_CHECKS` run here over every learner and kind (one test
per bad batch and per scale); the rest are the engine's specific refusals.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import core
from core import ELLA, FCL3, STL, InputError, checks, load_state

from .helpers import KINDS, basis_tasks, factory, learners, make  # noqa: F401

classifiers = pytest.mark.parametrize("cls", list(core.LEARNERS.values()), ids=lambda c: c.__name__)


# ----------------------------------------------------------------------------- every learner
@learners
@pytest.mark.parametrize("case", list(checks.BAD_BATCHES))
def test_bad_input_is_refused_and_changes_nothing(cls, kind, case):
    checks.check_bad_batches_are_refused_and_change_nothing(factory(cls, kind), cases=[case])


@learners
@pytest.mark.parametrize("scale", checks.HUGE_SCALES)
def test_huge_finite_values_are_learned_or_refused_cleanly(cls, kind, scale):
    checks.check_huge_finite_values_are_learned_or_refused_cleanly(factory(cls, kind), scales=[scale])


@classifiers
def test_invalid_labels_are_refused_and_change_nothing(cls):
    checks.check_invalid_labels_are_refused_and_change_nothing(factory(cls, "classification"))


@learners
def test_unknown_task_and_bad_prediction_input(cls, kind):
    checks.check_unknown_task_and_bad_prediction_input(factory(cls, kind))


def test_every_input_check_runs_here():
    assert set(checks.INPUT_CHECKS) == {
        checks.check_bad_batches_are_refused_and_change_nothing,
        checks.check_huge_finite_values_are_learned_or_refused_cleanly,
        checks.check_invalid_labels_are_refused_and_change_nothing,
        checks.check_unknown_task_and_bad_prediction_input,
    }


# ----------------------------------------------------------------------------- hyper-parameters
@pytest.mark.parametrize("cap", [0, -1, 2.5, True, "10"])
def test_bad_max_task_rows_is_refused(cap):
    m = STL(max_task_rows=cap)
    with pytest.raises(InputError, match="max_task_rows"):
        m.learn("a", np.ones((3, 2)), np.ones(3))
    assert not m.is_fitted


def test_bad_hyper_parameters_are_refused_before_any_work():
    m = FCL3(lambda2=-1.0)
    with pytest.raises(InputError, match="lambda2"):
        m.learn("a", np.ones((3, 2)), np.ones(3))
    assert not m.is_fitted


# ----------------------------------------------------------------------------- ELLA


@pytest.mark.parametrize("bad", [
    lambda X, y: (X[:, :-1], y),
    lambda X, y: (np.where(np.arange(X.size).reshape(X.shape) == 3, np.nan, X), y),
    lambda X, y: (X[:0], y[:0]),
    lambda X, y: (X, y[:-1]),
    lambda X, y: (X, np.full_like(y, np.inf)),
])
def test_ella_bad_input_leaves_state_unchanged(bad):
    model = ELLA(n_components=2)
    tasks = basis_tasks()
    for t, X, y in tasks[:3]:
        model.learn(t, X, y)
    before = model.get_state()
    X, y = bad(tasks[3][1], tasks[3][2])
    with pytest.raises(InputError):
        model.learn("t0", X, y)
    after = model.get_state()
    for k, v in before.arrays.items():
        np.testing.assert_array_equal(v, after.arrays[k])
    assert after.meta == before.meta and set(after.tasks) == set(before.tasks)
    assert set(before.tasks["t0"]["arrays"]) == set(after.tasks["t0"]["arrays"])
    for k, v in before.tasks["t0"]["arrays"].items():
        np.testing.assert_array_equal(v, after.tasks["t0"]["arrays"][k])


def test_ella_invalid_labels_and_params_rejected():
    model = ELLA(kind="classification")
    X = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(InputError):
        model.learn("a", X, np.arange(10.0))
    with pytest.raises(InputError):
        ELLA(n_components=0).learn("a", X, np.zeros(10))
    with pytest.raises(InputError):
        ELLA(ridge=0.0).learn("a", X, np.zeros(10))
    assert not model.is_fitted


# ----------------------------------------------------------------------------- states and names
def test_state_format_version_is_checked():
    m = FCL3()
    checks.fit(m, checks.stream("regression")[:2])
    s = m.get_state()
    s.format_version = 999
    with pytest.raises(ValueError, match="format"):
        load_state(s)


def test_a_state_of_an_unknown_learner_is_refused():
    s = STL().get_state()
    s.estimator = "NoSuchLearner"
    with pytest.raises(InputError, match="NoSuchLearner.*STL, ELLA, FCL3, CL3, FCL3WithoutDecoder"):
        load_state(s)


@pytest.mark.parametrize("name", ["NoSuchLearner", "LifelongLearner", "fcl3", "", None, ["FCL3"]])
def test_learner_class_refuses_an_unknown_name_and_names_the_known_ones(name):
    with pytest.raises(InputError, match="unknown learner") as err:
        core.learner_class(name)
    assert all(known in str(err.value) for known in core.LEARNERS)


# ----------------------------------------------------------------------------- numerical failures
@pytest.mark.parametrize("error", [FloatingPointError("not finite"), np.linalg.LinAlgError("not positive definite")])
def test_a_numerical_failure_is_refused_by_type_and_rolled_back(monkeypatch, error):
    import core.fcl3 as fcl3_module

    m = make(FCL3, "regression")
    data = checks.stream("regression")
    checks.fit(m, data[:3])
    before = load_state(m.get_state())

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(fcl3_module, "solve_rows_in_ball", fail)
    with pytest.raises(InputError, match=rf"numerical failure \({type(error).__name__}\).*Nothing was changed"):
        m.learn("t3", *data[3][1:])
    checks.assert_same_state(m, before)


def test_any_other_error_is_not_disguised_as_bad_input(monkeypatch):
    import core.fcl3 as fcl3_module

    m = make(FCL3, "regression")
    data = checks.stream("regression")
    checks.fit(m, data[:3])
    before = load_state(m.get_state())

    def fail(*args, **kwargs):
        raise ValueError("array must not contain infs or NaNs")

    monkeypatch.setattr(fcl3_module, "solve_rows_in_ball", fail)
    with pytest.raises(ValueError) as err:
        m.learn("t3", *data[3][1:])
    assert not isinstance(err.value, InputError)
    checks.assert_same_state(m, before)


#: A batch of finite values whose squared-loss statistics overflow, so that the task's
#: single-task solve falls back to least squares on a system holding inf and NaN, on which
#: LAPACK's least squares never returns.
_OVERFLOWING_BATCH = (
    [[0.0, -3.502132270651982e+110, -6.424154577936305e-177, 8.289622796670042e+152],
     [1e+308, -1.0, 0.3665440204324967, -0.20273357910365394],
     [-4.0576479850677207e+49, 5e-324, -8.723559467721425e+114, -1009.8828310000243]],
    [-1.6040493954244048, -9.195389090109829e-243, 0.380283167858065])


def test_a_batch_whose_statistics_overflow_is_refused_and_never_hangs():
    """Run in a child process with a timeout: a learner that reached ``gelsd`` with that
    system would spin there for ever, and would hang the whole run in this process."""
    script = f"""
import numpy as np, core, core.checks
m = core.LEARNERS["FCL3"](kind="regression")
rng = np.random.default_rng(1)
for t in ("a", "b"):
    X = rng.normal(size=(8, 4))
    m.learn(t, X, X @ np.ones(4))
before = m.get_state()
X, y = {_OVERFLOWING_BATCH!r}
try:
    m.learn("b", X, y)
    print("learned")
except core.InputError as exc:
    assert "numerical failure (FloatingPointError)" in str(exc), exc
    core.checks.assert_same_state(m, core.load_state(before))
    print("refused")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stdout + out.stderr
