"""FCL3's updates against the minimisers of their stated objectives, and its decisions."""
import dataclasses
import numpy as np
import pytest
import scipy.optimize

from core import CL3, FCL3, FCL3WithoutDecoder
from core.fcl3 import phi_inverse

from .helpers import basis_tasks


def clustered_stream(n_tasks=12, d=6, n=40, seed=0, kind="regression", n_clusters=3, spread=0.3):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=3.0, size=(n_clusters, d))
    tasks = []
    for t in range(n_tasks):
        c = t % n_clusters
        w = centres[c] + rng.normal(scale=spread, size=d)
        X = rng.normal(size=(n, d))
        score = X @ w + 0.5
        if kind == "regression":
            y = score + rng.normal(scale=0.5, size=n)
        else:
            y = (rng.random(n) < 1 / (1 + np.exp(-score))).astype(float)
        tasks.append((f"task{t}", X, y, c))
    return tasks


def fitted(kind="regression", n_tasks=9, **params):
    m = FCL3(kind=kind, n_components=3, **params)
    results = [m.learn(tid, X, y) for tid, X, y, _ in clustered_stream(n_tasks, kind=kind)]
    return m, results


def s_objective(m, rec, s, Z, use_encoder=True):
    """The paper's eq. (subproblem_s) with our documented scalings, written out directly."""
    D, L = m.D_, m.L_
    w, om = m._quadratic(rec.w, rec.omega)
    scale = np.mean(np.diag(om))
    r = w - D @ s
    val = r @ om @ r + m.lambda1 * scale * np.abs(s).sum()
    if use_encoder:
        e = s - L @ w
        val += m.encoder_weight * scale * e @ e
    for k, (s_k, om_k) in enumerate(zip(rec.arrays["rep_codes"], rec.arrays.get("rep_omegas", [om] * 9))):
        dk = D @ (s_k - s)
        val += m.lambda2 * Z[k] * dk @ om_k @ dk
    return val


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_s_step_minimises_its_objective(kind):
    m, _ = fitted(kind)
    rec = m.tasks_["task8"]
    # re-solve task 8's code with the current libraries and the stored Z, compare with scipy
    rep_codes = rec.arrays["rep_codes"]
    rep_omegas = m._rep_hessians(rec, rep_codes, m.D_)
    w_q, om_q = m._quadratic(rec.w, rec.omega)
    scale = float(np.mean(np.diag(om_q)))
    Z = rec.arrays["assignment"]
    m_fixed = FCL3(**{**m.get_params(), "max_outer_iter": 0, "z_init": "uniform"})
    m_fixed.__dict__.update({k: v for k, v in m.__dict__.items() if k.endswith("_")})
    s, _ = m_fixed._solve_code(m.D_, m.L_, w_q, om_q, rep_codes, rep_omegas, scale, True)
    # with max_outer_iter=0 the s step ran with the uniform Z: check against that objective
    Zu = np.full(len(rep_codes) + 1, 1 / (len(rep_codes) + 1))
    rec2 = type(rec)(data=rec.data, w=rec.w, omega=rec.omega,
                     arrays={"rep_codes": rep_codes, "rep_omegas": np.array(rep_omegas)})
    f = lambda v: s_objective(m, rec2, v, Zu)
    p = s.size
    g = lambda uv: f(uv[:p] - uv[p:])
    res = scipy.optimize.minimize(g, np.zeros(2 * p), method="L-BFGS-B", bounds=[(0, None)] * (2 * p),
                                  options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 20000})
    ref = res.x[:p] - res.x[p:]
    assert f(s) <= f(ref) + 1e-8
    np.testing.assert_allclose(s, ref, atol=1e-4)
    assert Z.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_a_known_tasks_first_s_step_starts_from_its_code_and_reaches_the_same_minimiser(kind, monkeypatch):
    """A known task's update begins FISTA at the code of its last update; the s step is
    strictly convex, so the code equals the one solved from zero (to the solver's tolerance)."""
    import core.fcl3 as fcl3_module

    m, _ = fitted(kind)
    _, X, y, _ = clustered_stream(9, kind=kind, seed=3)[8]
    before = m.tasks_["task8"].arrays["code"].copy()
    cold = m.copy()
    starts = []
    real_fista, real_solve = fcl3_module.fista_quadratic_l1, FCL3._solve_code

    def spy(H, g, lam, x0=None, **kw):
        starts.append(x0)
        return real_fista(H, g, lam, x0=x0, **kw)

    monkeypatch.setattr(fcl3_module, "fista_quadratic_l1", spy)
    warm_code = m.learn("task8", X, y).code
    np.testing.assert_array_equal(starts[0], before)
    starts.clear()
    monkeypatch.setattr(FCL3, "_solve_code", lambda self, *a: real_solve(self, *a[:8], None))
    cold_code = cold.learn("task8", X, y).code
    assert starts[0] is None
    np.testing.assert_allclose(warm_code, cold_code, rtol=0, atol=1e-7)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_statistics_are_the_sum_of_stored_contributions(kind):
    m, _ = fitted(kind)
    A = sum(m._stored_contribution(r)[0] for r in m.tasks_.values())
    b = sum(m._stored_contribution(r)[1] for r in m.tasks_.values())
    np.testing.assert_allclose(m.A_, A, atol=1e-10)
    np.testing.assert_allclose(m.b_, b, atol=1e-10)


