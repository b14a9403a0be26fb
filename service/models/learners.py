"""Learner construction: the configured estimator name and hyper-parameters -> a core learner."""

from __future__ import annotations

from typing import Any

import core


class ModelConfigError(Exception):
    """The configured estimator or hyper-parameters cannot make a learner."""


def learner_class(name: str) -> type[core.LifelongLearner]:
    """The learner class called ``name`` in :data:`core.LEARNERS`."""
    cls = core.LEARNERS.get(name)
    if cls is None:
        raise ModelConfigError(f"FCL3_ESTIMATOR={name!r} is not a learner in core")
    return cls


def make_learner(model_settings: dict[str, Any]) -> core.LifelongLearner:
    """An unfitted learner from a model's settings (``estimator``, ``kind``, ``params``), its
    hyper-parameters checked: a bad value fails here, at start-up, not at the first update."""
    cls = learner_class(model_settings["estimator"])
    params = dict(model_settings.get("params") or {})
    params.pop("kind", None)
    try:
        learner = cls(kind=model_settings["kind"], **params)
        learner.check_params()
    except (TypeError, core.InputError) as exc:
        raise ModelConfigError(f"bad FCL3_PARAMS for {cls.__name__}: {exc}") from exc
    return learner
