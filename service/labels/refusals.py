"""The refusals of a label request, each with nothing changed (:mod:`service.labels.remembered`
says when each applies), and how their ids are listed in a message."""

from __future__ import annotations

from collections.abc import Sequence

import core
from service.refusals import Refused
from service.store.writes import StaleWrite


class LabelRefused(Refused):
    """A label request refused with nothing changed: ``status`` and the body's extra fields."""


class UnknownPredictions(LabelRefused):
    """Ids never remembered by this model (404)."""

    status = 404


class ExpiredPredictions(LabelRefused):
    """Ids past ``PREDICTION_TTL``, or dropped beyond ``MAX_REMEMBERED_PER_MODEL`` (410)."""

    status = 410


class AlreadyLabelled(LabelRefused):
    """Ids learned already, by the batch of ``version`` (409)."""

    status = 409


class MixedTasks(LabelRefused, core.InputError):
    """Ids of several tasks in one request (422, answered as any bad input)."""


class TooManyRemembered(LabelRefused):
    """More rows remembered by one request than ``MAX_REMEMBERED_PER_MODEL`` (413)."""

    status = 413


class LabelsChanged(StaleWrite):
    """At commit, a row was no longer waiting (labelled, dropped or expired meanwhile): rolled back."""


def listed(ids: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(i) for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")