@pytest.mark.parametrize("kind", ["regression", "classification"])
@pytest.mark.parametrize("n_components, pcg", [(3, False), (5, False), (5, True)])
def test_decoder_is_the_minimiser_of_its_objective(kind, n_components, pcg, monkeypatch):
    """Also with more components than environments (unused columns decouple and are solved as
    exact zeros) and through the mixed-precision PCG."""
    import core.fcl3 as fcl3_module

    monkeypatch.setattr(fcl3_module, "PCG_MIN_SIZE", 1 if pcg else 10**9)
    m = FCL3(kind=kind, n_components=n_components)
    for tid, X, y, _ in clustered_stream(9, kind=kind, n_clusters=2):
        m.learn(tid, X, y)
    d, p = m.D_.shape
    T = len(m.tasks_)
    recs = list(m.tasks_.values())

    def objective(vecD):
        D = vecD.reshape((d, p), order="F")
        total = 0.0
        for r in recs:
            s, Z = r.arrays["code"], r.arrays["assignment"]
            w, om = m._quadratic(r.w, r.omega)
            res = w - D @ s
            total += res @ om @ res
            om_k = r.arrays.get("rep_omegas", [om] * len(r.arrays["rep_codes"]))
            for k, s_k in enumerate(r.arrays["rep_codes"]):
                dk = D @ (s_k - s)
                total += m.lambda2 * Z[k] * dk @ om_k[k] @ dk
        return total / T + m.ridge * vecD @ vecD

    ref = scipy.optimize.minimize(objective, np.zeros(d * p), method="L-BFGS-B",
                                  options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 50000}).x
    assert objective(m.D_.reshape(-1, order="F")) <= objective(ref) + 1e-9
    np.testing.assert_allclose(m.D_.reshape(-1, order="F"), ref, atol=1e-4)
    unused = ~np.any([r.arrays["code"] != 0 for r in recs], axis=0)
    assert unused.sum() == max(0, n_components - m.n_seeded_columns_)  # codes never use them
    assert np.all(m.D_[:, unused] == 0.0)  # exact zeros, not denormal leftovers


def test_decoder_respects_the_column_norm_bound():
    m, _ = fitted("regression", max_norm=1.0)
    assert np.all(np.linalg.norm(m.D_, axis=0) <= 1.0 + 1e-9)
    assert np.all(np.linalg.norm(m.L_, axis=1) <= 1.0 + 1e-9)


