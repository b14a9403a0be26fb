"""After a batch whose errors overflow float64, the client reads the model and ``fcl3 models
show`` prints it (the service answered `"rmse": null`, which the client refused with a
ValidationError and the CLI printed as a traceback; issue 22, row 5). Both backends."""
from __future__ import annotations

import json
import math

import numpy as np
from click.testing import CliRunner

from fcl3 import Client, InvalidInput
from fcl3.cli import main
from tests.service.conftest import PARAMS

from .conftest import WRITE_KEY


def test_the_client_and_the_cli_read_a_model_after_an_overflowing_batch(service, model_name):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 3))
    with Client(service.url, api_key=WRITE_KEY) as c:
        c.create_model(model_name, kind="regression", params=PARAMS)
        c.learn(model_name, "t", X, X @ np.array([3.0, 3.0, 1.0]))
        try:
            assert c.learn(model_name, "t", [[1e154, 1e154, 1.0], [1.0, 2.0, 3.0]], [1.0, 2.0]).prequential is None
        except InvalidInput:  # refused by the engine: also fine, nothing changed
            pass
        model = c.get_model(model_name)
        overall = model.prequential.overall
        assert overall is None or all(math.isfinite(v) for v in (overall.rmse, overall.mae))
    r = CliRunner().invoke(main, ["models", "show", model_name, "--url", service.url, "--api-key", WRITE_KEY])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["name"] == model_name
