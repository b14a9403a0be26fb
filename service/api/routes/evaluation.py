"""POST /tasks/{task_id}/evaluation: held-out labelled rows of a task, never learned; GET
/evaluation: the online evaluation (held-out scores, accuracy matrix, transfer, prequential)."""

from __future__ import annotations

from fastapi import APIRouter, Query

from fcl3.schemas import EvaluationOut, EvaluationRows, EvaluationRowsOut
from service.api.deps import CSV_BODY, MAX_OFFSET, CsvCharset, ModelDep, SettingsDep, TaskIdPath, rows_of
from service.api.json_body import JsonRoute
from service.api.routes.data import ERRORS
from service.evaluation import figures
from service.evaluation.model_evaluation import add_evaluation_rows

#: ``POST .../evaluation``: included behind the write key.
write_router = APIRouter(route_class=JsonRoute, tags=["learning"])
#: ``GET .../evaluation``: included behind the read key.
read_router = APIRouter(tags=["tasks"])


@write_router.post(
    "/tasks/{task_id}/evaluation",
    response_model=EvaluationRowsOut,
    openapi_extra=CSV_BODY,
    responses={
        **{k: v for k, v in ERRORS.items() if k not in (409, 410)},
        422: {
            "description": "Bad rows (the checks of a batch: width, NaN/inf, empty, lengths, labels, unknown fields)."
        },
    },
)
def post_evaluation_rows(
    model: ModelDep, settings: SettingsDep, rows: EvaluationRows, task_id: TaskIdPath, _charset: CsvCharset
) -> EvaluationRowsOut:
    """Store labelled rows as the task's evaluation set: never learned (the model's version and
    the task's samples do not move), kept up to EVALUATION_MAX_ROWS per task (then a uniform
    sample of all rows received). The task need not be learned yet. The set is scored at once
    if the task is learned; then just after the commit of each update of that task, and of an
    update of another task when the set is among the EVALUATION_RESCORE ones whose scores are
    oldest (each score carries the version it is of: ``scored_version``). An update that learns
    a new task also scores every learned set, in the background, for the accuracy matrix."""
    out = add_evaluation_rows(model, task_id, rows_of(model, settings, rows), rows.y)
    return EvaluationRowsOut(**out)


@read_router.get("/evaluation", response_model=EvaluationOut, responses={404: {"description": "Unknown model."}})
def get_evaluation(
    model: ModelDep,
    limit: int = Query(
        100, ge=0, le=100000, description="Versions of the model-wide prequential series (the latest ones)."
    ),
    offset: int = Query(
        0, ge=0, le=MAX_OFFSET, description="Latest versions of the prequential series skipped (its next page)."
    ),
    matrix_limit: int = Query(25, ge=0, le=10000, description="Rows of the accuracy matrix (in version order)."),
    matrix_offset: int = Query(0, ge=0, le=MAX_OFFSET, description="Rows of the accuracy matrix skipped."),
) -> EvaluationOut:
    """Each task's current score on its evaluation rows (beside its own single-task model's), the
    accuracy matrix, backward transfer, forgetting, forward transfer, and the model-wide
    prequential scores over versions (definitions: docs/concepts.md). The matrix's rows and the
    prequential series are paged (``accuracy_matrix.n_rows`` and ``prequential_total`` count
    them all); the transfer figures are always over the whole matrix."""
    pages = figures.Pages(limit, offset, matrix_limit, matrix_offset)
    return EvaluationOut(**figures.evaluation_report(model, pages))
