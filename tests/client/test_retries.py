"""The client's retry rules and Server-Sent Events framing, on scripted answers (no server)."""
from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import fcl3.client as fc
from fcl3 import AsyncClient, Conflict, ConnectionFailed, InvalidInput, Unavailable, schemas

from .conftest import UPDATE, Script, scripted

ROOT = Path(__file__).resolve().parents[2]

client = scripted


def test_503_waits_retry_after_then_succeeds(sleeps):
    s = Script(httpx.Response(503, json={"detail": "busy"}, headers={"Retry-After": "2"}),
               httpx.Response(503, json={"detail": "busy"}, headers={"Retry-After": "1"}),
               httpx.Response(200, json=UPDATE))
    r = client(s).learn_batch("m", "a", [[1.0]], [1.0])
    assert r.attempts == 3 and sleeps == [2.0, 1.0]
    keys = {req.headers["Idempotency-Key"] for req in s.requests}
    assert len(keys) == 1 and r.idempotency_key in keys  # one key over the retries


def test_retry_after_is_capped_and_retries_run_out(sleeps):
    s = Script(*[httpx.Response(503, json={"detail": "database unavailable"}, headers={"Retry-After": "3600"})] * 3)
    with pytest.raises(Unavailable) as err:
        client(s, retries=fc.Retries(total=2, max_retry_after=5)).get_model("m")
    assert err.value.status == 503 and err.value.detail == "database unavailable" and sleeps == [5.0, 5.0]


def test_connection_errors_back_off_exponentially(sleeps, monkeypatch):
    monkeypatch.setattr(random, "uniform", lambda a, b: 1.0)
    s = Script(httpx.ConnectError("refused"), httpx.ConnectError("refused"), httpx.ReadError("reset"),
               httpx.Response(200, json=UPDATE))
    r = client(s).learn_batch("m", "a", [[1.0]], [1.0])
    assert r.attempts == 4 and sleeps == [0.5, 1.0, 2.0]
    with pytest.raises(ConnectionFailed, match="could not connect after 3 attempt"):
        client(Script(*[httpx.ConnectError("refused")] * 3), retries=2).list_models()


def test_a_lost_answer_is_resent_only_when_that_is_safe(sleeps):
    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    with pytest.raises(ConnectionFailed, match="not resent"):
        client(Script(lost)).create_model("m", "regression")
    with pytest.raises(ConnectionFailed, match="not resent"):
        client(Script(lost)).fork_model("m2", "m")
    # a batch is (its key), and a delete is (a 404 after a lost answer means it was deleted)
    assert client(Script(lost, httpx.Response(200, json=UPDATE))).learn("m", "a", [[1.0]], [1.0]).version == 1
    assert client(Script(lost, httpx.Response(404, json={"detail": "unknown model"}))).delete_model("m") is None


def test_timeouts_raise_timed_out_saying_how_long_and_whether_it_was_resent(sleeps):
    late = httpx.ReadTimeout("timed out")
    # a batch is resent with its key; the retries run out: TimedOut (a ConnectionFailed)
    s = Script(late, late, late)
    with pytest.raises(fc.TimedOut) as err:
        client(s, timeout=2.5, retries=2).learn("m", "a", [[1.0]], [1.0])
    assert isinstance(err.value, ConnectionFailed) and (err.value.timeout, err.value.phase) == (2.5, "read")
    assert str(err.value) == "POST http://fcl3.test/models/m/tasks/a/data: timed out: no answer within 2.5 s, after 3 attempt(s)"
    assert len({r.headers["Idempotency-Key"] for r in s.requests}) == 1 and len(sleeps) == 2
    # a create is not resent: it may have been applied
    with pytest.raises(fc.TimedOut, match=r"^POST http://fcl3.test/models: timed out: no answer within 2.5 s, after 1 "
                       r"attempt\(s\) \(not resent: it may have been applied\)$"):
        client(Script(late), timeout=2.5).create_model("m", "regression")
    # no connection in time: nothing was sent, so even a create is retried
    slow = httpx.ConnectTimeout("timed out")
    with pytest.raises(fc.TimedOut, match="could not connect within 2 s, after 2 attempt") as err:
        client(Script(slow, slow), timeout=httpx.Timeout(30.0, connect=2.0), retries=1).create_model("m", "regression")
    assert err.value.phase == "connect"


def test_the_async_client_raises_timed_out_too(sleeps):
    async def run():
        async with AsyncClient("http://fcl3.test", timeout=1.0, retries=0,
                               transport=httpx.MockTransport(Script(httpx.ReadTimeout("timed out")))) as c:
            await c.predict("m", "a", [[1.0]])

    with pytest.raises(fc.TimedOut, match=r"^POST http://fcl3.test/models/m/predict: timed out: no answer within 1 s, "
                       r"after 1 attempt\(s\)$"):
        asyncio.run(run())


def test_healthz_ready_and_metrics(sleeps):
    prom = "# HELP fcl3_updates_total Model updates by outcome.\n# TYPE fcl3_updates_total counter\n"
    checks = {"status": "ready", "database": "ok", "schema": "ok", "lock": "ok (file)"}
    s = Script(httpx.Response(200, json={"status": "ok"}), httpx.Response(200, json=checks),
               httpx.Response(200, text=prom, headers={"content-type": "text/plain; version=0.0.4"}))
    c = client(s)
    assert c.healthz() == {"status": "ok"} and c.ready() == checks and c.metrics() == prom
    assert [r.url.path for r in s.requests] == ["/healthz", "/readyz", "/metrics"]
    # not ready: 503 (retried like any 503), then Unavailable carrying the checks
    down = {"status": "not ready", "database": "unavailable: OperationalError: no such host", "schema": "ok",
            "lock": "ok (file)"}
    with pytest.raises(Unavailable) as err:
        client(Script(*[httpx.Response(503, json=down)] * 2), retries=1).health()
    assert err.value.status == 503 and err.value.detail == down and len(sleeps) == 1

    async def run():
        s = Script(httpx.Response(200, json={"status": "ok"}), httpx.Response(200, json=checks),
                   httpx.Response(200, json=checks), httpx.Response(200, text=prom))
        async with AsyncClient("http://fcl3.test", transport=httpx.MockTransport(s)) as ac:
            return await ac.healthz(), await ac.ready(), await ac.health(), await ac.metrics()

    assert asyncio.run(run()) == ({"status": "ok"}, checks, checks, prom)


