"""JSON bodies parsed by ``pydantic_core.from_json`` (:mod:`service.api.json_body`): the
parsed value, and every refusal, are those of :func:`json.loads`, which Starlette uses."""
from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from service.api.json_body import JsonRequest

BODIES = [
    b'{"X": [[1.5, -2e-300, 3.0000000000000004, 1e308]], "y": [0.1]}',
    b'{"a": 1, "a": 2}',  # the last of a repeated key
    b'[1e400, -1e400, NaN, Infinity, -Infinity]',
    b"123456789012345678901234567890",
    b' {"s": "caf\\u00e9 \\ud83d\\ude00"} ',
    b'{"s": "\\ud800"}',  # a lone surrogate: from_json refuses, json.loads reads
    b'\xef\xbb\xbf{"a": 1}',  # a UTF-8 byte-order mark: the same
    '{"a": [1, 2]}'.encode("utf-16"),  # UTF-16: the same
    b'{"x": "\x01"}', b"[1,]", b'{"a": 1} x', b"{X: nope", b"\xff", b"",
]


def _parse(body: bytes):
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    request = JsonRequest({"type": "http", "method": "POST", "headers": [], "path": "/"}, receive)
    return asyncio.run(request.json())


def _outcome(parse, body):
    try:
        return "ok", parse(body)
    except json.JSONDecodeError as exc:
        return "JSONDecodeError", (exc.msg, exc.pos)
    except Exception as exc:  # noqa: BLE001 - compared, not hidden
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_a_body_parses_or_fails_as_json_loads_does(body):
    got, want = _outcome(_parse, body), _outcome(json.loads, body)
    assert got[0] == want[0]
    if got[0] == "ok":  # NaN != NaN: compared through their JSON text
        assert json.dumps(got[1]) == json.dumps(want[1])
        assert type(got[1]) is type(want[1])
    else:
        assert got[1] == want[1]


def test_a_batch_and_a_broken_body_over_http(backend_client):
    c = backend_client
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(30, 4)), rng.normal(size=30)
    body = json.dumps({"X": X.tolist(), "y": y.tolist()}).encode()
    r = c.post("/tasks/t/data", content=b"\xef\xbb\xbf" + body, headers={"content-type": "application/json"})
    assert r.status_code == 200, r.text  # json.loads reads a byte-order mark, so does the service
    assert r.json()["n_samples"] == 30
    broken = body[:-1] + b",]"
    r = c.post("/tasks/t/data", content=broken, headers={"content-type": "application/json"})
    assert r.status_code == 422
    err = r.json()
    try:
        json.loads(broken)
    except json.JSONDecodeError as exc:
        assert err["detail"] == f"the body is not valid JSON at character {exc.pos}: {exc.msg}", err
    assert c.get("/model").json()["version"] == 1



def test_the_routes_with_a_json_body_parse_it_with_from_json(backend_client, monkeypatch):
    from service.api import json_body

    parsed = []
    real = json_body.from_json
    monkeypatch.setattr(json_body, "from_json", lambda body: parsed.append(len(body)) or real(body))
    c = backend_client
    batch = {"X": [[1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 1.5, 2.0]], "y": [1.0, 2.0]}
    assert c.post("/tasks/t/data", json=batch).status_code == 200
    assert c.post("/tasks/t/evaluation", json=batch).status_code == 200
    assert c.post("/models", json={"name": f"{c.get('/model').json()['name']}-2", "kind": "regression",
                                    "estimator": "FCL3"}).status_code == 201
    assert len(parsed) == 3
    assert c.get("/healthz").status_code == 200 and len(parsed) == 3  # no body: not parsed
