"""API keys, limits, no leaks (metrics and logs: test_observability.py)."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from fastapi import Depends

from .conftest import regression_batch

WRITE, READ = "w-key-Secr3t-0123456789", "r-key-Secr3t-9876543210"
READ_HASHED = "r2-key-only-its-hash-is-configured"


def hashed(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed(make_client):
    return make_client(API_WRITE_KEYS=f"{WRITE}, other-write-key", API_READ_KEYS=f"{READ},{hashed(READ_HASHED)}")


def batch(seed=0, n=8):
    X, y = regression_batch(np.random.default_rng(seed), n=n)
    return {"X": X, "y": y}


# ----------------------------------------------------------------------------- API keys
def test_keys_separate_read_and_write(keyed):
    c = keyed
    # no key / wrong key / malformed header: 401 with WWW-Authenticate, nothing changed
    for headers in ({}, auth("nope"), {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": f"Bearer {WRITE}x"}):
        r = c.post("/tasks/t/data", json=batch(), headers=headers)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer", (headers, r.text)
        assert c.get("/model", headers=headers).status_code == 401
    # a read key may not write: 403
    r = c.post("/tasks/t/data", json=batch(), headers=auth(READ))
    assert r.status_code == 403, r.text
    assert c.get("/model", headers=auth(WRITE)).json()["version"] == 0
    # a write key writes and reads; read keys (plain or configured by hash) read
    r = c.post("/tasks/t/data", json=batch(), headers=auth(WRITE))
    assert r.status_code == 200 and r.json()["version"] == 1
    assert c.post("/tasks/t/data", json=batch(1), headers=auth("other-write-key")).status_code == 200
    for key in (WRITE, READ, READ_HASHED):
        assert c.get("/predict", params={"task_id": "t", "x": "1,2,3,4"}, headers=auth(key)).status_code == 200
        assert c.post("/predict", json={"task_id": "t", "X": [[1, 2, 3, 4]]}, headers=auth(key)).status_code == 200
        assert c.get("/tasks", headers=auth(key)).status_code == 200
        assert c.get("/tasks/t", headers=auth(key)).status_code == 200
        assert c.get("/model", headers=auth(key)).json()["version"] == 2
    # the hash itself is not a key
    assert c.get("/model", headers=auth(hashed(READ_HASHED))).status_code == 401
    assert c.post("/tasks/t/data", json=batch(), headers=auth(READ_HASHED)).status_code == 403
    # open routes
    for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
        assert c.get(path).status_code == 200, path


def test_openapi_documents_the_bearer_scheme(keyed):
    spec = keyed.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert any(s["type"] == "http" and s["scheme"] == "bearer" for s in schemes.values())
    ops = spec["paths"]
    assert ops["/tasks/{task_id}/data"]["post"]["security"]
    assert "401" in ops["/predict"]["get"]["responses"] and "403" in ops["/tasks/{task_id}/data"]["post"]["responses"]
    assert "security" not in ops["/healthz"]["get"]


def test_no_keys_is_open_with_a_loud_warning(make_client, capsys):
    c = make_client()
    assert c.post("/tasks/t/data", json=batch()).status_code == 200
    err = capsys.readouterr().err
    lines = [json.loads(x) for x in err.splitlines() if x.startswith("{")]
    assert any(x["level"] == "WARNING" and "NO API KEYS" in x["message"] for x in lines), err


def test_keyed_app_does_not_warn(make_client, capsys):
    make_client(API_READ_KEYS=READ)
    assert "NO API KEYS" not in capsys.readouterr().err


def test_malformed_hash_entry_fails_at_start(make_client):
    from service.security import KeyConfigError

    with pytest.raises(KeyConfigError):
        make_client(API_WRITE_KEYS="sha256:nothex")


# ----------------------------------------------------------------------------- limits
def test_rows_and_features_limits_are_413_before_any_work(make_client):
    c = make_client(MAX_ROWS_PER_BATCH=5, MAX_FEATURES=4)
    r = c.post("/tasks/t/data", json=batch(n=6))
    assert r.status_code == 413 and "MAX_ROWS_PER_BATCH" in r.text
    r = c.post("/tasks/t/data", json={"X": [[1.0] * 5], "y": [1.0]})
    assert r.status_code == 413 and "MAX_FEATURES" in r.text
    assert c.get("/model").json()["version"] == 0  # nothing was learned, not even the width
    assert c.post("/tasks/t/data", json=batch(n=5)).status_code == 200
    assert c.post("/predict", json={"task_id": "t", "X": [[0, 0, 0, 0]] * 6}).status_code == 413
    assert c.get("/predict", params={"task_id": "t", "x": ["1,2,3,4"] * 6}).status_code == 413
    assert c.get("/predict", params={"task_id": "t", "x": "1,2,3,4,5"}).status_code == 413
    assert c.get("/predict", params={"task_id": "t", "x": ["1,2,3,4"] * 5}).status_code == 200
    assert c.get("/model").json()["version"] == 1


def test_body_limit_is_413(make_client):
    c = make_client(MAX_BODY_BYTES=1000)
    r = c.post("/tasks/t/data", json=batch(n=50))
    assert r.status_code == 413 and "x-request-id" in r.headers
    assert c.get("/model").json()["version"] == 0


# ----------------------------------------------------------------------------- no leaks
def test_internal_error_is_a_generic_500_with_the_request_id(make_client, capsys):
    c = make_client(API_WRITE_KEYS=WRITE)

    def boom():
        raise RuntimeError(f"secret detail {WRITE} at postgresql://u:pw@h/db")

    c.app.add_api_route("/boom", lambda: None, dependencies=[Depends(boom)])
    from fastapi.testclient import TestClient

    with TestClient(c.app, raise_server_exceptions=False) as c2:
        r = c2.get("/boom", headers={"X-Request-ID": "req-123", **auth(WRITE)})
    assert r.status_code == 500
    assert r.json() == {"detail": "internal server error", "request_id": "req-123"}
    assert r.headers["x-request-id"] == "req-123"
    for word in ("Traceback", "RuntimeError", "secret", "postgresql", WRITE):
        assert word not in r.text
    logged = capsys.readouterr().err
    assert "RuntimeError" in logged and "req-123" in logged  # the details are in the log...
    assert WRITE not in logged  # ...without the key


def test_database_password_never_leaks(make_client, capsys):
    from .conftest import free_port

    password = "Pa55w0rd-do-not-leak"
    url = f"postgresql+psycopg://fcl3:{password}@127.0.0.1:{free_port()}/fcl3"
    c = make_client(DATABASE_URL=url, API_READ_KEYS=READ, API_WRITE_KEYS=WRITE, DB_CONNECT_TIMEOUT=1)
    for r in (c.get("/model", headers=auth(READ)), c.post("/tasks/t/data", json=batch(), headers=auth(WRITE)),
              c.get("/readyz"), c.get("/predict", params={"task_id": "t", "x": "1"}, headers=auth(READ)),
              c.get("/model", headers=auth("wrong-key"))):
        assert r.status_code in (401, 503), r.text
        assert password not in r.text and url not in r.text and WRITE not in r.text and READ not in r.text
    logged = capsys.readouterr().err
    assert logged  # something was logged (the requests, the database being down)
    assert password not in logged and WRITE not in logged and READ not in logged


def test_redactor_scrubs_keys_and_url_passwords():
    from service.config import Settings
    from service.security import Redactor

    s = Settings(_env_file=None, DATABASE_URL="postgresql://u:p%40ss@h:5432/db", REDIS_URL="redis://:rpw123@h:6379/0",
                 API_WRITE_KEYS="k1-abc,k2-def", API_READ_KEYS="sha256:" + "0" * 64)
    red = Redactor.from_settings(s)
    text = red("db postgresql+psycopg://u:p%40ss@h:5432/db pw p@ss redis rpw123 keys k1-abc k2-def")
    for secret in ("p%40ss", "p@ss", "rpw123", "k1-abc", "k2-def"):
        assert secret not in text
