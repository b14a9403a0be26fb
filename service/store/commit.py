"""The one small interface through which a commit takes the features that write in its own
transaction (the evaluation, an ``Idempotency-Key``'s answer, labels marked, a take-back's
scores): each is a :class:`CommitParticipant` and sees the :class:`Commit` being written.
:mod:`service.store.writes` calls them without naming any feature, so a feature depends on the
commit and never the other way round."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection

from service.store.prepared import Prepared, PreparedTakeBack

#: What a commit stores: a batch learned (:class:`Prepared`) or a batch taken back.
P = TypeVar("P", Prepared, PreparedTakeBack)


@dataclass(frozen=True)
class Commit(Generic[P]):
    """An update being committed: what its participants see inside its transaction."""

    prepared: P
    version: int  # the new model version
    at: datetime
    answer: dict[str, Any]  # the body of the update's 200 (fcl3.schemas.UpdateOut, or TakeBackOut)


class CommitParticipant(Generic[P]):
    """A feature that writes its part of an update in the update's own transaction (the
    evaluation, an ``Idempotency-Key``'s answer, labels marked, a take-back's scores), of the
    commits of :data:`P` it takes part in. Raising rolls the whole commit back."""

    def in_commit(self, conn: Connection, commit: Commit[P]) -> None:
        raise NotImplementedError

    def in_commits(self, conn: Connection, commits: list[Commit[P]]) -> None:
        """Its part of consecutive updates of one group commit, in version order: what
        :meth:`in_commit` of each in turn writes (by default, those calls; a participant of
        many batches, as the evaluation, may write them at once)."""
        for commit in commits:
            self.in_commit(conn, commit)
