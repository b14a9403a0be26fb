"""Bad input at scale: schemathesis over the service's own OpenAPI schema (no 5xx, every
response conforms to the schema), API keys supplied as a client would."""
from __future__ import annotations

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)

from .conftest import make_settings

WRITE = "fuzz-write-key"
READ = "fuzz-read-key"
CHECKS = [not_a_server_error, response_schema_conformance, content_type_conformance, status_code_conformance]
EXAMPLES_PER_OPERATION = 60
MIN_REQUESTS = 300


@pytest.fixture
def running_app(tmp_path):
    """The real app with API keys and small limits, its lifespan running, one task learned
    (so that generated predictions can succeed as well as fail)."""
    from service.main import create_app

    app = create_app(make_settings(SQLITE_PATH=str(tmp_path / "fuzz.db"), API_WRITE_KEYS=WRITE, API_READ_KEYS=READ,
                                   MAX_ROWS_PER_BATCH=200, MAX_FEATURES=50))
    with TestClient(app) as client:
        r = client.post("/tasks/t/data", json={"X": [[1.0, 2.0], [0.5, 1.0], [2.0, 0.0]], "y": [1.0, 2.0, 0.5]},
                        headers={"Authorization": f"Bearer {WRITE}"})
        assert r.status_code == 200, r.text
        yield app


def check_operation(operation) -> int:
    """Hypothesis over one operation's valid and invalid requests; returns the requests sent."""
    sent = 0
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    @given(case=cases)
    def check(case):
        nonlocal sent
        note(f"operation: {operation.label}")
        for key in (WRITE, READ):
            case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS)
            sent += 1

    check()
    return sent


def test_api_conforms_to_its_schema(running_app):
    """Every operation, valid and invalid requests, with a write key and a read key; at least
    a few hundred requests in all go through the checks."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", running_app)
    # GET .../events is an endless stream (TestClient waits for a body's end): tests/service/test_events.py
    operations = [op for op in (result.ok() for result in schema.get_all_operations()) if not op.path.endswith("/events")]
    assert len(operations) >= 6, [op.label for op in operations]
    requests = sum(check_operation(op) for op in operations)
    print(f"\nschemathesis: {requests} requests checked over {len(operations)} operations")
    assert requests >= MIN_REQUESTS, requests
