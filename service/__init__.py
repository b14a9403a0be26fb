"""The FCL3 streaming microservice: a FastAPI app around the :mod:`core` engine.

``service.main:app`` is the ASGI app. Layout follows FastAPI's full-stack template, one module
per job: ``main.py`` (assembles the app and holds what the models share in its state),
``config.py`` (one pydantic-settings ``Settings``), ``db.py`` (engines, migrations),
``tables.py`` (SQLAlchemy tables), ``learners.py`` (the configured learner), ``registry.py``
(the models a process serves), ``usecases.py`` (learn, predict: where updates are observed),
``group_commit.py`` / ``write_queue.py`` (batches queued in a process, committed together),
``write_outcomes.py`` (each write's outcome and lock wait, counted), ``idempotent_writes.py``
(a write at most once per key), ``label_usecases.py`` / ``take_back_usecases.py`` /
``evaluation_usecases.py`` (labels, take-backs, evaluation rows and figures),
``lifecycle.py`` (create, delete, export, import, fork), ``reads.py`` (cached reads of a
model), ``writes.py`` (create, prepare, the guarded commit), ``prepared.py`` (what an update
computed before its commit), ``commit_participants.py`` (the interface a commit takes its
participants through), ``idempotency.py`` (``Idempotency-Key``), ``scores.py`` /
``evaluation.py`` / ``evaluation_matrix.py`` / ``evaluation_jobs.py`` / ``evaluation_store.py``
/ ``evaluation_reads.py`` / ``evaluation_worker.py`` (the online evaluation: metrics, its part
in a commit, the accuracy matrix's rows, what a commit hands them, SQL, reads, background
worker), ``watch.py`` (when the stored model changed), ``events.py`` (Server-Sent Events),
``locks.py`` / ``file_lock_holds.py`` / ``lock_holders.py`` (the update lock, a file lock's
holds, a Redis lock's holders), ``state_files.py``,
``responses.py``, ``middleware.py``, ``errors.py``, ``security.py``, ``logs.py``, ``metrics.py``,
``memory.py``, ``api/deps.py`` and ``api/routes/*`` (one router per resource).
"""
