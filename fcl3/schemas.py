"""Request and response bodies. Requests refuse unknown fields (``extra="forbid"``) and
non-numbers (strict floats: no strings, no booleans)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Strict,
    field_validator,
    model_validator,
)

if TYPE_CHECKING:
    from typing_extensions import Self

from . import records
from .records import JSON_NUMBER, RecordError, parse_schema

Number = Annotated[float, Strict()]


def _utc(value: datetime) -> datetime:
    """Stored times are UTC; SQLite hands them back naive: say so (RFC 3339 needs an offset)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]

#: Characters an id may not hold (:data:`fcl3.records.UNSTORABLE`, the rule of feature names and
#: levels too; ids appear in paths, logs and the CLI's tables).
UNSTORABLE = records.UNSTORABLE


def storable_id(value: str) -> str:
    """``value`` unchanged; ValueError (a 422) when it holds a character of :data:`UNSTORABLE`."""
    bad = UNSTORABLE.search(value)
    if bad is not None:
        raise ValueError(
            f"holds the control character U+{ord(bad.group()):04X} at position {bad.start()}: "
            "ids may not hold control characters (U+0000-U+001F, U+007F-U+009F) or lone surrogates"
        )
    return value


#: A task id: 1-200 characters, none of them a control character or a lone surrogate.
TaskId = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(storable_id)]

#: A model name: 1-100 characters of [A-Za-z0-9._-], not starting with "." (so never "." or "..",
#: which a URL path would resolve, nor a hidden file name; a name is a path segment, a file name
#: and a Redis key, and holds no "/" or "\\").
MODEL_NAME_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$"
MODEL_NAME_RULE = "1-100 characters of [A-Za-z0-9._-], not starting with '.'"
ModelNameStr = Annotated[
    str, Field(min_length=1, max_length=100, pattern=MODEL_NAME_PATTERN, description=f"Model name: {MODEL_NAME_RULE}.")
]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorItem(BaseModel):
    """One problem of a refused request."""

    detail: str = Field(..., description="What is wrong, in words.", examples=["X is empty: a batch needs a row"])
    field: str | None = Field(
        None, description="The field at fault (`X`, `y`, a record's feature, a query parameter), when there is one."
    )
    row: int | None = Field(None, description="The row at fault (0-based), when there is one.")


class ErrorOut(ErrorItem):
    """The body of every error answer (4xx and 5xx): ``detail``, with ``field`` and ``row`` where
    the fault has them; ``errors`` lists every problem when there is more than one. Some answers
    add fields of their own (a 410's ``taken_back_by``, a 500's ``request_id``)."""

    model_config = ConfigDict(extra="allow")

    errors: list[ErrorItem] | None = Field(None, description="Every problem, when the request has more than one.")


def _not_empty(X: list[Any]) -> list[Any]:
    if not X:
        raise ValueError("X is empty: a batch needs at least one row")
    return X


#: A record: feature name -> value (a number, a category's level, true/false, or null when the
#: feature is nullable); see docs/records.md.
Record = dict[str, Any]
_RECORDS_DESCRIPTION = (
    "Rows as records of the model's feature schema, instead of `X`: "
    '`[{"age": 31, "urban": "yes", "smoker": false}, ...]`. Unknown names, wrong types and '
    "missing required fields are refused (422 naming the field); categories are one-hot "
    "encoded by the service, missing values (null) of nullable features get their indicator "
    "(docs/records.md)."
)


def _x_or_records(data: Any) -> Any:
    """A body with ``records`` and no ``X``: ``X`` is null (``X`` stays required otherwise, so a
    body with neither is refused as missing ``X``)."""
    if isinstance(data, dict) and "records" in data and "X" not in data:
        return {**data, "X": None}
    return data


def _one_of_x_or_records(model: Any) -> Any:
    if (model.X is None) == (model.records is None):
        raise ValueError("give either X (rows of numbers) or records (rows of named features), not both")
    if model.records is not None and not model.records:
        raise ValueError("records is empty: a batch needs at least one row")
    return model