@pytest.mark.parametrize("phi", ["identity", "tanh"])
def test_encoder_is_the_minimiser_of_its_objective(phi):
    m, _ = fitted("regression", phi=phi)
    recs = list(m.tasks_.values())
    p, d = m.L_.shape
    T = len(recs)

    def objective(vecL):
        L = vecL.reshape(p, d)
        return sum(np.sum((phi_inverse(phi, r.arrays["code"]) - L @ m._quadratic(r.w, r.omega)[0]) ** 2)
                   for r in recs) / T \
            + m.encoder_ridge * vecL @ vecL

    ref = scipy.optimize.minimize(objective, np.zeros(p * d), method="L-BFGS-B",
                                  options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 50000}).x
    np.testing.assert_allclose(m.L_.reshape(-1), ref, atol=1e-4)


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_task_intercept_is_the_tasks_best_intercept_for_the_shared_slopes(kind):
    m, _ = fitted(kind, task_models="paper")
    rec = m.tasks_["task4"]
    theta = m.theta("task4")
    # minimise the task's quadratic ||w - theta||^2_Omega over the intercept alone (scipy)
    f = lambda b: (rec.w - np.append(theta[:-1], b)) @ rec.omega @ (rec.w - np.append(theta[:-1], b))
    best = scipy.optimize.minimize_scalar(f).x
    assert theta[-1] == pytest.approx(best, abs=1e-7)
    np.testing.assert_allclose(theta[:-1], m.D_ @ rec.arrays["code"])
    assert m.D_.shape[0] == rec.w.size - 1


def test_intercept_through_the_decoder_when_asked():
    m, _ = fitted("regression", task_intercept=False, task_models="paper")
    rec = m.tasks_["task4"]
    assert m.D_.shape[0] == rec.w.size
    np.testing.assert_allclose(m.theta("task4"), m.D_ @ rec.arrays["code"])


def test_phi_inverse_is_defined_on_every_code():
    s = np.array([0.0, -0.5, 1.0, -3.0, 2.0])
    assert np.all(np.isfinite(phi_inverse("tanh", s)))
    np.testing.assert_allclose(np.tanh(phi_inverse("tanh", np.array([0.0, -0.5, 0.3]))), [0.0, -0.5, 0.3])


def test_relearning_removes_the_old_contribution():
    tasks = clustered_stream(6)
    m = FCL3(n_components=3)
    tid, X, y, _ = tasks[0]
    m.learn(tid, X[:20], y[:20])
    for t2, X2, y2, _ in tasks[1:]:
        m.learn(t2, X2, y2)
    before = m.n_learned_
    r = m.learn(tid, X[20:], y[20:])
    assert not r.new_task and r.n_samples == 40 and m.n_learned_ == before == 6
    Xd = m.scaler_.design(X)  # the task is kept as the statistics of all 40 rows, not the rows
    np.testing.assert_allclose(m.tasks_[tid].data.gram, Xd.T @ Xd, rtol=1e-12)
    np.testing.assert_allclose(m.tasks_[tid].data.moment, Xd.T @ m.scaler_.target(y), rtol=1e-12, atol=1e-12)
    A = sum(m._stored_contribution(rec)[0] for rec in m.tasks_.values())
    M = sum(m._stored_contribution(rec)[2] for rec in m.tasks_.values())
    np.testing.assert_allclose(m.A_, A, atol=1e-10)
    np.testing.assert_allclose(m.M_, M, atol=1e-10)
    # the first task is a representative: it stays one, with its new code in S
    assert m.representatives[0] == tid
    np.testing.assert_array_equal(m.S_[0], m.tasks_[tid].arrays["code"])
    assert tid not in r.assignment_tasks


def test_first_task_is_representative_and_d0_is_guarded_at_one_representative():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    w = np.array([1.0, -2.0, 0.5, 3.0])
    m = FCL3(n_components=3)
    r1 = m.learn("a", X, X @ w)
    assert r1.new_representative and r1.outlier_probability == 1.0 and r1.n_representatives == 1
    # the paper's d0 would be 0 here (one representative) and open a cluster for any task;
    # a task equal to the first must not open one, and must not produce NaN
    r2 = m.learn("b", X, X @ w)
    assert not r2.new_representative and np.all(np.isfinite(r2.assignment))
    r3 = m.learn("c", X, X @ (-5 * w[::-1]))
    assert r3.new_representative


