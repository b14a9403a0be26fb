"""``learn(..., defer_refits=True)``: a batch that leaves the stream-level estimates (the
population, the stream's family and priors) to the next batch learned without it."""
from __future__ import annotations

import numpy as np
import pytest

from core import load_state
from core.evidence import family_priors, prequential_family
from core.exceptions import InputError
from core.fcl3 import FCL3
from core.population import refit_due

from .helpers import KINDS, basis_tasks, learners, make


def _stream(kind, n_tasks=6, seed=0):
    m = FCL3(kind=kind, random_state=0, n_components=3)
    for tid, X, y in basis_tasks(n_tasks=n_tasks, d=4, n=30, seed=seed, kind=kind):
        m.learn(tid, X[:20], y[:20])
    return m, {tid: (X[20:], y[20:]) for tid, X, y in basis_tasks(n_tasks=n_tasks, d=4, n=30, seed=seed, kind=kind)}


@pytest.mark.parametrize("kind", KINDS)
def test_deferred_batches_keep_the_stream_estimates_and_count_toward_their_schedules(kind):
    m, rest = _stream(kind)
    population, choice = m.population_, dict(m.stream_choice_)
    pop_updates, choice_updates = m.population_updates_, choice["updates"]
    tids = list(rest)[:3]
    cursor, evidence = m.evidence_cursor_, {t: r.meta["evidence"] for t, r in m.tasks_.items()}
    for tid in tids:
        X, y = rest[tid]
        result = m.learn(tid, X[:5], y[:5], defer_refits=True)
        assert result.changed_tasks == ()  # no other task's evidence measured again
    assert m.evidence_cursor_ == cursor
    # no task's evidence measured, the learned ones' left due
    assert all(r.meta["evidence"] is evidence[t] for t, r in m.tasks_.items())
    assert m.evidence_due_ == tuple(tids)
    assert m.population_ is population
    assert m.stream_choice_["family"] == choice["family"] and m.stream_choice_["priors"] == choice["priors"]
    assert m.stream_choice_["known"] == choice["known"]  # a deferred batch is not scored
    assert m.stream_choice_["new"] == choice["new"]
    assert m.population_updates_ == pop_updates + 3
    assert m.stream_choice_["updates"] == choice_updates + 3
    fitted, since = m.population_tasks_, m.population_updates_ + 1

    X, y = rest[tids[0]]
    # not deferred: measures the due tasks and one more, and refits what is due by now
    changed = m.learn(tids[0], X[5:], y[5:]).changed_tasks
    assert changed[:2] == tuple(tids[1:]) and len(changed) == 3 and changed[2] not in tids
    assert m.evidence_due_ == ()
    assert all(m.tasks_[t].meta["evidence"] != evidence[t] for t in tids)
    priors = family_priors(m._choice_evidence(), m._families, m._n_omega,
                           start=choice["priors"])  # warm-started from the choice the batches kept
    assert m.stream_choice_["updates"] == 0  # at most EVERY_UPDATE_TASKS tasks: chosen at every refit
    # the batch not deferred was scored, the deferred ones were not
    c = m.stream_choice_
    assert set(c["known"]["scores"]) == {f.name for f in m._families}
    assert c["known"]["scores"] != choice["known"]["scores"] and c["new"] == choice["new"]
    assert c["known"]["batches"] == choice["known"]["batches"] + 1
    k = c["known"] if c["known"]["batches"] >= 2 else c["new"]
    assert c["family"] == prequential_family(k["scores"], m._families, m._reference_families, k["products"],
                                             k["batches"])
    for name, log_pi in priors.items():
        np.testing.assert_allclose(m.stream_choice_["priors"][name], log_pi, rtol=0, atol=0)
    if refit_due(fitted, since, len(m.tasks_)):
        assert m.population_updates_ == 0 and m.population_ is not population
    else:
        assert m.population_updates_ == since


