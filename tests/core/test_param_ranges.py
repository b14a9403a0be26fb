"""Every hyper-parameter of every learner has a declared range, checked before any work
(issue 22, row 3): refused values raise :class:`ValueError` naming the parameter and its range."""
from __future__ import annotations

import time

import numpy as np
import pytest

import core
from core import checks
from core.params import MAX_SYSTEM_SIZE, describe, missing_constraints, validate_params

from .helpers import make

LEARNERS = list(core.LEARNERS.values())
FCL3_FAMILY = [core.FCL3, core.CL3, core.FCL3WithoutDecoder]


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_the_table_covers_every_init_parameter(cls):
    """A parameter added to a learner without a range fails here."""
    assert missing_constraints(cls) == []
    assert set(cls._parameter_constraints) == set(cls._param_names())  # and nothing stale


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_the_defaults_are_in_range(cls):
    for kind in ("regression", "classification"):
        cls(kind=kind).check_params()


#: (learners, parameter, refused values)
REFUSED = [
    (LEARNERS, "kind", ["ranking", None, 1]),
    (LEARNERS, "mu", [-1e-3, float("nan"), float("inf"), 1e7, "0.1", True]),
    (LEARNERS, "standardize", [1, "yes", None]),
    (LEARNERS, "random_state", [-1, 2**63, 1.5, None, True, "0"]),
    (LEARNERS, "max_task_rows", [0, -1, 2.5, True, "10", 10**6 + 1]),
    (LEARNERS, "task_models", ["bayes", None]),
    ([core.ELLA, *FCL3_FAMILY], "n_components", [0, -3, 51, 100, 100_000, 2.0, True, None]),
    ([core.ELLA, *FCL3_FAMILY], "ridge", [0.0, -1.0, float("inf"), 1e7]),
    ([core.ELLA], "code_l1", [-1.0, float("nan")]),
    ([core.ELLA], "init_with_first_tasks", [0, "true"]),
    (FCL3_FAMILY, "tol", [-1, 0, 0.0, float("nan"), 2.0, "1e-6"]),
    (FCL3_FAMILY, "max_outer_iter", [100_000_000, 201, 1000, -1, 20.0, True, None]),
    (FCL3_FAMILY, "lambda1", [-1.0, 1e9]),
    (FCL3_FAMILY, "lambda2", [-1.0, float("inf")]),
    (FCL3_FAMILY, "alpha", [-0.1]),
    (FCL3_FAMILY, "gamma", [-0.5, float("nan")]),
    (FCL3_FAMILY, "encoder_weight", [-0.1]),
    (FCL3_FAMILY, "assignment_ridge", [0.0, -1.0]),
    (FCL3_FAMILY, "encoder_ridge", [0.0]),
    (FCL3_FAMILY, "max_norm", [0.0, -1.0, float("inf")]),
    (FCL3_FAMILY, "phi", ["relu", None]),
    (FCL3_FAMILY, "joint", [1, None]),
    (FCL3_FAMILY, "task_intercept", [0, "no"]),
    (FCL3_FAMILY, "z_init", ["random"]),
    (FCL3_FAMILY, "seed_columns", ["all"]),
]
CASES = [(cls, name, value) for classes, name, values in REFUSED for cls in classes for value in values]


@pytest.mark.parametrize("cls,name,value", CASES, ids=lambda v: getattr(v, "__name__", repr(v)))
def test_a_value_out_of_range_is_refused_naming_the_parameter_and_its_range(cls, name, value):
    learner = cls(**{name: value})
    with pytest.raises(ValueError) as err:
        learner.check_params()
    assert isinstance(err.value, core.InputError)
    message = str(err.value)
    assert message.startswith(f"{cls.__name__}: {name} must be ") and f"got {value!r}" in message
    assert any(word in message for word in ("in [", "in (", "one of", "true or false")), message
    # learn refuses it too, before any work
    with pytest.raises(core.InputError, match=name):
        learner.learn("a", np.ones((3, 2)), np.ones(3))
    assert not learner.is_fitted