def test_representatives_cover_true_clusters_and_old_tasks_move_with_D():
    tasks = clustered_stream(15, d=8, n=60, seed=4)
    m = FCL3(n_components=4)
    theta_first = None
    for i, (tid, X, y, c) in enumerate(tasks):
        m.learn(tid, X, y)
        if i == 0:
            theta_first = m.theta(tid).copy()
    clusters = {c for tid, _, _, c in tasks if tid in m.representatives}
    assert clusters == {0, 1, 2}
    assert 3 <= len(m.representatives) <= 4
    assert not np.allclose(m.theta("task0"), theta_first)  # reverse transfer: D moved


def test_gamma_controls_how_many_representatives_open():
    counts = []
    for gamma in (0.01, 5.0):
        m = FCL3(n_components=3, gamma=gamma)
        for tid, X, y, _ in clustered_stream(12, spread=1.0):
            m.learn(tid, X, y)
        counts.append(len(m.representatives))
    assert counts[0] > counts[1]


def test_variants_are_distinct():
    assert FCL3WithoutDecoder().encoder_weight == 0.0 and FCL3WithoutDecoder().joint
    assert CL3().encoder_weight == 0.0 and not CL3().joint
    tasks = clustered_stream(9, spread=2.0)
    preds = []
    for cls in (FCL3, FCL3WithoutDecoder, CL3):
        m = cls(n_components=3, assignment_ridge=1.0, task_models="paper")
        for tid, X, y, _ in tasks:
            m.learn(tid, X, y)
        preds.append(np.concatenate([m.predict(tid, X) for tid, X, _, _ in tasks]))
    assert not np.allclose(preds[0], preds[1]) and not np.allclose(preds[1], preds[2])


def test_classification_predictions_use_the_tasks_label_convention():
    m = FCL3(kind="classification", n_components=2)
    for tid, X, y, _ in clustered_stream(4, kind="classification"):
        m.learn(tid, X, 2 * y - 1 if tid == "task1" else y)
    X = np.random.default_rng(0).normal(size=(30, 6))
    assert set(np.unique(m.predict("task1", X))) <= {-1.0, 1.0}
    assert set(np.unique(m.predict("task0", X))) <= {0.0, 1.0}
    p = m.predict_proba("task0", X)
    assert np.all((p > 0) & (p < 1))


def test_scaling_follows_every_row_until_the_warm_up_ends_then_freezes():
    from core.preprocessing import SCALER_WARMUP_ROWS
    rng = np.random.default_rng(0)
    X1 = np.column_stack([rng.normal(5.0, 2.0, 40), np.full(40, 30.0)])  # 2nd feature constant
    m = FCL3(n_components=2)
    m.learn("a", X1, X1[:, 0] * 3 + 100)
    np.testing.assert_allclose(m.scaler_.x_mean, X1.mean(0))
    np.testing.assert_allclose(m.scaler_.x_scale, [X1[:, 0].std(), 30.0])  # constant: scaled by magnitude
    X2 = rng.normal(50.0, 9.0, size=(40, 2))
    result = m.learn("b", X2, X2[:, 1])  # 80 rows: twice those the scaling was fitted on
    both = np.vstack([X1, X2])
    np.testing.assert_allclose(m.scaler_.x_mean, both.mean(0))
    np.testing.assert_allclose(m.scaler_.x_scale, both.std(0))
    assert result.changed_tasks == ("a",) and result.remeasured_tasks == ()  # learned again: its arrays too
    seen = 80
    while seen < SCALER_WARMUP_ROWS:
        X = rng.normal(0.0, 1.0, size=(30, 2))
        m.learn(f"t{seen}", X, X[:, 0])
        seen += 30
    frozen, before = m.scaler_, dict(m.tasks_)
    m.learn("late", rng.normal(100.0, 50.0, size=(40, 2)), np.ones(40))
    assert m.scaler_ is frozen  # past the warm-up it never moves, and no task is learned again
    assert all(m.tasks_[t].data is r.data and m.tasks_[t].w is r.w for t, r in before.items())


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_the_first_batch_does_not_decide_the_model(kind):
    """The same rows, the stream's first batch cut to one row or not: the same model once the
    scaling's warm-up is over (its refit re-learns every task from its data)."""
    tasks = clustered_stream(12, d=5, kind=kind)
    rows = [(tid, X, y) for tid, X, y, _ in tasks]
    whole, cut = FCL3(kind=kind), FCL3(kind=kind)
    for tid, X, y in rows:
        whole.learn(tid, X, y)
    tid0, X0, y0 = rows[0]
    cut.learn(tid0, X0[:1], y0[:1])
    cut.learn(tid0, X0[1:], y0[1:])
    for tid, X, y in rows[1:]:
        cut.learn(tid, X, y)
    assert sum(len(y) for _, _, y in rows) > 200
    Xt = np.random.default_rng(3).normal(size=(20, 5))
    for tid, _, _ in rows:
        np.testing.assert_allclose(cut.decision_function(tid, Xt), whole.decision_function(tid, Xt),
                                   rtol=1e-6, atol=1e-8)