def _x_or_records_schema(schema: dict[str, Any]) -> None:
    """OpenAPI: ``X`` stays required, and is ``null`` (or left out) when ``records`` are given."""
    schema["description"] = (
        "Rows as `X` (numbers), or as `records` (named features) with `X` null or left out: one of the two."
    )


def csv_batch(data: bytes | str, target: bool = True) -> dict[str, Any]:
    """A ``text/csv`` body (UTF-8) as a batch of records: a header naming the columns, each once,
    ``y`` (or ``target``) the target (``target``: required; else there is none; a number as JSON
    writes it) and every other column a feature; cells as text, unstripped (the service reads
    them by the JSON rules with the model's schema: :func:`fcl3.records.json_cells`)."""
    import csv
    import io

    text = data.decode("utf-8-sig") if isinstance(data, bytes) else data  # UnicodeDecodeError: a ValueError
    try:
        return _csv_rows(csv.reader(io.StringIO(text)), target)
    except csv.Error as exc:
        raise ValueError(f"not a valid CSV body: {exc}") from None


def _csv_rows(reader: Iterator[list[str]], with_target: bool) -> dict[str, Any]:
    header = next(reader, [])
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
        raise ValueError(
            f"the CSV header names the column {twice[0]!r} twice: each column once, as a JSON object's keys"
        )
    target = next((n for n in ("y", "target") if n in header), None) if with_target else None
    if with_target and target is None:
        raise ValueError(f"a CSV batch needs a header with a 'y' (or 'target') column; got {header}")
    t = header.index(target) if target is not None else -1
    records, y = [], []
    for i, row in enumerate(reader):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != len(header):
            raise ValueError(f"CSV row {i + 1}: {len(row)} values for {len(header)} columns")
        if target is not None:
            if not JSON_NUMBER.fullmatch(row[t]):
                raise ValueError(f"CSV row {i + 1}: {target} {row[t][:60]!r} is not a number as JSON writes it")
            y.append(float(row[t]))
        records.append({h: v for j, (h, v) in enumerate(zip(header, row, strict=False)) if j != t})
    return {"records": records, "y": y} if with_target else {"records": records}


class RecordsRequest(Request):
    """A request that may carry records; ``text_cells``: they came from a ``text/csv`` body,
    their cells text that the service types with the model's schema."""

    _text: bool = PrivateAttr(False)

    @property
    def text_cells(self) -> bool:
        return self._text

    def with_text_cells(self) -> Self:
        """This request, marked as records of a ``text/csv`` body."""
        self._text = True
        return self


class Batch(RecordsRequest):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_x_or_records_schema)

    X: list[list[Number]] | None = Field(
        ...,
        description="Feature rows (all the same width); null (or left out) with `records`.",
        examples=[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]],
    )
    records: list[Record] | None = Field(
        None, description=_RECORDS_DESCRIPTION, examples=[[{"age": 31, "urban": "yes"}, {"age": 25, "urban": "no"}]]
    )
    y: list[Number] = Field(
        ..., description="One target per row; labels 0/1 or -1/1 for classification.", examples=[[0.5, 1.5]]
    )

    _x_not_empty = field_validator("X")(lambda X: X if X is None else _not_empty(X))
    _before = model_validator(mode="before")(_x_or_records)
    _after = model_validator(mode="after")(_one_of_x_or_records)

    @model_validator(mode="wrap")
    @classmethod
    def _from_csv(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        """A ``text/csv`` body (FastAPI passes a body that is not JSON as its bytes)."""
        if isinstance(data, (bytes, str)):
            return handler(_x_or_records(csv_batch(data))).with_text_cells()
        return handler(data)

    @property
    def n_rows(self) -> int:
        return len(self.X) if self.X is not None else len(self.records or ())


class PredictRequest(RecordsRequest):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_x_or_records_schema)

    task_id: TaskId
    X: list[list[Number]] | None = Field(
        ..., description="Feature rows; null (or left out) with `records`.", examples=[[[1.0, 2.0, 3.0]]]
    )
    records: list[Record] | None = Field(
        None,
        description=_RECORDS_DESCRIPTION.replace(
            "; categories",
            " (a level never learned is encoded as no level of its category and listed in `unseen`); categories",
        ),
        examples=[[{"age": 31, "urban": "yes"}]],
    )
    remember: bool = Field(
        False,
        description="Store the rows, the outputs served and the version serving them, "
        "and answer `prediction_ids`: `POST .../labels` learns them when their labels arrive "
        "(within PREDICTION_TTL).",
        examples=[True],
    )

    _x_not_empty = field_validator("X")(lambda X: X if X is None else _not_empty(X))
    _before = model_validator(mode="before")(_x_or_records)
    _after = model_validator(mode="after")(_one_of_x_or_records)