def test_the_issue_values_are_refused_with_their_ranges():
    with pytest.raises(ValueError, match=r"FCL3: max_outer_iter must be an integer in \[0, 200\], got 100000000; "
                       r"tol must be a finite number in \(0, 1\], got -1$"):
        core.FCL3(tol=-1, max_outer_iter=100_000_000).check_params()
    with pytest.raises(ValueError, match=r"max_outer_iter must be an integer in \[0, 200\], got 100000000"):
        core.FCL3(max_outer_iter=100_000_000).check_params()
    with pytest.raises(ValueError, match=r"n_components must be an integer in \[1, 50\], got 100000"):
        core.FCL3(n_components=100_000).check_params()


@pytest.mark.parametrize("cls,name,value", [
    (core.FCL3, "tol", 1), (core.FCL3, "tol", 1e-300), (core.FCL3, "max_outer_iter", 0),
    (core.FCL3, "max_outer_iter", 200), (core.FCL3, "n_components", 50), (core.ELLA, "n_components", 50),
    (core.FCL3, "max_norm", None), (core.FCL3, "mu", 0), (core.STL, "random_state", 2**63 - 1),
    (core.STL, "max_task_rows", np.int64(5)), (core.FCL3, "lambda2", np.float32(0.5)),
    (core.FCL3, "joint", np.bool_(False)),
])
def test_values_at_the_ends_of_their_ranges_are_accepted(cls, name, value):
    cls(**{name: value}).check_params()


def test_validate_params_checks_a_mapping_before_a_learner_is_made():
    with pytest.raises(core.InputError, match="gamma"):
        validate_params(core.FCL3(), {"gamma": -1.0})


@pytest.mark.parametrize("cls", [core.FCL3, core.ELLA], ids=lambda c: c.__name__)
def test_a_first_batch_whose_system_is_too_large_is_refused_cleanly(cls):
    """1,000 features at p = 5: a 200 MB decoder, rewritten by every commit: refused with 422's
    InputError on the first batch, the model left unfitted; a smaller p is learned."""
    X, y = np.random.default_rng(0).normal(size=(4, 1000)), np.ones(4)
    m = cls(n_components=5)
    with pytest.raises(core.InputError, match=r"1,000 features|x 5 = .*smaller n_components \(at most [23] here\)"):
        m.learn("a", X, y)
    assert not m.is_fitted and m.task_ids == []
    ok = cls(n_components=2)
    ok.learn("a", X, y)
    assert ok.is_fitted
    assert MAX_SYSTEM_SIZE >= 129 * 20  # the speed benchmark's largest configuration


def test_ella_information_gain_checks_the_size_too():
    X = np.random.default_rng(0).normal(size=(4, 1000))
    with pytest.raises(core.InputError, match="basis L"):
        core.ELLA(n_components=5).information_gain(X, np.ones(4))


def test_the_largest_alternation_the_ranges_allow_is_bounded():
    """``tol`` tiny and ``max_outer_iter`` at its bound: every update still ends, after at most
    200 rounds (the issue's ``tol = -1`` with 10^8 rounds never did)."""
    m = make(core.FCL3, "regression", max_outer_iter=200, tol=1e-300)
    t0 = time.perf_counter()
    checks.fit(m, checks.stream("regression", n_tasks=8))
    assert time.perf_counter() - t0 < 60
    assert len(m.task_ids) == 8


def test_describe_renders_one_row_per_parameter():
    table = describe(LEARNERS)
    names = {n for cls in LEARNERS for n in cls._param_names()}
    for name in names:
        assert f"| `{name}` |" in table
    assert "no range declared" not in table


def test_a_batch_too_wide_for_any_component_count_says_so():
    with pytest.raises(core.InputError, match=r"3,500 x 1 = 3,500 unknowns .* use fewer features$"):
        core.FCL3(n_components=1).learn("a", np.ones((2, 3500)), np.ones(2))


@pytest.mark.parametrize("cls", [core.FCL3, core.ELLA], ids=lambda c: c.__name__)
def test_check_size_tells_before_any_batch(cls):
    cls(n_components=5).check_size(500)
    with pytest.raises(core.InputError, match="n_components"):
        cls(n_components=5).check_size(1000)