def test_decoder_columns_start_from_the_first_tasks():
    tasks = clustered_stream(2, d=6)
    m = FCL3(n_components=4, ridge=1e-9)
    tid, X, y, _ = tasks[0]
    m.learn(tid, X, y)
    w, _ = m._quadratic(m.tasks_[tid].w, m.tasks_[tid].omega)
    # after the first task D s_1 reproduces the task's own model: D was seeded with w_1
    np.testing.assert_allclose(m.D_ @ m.tasks_[tid].arrays["code"], w, rtol=0.05, atol=0.05)
    assert m.n_seeded_columns_ == 1


def test_only_novel_tasks_seed_decoder_columns():
    tasks = clustered_stream(6, d=6, spread=0.05, n_clusters=2)
    seeded = {}
    for rule in ("novel", "first"):
        m = FCL3(n_components=4, seed_columns=rule)
        for tid, X, y, _ in tasks:
            m.learn(tid, X, y)
        seeded[rule] = m.n_seeded_columns_
    assert seeded == {"novel": 2, "first": 4}  # two environments vs the first four tasks


def test_pcg_and_cholesky_decoder_solves_agree(monkeypatch):
    import core.fcl3 as fcl3_module

    models = []
    for min_size in (10**9, 1):  # Cholesky everywhere, then PCG everywhere
        monkeypatch.setattr(fcl3_module, "PCG_MIN_SIZE", min_size)
        m = FCL3(n_components=3)
        for tid, X, y, _ in clustered_stream(8):
            m.learn(tid, X, y)
        models.append(m)
    np.testing.assert_allclose(models[0].D_, models[1].D_, rtol=1e-8, atol=1e-10)
    assert models[0].representatives == models[1].representatives


def test_updates_never_write_into_arrays_that_copies_exports_or_views_hold():
    """An update replaces the statistics, never writes into them: anything that still refers
    to an old array (a copy of the learner, an exported state, a view) keeps it unchanged."""
    tasks = clustered_stream(8)
    m = FCL3(n_components=3)
    for tid, X, y, _ in tasks[:5]:
        m.learn(tid, X, y)
    held = m.A_
    frozen = held.copy()
    exported = m.get_state().arrays
    exported_A = {k: v.copy() for k, v in exported.items()}
    clone = m.copy()
    view = held[:2]
    for tid, X, y, _ in tasks[5:]:
        m.learn(tid, X, y)
    assert m.A_ is not held
    np.testing.assert_array_equal(held, frozen)
    np.testing.assert_array_equal(view, frozen[:2])
    np.testing.assert_array_equal(clone.A_, frozen)
    for k, v in exported.items():
        np.testing.assert_array_equal(v, exported_A[k])
    assert not any(name.startswith("_spare") for name in vars(m))  # no buffers kept for reuse


