"""Configuration: one pydantic-settings class, read from the environment (and ``.env``).

Service settings are plain names (``DATABASE_URL``, ``REDIS_URL``, ...); the model's own
settings carry the prefix ``FCL3_``. The ``FCL3_*`` values are used only when a model is
created; they are then stored with the model, and a model that already exists keeps the
settings it was created with (``GET /model`` shows them).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore", env_ignore_empty=True)

    # --- storage and locking ---------------------------------------------------------
    DATABASE_URL: str | None = Field(
        None,
        description="SQLAlchemy URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/fcl3. "
        "Unset: an SQLite file (SQLITE_PATH) with the schema created automatically.",
    )
    SQLITE_PATH: str = Field("fcl3.db", description="SQLite file used when DATABASE_URL is unset.")
    REDIS_URL: str | None = Field(
        None,
        description="redis://host:6379/0 for the update lock. Unset: on the SQLite default, file "
        "locks next to the database file (any number of processes of one machine); otherwise an "
        "in-process lock (correct for one process only).",
    )
    REDIS_PREFIX: str = Field("fcl3:", description="Prefix of every Redis key this service uses.")
    AUTO_CREATE_SCHEMA: bool | None = Field(
        None,
        description="Run the migrations at start-up. Default: yes on SQLite, no otherwise "
        "(run `alembic upgrade head` once before the workers start).",
    )
    MODEL_NAME: str = Field(
        "default",
        description="Name of the default model: the one the routes without "
        "/models/{name} act on, created at start-up from the FCL3_* settings.",
    )
    MODEL_CACHE_SIZE: int = Field(
        100,
        gt=0,
        description="Models (besides the default one) whose learner each "
        "process keeps in memory; the least recently used is dropped first.",
    )
    LOCK_TTL: float = Field(30.0, gt=0, description="Seconds before an update lock expires if its holder dies.")
    LOCK_WAIT: float = Field(5.0, ge=0, description="Seconds an update waits for the lock before answering 503.")
    IDEMPOTENCY_TTL: float = Field(
        24 * 3600.0,
        gt=0,
        description="Seconds an Idempotency-Key is kept "
        "after its request (then purged; a later request with it is a new one).",
    )
    IDEMPOTENCY_PURGE_EVERY: float = Field(
        300.0,
        ge=0,
        description="At most one purge of expired Idempotency-Keys per this many seconds per process (on writes).",
    )
    MAX_BODY_BYTES: int = Field(16 * 1024 * 1024, gt=0, description="Larger request bodies get 413.")
    MAX_IMPORT_BYTES: int = Field(
        1024 * 1024 * 1024,
        gt=0,
        description="Larger model files (PUT/POST of an "
        "exported state) get 413; the body is streamed to a temporary file, not "
        "held in memory.",
    )
    MAX_IMPORT_INFLATED_BYTES: int = Field(
        1024 * 1024 * 1024,
        gt=0,
        description="A model file whose arrays "
        "would take more than this once decompressed gets 413, before any "
        "of them is allocated. An import briefly needs about three times "
        "this in the worker: set it to a third of what one worker may use.",
    )
    HEADER_TIMEOUT: float = Field(10.0, gt=0, description="Seconds a client has to send a request's headers.")
    BODY_TIMEOUT: float = Field(
        30.0,
        gt=0,
        description="Seconds a client has between two chunks of a request's body (an idle upload is dropped with 408).",
    )
    MAX_EVENT_STREAMS_PER_KEY: int = Field(
        16,
        gt=0,
        description="Open event streams (GET .../events) per API "
        "key (per client address when the API is open), per process; one "
        "more gets 429.",
    )
    DB_POOL_SIZE: int = Field(
        20, gt=0, description="Database connections kept per process (as many again may overflow)."
    )
    VERSION_POLL: float = Field(
        1.0,
        ge=0,
        description="Seconds a process serves its cached model without "
        "checking the stored version while its version watch (SQLite PRAGMA data_version, "
        "PostgreSQL LISTEN/NOTIFY) reports no change: the bound on staleness should a "
        "notification be lost. 0: check the version on every request.",
    )
    DB_CONNECT_TIMEOUT: int = Field(3, gt=0, description="Seconds to wait for a database connection.")

    # --- online evaluation (service.evaluation, service.events) ----------------------
    EVALUATION_MAX_ROWS: int = Field(
        1000,
        gt=0,
        description="Evaluation rows kept per task; beyond it a uniform sample of every row received (a reservoir).",
    )
    EVALUATION_RESCORE: int = Field(
        8, ge=0, description="Evaluation sets an update rescores besides its own task's, oldest score first."
    )
    EVALUATION_MATRIX: bool = Field(
        True,
        description="Record the accuracy matrix: after a new task's first "
        "batch, every learned evaluation set is scored (off the update lock, in a "
        "background thread; cost grows with the tasks that hold evaluation rows). "
        "false: no matrix rows, no transfer figures.",
    )
    PREQUENTIAL_WINDOW: int = Field(
        100, ge=0, description="Scored batches in the model's recent prequential window (GET /models/{name})."
    )
    EVENTS_HEARTBEAT: float = Field(
        15.0, gt=0, description="Seconds between keep-alive comments of an idle event stream (GET .../events)."
    )

    # --- labels that arrive later (service.labels) -----------------------------------
    PREDICTION_TTL: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Seconds a prediction made with "
        '"remember": true can be labelled (POST .../labels); later its id answers 410.',
    )
    MAX_REMEMBERED_PER_MODEL: int = Field(
        100_000,
        gt=0,
        description="Remembered predictions waiting for their "
        "label, per model; beyond it the oldest are dropped (their ids then "
        "answer 410), and as many labelled or dropped rows are kept, the oldest "
        "deleted beyond it. A request remembering more rows than this gets 413.",
    )

    # --- access control, limits, logs ------------------------------------------------
    API_WRITE_KEYS: str | None = Field(
        None,
        description="Comma-separated keys allowed to change the model (and to read). An entry "
        "`sha256:<hex>` is the SHA-256 of a key, so that only hashes need be stored. "
        "Unset (and API_READ_KEYS unset): the API is open (a WARNING says so at start-up).",
    )
    API_READ_KEYS: str | None = Field(
        None, description="Comma-separated keys allowed to read (predictions, /tasks, /model); same format."
    )
    MAX_ROWS_PER_BATCH: int = Field(10_000, gt=0, description="More rows in one request get 413.")
    MAX_FEATURES: int = Field(1_000, gt=0, description="More features per row get 413.")
    MAX_COLUMNS: int = Field(
        128,
        gt=0,
        description="The most encoded columns a model with a feature schema may have (its base "
        "columns and one per category level): a schema, an import or a batch that would pass it "
        "gets 422, nothing changed. FCL3's update time grows with the cube of the columns "
        "(docs/limits.md, 'Columns of a model'); a model's engine may take fewer.",
    )
    LOG_LEVEL: str = Field("INFO", description="Level of the service's JSON log lines.")

    # --- the model (used when the model is created, then stored with it) --------------
    FCL3_ESTIMATOR: str = Field("FCL3", description="Learner class in core (FCL3, STL, ...).")
    FCL3_KIND: Literal["regression", "classification"] = "regression"
    FCL3_PARAMS: dict[str, Any] = Field(
        default_factory=dict, description='Other hyper-parameters as JSON, e.g. {"lambda2": 0.1}.'
    )
    FCL3_D: int | None = Field(None, gt=0, description="Number of features; unset: fixed by the first batch.")
    FCL3_FEATURES: list[dict[str, Any]] | None = Field(
        None,
        description='A feature schema as JSON, as `features` of POST /models (e.g. [{"name": "age", "type": '
        '"number"}, {"name": "urban", "type": "category"}]): the default model then takes records.',
    )

    @field_validator("DATABASE_URL")
    @classmethod
    def _driver(cls, v: str | None) -> str | None:
        """Accept plain ``postgres://``/``postgresql://`` URLs and use psycopg 3 for them."""
        if not v:
            return None
        for plain in ("postgres://", "postgresql://"):
            if v.startswith(plain):
                return "postgresql+psycopg://" + v[len(plain) :]
        return v

    @field_validator("REDIS_URL")
    @classmethod
    def _empty_redis(cls, v: str | None) -> str | None:
        return v or None

    @property
    def max_columns(self) -> int:
        """The column cap of a model with a feature schema: ``MAX_COLUMNS``, and never a row
        wider than ``MAX_FEATURES``."""
        return min(self.MAX_COLUMNS, self.MAX_FEATURES)

    @property
    def database_url(self) -> str:
        return self.DATABASE_URL or f"sqlite:///{self.SQLITE_PATH}"

    @property
    def embedded(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def auto_create_schema(self) -> bool:
        return self.embedded if self.AUTO_CREATE_SCHEMA is None else self.AUTO_CREATE_SCHEMA

    @model_validator(mode="after")
    def _model_settings_valid(self) -> Settings:
        """FCL3_FEATURES is checked as a POST /models body's ``features`` is, at start-up."""
        if self.FCL3_FEATURES is not None:
            self.model_settings()
        return self

    def model_settings(self) -> dict[str, Any]:
        """What a new model is created with (stored with the model): with FCL3_FEATURES, as
        :meth:`fcl3.schemas.ModelCreate.model_settings` makes them (the schema normalised, the
        learner's ``grow_features`` set)."""
        if self.FCL3_FEATURES is None:
            return {
                "estimator": self.FCL3_ESTIMATOR,
                "kind": self.FCL3_KIND,
                "params": dict(self.FCL3_PARAMS),
                "d": self.FCL3_D,
            }
        from fcl3.schemas import ModelCreate

        try:
            create = ModelCreate(
                name=self.MODEL_NAME,
                kind=self.FCL3_KIND,
                estimator=self.FCL3_ESTIMATOR,
                params=dict(self.FCL3_PARAMS),
                d=self.FCL3_D,
                features=self.FCL3_FEATURES,
            )
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"FCL3_FEATURES (with FCL3_KIND, FCL3_PARAMS, FCL3_D): {problems}") from None
        return create.model_settings()


@lru_cache
def get_settings() -> Settings:
    return Settings()