class AssignmentEntry(BaseModel):
    representative: str | None = Field(None, description="Task id of the representative; null for the outlier slot.")
    outlier: bool = Field(False, description="True for the last entry: the outlier (new-environment) slot.")
    weight: float


class UpdateOut(BaseModel):
    task_id: str
    n_samples: int = Field(..., description="Samples of this task seen so far.")
    new_task: bool
    code: list[float] | None = Field(None, description="The task's code s_t.")
    assignment: list[AssignmentEntry] | None = Field(
        None, description="Z^t over the representatives, then the outlier slot."
    )
    outlier_probability: float | None = Field(None, description="e: probability that the task opens a new environment.")
    new_representative: bool
    n_representatives: int
    version: int = Field(..., description="Model version after this update.")
    prequential: Scores | None = Field(
        None,
        description="The batch scored before it was learned (null: a new "
        "task's first batch, or a batch whose errors overflow float64, left "
        "unscored); what /predict answered just before the update.",
    )


class PredictOut(BaseModel):
    task_id: str
    predictions: list[float]
    probabilities: list[float] | None = Field(None, description="P(positive class), classification only.")
    version: int
    unseen: dict[str, list[str]] | None = Field(
        None,
        description="Records only: per category, the levels the "
        "model has never learned (encoded as no level: every column of the "
        "category 0). Absent when there are none.",
    )
    prediction_ids: list[str] | None = Field(
        None,
        description='With `"remember": true`: one id per row, in row order, for `POST .../labels`.',
        examples=[["19c0d6e3a2f-8c1e5b0d2a4f6e13", "19c0d6e3a2f-0b7d3e9a1c5f2e84"]],
    )


#: A prediction id (``POST .../predict`` with ``"remember": true``): its expiry in
#: milliseconds since the epoch (hex), a dash, 16 random hex digits.
PREDICTION_ID_PATTERN = r"^[0-9a-f]{1,15}-[0-9a-f]{16}$"
PredictionId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=100,
        # the form is documented, not enforced here: an id of another form is unknown (404)
        json_schema_extra={"pattern": PREDICTION_ID_PATTERN},
        description="An id of `prediction_ids`; one of another form is unknown (404).",
        examples=["19c0d6e3a2f-8c1e5b0d2a4f6e13"],
    ),
]


class Label(Request):
    prediction_id: PredictionId
    y: Number = Field(..., description="The row's target; 0/1 or -1/1 for classification.", examples=[1.25])


class LabelsRequest(Request):
    """Labels of remembered predictions, learned as one batch of their task (every id of one
    task; each id once)."""

    labels: list[Label] = Field(
        ...,
        min_length=1,
        description="One entry per row; the batch's rows in this order.",
        examples=[
            [
                {"prediction_id": "19c0d6e3a2f-8c1e5b0d2a4f6e13", "y": 1.25},
                {"prediction_id": "19c0d6e3a2f-0b7d3e9a1c5f2e84", "y": -0.5},
            ]
        ],
    )

    @field_validator("labels")
    @classmethod
    def _each_id_once(cls, labels: list[Label]) -> list[Label]:
        seen: set[str] = set()
        for i, label in enumerate(labels):
            if label.prediction_id in seen:
                raise ValueError(
                    f"prediction_id {label.prediction_id!r} is given twice (again at labels[{i}]): "
                    "each row is labelled once"
                )
            seen.add(label.prediction_id)
        return labels


