"""The client's retry budget for a batch covers the service's ``LOCK_TTL`` (issue 22, row 8): a
batch answered 409 (its key still in flight) or 503 (nothing applied) is retried for at least
``Retries.patience`` seconds by default, past ``Retries.total``; on scripted answers (no
server), the waits recorded instead of slept."""
from __future__ import annotations

import asyncio

import httpx
import pytest

from fcl3 import AsyncClient, Conflict, Unavailable
from fcl3.retries import Retries

from .conftest import UPDATE, Script, scripted

IN_FLIGHT = {"detail": "a request with Idempotency-Key 'k' is still running on model 'm'"}


def in_flight() -> httpx.Response:
    return httpx.Response(409, json=IN_FLIGHT, headers={"Retry-After": "1"})


def down() -> httpx.Response:
    return httpx.Response(503, json={"detail": "database unavailable"}, headers={"Retry-After": "5"})

client = scripted


def lock_ttl() -> float:
    from service.config import Settings

    return float(Settings.model_fields["LOCK_TTL"].default)


def test_the_default_patience_covers_lock_ttl():
    assert Retries().patience >= lock_ttl() + 10  # + an update's LOCK_WAIT and its commit


def test_a_batch_waits_out_a_claim_that_lasts_lock_ttl(sleeps):
    """A crashed request's claim answers 409 for up to ``LOCK_TTL`` (30 s): the default client
    keeps the batch's key and retries until it is learned, instead of raising Conflict."""
    n = int(lock_ttl()) + 5
    s = Script(*[in_flight() for _ in range(n)], httpx.Response(200, json=UPDATE))
    r = client(s).learn_batch("m", "a", [[1.0]], [1.0], idempotency_key="k")
    assert (r.attempts, r.replayed, r.update.version) == (n + 1, False, 1)
    assert sleeps == [1.0] * n and sum(sleeps) > lock_ttl()
    assert {req.headers["Idempotency-Key"] for req in s.requests} == {"k"}


def test_a_batch_waits_out_a_database_outage(sleeps):
    s = Script(*[down() for _ in range(9)], httpx.Response(200, json=UPDATE))
    assert client(s).learn("m", "a", [[1.0]], [1.0]).version == 1
    assert sleeps == [5.0] * 9


def test_the_async_client_waits_as_long(sleeps):
    n = int(lock_ttl()) + 5
    s = Script(*[in_flight() for _ in range(n)], down(), httpx.Response(200, json=UPDATE))

    async def run():
        async with AsyncClient("http://fcl3.test", transport=httpx.MockTransport(s)) as c:
            return await c.learn_batch("m", "a", [[1.0]], [1.0])

    r = asyncio.run(run())
    assert r.attempts == n + 2 and sum(sleeps) == n + 5.0


def test_patience_is_bounded_then_the_error_is_raised(sleeps):
    s = Script(*[in_flight() for _ in range(200)])
    with pytest.raises(Conflict) as err:
        client(s).learn("m", "a", [[1.0]], [1.0])
    assert err.value.status == 409
    # 60 s of patience, then the 5 ordinary retries
    assert sleeps == [1.0] * (60 + 5) and len(s.requests) == 66


def test_busy_answers_do_not_spend_the_retries_of_a_lost_connection(sleeps):
    """After many busy answers the batch's connection errors are still retried ``total`` times."""
    s = Script(*[in_flight() for _ in range(20)], httpx.ConnectError("refused"), httpx.ConnectError("refused"),
               httpx.Response(200, json=UPDATE, headers={"Idempotent-Replayed": "true"}))
    r = client(s, retries=2).learn_batch("m", "a", [[1.0]], [1.0])
    assert r.replayed and r.attempts == 23


def test_patience_can_be_set_or_turned_off(sleeps):
    with pytest.raises(Conflict):
        client(Script(*[in_flight() for _ in range(3)]), retries=Retries(total=2, patience=0)).learn("m", "a", [[1]], [1])
    assert sleeps == [1.0, 1.0]
    sleeps.clear()
    with pytest.raises(Conflict):  # retries=0: never retried
        client(Script(in_flight()), retries=0).learn("m", "a", [[1.0]], [1.0])
    assert sleeps == []
    with pytest.raises(Unavailable):
        client(Script(*[down() for _ in range(4)]), retries=Retries(total=1, patience=10)).learn("m", "a", [[1]], [1])
    assert sleeps == [5.0, 5.0, 5.0]  # 10 s of patience, then the one ordinary retry


def test_reads_are_not_made_patient(sleeps):
    """Only a batch waits out ``LOCK_TTL``: a read answered 503 gives up after ``total`` retries."""
    with pytest.raises(Unavailable):
        client(Script(*[down() for _ in range(3)]), retries=2).get_model("m")
    assert sleeps == [5.0, 5.0]


def test_a_label_waits_out_its_key_in_flight_but_not_ids_labelled_already(sleeps):
    """A label request answered 409 with ``Retry-After`` (its key still in flight) is retried
    with the same key until it is learned; a 409 without (the ids were labelled already) is
    raised at once."""
    s = Script(in_flight(), in_flight(), httpx.Response(200, json=UPDATE))
    r = client(s).label_batch("m", {"p1": 1.0}, idempotency_key="k")
    assert (r.attempts, r.update.version) == (3, 1)
    assert {req.headers["Idempotency-Key"] for req in s.requests} == {"k"}
    labelled = httpx.Response(409, json={"detail": "labelled already", "version": 4, "prediction_ids": ["p1"]})
    s = Script(labelled)
    with pytest.raises(Conflict):
        client(s).label_batch("m", {"p1": 1.0}, idempotency_key="k2")
    assert len(s.requests) == 1