def test_second_batches_of_known_tasks_bring_the_stream_choice_and_population_up_to_date():
    """Past EVERY_UPDATE_TASKS the family and the population are recomputed on a schedule
    that counts updates of known tasks too: new batches of old tasks alone trigger them."""
    from core.task_models import EVERY_UPDATE_TASKS
    rng = np.random.default_rng(0)
    T = EVERY_UPDATE_TASKS + 16
    m = FCL3(kind="regression", random_state=0)
    data = {f"t{i}": (rng.standard_normal((8, 3)), rng.standard_normal(8)) for i in range(T)}
    for tid, (X, y) in data.items():
        m.learn(tid, X[:4], y[:4])
    n2 = int(np.ceil(0.25 * max(m.stream_choice_["tasks"], m.population_tasks_)))
    for tid, (X, y) in list(data.items())[:n2]:
        m.learn(tid, X[4:], y[4:])
    assert len(m.tasks_) == T
    assert m.stream_choice_["updates"] < n2 and m.population_updates_ < n2  # each recomputed since


def test_tasks_whose_features_each_have_their_own_scale_and_offset_are_learned():
    """Sensors calibrated differently per task (column scales 1e-2..1e2, offsets to 1e3):
    every batch is learned (the population's EM meets a singular system here and keeps its
    last fit instead of refusing the batch) and every prediction is finite."""
    rng = np.random.default_rng(0)
    m = FCL3(kind="classification", random_state=0)
    tasks = []
    for t in range(30):
        Z = rng.standard_normal((24, 10))
        y = (rng.random(24) < 1 / (1 + np.exp(-3 * Z @ rng.standard_normal(10) / np.sqrt(10)))).astype(float)
        X = Z * 10.0 ** rng.uniform(-2, 2, 10) + rng.choice([-1.0, 1.0], 10) * 10.0 ** rng.uniform(0, 3, 10)
        tasks.append((f"t{t}", X, y))
        m.learn(f"t{t}", X[:12], y[:12])
    for tid, X, _ in tasks:
        assert np.all(np.isfinite(m.decision_function(tid, X[12:])))


@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_environment_sums_kept_by_each_update_equal_the_sums_over_every_task(kind):
    """The environments' centres read sums that each update moves (the task's old terms out
    of the environment it was counted in, its new terms in): after new tasks, second batches
    and new representatives they equal the sums over every task, and a state exported
    without them (an earlier format) gets them summed when first needed."""
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, 4)) * 2
    m = FCL3(kind=kind, random_state=0)
    for step in range(60):
        t = step % 40
        X = rng.normal(size=(12, 4))
        f = X @ (centres[t % 3] + 0.1 * rng.normal(size=4))
        y = f + 0.2 * rng.normal(size=12) if kind == "regression" else (f > 0).astype(float)
        m.learn(f"t{t}", X, y)
    assert len(m.representatives) >= 2
    counts, W, Ww = m._summed_environments()
    np.testing.assert_array_equal(m.env_counts_, counts)
    np.testing.assert_allclose(m.env_weights_, W, rtol=1e-9, atol=1e-9 * np.abs(W).max())
    np.testing.assert_allclose(m.env_weighted_, Ww, rtol=1e-9, atol=1e-9 * np.abs(Ww).max())
    from core import load_state
    state = m.get_state()
    old = dataclasses.replace(state, arrays={k: v for k, v in state.arrays.items() if not k.startswith("env_")})
    back = load_state(old)
    X = rng.normal(size=(5, 4))
    np.testing.assert_allclose(back.decision_function("t7", X), m.decision_function("t7", X), rtol=1e-9, atol=1e-9)
    back._environment_stats()
    np.testing.assert_array_equal(back.env_counts_, counts)



