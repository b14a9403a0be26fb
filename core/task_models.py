"""The empirical-Bayes task models every learner of :mod:`core` offers its tasks.

Each task is predicted with its posterior mean under a prior built from the learned state
without that task: its library (the learner's :meth:`_library`), the stream's population of
slopes (the mixed model, :mod:`core.population`) and a family of priors (:mod:`core.evidence`)
whose strength is read from every task's evidence. The stream's family is the one whose
prequential log score is best (:func:`core.evidence.prequential_family`). The mixin holds that
layer; :class:`core.base.LifelongLearner` holds the learner's API and calls it.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from .evidence import (GAUSSIAN_OMEGAS, LOGISTIC_OMEGAS, POPULATION, PREQUENTIAL_Z, RIDGE, Curve, Family, Library,
                       family_curves, family_priors, log_sum_exp, posterior_fit, prequential_default,
                       prequential_family, prequential_margins)
from .losses import sigmoid
from .population import (LOGISTIC_SPREAD_SCALE, NOISE_PSEUDO_DOF, Population, choose_logistic_population,
                         fit_gaussian_population, logistic_mode, marginal_objective, noise_precisions, pooled_intercept,
                         population_structure, posterior_mean, refit_due, task_noises, without_task)
from .state import SquaredLossMoments, TaskRecord

#: Streams of at most this many tasks estimate their priors over ``omega`` again at every new
#: task's update; longer ones, and a known task's update at any length, on the geometric
#: schedule of :func:`core.population.refit_due`.
EVERY_UPDATE_TASKS = 64


class EmpiricalBayesTaskModels:
    """The empirical-Bayes layer of :class:`core.base.LifelongLearner` (a mixin: it reads the
    learner's ``kind``, ``tasks_``, ``task_models`` and scaling): each task's evidence under
    every family, the stream's choice of family and priors over ``omega``, the population of
    slopes, and each task's model under them."""

    #: The prior families the learner offers its tasks (:mod:`core.evidence`); ``ridge`` first.
    _families: ClassVar[tuple[Family, ...]] = (RIDGE,)

    def _library(self, task_id: str, exclude: TaskRecord | None, basis: bool = True) -> Library | None:
        """The ingredients of task ``task_id``'s prior, from the learned state without the
        contribution of ``exclude`` (the task's stored record, or ``None`` for a task the
        state does not hold yet). ``None``: the learner has no library (STL). ``basis=False``:
        a caller that reads no family of ``rho > 0`` may get the library without its basis
        (``None``), which a learner may then skip computing."""
        return None

    def _safe_library(self, task_id: str, exclude: TaskRecord | None,
                      population: Population | None = None, basis: bool = True) -> Library | None:
        """:meth:`_library` (``basis``: its) with ``population`` (the stream's, when ``None``),
        or ``None`` when the arithmetic fails: removing a task's terms from statistics dominated
        by them can leave a system that is not positive definite (values of extreme magnitude);
        the task is then judged without a library."""
        try:
            library = self._library(task_id, exclude, basis)
            if library is not None and self._keeps_population:
                pop = self._population() if population is None else population
                library = dataclasses.replace(library, population=pop.predictive().slopes(),
                                              shared_slopes=population_structure(pop) == "shared_slopes")
        except (np.linalg.LinAlgError, ArithmeticError):
            return None
        if library is not None and not (np.all(np.isfinite(library.centres))
                                        and (library.basis is None or np.all(np.isfinite(library.basis)))):
            return None
        return library

    def _evidence_data(self, record: TaskRecord):
        """The task's data as :func:`core.evidence.family_fits` takes it, or ``None`` when its
        evidence cannot be computed (a regression task without ``y'y``)."""
        data = record.data
        if isinstance(data, SquaredLossMoments):
            return (data.n, data.gram, data.moment, data.yy) if np.isfinite(data.yy) else None
        Xd, y, _ = self._design(data)
        return Xd, y

    def _record_evidence(self, task_id: str, library: Library | None,
                         population: Population | None) -> dict[str, np.ndarray] | None:
        """Store the task's log evidence curve (over the ``omega`` grid) for every family,
        measured against ``library`` and ``population`` (:meth:`_intercept_prior`), and return
        it (``None`` when it has none)."""
        record = self.tasks_[task_id]
        data = self._evidence_data(record)
        evidence = None
        if data is not None:
            evidence = self._curves(data, library, population)
            evidence = {name: [float(v) for v in E] for name, E in evidence.items()}
            if RIDGE.name not in evidence:
                evidence = None
        record.meta = {**record.meta, "evidence": evidence}
        return None if evidence is None else {name: np.asarray(E) for name, E in evidence.items()}

    def _curves(self, data, library: Library | None, population: Population | None, design=None
                ) -> dict[str, np.ndarray]:
        """Every family's finite log evidence curve of a task's ``data`` against ``library``
        and ``population`` (``design``: :func:`core.evidence.family_curves`'s)."""
        return {name: c.log_evidence for name, c in self._finite_curves(data, library, population, design).items()}

    def _finite_curves(self, data, library: Library | None, population: Population | None, design=None
                       ) -> dict[str, Curve]:
        """:meth:`_curves` as :class:`core.evidence.Curve` objects (a logistic curve holds its
        posterior modes, a squared-loss one none)."""
        try:
            curves = family_curves(self.kind, data, library, self._families, self._intercept_prior(population),
                                   self.grow_features, posterior_means=False, design=design)
        except (np.linalg.LinAlgError, ArithmeticError):  # values of extreme magnitude
            return {}
        return {name: c for name, c in curves.items() if np.all(np.isfinite(c.log_evidence))}

    def _prequential_scores(self, task_id: str, previous: TaskRecord | None, curves: dict[str, np.ndarray] | None,
                            library: Library | None, population: Population | None,
                            batch: tuple[np.ndarray, np.ndarray] | SquaredLossMoments | None = None
                            ) -> dict[str, float] | None:
        """Each family's log predictive density of the batch of task ``task_id`` just learned,
        before it was learned: ``log p(y_B | y_P)`` for a task whose earlier rows are ``P``
        (its record ``previous``), ``log p(y_B)`` for a new one, under the family's prior as the
        stream had it before the batch (the library and population without the task, the
        stream's prior ``pi`` over ``omega``; every per-task scale of the prior set by the design
        of all the task's rows, ``X`` alone): ``log sum_j pi_j p(y_P, y_B |
        omega_j) - log sum_j pi_j p(y_P | omega_j)``, from the task's evidence ``curves`` of all
        its rows (measured against that prior) and those of its earlier rows. A family the
        library cannot define for the task scores as ``ridge``. ``None``: no score (no
        evidence).

        A known squared-loss task's batch (``batch``: its moments) is scored instead by the
        residuals of what each family served (:meth:`_served_scores`). A known logistic
        task's batch (``batch``: its design rows and labels) is scored instead
        by the prediction the family serves: ``sum_i log p(y_i | x_i' theta_P)`` with ``theta_P``
        the family's model of the earlier rows (:meth:`_served_before`). For squared loss the
        Bayesian predictive's mean is the served prediction ``x' theta_P``; for logistic loss
        the Bayesian predictive ``int sigmoid(x' theta) p(theta | y_P)``, which integrates a wide
        posterior toward 1/2, is not the served ``sigmoid(x' theta_P)``, and a family whose
        tasks' posteriors are wide (each task alone, on a few rows) would be chosen for
        forecasts it never serves. A new task's batch, for which no family serves anything, is
        scored by each family's forecast of a task it has not seen, its prior predictive."""
        if not curves or RIDGE.name not in curves:
            return None
        if self.kind == "regression" and previous is not None and batch is not None:
            return self._served_scores(task_id, previous, library, population, batch)
        before: dict[str, np.ndarray] = {}
        fits: dict[str, Curve] = {}
        if previous is not None:
            data = self._evidence_data(previous)
            if data is None:
                return None
            fits = self._finite_curves(data, library, population, design=self._evidence_data(self.tasks_[task_id]))
            before = {name: c.log_evidence for name, c in fits.items()}
            if RIDGE.name not in before:
                return None
        priors = self._stream_priors()[1] if getattr(self, "stream_choice_", None) else {}
        uniform = np.full(self._n_omega, -np.log(self._n_omega))
        scores = {}
        served = self.kind != "regression" and previous is not None and batch is not None
        for family in self._families:
            if served:
                name = family.name if family.name in fits else RIDGE.name
                theta = self._served_before(family, name, fits, np.asarray(priors.get(name, uniform)), previous,
                                            population)
                z = batch[0] @ theta
                scores[family.name] = float(-np.sum(np.logaddexp(0.0, z) - batch[1] * z))
                continue
            name = family.name if family.name in curves and (previous is None or family.name in before) else RIDGE.name
            log_pi = np.asarray(priors.get(name, uniform))
            score = log_sum_exp(log_pi + curves[name])
            if previous is not None:
                score -= log_sum_exp(log_pi + before[name])
            scores[family.name] = score
        return scores

    def _served_scores(self, task_id: str, previous: TaskRecord, library: Library | None,
                       population: Population | None, batch: SquaredLossMoments) -> dict[str, float] | None:
        """Each family's score of a known squared-loss task's batch (its moments ``batch``) by
        the model the family serves from the task's earlier rows (:meth:`_served_model` of the
        record ``previous``, against ``library`` and ``population`` without the task and the
        stream's priors over ``omega``): the log density of the batch's residuals under that
        model with the task's noise integrated over its posterior, the same for every family
        (``sigma_t^2 ~ Scaled-Inv-chi^2(nu, s_t^2)``, ``nu = k + n_t`` and ``s_t^2`` the task's
        noise under the population, :func:`core.population.noise_precisions`; before a
        population, the task's own fit): a Student t, ``-(nu + n_B)/2 log(1 + ||y_B - X_B
        theta_f||^2 / (nu s_t^2))`` up to a constant common to every family. The families are
        compared on the squared error of what they serve, in units of the task's noise, and a
        batch with an outlier counts by the logarithm of its error, not its square, so that one
        bad row does not decide the stream. ``None`` when the task's noise cannot be estimated
        or a score is not finite."""
        fitted = population is not None and self._population_fitted
        if fitted:
            noise, nu = self._task_noise(previous, population), NOISE_PSEUDO_DOF + float(previous.data.n)
        else:
            rss, nu = self._noise_terms(previous)
            noise = rss / nu if nu > 0 else np.nan
        if not (np.isfinite(noise) and noise > 0):
            return None
        priors = self._stream_priors()[1] if getattr(self, "stream_choice_", None) else {}
        uniform = np.full(self._n_omega, -np.log(self._n_omega))
        priors = {k: np.asarray(v) for k, v in priors.items()} or {f.name: uniform for f in self._families}
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                curves = family_curves(self.kind, self._evidence_data(previous), library, self._families, None,
                                       self.grow_features)
        except (np.linalg.LinAlgError, ArithmeticError):
            return None
        if RIDGE.name not in curves:
            return None
        scores = {}
        for family in self._families:
            theta = self._served_model(previous, family, lambda: library, population if fitted else None, priors,
                                       curves, noise if fitted else None)
            if theta is None:
                return None
            sse = float(batch.yy - 2.0 * theta @ batch.moment + theta @ batch.gram @ theta)
            scores[family.name] = -0.5 * (nu + batch.n) * np.log1p(max(sse, 0.0) / (nu * noise))
        return scores if all(np.isfinite(v) for v in scores.values()) else None

    def _served_before(self, family: Family, name: str, before: dict[str, Curve], log_pi: np.ndarray,
                       previous: TaskRecord, population: Population | None) -> np.ndarray:
        """The logistic model family ``family`` serves from a task's earlier rows (its record
        ``previous``) under the prior the stream had before the batch, as
        :meth:`_empirical_bayes_model` serves it: the mixed model's mode under ``population``
        for the population's family once one is fitted, else the posterior mean of the
        family's curve ``name`` of those rows (``before``, means included) over ``omega``."""
        if family.centred_on_population and population is not None and int(getattr(self, "population_tasks_", 0)):
            X, y = self._evidence_data(previous)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                theta = logistic_mode(X, y, population.mean, np.linalg.inv(population.cov))[0]
            if np.all(np.isfinite(theta)):
                return theta
        return posterior_fit(before[name], log_pi).theta

    @property
    def _n_omega(self) -> int:
        return (GAUSSIAN_OMEGAS if self.kind == "regression" else LOGISTIC_OMEGAS).size

    def _stream_priors(self) -> tuple[str, dict[str, np.ndarray]]:
        """The stream's family and every family's prior over ``omega``, as last chosen
        (:meth:`_update_stream_choice`), or chosen now for a state that carries none."""
        choice = getattr(self, "stream_choice_", None)
        if choice:
            return choice["family"], {k: np.asarray(v) for k, v in choice["priors"].items()}

        def compute():
            priors = family_priors(self._choice_evidence(), self._families, self._n_omega)
            return prequential_family(None, self._families, self._reference_families), priors
        return self._stream_value("priors", compute)

    def _choice_evidence(self) -> list[dict]:
        """Every task's evidence curves, which the stream's priors over ``omega`` read."""
        return [e for e in (r.meta.get("evidence") for r in getattr(self, "tasks_", {}).values()) if e]

    @property
    def _reference_families(self) -> tuple[str, ...]:
        """The two defaults of :func:`core.evidence.prequential_family`, the first of which a
        stream with no scores uses: the stream's population (the mixed model) once one is
        fitted, then ``ridge`` (each task alone)."""
        fitted = self._keeps_population and int(getattr(self, "population_tasks_", 0))
        return (POPULATION.name, RIDGE.name) if fitted else (RIDGE.name,)

    def _update_stream_choice(self, defer: bool = False, scores: dict[str, float] | None = None,
                              known: bool = False) -> None:
        """Add the batch's prequential ``scores`` (:meth:`_prequential_scores`) to the stream's
        sums and sums of products and choose the family (:func:`core.evidence.prequential_family`)
        at every update; estimate every family's prior over ``omega`` again from every task's
        evidence when :func:`refit_due` says so (at every new task's update while there are at
        most :data:`EVERY_UPDATE_TASKS` tasks; a ``known`` task's on the schedule) and the update does not
        ``defer`` it: a geometric schedule, so the priors, which read every task, cost a bounded
        amount per update on average however many tasks there are. A known task's batch
        changes two tasks' evidence among all (its own and the one measured again), a new
        task adds one that a short stream's priors have not seen. Each family's prior is
        warm-started from the last one (:func:`core.evidence.omega_prior`'s ``start``)."""
        choice = getattr(self, "stream_choice_", None)
        if defer and not choice:
            return
        parts = dict(zip(("known", "new"), _parts(choice or {})))
        tally = {kind: _added(parts[kind], scores if (kind == "known") == known else None) for kind in ("known", "new")}
        sums, products, batches = _rule_sums(tally, self.kind)
        family = prequential_family(sums, self._families, self._reference_families, products, batches)
        tally = {"family": family, **tally}
        if choice and (defer or known or len(self.tasks_) > EVERY_UPDATE_TASKS):
            since = int(choice.get("updates", 0)) + 1
            if defer or not refit_due(choice["tasks"], since, len(self.tasks_)):
                self.stream_choice_ = {**choice, **tally, "updates": since}
                return
        priors = family_priors(self._choice_evidence(), self._families, self._n_omega,
                               start=(choice or {}).get("priors"))
        self.stream_choice_ = {**tally, "priors": {k: [float(x) for x in v] for k, v in priors.items()},
                               "tasks": len(self.tasks_), "updates": 0}

    def family_margins(self) -> dict:
        """How the stream's family was chosen (:func:`core.evidence.prequential_family`): the
        ``default`` (the larger sum of the ``references``), the ``threshold`` in standard errors a family
        had to beat it by, the ``batches`` scored and, per family, its summed prequential score's
        ``lead`` over the default and that lead's standard error ``se``."""
        if self.task_models == "paper" or not getattr(self, "stream_choice_", None):
            raise ValueError("no stream choice: the learner has no empirical-Bayes task models or has learned nothing")
        scores, products, batches = _rule_sums(self.stream_choice_, self.kind)
        names = [f.name for f in self._families]
        refs = [r for r in self._reference_families if r in names] or names[:1]
        default = prequential_default(scores, self._families, tuple(refs), products, batches)
        scored = bool(scores and products and batches >= 2)
        margins = prequential_margins(scores, products, batches, self._families, default) if scored else {}
        return {"family": self.stream_choice_["family"], "default": default, "references": refs,
                "threshold": PREQUENTIAL_Z,
                "batches": batches, "margins": {f: {"lead": lead, "se": se} for f, (lead, se) in margins.items()}}

    def with_task_family(self, family: str):
        """A copy (:meth:`copy`) that predicts every task with the prior family ``family``
        instead of the stream's choice, everything learned the same: what each family would
        serve, to compare them on held-out rows."""
        names = [f.name for f in self._families]
        if self.task_models == "paper" or family not in names:
            raise ValueError(f"family must be one of {names} of a learner with empirical-Bayes task models, "
                             f"got {family!r}")
        clone = self.copy()
        _, priors = self._stream_priors()
        clone.stream_choice_ = {**(getattr(self, "stream_choice_", None) or {}), "family": family,
                                "priors": {k: [float(x) for x in v] for k, v in priors.items()}}
        return clone

    def task_family(self) -> str:
        """The prior family every task is predicted with (``"paper"`` when ``task_models`` is)."""
        if self.task_models == "paper":
            return "paper"
        return self._stream_priors()[0]

    def _task_model(self, task_id: str) -> np.ndarray:
        """The parameters task ``task_id`` is predicted with (cached until the next update)."""
        if self.task_models == "paper":
            return self._theta(task_id)
        cache = self.__dict__.setdefault("_task_models", {})
        theta = cache.get(task_id)
        if theta is None:
            theta = cache[task_id] = self._empirical_bayes_model(task_id)
        return theta

    def _empirical_bayes_model(self, task_id: str) -> np.ndarray:
        record = self.tasks_[task_id]
        if self._evidence_data(record) is None or not record.meta.get("evidence"):
            return self._theta(task_id)
        name, priors = self._stream_priors()
        family = next(f for f in self._families if f.name == name)
        # a family of rho = 0 reads the library's centres, not its basis (FCL3's decoder re-solved)
        theta = self._served_model(record, family, lambda: self._safe_library(task_id, record, basis=family.rho > 0),
                                   self._population() if self._population_fitted else None, priors)
        return self._theta(task_id) if theta is None else theta

    @property
    def _population_fitted(self) -> bool:
        return self._keeps_population and bool(int(getattr(self, "population_tasks_", 0)))

    def _served_model(self, record: TaskRecord, family: Family, library_of, pop: Population | None,
                      priors: dict[str, np.ndarray], curves: dict[str, Curve] | None = None,
                      noise: float | None = None) -> np.ndarray | None:
        """The model family ``family`` serves a task of record ``record`` under the library
        ``library_of()`` (called only when the family reads one) and the fitted population
        ``pop`` (``None``: none yet), with the stream's priors over ``omega`` (``priors``): the
        mixed model's prediction for the population's family, else the posterior mean of the
        family's curve over ``omega``, its intercept pooled with the population's. ``None`` when
        the arithmetic fails. ``curves``: the task's curves of every family (means included),
        when already computed against that library; ``noise``: a squared-loss task's noise
        under ``pop`` (:meth:`_task_noise`), when already computed."""
        data = self._evidence_data(record)
        if family.centred_on_population and pop is not None:
            theta = self._mixed_model_prediction(record, pop, noise)
            if np.all(np.isfinite(theta)):
                return theta
        name = family.name
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            library = None if family is RIDGE or family.own_scale else library_of()
            try:
                intercept = None if self.kind == "regression" or pop is None else pop.predictive()
                if curves is None:
                    curve = family_curves(self.kind, data, library, (family,), intercept, self.grow_features).get(name)
                else:
                    curve = curves.get(name)
                if curve is None:  # the library cannot define the family for this task
                    name = RIDGE.name
                    curve = (family_curves(self.kind, data, None, (RIDGE,), intercept, self.grow_features)[name]
                             if curves is None else curves[name])
                fit = posterior_fit(curve, priors.get(name))
                # a logistic fit has the population's intercept in its prior already; a task
                # alone on its own scales keeps its own intercept, as the user's per-task fit does
                pooled = pop is not None and intercept is None and not family.own_scale
                theta = (self._with_pooled_intercept(record, fit.theta, family.centred_on_population, pop, noise)
                         if pooled else fit.theta)
            except (np.linalg.LinAlgError, ArithmeticError):
                return None
        return theta if np.all(np.isfinite(theta)) else None

    def _intercept_prior(self, population: Population | None = None) -> Population | None:
        """The population (``population``, or the stream's when ``None``) whose intercept is the
        logistic intercept's prior (:func:`core.evidence.family_curves`) once fitted (``None``,
        flat, before and for squared loss, whose evidence integrates a flat intercept exactly).
        A proper prior keeps every task's evidence finite and the families comparable on tasks
        of a few rows."""
        if self.kind == "regression" or not self._keeps_population or not int(getattr(self, "population_tasks_", 0)):
            return None
        return (self._population() if population is None else population).predictive()

    def _mixed_model_prediction(self, record: TaskRecord, pop: Population, noise: float | None = None) -> np.ndarray:
        """The task's posterior mean (squared loss) or mode (logistic loss) of its slopes and
        intercept under the population ``pop``: the prediction of the fitted mixed model (its BLUP)."""
        if self.kind == "regression":
            noise = self._task_noise(record, pop) if noise is None else noise
            return posterior_mean(record.data.gram / noise, record.data.moment / noise, pop)
        X, y = self._evidence_data(record)
        return logistic_mode(X, y, pop.mean, np.linalg.inv(pop.cov))[0]

    def _with_pooled_intercept(self, record: TaskRecord, theta: np.ndarray, conditional: bool,
                               pop: Population, noise: float | None = None) -> np.ndarray:
        """``theta`` with its intercept (the task's own, flat-prior estimate given the slopes)
        pooled with the population's (:func:`core.population.pooled_intercept`): its precision
        is ``n / sigma_t^2`` for squared loss and the Hessian's intercept entry for logistic
        loss. With ``conditional``, the intercept's prior is its conditional given ``theta``'s
        slopes, which holds for slopes drawn from the population; slopes from another family's
        prior (shrunk toward zero or toward an environment's centre) may lie where the
        population's regression of the intercept on the slopes extrapolates far, and pool with
        the intercept's marginal prior (``conditional=False``); ``pop``: the fitted population."""
        data = self._evidence_data(record)
        if self.kind == "regression":
            n, gram, moment, yy = data
            precision = n / (self._task_noise(record, pop) if noise is None else noise)
        else:
            X, _ = data
            p = sigmoid(X @ theta)
            precision = float(np.sum(p * (1.0 - p)))
        out = theta.copy()
        out[-1] = pooled_intercept(float(theta[-1]), precision, pop, theta[:-1] if conditional else None)
        return out

    # ----------------------------------------------------------------- the population of slopes
    @property
    def _keeps_population(self) -> bool:
        return self.task_models == "empirical_bayes" and any(f.centred_on_population or f.population_shape
                                                             for f in self._families)

    @property
    def _n_params(self) -> int:
        """Slopes and intercept: the size of a task model in the scaled space."""
        return int(self.n_features_in_) + 1

    def _population(self) -> Population:
        """The stream's population as last fitted (:mod:`core.population`): one object for as
        long as its arrays are the learner's (arrays are replaced, never written into), so that
        what it computes of itself is computed once."""
        arr = getattr(self, "population_", None)
        if arr is None or arr.size <= 1:
            return Population.initial(self._n_params)
        mean_cov = getattr(self, "population_mean_cov_", None)
        cached = self.__dict__.get("_population_of")
        if cached is not None and cached[0] is arr and cached[1] is mean_cov:
            return cached[2]
        known = mean_cov is not None and mean_cov.shape == (self._n_params,) * 2 and bool(np.any(mean_cov))
        pop = dataclasses.replace(Population.from_array(arr), mean_cov=mean_cov if known else None)
        self._population_of = (arr, mean_cov, pop)
        return pop

    def _population_without(self, record: TaskRecord | None) -> Population | None:
        """The stream's population without the task of stored record ``record``
        (:func:`core.population.without_task`) when its last fit included it, the population
        as fitted when it did not (``record`` ``None``: a new task) or when the arithmetic
        fails; ``None`` for a learner that keeps none. A task's evidence is measured against
        the other tasks' population, as against the library without it: in-sample, the
        population would count the task's data twice and be favoured by every task, related
        to the others or not."""
        if not self._keeps_population:
            return None
        pop = self._population()
        fitted = int(getattr(self, "population_tasks_", 0))
        if record is None or record.meta.get("position", 0) >= fitted or fitted < 2:
            return pop
        data = self._evidence_data(record)
        if data is None:
            return pop
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            try:
                if self.kind == "regression":
                    noise = self._task_noise(record, pop)
                    return without_task(pop, (record.data.gram / noise, record.data.moment / noise), fitted)
                site = marginal_objective([data], pop)[2][0]  # the task's Gaussian site, as in the fit
                return without_task(pop, site, fitted, spread_scale=LOGISTIC_SPREAD_SCALE)
            except (np.linalg.LinAlgError, ArithmeticError):
                return pop

    def _measure_due_evidence(self) -> tuple[str, ...]:
        """Measure the evidence of every task left due by deferred batches (:meth:`learn`),
        against the current library and population without each; their ids, in the order they
        fell due."""
        due = tuple(t for t in getattr(self, "evidence_due_", ()) if t in self.tasks_)
        self.evidence_due_ = ()
        for task_id in due:
            self._measure_evidence(task_id)
        return due

    def _measure_evidence_again(self, measured: tuple[str, ...]) -> tuple[str, ...]:
        """Measure one more task's evidence again, against the current library and population
        without it, and return its id (one id, or none): the tasks in their order, one per
        update that does not defer the refits, the tasks this update ``measured`` (its own
        first) skipped. A task's evidence is measured when it is learned, against the library
        and population of that moment; the stream's family, chosen from every task's evidence,
        would otherwise judge the first tasks by the first populations for ever. Every task's
        evidence is thus at most as many updates old as there are tasks, for one task's
        evidence per update."""
        n = len(self.tasks_)
        skip = set(measured)
        if n <= len(skip):
            return ()
        position = int(getattr(self, "evidence_cursor_", 0)) % n
        while self.tasks_.key_at(position) in skip:
            position = (position + 1) % n
        self.evidence_cursor_ = (position + 1) % n
        task_id = self.tasks_.key_at(position)
        self._measure_evidence(task_id)
        return (task_id,)

    def _measure_evidence(self, task_id: str) -> None:
        """:meth:`_record_evidence` of a stored task, against the current library and
        population without it (its record replaced, never mutated: stored records are shared)."""
        stored = self.tasks_[task_id]
        self.tasks_ = self.tasks_.set(task_id, dataclasses.replace(stored, meta=dict(stored.meta)))
        population = self._population_without(stored)
        self._record_evidence(task_id, self._safe_library(task_id, stored, population), population)

    def _noise_terms(self, record: TaskRecord) -> tuple[float, float]:
        """A regression task's residual sum of squares at its single-task fit and its degrees
        of freedom (``n`` less the parameters), for :func:`core.population.task_noises`."""
        data = record.data
        w = record.w
        rss = float(data.yy - 2.0 * w @ data.moment + w @ data.gram @ w)
        # a column of zeros (a new feature the task never had, ``grow_features``) fits nothing
        params = np.count_nonzero(np.diag(data.gram)[:-1]) + 1 if self.grow_features else w.size
        return (rss if np.isfinite(rss) else 0.0), float(data.n - params)

    def _task_noise(self, record: TaskRecord, pop: Population) -> float:
        """A regression task's noise variance under the population ``pop`` (slopes and
        intercept): ``1 / E[1 / sigma_t^2]`` of :func:`core.population.noise_precisions`, its
        expected residual under ``pop``'s posterior pooled with the typical noise."""
        data = record.data
        w, _ = noise_precisions(np.array([data.n]), data.gram[None], data.moment[None], np.array([data.yy]), pop)
        return float(1.0 / w[0])

    def _update_population(self, defer: bool = False) -> None:
        """Refit the population over every task when :func:`refit_due` says so and the update
        does not ``defer`` it (warm-started from the last fit)."""
        fitted = int(getattr(self, "population_tasks_", 0))
        since = int(getattr(self, "population_updates_", 0)) + 1
        if defer or (fitted and not refit_due(fitted, since, len(self.tasks_))):
            self.population_updates_ = since
            return
        records = [r for r in self.tasks_.values() if self._evidence_data(r) is not None]
        if not records:
            return
        start = self._population() if fitted else None
        try:
            pop = self._fit_population(records, start)
        except np.linalg.LinAlgError:
            # features of extreme or very uneven scale can leave EM a singular system: the
            # population, an auxiliary estimate, keeps its last fit (tried again on schedule)
            # rather than refuse the batch; a stream without one stays without (tried again
            # at the next update)
            if not fitted:
                return
            pop = self._population()
        if np.all(np.isfinite(pop.to_array())):
            self.population_ = pop.to_array()
            mean_cov = pop.mean_cov if pop.mean_cov is not None and np.all(np.isfinite(pop.mean_cov)) else None
            self.population_mean_cov_ = np.zeros((pop.mean.size,) * 2) if mean_cov is None else mean_cov
            self.population_tasks_ = len(self.tasks_)
            self.population_updates_ = 0

    def _fit_population(self, records: list[TaskRecord], start: Population | None) -> Population:
        """The population over ``records``: for logistic tasks warm-started from ``start``; for
        squared-loss tasks always from the initial population and each task's own noise
        estimate (:func:`core.population.task_noises`), so that it is one function of the tasks
        whatever the stream's path: a stream's first tasks of one or two rows fit their rows with
        no noise at all, and EM warm-started from that fit stays on that boundary long after the
        tasks have grown to tell noise from spread."""
        if self.kind == "regression":
            rss, dof = np.array([self._noise_terms(r) for r in records]).T
            stats = [(r.data.n, r.data.gram, r.data.moment, r.data.yy) for r in records]
            return fit_gaussian_population(stats, None, task_noises(rss, dof)[0])[0]
        return choose_logistic_population([self._design(r.data)[:2] for r in records], start)


def _added(sums: dict, scores: dict[str, float] | None) -> dict:
    """``sums`` (``scores``: family -> sum, ``products``: their sums of products, ``batches``)
    with one batch's ``scores`` added (``None``: unchanged)."""
    total = dict(sums.get("scores") or {})
    products = {f: dict(row) for f, row in (sums.get("products") or {}).items()}
    batches = int(sums.get("batches", 0))
    if scores:
        total = {f: total.get(f, 0.0) + value for f, value in scores.items()}
        products = {f: {g: products.get(f, {}).get(g, 0.0) + value * scores[g] for g in scores}
                    for f, value in scores.items()}
        batches += 1
    return {"scores": total, "products": products, "batches": batches}


def _rule_sums(choice: dict, kind: str) -> tuple[dict[str, float] | None, dict[str, dict[str, float]] | None, int]:
    """The sums the stream's family is chosen by (:func:`core.evidence.prequential_family`'s
    ``scores``, ``products``, ``batches``), of the ``known`` tasks' batches (each scored by what
    every family served the task before it) and the ``new`` tasks' first batches (by every
    family's prior predictive). A logistic score is a log probability of the labels, at most
    0 a row: both kinds are summed. A squared-loss new task's score is its evidence with the
    noise profiled out, not a density: on a batch of two or three rows fitted almost exactly it
    grows without bound, and a few such batches would outweigh every known task's. It counts
    only while the stream has fewer than two known tasks' batches (a stream whose every task is
    one batch)."""
    known, new = _parts(choice)
    if kind == "regression":
        sums = known if int(known.get("batches", 0)) >= 2 else new
        return sums.get("scores"), sums.get("products"), int(sums.get("batches", 0))
    a, b = known.get("scores") or {}, new.get("scores") or {}
    names = set(a) | set(b)
    scores = {f: a.get(f, 0.0) + b.get(f, 0.0) for f in names}
    pa, pb = known.get("products") or {}, new.get("products") or {}
    products = {f: {g: pa.get(f, {}).get(g, 0.0) + pb.get(f, {}).get(g, 0.0) for g in names} for f in names}
    return scores, products, int(known.get("batches", 0)) + int(new.get("batches", 0))


def _parts(choice: dict) -> tuple[dict, dict]:
    """The sums of the known and the new tasks' batches of a stream choice; a choice stored
    before they were kept apart has one set of sums (``scores``, ``products``, ``batches``),
    read as the new tasks': a logistic stream sums both kinds anyway, and a squared-loss
    stream reads them until it has two known tasks' batches of its own."""
    if "known" in choice or "new" in choice or "scores" not in choice:
        return dict(choice.get("known") or {}), dict(choice.get("new") or {})
    return {}, {k: choice[k] for k in ("scores", "products", "batches") if k in choice}