def test_409_on_a_batch_waits_for_its_first_request(sleeps):
    s = Script(httpx.Response(409, json={"detail": "in flight"}, headers={"Retry-After": "1"}),
               httpx.Response(200, json=UPDATE, headers={"Idempotent-Replayed": "true"}))
    r = client(s).learn_batch("m", "a", [[1.0]], [1.0], idempotency_key="k")
    assert r.replayed and r.attempts == 2 and sleeps == [1.0]
    # elsewhere 409 is an answer, not a reason to retry
    with pytest.raises(Conflict):
        client(Script(httpx.Response(409, json={"detail": "taken"}))).create_model("m", "regression")


def test_422_is_raised_at_once_with_pydantic_details(sleeps):
    detail = [{"loc": ["body", "X", 0, 0], "msg": "Input should be a valid number", "type": "float_type"}]
    with pytest.raises(InvalidInput) as err:
        client(Script(httpx.Response(422, json={"detail": detail}))).learn("m", "a", [["x"]], [1.0])
    assert err.value.detail == detail and err.value.message == "body.X.0.0: Input should be a valid number"
    assert sleeps == []


def test_async_client_retries_the_same_way(sleeps):
    s = Script(httpx.ConnectError("refused"), httpx.Response(503, headers={"Retry-After": "1"}),
               httpx.Response(200, json=UPDATE))

    async def run():
        async with AsyncClient("http://fcl3.test", transport=httpx.MockTransport(s)) as c:
            return await c.learn_batch("m", "a", [[1.0]], [1.0])

    r = asyncio.run(run())
    assert r.attempts == 3 and sleeps[1] == 1.0
    assert len({req.headers["Idempotency-Key"] for req in s.requests}) == 1


def test_requests_carry_the_key_and_accept_numpy_arrays():
    np = pytest.importorskip("numpy")
    s = Script(httpx.Response(200, json=UPDATE))
    client(s, api_key="secret").learn("m", "task one", np.eye(2), np.array([1, 0]))
    req = s.requests[0]
    assert req.headers["Authorization"] == "Bearer secret"
    assert req.url.path == "/models/m/tasks/task one/data" and b"task%20one" in req.url.raw_path
    assert json.loads(req.content) == {"X": [[1.0, 0.0], [0.0, 1.0]], "y": [1, 0]}


def test_server_sent_events_are_parsed_and_resumed(sleeps):
    first = ("id: 1\nevent: update\ndata: {\"version\": 1, \"task_id\": \"a\", \"new_task\": true, "
             "\"new_representative\": true, \"n_representatives\": 1}\n\n: keep-alive\n\n"
             "event: custom\ndata: {\"x\":\ndata: 1}\n\n")
    second = "id: 2\nevent: reset\ndata: {\"version\": 2, \"reason\": \"gone\"}\n\n"
    s = Script(httpx.Response(200, text=first, headers={"content-type": "text/event-stream"}),
               httpx.Response(200, text=second, headers={"content-type": "text/event-stream"}))
    events = client(s).events("m", last_event_id=0)
    got = [next(events) for _ in range(3)]
    events.close()
    assert [(e.id, e.event) for e in got] == [("1", "update"), ("1", "custom"), ("2", "reset")]
    assert isinstance(got[0].data, schemas.UpdateEvent) and got[0].version == 1
    assert got[1].data == {"x": 1}  # an event without its own id keeps the last one seen
    assert isinstance(got[2].data, schemas.ResetEvent)
    assert s.requests[0].headers["Last-Event-ID"] == "0" and s.requests[1].headers["Last-Event-ID"] == "1"


def test_the_client_imports_neither_numpy_nor_the_server(tmp_path):
    code = ("import sys, json, fcl3, fcl3.client, fcl3.cli; from fcl3 import Client, AsyncClient, NotFound; "
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('numpy', 'scipy', 'fastapi', 'starlette', 'sqlalchemy', 'uvicorn', 'redis', 'core', 'service'))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def test_the_service_does_not_load_the_client(tmp_path):
    """``fcl3.schemas`` is imported by the service; the client (httpx) is loaded lazily."""
    r = subprocess.run([sys.executable, "-c", "import sys, fcl3.schemas; print('httpx' in sys.modules, "
                        "'fcl3.client' in sys.modules)"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


def test_results_are_the_service_schemas_never_redefined():
    from pydantic import BaseModel

    import fcl3._async.client
    import fcl3._calls
    import fcl3._sync.client
    import fcl3.cli.commands
    import fcl3.cli.files
    import fcl3.cli.replay
    import fcl3.events

    for module in (fc, fcl3.cli.commands, fcl3.cli.files, fcl3.cli.replay, fcl3._calls, fcl3.events,
                   fcl3._async.client, fcl3._sync.client):
        own = [n for n, v in vars(module).items()
               if isinstance(v, type) and issubclass(v, BaseModel) and v.__module__ == module.__name__]
        assert own == [], own
    assert fc.UpdateOut is schemas.UpdateOut and fc.ModelOut is schemas.ModelOut