class LabelsTask(BaseModel):
    task_id: str
    pending: int = Field(..., description="Remembered predictions waiting for their label (not expired).")
    label_batches: int = Field(..., description="Batches of labels that arrived later, learned (not taken back).")
    labelled_rows: int = Field(..., description="Their rows.")


class LabelsOut(BaseModel):
    """``GET .../labels``: predictions waiting for their labels and labels received, per task."""

    model: str
    version: int
    pending: int = Field(..., description="Remembered predictions waiting for their label, over every task.")
    label_batches: int = Field(..., description="Batches of labels learned, over every task.")
    labelled_rows: int
    tasks: list[LabelsTask] = Field(..., description="The tasks with predictions pending or labels received, by id.")

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "model": "schools",
                    "version": 42,
                    "pending": 7,
                    "label_batches": 3,
                    "labelled_rows": 18,
                    "tasks": [
                        {"task_id": "school-1", "pending": 5, "label_batches": 2, "labelled_rows": 12},
                        {"task_id": "school-2", "pending": 2, "label_batches": 1, "labelled_rows": 6},
                    ],
                }
            ]
        }
    }


class TaskOut(BaseModel):
    task_id: str
    n_samples: int
    n_batches: int
    version: int = Field(
        ...,
        description="Model version that last wrote this task's record: its own batch, or "
        "another update that changed it (the scaling's warm-up, its evidence measured again).",
    )
    batch_version: int | None = Field(
        None, description="Model version of the task's latest batch (learned, or taken back)."
    )
    labels: str | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime
    last_update: dict[str, Any] | None = Field(
        None,
        description="The task's latest update as POST .../data answered "
        "it: UpdateOut's task_id, n_samples, new_task, code, assignment, "
        "outlier_probability, new_representative, n_representatives.",
    )
    prequential: Scores | None = Field(None, description="Cumulative prequential score over the task's scored batches.")
    evaluation: Scores | None = Field(None, description="Current score on the task's evaluation rows.")


class TaskList(BaseModel):
    model: str
    version: int | None
    count: int
    tasks: list[TaskOut]


class ModelOut(BaseModel):
    name: str
    estimator: str
    kind: str
    d: int | None = Field(None, description="Number of features (fixed by the first batch unless configured).")
    p: int | None = Field(None, description="Length of a task code (size of the feature library).")
    hyperparameters: dict[str, Any]
    created_with: dict[str, Any] = Field(..., description="The FCL3_* settings the model was created with.")
    version: int
    n_tasks: int
    n_batches: int = Field(..., description="Batches the model has learned (over all its tasks).")
    n_representatives: int
    representatives: list[str]
    created_at: UtcDatetime
    updated_at: UtcDatetime
    features: list[dict[str, Any]] | None = Field(
        None, description="The feature schema (null: the model takes X only); see `POST /models`."
    )
    columns: list[str] | None = Field(
        None,
        description="With a schema: the columns its records are encoded into, "
        "in order (`age`, `age=null`, `urban=yes`, ...): the vocabulary (GET of one "
        "model).",
    )
    origin: dict[str, Any] | None = Field(
        None,
        description="How the model came to be: null (created), "
        '{"fork": {"model", "version"}} or {"import": {"model", "version"}}.',
    )
    prequential: ModelPrequential | None = Field(None, description="Model-wide prequential scores (GET of one model).")


class ModelList(BaseModel):
    total: int = Field(..., description="Models in the database.")
    offset: int
    count: int
    models: list[ModelOut] = Field(..., description="By name.")


class ForkFrom(Request):
    model: ModelNameStr = Field(..., description="The model to fork.")
    version: int | None = Field(
        None, ge=0, le=2**31 - 1, description="Its version to start from (default: its current version)."
    )