@pytest.mark.parametrize("kind", KINDS)
def test_a_deferred_batch_updates_its_task_and_the_library_exactly_as_an_ordinary_one(kind):
    m, rest = _stream(kind)
    deferred, ordinary = m.copy(), m.copy()
    tid = next(iter(rest))
    X, y = rest[tid]
    a, b = deferred.learn(tid, X, y, defer_refits=True), ordinary.learn(tid, X, y)
    np.testing.assert_array_equal(a.code, b.code)
    np.testing.assert_array_equal(deferred.D_, ordinary.D_)
    ra, rb = deferred.tasks_[tid], ordinary.tasks_[tid]
    np.testing.assert_array_equal(ra.w, rb.w)
    np.testing.assert_array_equal(ra.omega, rb.omega)
    # its evidence, which only the stream's choice reads, is left due: its predictions are those
    # it would have with its evidence measured
    assert ra.meta["evidence"] is m.tasks_[tid].meta["evidence"] and deferred.evidence_due_ == (tid,)
    measured = deferred.copy()
    measured._measure_evidence(tid)
    assert measured.tasks_[tid].meta["evidence"] != ra.meta["evidence"]
    np.testing.assert_array_equal(deferred.predict(tid, X), measured.predict(tid, X))


@pytest.mark.parametrize("kind", KINDS)
def test_due_evidence_is_measured_against_the_library_without_the_task_as_the_next_batch_leaves_it(kind):
    m, rest = _stream(kind)
    first, second = list(rest)[:2]
    m.learn(first, *rest[first], defer_refits=True)
    m.learn(second, *rest[second])
    assert m.evidence_due_ == ()
    # measured again on what the next batch left: the same curves (measured then, not before the
    # batch changed the library)
    again = m.copy()
    again._measure_evidence(first)
    assert again.tasks_[first].meta["evidence"] == m.tasks_[first].meta["evidence"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_new_task_deferred_is_measured_at_once_and_due_evidence_survives_the_state(kind):
    m, _ = _stream(kind, n_tasks=5)
    tid, X, y = basis_tasks(n_tasks=6, d=4, n=30, seed=0, kind=kind)[5]
    # few rows: no refit of the scaling here (its warm-up learns every task again, deferring nothing)
    X, y = X[:6], y[:6]
    m.learn(tid, X, y, defer_refits=True)
    assert m.tasks_[tid].meta["evidence"] and m.evidence_due_ == ()  # predicted with its own evidence
    known = m.task_ids[0]
    m.learn(known, X, y, defer_refits=True)
    assert m.evidence_due_ == (known,)
    loaded = load_state(m.get_state())
    assert loaded.evidence_due_ == (known,)
    m.learn(tid, X[:3], y[:3])
    loaded.learn(tid, X[:3], y[:3])
    assert loaded.evidence_due_ == m.evidence_due_ == ()
    assert loaded.tasks_[known].meta["evidence"] == m.tasks_[known].meta["evidence"]


def test_the_first_batches_deferred_leave_the_stream_without_estimates_until_one_is_not():
    # without the scaling's warm-up, whose replay of every task refits as it goes
    m = FCL3(kind="regression", random_state=0, n_components=3, standardize=False)
    tasks = basis_tasks(n_tasks=4, d=4, n=20, seed=1)
    for tid, X, y in tasks[:3]:
        m.learn(tid, X, y, defer_refits=True)
    assert getattr(m, "stream_choice_", None) is None and not getattr(m, "population_tasks_", 0)
    assert np.all(np.isfinite(m.predict(tasks[0][0], tasks[0][1])))  # the priors chosen on demand
    m.learn(*tasks[3])
    assert m.stream_choice_["tasks"] == 4 and m.population_tasks_ == 4


@learners
def test_every_learner_defers_and_refuses_a_bad_deferred_batch_unchanged(cls, kind):
    m = make(cls, kind)
    tasks = basis_tasks(n_tasks=3, d=4, n=20, seed=2, kind=kind)
    for tid, X, y in tasks:
        m.learn(tid, X, y, defer_refits=True)
    before = m.get_state()
    X, y = tasks[0][1], tasks[0][2]
    with pytest.raises(InputError):
        m.learn(tasks[0][0], X[:, :3], y, defer_refits=True)
    after = m.get_state()
    assert after.meta == before.meta
    for name, a in before.arrays.items():
        np.testing.assert_array_equal(after.arrays[name], a)
    m.learn(tasks[1][0], X, y)
    assert np.all(np.isfinite(m.predict(tasks[1][0], X)))