@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_the_library_without_a_task_weighs_each_environment_by_its_other_members(kind):
    """``D_{-t}``'s library: every other representative's environment weighs as many as the
    tasks counted in it besides ``t`` (the representative and the tasks whose largest
    assignment it holds), and an environment with other members than its representative is
    centred on their pooled fit. Summed here from the tasks themselves, for every task: a
    representative that leans most on another representative is not counted in that one's
    environment, so removing it takes nothing from it."""
    m = FCL3(kind=kind, random_state=0, n_components=3)
    tasks = basis_tasks(n_tasks=6, d=4, n=30, seed=0 if kind == "regression" else 1, kind=kind)
    for tid, X, y in tasks:
        m.learn(tid, X[:20], y[:20])
    tid, X, y = tasks[0]
    m.learn(tid, X[20:], y[20:])
    reps = list(m.representatives_)
    key = {t: t if t in reps else m._environment_of(r) for t, r in m.tasks_.items()}
    assert any(t in reps and m._environment_of(r) not in (None, t) for t, r in m.tasks_.items()), \
        "no representative leaning most on another: the case this test is for"
    for tid, record in m.tasks_.items():
        library = m._library(tid, record)
        others = [r for r in reps if r != tid]
        members = {r: [t for t in m.tasks_ if t != tid and key[t] == r] for r in others}
        sizes = np.array([len(members[r]) for r in others], dtype=float)
        np.testing.assert_allclose(library.log_weights, np.log(sizes / sizes.sum()), rtol=1e-12)
        for r, centre in zip(others, library.centres):
            if len(members[r]) < 2:  # the representative alone: D_{-t} s_r
                continue
            terms = [m._pooling_terms(m.tasks_[t]) for t in members[r]]
            W, Ww = sum(w for w, _ in terms), sum(ww for _, ww in terms)
            want = np.linalg.solve(W + 1e-9 * np.trace(W) / W.shape[0] * np.eye(W.shape[0]), Ww)
            np.testing.assert_allclose(centre, want[:centre.shape[0]], rtol=1e-6, atol=1e-9)