class FeatureSpec(Request):
    """One named feature of a model's schema."""

    name: str = Field(..., min_length=1, max_length=200, examples=["age"])
    type: Literal["number", "category", "boolean"] = Field(
        ...,
        description="`number` (one column), `category` "
        "(one-hot: a column per level, added as levels arrive), "
        "`boolean` (one column, true = 1).",
    )
    nullable: bool = Field(
        False,
        description="May be null or absent: a number or boolean then gets a missing "
        "indicator column and is encoded as `fill`; a category gets a missing level.",
    )
    fill: Number | None = Field(
        None,
        description="Number or boolean only: the value a missing one is encoded "
        "with, beside its indicator (default 0).",
    )
    levels: list[Annotated[str, Field(max_length=200)]] | None = Field(
        None,
        max_length=10000,
        description="Category only: levels known in advance, whose columns exist from the "
        "start (others are added as they arrive).",
        examples=[["Y", "N"]],
    )


class ModelCreate(Request):
    """A new model: its settings, or ``fork`` (an existing model at one of its versions; the
    settings are then the parent's, and none may be given)."""

    name: ModelNameStr = Field(..., description=MODEL_NAME_RULE + ".", examples=["schools"])
    kind: Literal["regression", "classification"] | None = Field(
        None, description="Kind of the model; left out: the server's default kind (FCL3_KIND). Not with `fork`."
    )
    estimator: str = Field("FCL3", min_length=1, max_length=100, description="Learner class in core (FCL3, STL, ...).")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description='Other hyper-parameters, e.g. {"lambda2": 0.5}; '
        "each within its range (core.params: e.g. n_components 1-50, max_outer_iter "
        "0-200, tol in (0, 1]), else 422 naming it and its range.",
    )
    d: int | None = Field(None, gt=0, le=10**6, description="Number of features; null: fixed by the first batch.")
    features: list[FeatureSpec] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description=(
            "A feature schema: the model then takes `records` (rows of named values) on .../data and /predict, and "
            "`text/csv`; categories are one-hot encoded by the service into columns that grow with their levels "
            "(the learner's `grow_features` is set). Null: rows of numbers (`X`) only."
        ),
        examples=[
            [
                {"name": "age", "type": "number"},
                {"name": "urban", "type": "category"},
                {"name": "smoker", "type": "boolean", "nullable": True},
            ]
        ],
    )
    fork: ForkFrom | None = Field(None, description="Create the model as this model was at this version.")

    @model_validator(mode="after")
    def _kind_or_fork(self) -> ModelCreate:
        if self.fork is not None:
            given = sorted(self.model_fields_set & {"kind", "estimator", "params", "d", "features"})
            if given:
                raise ValueError(f"a fork takes its parent's settings: do not give {', '.join(given)}")
        if self.features is not None:
            try:
                parse_schema([f.model_dump(exclude_unset=True) for f in self.features])
            except RecordError as exc:
                raise ValueError(str(exc)) from None
            if self.d is not None:
                raise ValueError(
                    "d is the number of columns of X: a model with features has as many as its "
                    "vocabulary (do not give d)"
                )
            if self.params.get("grow_features") is False:
                raise ValueError(
                    "a model with features grows a column per new category level: grow_features cannot be false"
                )
        return self

    def model_settings(self) -> dict[str, Any]:
        params = dict(self.params)
        settings: dict[str, Any] = {"estimator": self.estimator, "kind": self.kind, "params": params, "d": self.d}
        if self.features is not None:
            params["grow_features"] = True
            settings["features"] = [
                {"fill": 0.0, **f.model_dump(exclude_unset=True)}
                if f.type != "category"
                else f.model_dump(exclude_unset=True, exclude={"fill"})
                for f in self.features
            ]
            for f in settings["features"]:
                f.setdefault("nullable", False)
        return settings


# ----------------------------------------------------------------------------- online evaluation
class RegressionScores(BaseModel):
    """Scores of a regression model on ``n`` labelled rows, beside its baseline: the task's own
    single-task model (what learning the task alone gives). Lower is better."""

    n: int = Field(..., description="Rows scored.")
    rmse: float = Field(..., description="Root mean squared error (the primary error metric of regression).")
    mae: float = Field(..., description="Mean absolute error.")
    baseline_rmse: float = Field(..., description="RMSE of the task's own single-task model.")
    baseline_mae: float = Field(..., description="MAE of the task's own single-task model.")


