"""The conformance suite :mod:`core.checks`, run over every learner of :data:`core.LEARNERS`
(one test per check, learner and kind), and tests that its checks can fail."""
import inspect

import numpy as np
import pytest

import core
from core import CL3, ELLA, FCL3, STL, FCL3WithoutDecoder, checks

from .helpers import KINDS, factory, learners, make  # noqa: F401


@learners
@pytest.mark.parametrize("check", checks.LEARNING_CHECKS, ids=lambda c: c.__name__)
def test_learner_passes(check, cls, kind):
    check(factory(cls, kind))


def test_check_learner_runs_every_check_on_a_factory_or_an_instance():
    checks.check_learner(STL(kind="classification", mu=0.5))
    checks.check_learner(factory(STL, "regression"))


def test_every_exported_learner_is_registered():
    exported = {getattr(core, n) for n in core.__all__ if isinstance(getattr(core, n), type)
                and issubclass(getattr(core, n), core.LifelongLearner) and getattr(core, n) is not core.LifelongLearner}
    assert exported == set(core.LEARNERS.values())
    assert list(core.LEARNERS) == ["STL", "ELLA", "FCL3", "CL3", "FCL3WithoutDecoder"]
    assert all(core.LEARNERS[name].__name__ == name for name in core.LEARNERS)
    for name, cls in core.LEARNERS.items():
        assert core.learner_class(name) is cls


# ----------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("cls", list(core.LEARNERS.values()), ids=lambda c: c.__name__)
def test_get_params_round_trips_through_the_constructor(cls):
    """Every parameter lands in the attribute of its own name: distinct values, one per
    parameter, come back unchanged (``__init__`` does no work, so any value will do)."""
    names = cls._param_names()
    assert names == [n for n in inspect.signature(cls.__init__).parameters if n != "self"]
    values = {name: f"value of {name}" for name in names}
    m = cls(**values)
    assert m.get_params() == values
    assert cls(**m.get_params()).get_params() == values
    assert cls().get_params() == {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
                                  if n != "self"}


@pytest.mark.parametrize("cls", [CL3, FCL3WithoutDecoder], ids=lambda c: c.__name__)
def test_fcl3_variants_have_exactly_fcl3s_parameters(cls):
    assert cls._param_names() == FCL3._param_names()
    differ = {n for n, v in cls().get_params().items() if v != FCL3().get_params()[n]}
    assert differ == ({"encoder_weight", "joint"} if cls is CL3 else {"encoder_weight"})


# ----------------------------------------------------------------------------- the checks can fail
class MutatingSTL(STL):
    """Breaks the rules: learning writes into the caller's rows."""

    def learn(self, task_id, X, y):
        result = super().learn(task_id, X, y)
        if isinstance(X, np.ndarray):
            X[0, 0] += 1.0
        return result


class LossyExportSTL(STL):
    """Breaks the rules: a restored task loses precision."""

    def _task_record(self, task):
        record = super()._task_record(task)
        record.w = record.w.astype(np.float32).astype(float)
        return record


class InPlaceELLA(ELLA):
    """Breaks the rules: an update writes into the statistics a copy shares."""

    def _update(self, task_id, record, previous):
        A = self.A_
        result = super()._update(task_id, record, previous)
        A += 1.0
        self.A_ = A
        return result


class SilentSTL(STL):
    """Breaks the rules: a bad batch is learned instead of refused."""

    def learn(self, task_id, X, y):
        try:
            return super().learn(task_id, X, y)
        except core.InputError:
            return None


@pytest.mark.parametrize("broken, check", [
    (MutatingSTL, checks.check_learning_does_not_mutate_inputs),
    (LossyExportSTL, checks.check_export_import_is_exact_and_learning_continues_identically),
    (LossyExportSTL, checks.check_following_partial_states_equals_loading_the_full_state),
    (InPlaceELLA, checks.check_a_copy_learns_without_touching_the_original),
    (SilentSTL, checks.check_bad_batches_are_refused_and_change_nothing),
    (SilentSTL, checks.check_invalid_labels_are_refused_and_change_nothing),
], ids=lambda v: v.__name__)
def test_a_broken_learner_fails_its_check(broken, check):
    with pytest.raises(AssertionError):
        check(factory(broken, "classification"))
    with pytest.raises(AssertionError, match=r"check_\w+ failed"):  # names the first check that fails
        checks.check_learner(factory(broken, "classification"))


def test_check_learner_names_the_failing_check():
    with pytest.raises(AssertionError, match="check_learning_does_not_mutate_inputs failed"):
        checks.check_learner(MutatingSTL())


def test_a_broken_learner_is_not_registered():
    assert MutatingSTL.__name__ not in core.LEARNERS
    with pytest.raises(core.InputError, match="MutatingSTL"):
        core.learner_class(MutatingSTL.__name__)


@pytest.mark.parametrize("cls", [FCL3, ELLA, STL, CL3, FCL3WithoutDecoder])
def test_a_state_with_a_global_array_of_the_wrong_shape_is_refused(cls):
    """Every global array of a learned state, given a shape the learner cannot have, makes
    :func:`core.load_state` refuse the state (whatever the stream's family would read)."""
    rng = np.random.default_rng(0)
    model = cls()
    for t in range(4):
        X = rng.normal(size=(8, 3))
        model.learn(f"t{t}", X, X @ rng.normal(size=3))
    state = model.get_state()
    core.load_state(state)  # the state as exported loads
    for name, value in model.get_state().arrays.items():
        if name.startswith("scaler_") or np.ndim(value) == 0:
            continue
        bad = model.get_state()
        bad.arrays[name] = np.zeros((1,) * (np.ndim(value) + 1))
        with pytest.raises(ValueError, match=name):
            core.load_state(bad)
        if np.shape(value)[-1] > 1:
            bad.arrays[name] = np.zeros(np.shape(value)[:-1] + (1,))
            with pytest.raises(ValueError, match=name):
                core.load_state(bad)