@pytest.mark.parametrize("kind", ["regression", "classification"])
def test_a_library_without_its_basis_skips_the_decoder_and_changes_nothing_else(kind, monkeypatch):
    """``_library(..., basis=False)`` has the centres and weights of the full library exactly and
    no basis; it re-solves the decoder without the task only for an environment that falls
    back to ``D_{-t} s_k``. A prediction served by a family of ``rho = 0`` reads it: the same
    numbers as a model that serves the same family from the full library, with fewer solves."""
    m = FCL3(kind=kind, random_state=0, n_components=4)
    tasks = []
    rng = np.random.default_rng(0)
    centres = 3.0 * rng.normal(size=(4, 4))  # environments of six tasks each, and one of one task
    centres[3] = -4.0 * centres[0]
    for t in range(19):
        X = rng.normal(size=(30, 4))
        f = X @ (centres[min(t // 6, 3)] + 0.1 * rng.normal(size=4)) + 0.3 * rng.normal(size=30)
        tasks.append((f"t{t}", X, f if kind == "regression" else (f > 0).astype(float)))
    for tid, X, y in tasks:
        m.learn(tid, X[:20], y[:20])
    for tid, X, y in tasks[:3]:
        m.learn(tid, X[20:], y[20:])
    solves = []
    real = FCL3._solve_decoder
    monkeypatch.setattr(FCL3, "_solve_decoder", lambda self, *a, **k: solves.append(1) or real(self, *a, **k))
    fallbacks = 0
    for tid, record in m.tasks_.items():
        full = m._library(tid, record)
        before = len(solves)
        lean = m._library(tid, record, basis=False)
        assert lean.basis is None and full.basis is not None
        assert np.array_equal(lean.centres, full.centres) and np.array_equal(lean.log_weights, full.log_weights)
        stats = m._environment_stats()
        alone = any(stats[r][0] - (m._environment_key(tid, record, m.representatives_) == r) < 1
                    for r in m.representatives_ if r != tid)
        assert len(solves) - before == int(alone)  # D_{-t} only for an environment of no other member
        fallbacks += alone
    assert 0 < fallbacks < len(m.tasks_), "both cases: an environment that falls back to D_{-t}, and none"
    served = m.with_task_family("mixture")
    _, priors = served._stream_priors()
    family = next(f for f in served._families if f.name == "mixture")
    pop = served._population() if served._population_fitted else None
    for tid, record in served.tasks_.items():
        solves.clear()
        theta = served._empirical_bayes_model(tid)
        assert len(solves) <= 1
        want = served._served_model(record, family, lambda: served._safe_library(tid, record), pop, priors)
        assert np.array_equal(theta, want)


def test_a_population_that_cannot_be_fitted_is_not_taken_as_fitted(monkeypatch):
    """EM failing on a singular system keeps the last fitted population; a stream without
    one stays without (its initial population, N(0, I), is never used as a prior)."""
    rng = np.random.default_rng(0)
    model = FCL3()

    def fail(self, records, start):
        raise np.linalg.LinAlgError("singular")
    monkeypatch.setattr(FCL3, "_fit_population", fail)
    model.learn("a", rng.standard_normal((8, 3)), rng.standard_normal(8))
    assert model.population_tasks_ == 0 and model._intercept_prior() is None
    monkeypatch.undo()
    model.learn("b", rng.standard_normal((8, 3)), rng.standard_normal(8))
    assert model.population_tasks_ == 2
    fitted = model.population_.copy()
    monkeypatch.setattr(FCL3, "_fit_population", fail)
    model.learn("c", rng.standard_normal((8, 3)), rng.standard_normal(8))
    np.testing.assert_array_equal(model.population_, fitted)


def test_a_failed_update_leaves_the_tasks_as_they_were():
    """The snapshot a failed update restores holds references (learning replaces ``tasks_``,
    never mutates it): after a batch whose arithmetic overflows, the model has the very same
    task dictionary and records, and predicts as before."""
    from core.exceptions import InputError
    rng = np.random.default_rng(0)
    model = FCL3()
    for tid in ("a", "b", "c"):
        model.learn(tid, rng.standard_normal((10, 3)), rng.standard_normal(10))
    tasks, record = model.tasks_, model.tasks_["a"]
    X = rng.standard_normal((4, 3))
    before = model.predict("a", X)
    with pytest.raises(InputError):
        model.learn("a", np.full((5, 3), 1e300), np.full(5, 1e300))
    assert model.tasks_ is tasks and model.tasks_["a"] is record and len(tasks) == 3
    np.testing.assert_array_equal(model.predict("a", X), before)


def test_the_stream_family_is_the_one_whose_predictions_of_the_batches_scored_best():
    """The stream's family is :func:`core.evidence.prequential_family` of the summed
    prequential scores and their products, one score per batch not deferred and family, kept
    apart for new and known tasks' batches and (logistic loss) summed. Once a population is
    fitted it is the first reference, before it (and for the paper's rule) ``ridge``."""
    from core.evidence import prequential_family
    m = FCL3(kind="classification", random_state=0, standardize=False)  # no warm-up: one score per batch
    assert m._reference_families == ("ridge",)
    tasks = list(clustered_stream(8, kind="classification", n=8, spread=0.05, n_clusters=1))
    scored = {"new": [], "known": []}
    for part, rows in (("new", slice(0, 4)), ("known", slice(4, 8))):
        for tid, X, y, _ in tasks:
            before = dict(m.stream_choice_[part]["scores"]) if getattr(m, "stream_choice_", None) else {}
            m.learn(tid, X[rows], y[rows])
            after = m.stream_choice_[part]["scores"]
            scored[part].append({name: after[name] - before.get(name, 0.0) for name in after})
            choice = m.stream_choice_
            every = scored["new"] + scored["known"]  # a logistic stream sums both kinds
            sums = {f: sum(s[f] for s in every) for f in every[0]}
            products = {f: {g: sum(s[f] * s[g] for s in every) for g in sums} for f in sums}
            assert choice["family"] == prequential_family(sums, m._families, m._reference_families, products,
                                                          len(every))
        assert m.population_tasks_ and m._reference_families == ("population", "ridge")
        sums = m.stream_choice_[part]
        assert sums["batches"] == 8 and all(set(s) == {f.name for f in m._families} for s in scored[part])
        for f in sums["scores"]:  # the sums of products of the per-batch scores
            for g in sums["scores"]:
                assert sums["products"][f][g] == pytest.approx(sum(s[f] * s[g] for s in scored[part]), rel=1e-12)
    assert FCL3(kind="classification", task_models="paper")._reference_families == ("ridge",)