class ClassificationScores(BaseModel):
    """Scores of a classification model on ``n`` labelled rows, beside its baseline (the task's
    own single-task model). ``log_loss`` (natural log, probabilities clipped to [eps, 1-eps]) is
    the primary error metric; ``auc`` only when both labels occur among the rows scored at once
    (null in cumulative figures)."""

    n: int = Field(..., description="Rows scored.")
    log_loss: float = Field(..., description="Mean negative log-likelihood of the labels (primary error metric).")
    accuracy: float = Field(..., description="Fraction of rows whose predicted label is right.")
    baseline_log_loss: float
    baseline_accuracy: float
    auc: float | None = Field(None, description="Area under the ROC curve (both labels present), else null.")
    baseline_auc: float | None = None


Scores = RegressionScores | ClassificationScores


class ModelPrequential(BaseModel):
    """The model-wide prequential (test-then-train) scores: over every batch scored, and over
    the ``window`` most recent scored batches."""

    overall: Scores | None = None
    recent: Scores | None = None
    window: int = Field(..., description="Batches in the recent window (PREQUENTIAL_WINDOW).")


class EvaluationRows(Batch):
    """Labelled held-out rows of one task: never learned; rescored after its task's updates and,
    a bounded number per update (EVALUATION_RESCORE), after other tasks' updates."""


class EvaluationRowsOut(BaseModel):
    """The answer of ``POST .../tasks/{task_id}/evaluation``."""

    task_id: str
    n_rows: int = Field(..., description="Evaluation rows kept for the task (at most EVALUATION_MAX_ROWS).")
    n_received: int = Field(
        ...,
        description="Evaluation rows received for the task in all (a reservoir keeps a "
        "uniform sample when this exceeds the bound).",
    )
    version: int = Field(..., description="Model version (unchanged: evaluation rows are never learned).")
    score: Scores | None = Field(
        None,
        description="The task's score on its evaluation rows at this version (null while the task is not learned).",
    )


class EvaluationTask(BaseModel):
    task_id: str
    n_rows: int
    n_received: int
    learned: bool = Field(..., description="Whether the model has learned the task (else no score yet).")
    score: Scores | None = Field(None, description="Current score on the evaluation rows, beside the baseline.")
    scored_version: int | None = Field(
        None,
        description="Model version ``score`` is of (an update rescores the "
        "task it learned and a bounded number of others, oldest score first).",
    )


class AccuracyMatrixRow(BaseModel):
    version: int = Field(..., description="Model version right after the new task ``task_id`` was first learned.")
    task_id: str = Field(..., description="The new task of this row.")
    scores: list[float | None] = Field(
        ..., description="Each task's metric (order of ``tasks``); null: not learned yet or no evaluation rows then."
    )
    baseline: list[float | None] = Field(..., description="The same for each task's own single-task model.")


class AccuracyMatrix(BaseModel):
    """R[i][j]: the score on task j's evaluation rows right after the i-th new task was learned."""

    metric: str = Field(..., description='"rmse" (regression: lower is better) or "accuracy" (classification).')
    higher_is_better: bool
    tasks: list[str] = Field(
        ..., description="Columns: tasks with evaluation rows, in the order first learned (not yet learned last)."
    )
    rows: list[AccuracyMatrixRow] = Field(
        ..., description="The page of rows asked for (`matrix_offset`, `matrix_limit`)."
    )
    n_rows: int | None = Field(None, description="Rows of the whole matrix.")
    offset: int = Field(0, description="Rows skipped before the first of `rows`.")


class TakenBack(BaseModel):
    """What a take-back removed (``DELETE .../batches/{version}``)."""

    batch_version: int = Field(..., description="The version of the batch taken back.")
    n_samples: int = Field(..., description="Its rows.")
    task_removed: bool = Field(..., description="It was its task's only batch: the task is gone.")


