"""The client with records: lists of dicts and pandas DataFrames, a schema given or inferred
from a DataFrame, against the real service (SQLite and PostgreSQL + Redis)."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fcl3 import AsyncClient, Client, InvalidInput
from fcl3.records import infer_schema, records_of
from tests.service.conftest import PARAMS

from .conftest import WRITE_KEY

pd = pytest.importorskip("pandas")

FEATURES = [{"name": "age", "type": "number"}, {"name": "urban", "type": "category", "levels": ["Y", "N"]},
            {"name": "livch", "type": "category"}, {"name": "smoker", "type": "boolean", "nullable": True}]


def frame(rng, n, livch=("0", "1", "2", "3+")):
    return pd.DataFrame({"age": rng.normal(0, 8, n), "urban": rng.choice(["Y", "N"], n),
                         "livch": [livch[i % len(livch)] for i in range(n)],
                         "smoker": pd.array([None if i % 4 == 0 else bool(i % 2) for i in range(n)], dtype="boolean")})


def target(df):
    return (0.1 * df["age"] + (df["urban"] == "Y") * 1.0 + (df["livch"] == "3+") * 0.5).to_numpy()


def test_dataframes_and_lists_of_dicts_give_the_same_answers(service, model_name):
    rng = np.random.default_rng(0)
    with Client(service.url, api_key=WRITE_KEY) as c:
        m = c.create_model(model_name, "regression", params=PARAMS, features=FEATURES)
        assert [f["name"] for f in m.features] == ["age", "urban", "livch", "smoker"]
        assert m.columns == ["age", "smoker", "smoker=null", "urban=Y", "urban=N"]
        df = frame(rng, 20)
        u = c.learn(model_name, "d1", df, target(df))
        assert u.new_task and u.n_samples == 20
        as_dicts = records_of(df)
        assert as_dicts[0]["smoker"] is None and isinstance(as_dicts[1]["age"], float)
        probe = frame(rng, 4)
        p_df = c.predict(model_name, "d1", probe)
        p_list = c.predict(model_name, "d1", records_of(probe))
        assert p_df.predictions == p_list.predictions and p_df.unseen is None
        odd = records_of(probe)
        odd[0]["livch"] = "9"
        assert c.predict(model_name, "d1", odd).unseen == {"livch": ["9"]}
        got = c.get_model(model_name)
        assert got.columns[-4:] == ["livch=0", "livch=1", "livch=2", "livch=3+"]
        with pytest.raises(InvalidInput) as err:
            c.learn(model_name, "d1", [{"age": "old", "urban": "Y", "livch": "0"}], [1.0])
        assert "age" in err.value.message
        assert c.get_model(model_name).version == 1

    async def run():
        async with AsyncClient(service.url, api_key=WRITE_KEY) as ac:
            more = frame(rng, 10)
            u = await ac.learn(model_name, "d2", more, target(more))
            assert u.new_task
            return (await ac.predict(model_name, "d2", more.head(2))).predictions
    assert len(asyncio.run(run())) == 2


def test_a_schema_inferred_from_a_dataframe(service, model_name):
    rng = np.random.default_rng(1)
    df = frame(rng, 30)
    schema = {f.name: f for f in infer_schema({c: records_of(df[[c]]) and [r[c] for r in records_of(df)]
                                               for c in df.columns})}
    assert schema["age"].type == "number" and schema["urban"].type == "category"
    assert schema["smoker"].type == "boolean" and schema["smoker"].nullable
    assert schema["livch"].levels == ("0", "1", "2", "3+")
    with Client(service.url, api_key=WRITE_KEY) as c:
        m = c.create_model(model_name, "regression", params=PARAMS, features=df)  # inferred by the client
        assert {f["name"]: f["type"] for f in m.features} == {"age": "number", "urban": "category",
                                                               "livch": "category", "smoker": "boolean"}
        c.learn(model_name, "t", df, target(df))
        assert len(c.predict(model_name, "t", df.head(3)).predictions) == 3
