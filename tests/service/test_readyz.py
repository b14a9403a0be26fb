"""``/readyz`` is open: an anonymous caller learns ready or not and which component failed, by
name only; the details (lock backend, errors naming hosts and ports) need a valid key (issue 22,
row 14). Both backends."""
from __future__ import annotations

import pytest

READ, WRITE = "ready-read-key", "ready-write-key"
KEYS = {"API_READ_KEYS": READ, "API_WRITE_KEYS": WRITE}


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param


def test_an_anonymous_caller_gets_only_the_state_of_each_component(make_client, request, backend):
    c = make_client(backend, _request=request, **KEYS)
    for headers in ({}, auth("unknown-key"), {"Authorization": "Basic eDp5"}):
        r = c.get("/readyz", headers=headers)
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "ready", "database": "ok", "schema": "ok", "lock": "ok"}
    for key in (READ, WRITE):
        r = c.get("/readyz", headers=auth(key))
        assert r.status_code == 200 and r.json()["lock"] == f"ok ({'redis' if backend == 'postgres' else 'file'})"


def test_unreachable_database_and_redis_are_named_without_their_hosts(make_client, request):
    request.getfixturevalue("postgres_server")
    c = make_client(DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/nothing", DB_CONNECT_TIMEOUT=1,
                    REDIS_URL="redis://127.0.0.1:1/0", **KEYS)
    r = c.get("/readyz")
    assert r.status_code == 503
    assert r.json() == {"status": "not ready", "database": "unavailable", "lock": "unavailable"}
    assert "127.0.0.1" not in r.text and "port" not in r.text
    keyed = c.get("/readyz", headers=auth(READ))
    assert keyed.status_code == 503
    body = keyed.json()
    assert body["database"].startswith("unavailable: ") and body["lock"].startswith("unavailable: ")
    assert "127.0.0.1" in keyed.text  # the details, for a caller with a key


def test_a_missing_schema_is_named_and_its_remedy_given_with_a_key(make_client, tmp_path):
    c = make_client(SQLITE_PATH=str(tmp_path / "empty.db"), AUTO_CREATE_SCHEMA=False, **KEYS)
    r = c.get("/readyz")
    assert r.status_code == 503 and r.json()["schema"] == "missing", r.text
    assert "alembic" in c.get("/readyz", headers=auth(READ)).json()["schema"]


def test_with_no_key_configured_every_caller_gets_the_details(make_client):
    r = make_client().get("/readyz")
    assert r.status_code == 200 and r.json()["lock"] == "ok (file)"
