"""The FCL3 streaming microservice: a FastAPI app around the :mod:`core` engine.

``service.main:app`` is the ASGI app. Layout follows FastAPI's full-stack template:
``main.py`` (assembles the app), ``config.py`` (one pydantic-settings ``Settings``),
``db.py`` (engines and schema), ``models.py`` (SQLAlchemy tables), ``learners.py`` (the
configured learner), ``reads.py`` (cached reads of the model), ``writes.py`` (create,
prepare, guarded commit), ``idempotency.py`` (``Idempotency-Key`` claims and answers), ``evaluation.py`` (prequential
scores, evaluation sets, the accuracy matrix), ``events.py`` (Server-Sent Events of a model's
updates), ``watch.py`` (when the stored model changed),
``usecases.py`` (start, learn, predict: where the model's metrics and log lines are
recorded), ``locks.py`` (Redis, per-machine file or in-process update lock),
``responses.py`` (results and rows -> API bodies, the schemas of :mod:`fcl3.schemas`), ``middleware.py``, ``errors.py``,
``security.py``, ``logs.py``, ``metrics.py``, ``memory.py``, ``api/deps.py`` and
``api/routes/*`` (one router per resource; ``ui.py`` the dashboard, its files in ``ui/static``).
"""
