"""Bad input at scale: schemathesis over the service's own OpenAPI schema (no 5xx, every
response conforms to the schema), API keys supplied as a client would."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)

from .conftest import make_settings

WRITE = "fuzz-write-key"
READ = "fuzz-read-key"

_tmp = Path(tempfile.mkdtemp(prefix="fcl3-fuzz-"))
from service.main import create_app  # noqa: E402

app = create_app(make_settings(SQLITE_PATH=str(_tmp / "fuzz.db"), API_WRITE_KEYS=WRITE, API_READ_KEYS=READ,
                               MAX_ROWS_PER_BATCH=200, MAX_FEATURES=50))
schema = schemathesis.openapi.from_asgi("/openapi.json", app)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])

CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance, status_code_conformance]
COUNT = {"cases": 0}


@pytest.fixture(scope="module", autouse=True)
def running_app():
    """The app's lifespan (engine, store, model) for the whole module."""
    import shutil

    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        # one learned task, so that generated predictions can succeed as well as fail
        r = client.post("/tasks/t/data", json={"X": [[1.0, 2.0], [0.5, 1.0], [2.0, 0.0]], "y": [1.0, 2.0, 0.5]},
                        headers={"Authorization": f"Bearer {WRITE}"})
        assert r.status_code == 200, r.text
        yield client
    shutil.rmtree(_tmp, ignore_errors=True)


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_api_conforms_to_its_schema(case):
    for key in (WRITE, READ):
        case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS)
        COUNT["cases"] += 1


def test_enough_cases_ran():
    """At least a few hundred generated requests went through the checks above."""
    if COUNT["cases"] == 0:
        pytest.skip("run together with test_api_conforms_to_its_schema")
    print(f"\nschemathesis: {COUNT['cases']} requests checked")
    assert COUNT["cases"] >= 300, COUNT