class PrequentialPoint(BaseModel):
    version: int
    task_id: str
    new_task: bool
    batch: Scores | None = Field(
        None, description="This batch's prequential score (null: a new task's first batch, or a take-back)."
    )
    overall: Scores | None = Field(
        None, description="Model-wide prequential score over every batch up to this version."
    )
    source: Literal["labels"] | None = Field(None, description='"labels": a batch of labels that arrived later.')
    taken_back: TakenBack | None = Field(None, description="This version took a batch back (no batch learned).")


class EvaluationOut(BaseModel):
    """``GET .../evaluation``. Transfer figures are signed so that positive is good (better than
    the reference); forgetting is positive when a task got worse (see docs/design.md)."""

    model: str
    version: int = Field(..., description="Model version the current scores are of.")
    kind: str
    metric: str
    tasks: list[EvaluationTask]
    accuracy_matrix: AccuracyMatrix
    backward_transfer: float | None = Field(
        None,
        description="GEM BWT over the accuracy matrix (Lopez-Paz & "
        "Ranzato 2017); positive: later tasks improved earlier ones.",
    )
    forgetting: float | None = Field(None, description="Average forgetting (Chaudhry et al. 2018).")
    forward_transfer: float | None = Field(
        None,
        description="Score of each new task right after it was learned "
        "minus that of its own single-task model, averaged (positive: the "
        "shared library helped).",
    )
    prequential: list[PrequentialPoint] = Field(
        default_factory=list,
        description="Model-wide prequential scores over versions: ``limit`` of them after the ``offset`` latest.",
    )
    prequential_total: int | None = Field(None, description="Versions of the whole prequential series.")
    prequential_offset: int = Field(0, description="Latest versions skipped before the first of `prequential`.")


class UpdateEvent(BaseModel):
    """``event: update`` of ``GET .../events`` (``id:`` is ``version``): a batch learned, or
    (with ``taken_back``) a batch taken back."""

    version: int
    task_id: str
    new_task: bool
    new_representative: bool
    n_representatives: int
    prequential: Scores | None = None
    source: Literal["labels"] | None = Field(None, description='"labels": the batch is labels that arrived later.')
    taken_back: TakenBack | None = Field(None, description="This version took a batch of `task_id` back.")


class TakeBackOut(BaseModel):
    """The answer of ``DELETE .../batches/{version}``: the model rebuilt without that batch."""

    version: int = Field(..., description="Model version after the take-back (a new version).")
    batch_version: int = Field(..., description="The batch taken back.")
    task_id: str = Field(..., description="Its task.")
    n_samples: int = Field(..., description="Rows taken back.")
    task_removed: bool = Field(..., description="The batch was its task's only one: the task is gone (404 on it now).")
    task_n_samples: int = Field(..., description="Rows the task keeps (0 when removed).")
    n_replayed: int = Field(..., description="Batches replayed to rebuild the model.")
    n_representatives: int

    model_config = {
        "json_schema_extra": {
            "examples": [
                {
                    "version": 13,
                    "batch_version": 7,
                    "task_id": "school-4",
                    "n_samples": 1,
                    "task_removed": False,
                    "task_n_samples": 30,
                    "n_replayed": 11,
                    "n_representatives": 2,
                }
            ]
        }
    }


class EvaluationEvent(BaseModel):
    """``event: evaluation``: the evaluation changed: after an update, new evaluation rows, or a
    new row of the accuracy matrix (computed just after the new task's update)."""

    version: int
    reason: Literal["update", "rows", "matrix"]
    task_id: str | None = Field(None, description="The task updated, or the task whose evaluation rows were posted.")
    n_tasks: int = Field(..., description="Tasks with evaluation rows.")
    backward_transfer: float | None = None
    forgetting: float | None = None
    forward_transfer: float | None = None


class ResetEvent(BaseModel):
    """``event: reset``: the events since ``Last-Event-ID`` cannot be replayed; re-read the state."""

    version: int | None = Field(None, description="The model's current version (null: the model is gone).")
    reason: str


for _m in (UpdateOut, TaskOut, ModelOut):
    _m.model_rebuild()
