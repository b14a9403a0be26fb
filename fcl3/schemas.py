"""Request and response bodies. Requests refuse unknown fields (``extra="forbid"``) and
non-numbers (strict floats: no strings, no booleans)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

Number = Annotated[float, Strict()]


def _utc(value: datetime) -> datetime:
    """Stored times are UTC; SQLite hands them back naive: say so (RFC 3339 needs an offset)."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _not_empty(X: list) -> list:
    if not X:
        raise ValueError("X is empty: a batch needs at least one row")
    return X


class Batch(Request):
    X: list[list[Number]] = Field(..., description="Feature rows (all the same width).",
                                  examples=[[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])
    y: list[Number] = Field(..., description="One target per row; labels 0/1 or -1/1 for classification.",
                            examples=[[0.5, 1.5]])

    _x_not_empty = field_validator("X")(_not_empty)


class PredictRequest(Request):
    task_id: str = Field(..., min_length=1, max_length=200)
    X: list[list[Number]] = Field(..., examples=[[[1.0, 2.0, 3.0]]])

    _x_not_empty = field_validator("X")(_not_empty)


class AssignmentEntry(BaseModel):
    representative: str | None = Field(None, description="Task id of the representative; null for the outlier slot.")
    outlier: bool = Field(False, description="True for the last entry: the outlier (new-environment) slot.")
    weight: float


class UpdateOut(BaseModel):
    task_id: str
    n_samples: int = Field(..., description="Samples of this task seen so far.")
    new_task: bool
    code: list[float] | None = Field(None, description="The task's code s_t.")
    assignment: list[AssignmentEntry] | None = Field(None, description="Z^t over the representatives, then the outlier slot.")
    outlier_probability: float | None = Field(None, description="e: probability that the task opens a new environment.")
    new_representative: bool
    n_representatives: int
    version: int = Field(..., description="Model version after this update.")


class PredictOut(BaseModel):
    task_id: str
    predictions: list[float]
    probabilities: list[float] | None = Field(None, description="P(positive class), classification only.")
    version: int


class TaskOut(BaseModel):
    task_id: str
    n_samples: int
    n_batches: int
    version: int = Field(..., description="Model version that last updated this task.")
    labels: str | None = None
    created_at: UtcDatetime
    updated_at: UtcDatetime
    last_update: dict[str, Any] | None = None


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
    n_batches: int
    n_representatives: int
    representatives: list[str]
    created_at: UtcDatetime
    updated_at: UtcDatetime
    origin: dict[str, Any] | None = Field(None, description='How the model came to be: null (created), '
                                          '{"fork": {"model", "version"}} or {"import": {"model", "version"}}.')


class ModelList(BaseModel):
    total: int = Field(..., description="Models in the database.")
    offset: int
    count: int
    models: list[ModelOut] = Field(..., description="By name.")


class ForkFrom(Request):
    model: str = Field(..., min_length=1, max_length=200, description="The model to fork.")
    version: int | None = Field(None, ge=0, le=2**31 - 1,
                                description="Its version to start from (default: its current version).")


MODEL_NAME_PATTERN = r"^[A-Za-z0-9._-]{1,100}$"


class ModelCreate(Request):
    """A new model: its settings, or ``fork`` (an existing model at one of its versions; the
    settings are then the parent's, and none may be given)."""

    name: str = Field(..., min_length=1, max_length=100, pattern=MODEL_NAME_PATTERN,
                      description="1-100 characters of [A-Za-z0-9._-].", examples=["schools"])
    kind: Literal["regression", "classification"] | None = Field(None, description="Required unless forking.")
    estimator: str = Field("FCL3", min_length=1, max_length=100, description="Learner class in core (FCL3, STL, ...).")
    params: dict[str, Any] = Field(default_factory=dict, description='Other hyper-parameters, e.g. {"lambda2": 0.5}.')
    d: int | None = Field(None, gt=0, le=10**6, description="Number of features; null: fixed by the first batch.")
    fork: ForkFrom | None = Field(None, description="Create the model as this model was at this version.")

    @model_validator(mode="after")
    def _kind_or_fork(self) -> "ModelCreate":
        if self.fork is not None:
            given = sorted(self.model_fields_set & {"kind", "estimator", "params", "d"})
            if given:
                raise ValueError(f"a fork takes its parent's settings: do not give {', '.join(given)}")
        elif self.kind is None:
            raise ValueError("kind is required: 'regression' or 'classification'")
        return self

    def model_settings(self) -> dict[str, Any]:
        return {"estimator": self.estimator, "kind": self.kind, "params": dict(self.params), "d": self.d}
