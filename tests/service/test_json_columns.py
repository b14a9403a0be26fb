"""JSON columns through the service's engines (``service.db.make_engine``, pydantic-core's
encoder and decoder): every float reads back bit for bit as the standard library's ``json``
would give it back, and the non-finite ones too on SQLite (PostgreSQL's ``json`` type refuses
them, as it did with the standard library's text)."""
from __future__ import annotations

import json
import math
import random

import pytest
from sqlalchemy import JSON, Column, Integer, MetaData, Table, insert, select

from service.db import make_engine

from .conftest import make_settings


def floats(seed: int, finite_only: bool) -> list[float]:
    rng = random.Random(seed)
    out = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-320, 300) for _ in range(400)]
    out += [0.1, 1e-05, 5e-324, 1.7976931348623157e308, -0.0, 2.0 ** 53 + 2, 123456789.125]
    if not finite_only:
        out += [math.nan, math.inf, -math.inf]
    return out


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_json_columns_read_back_what_the_standard_library_would(backend, tmp_path, request):
    if backend == "postgres":
        settings = make_settings(DATABASE_URL=request.getfixturevalue("pg_database"))
    else:
        settings = make_settings(SQLITE_PATH=str(tmp_path / "json.db"))
    engine = make_engine(settings)
    table = Table("json_probe", MetaData(), Column("id", Integer, primary_key=True), Column("value", JSON))
    table.create(engine)
    try:
        values = floats(7, finite_only=backend == "postgres")
        stored = {"values": values, "nested": {"1": [values[:3], None, True, "text"]}, "n": 3}
        with engine.begin() as conn:
            conn.execute(insert(table).values(id=1, value=stored))
        with engine.connect() as conn:
            back = conn.execute(select(table.c.value)).scalar_one()
        expected = json.loads(json.dumps(stored))  # what the standard library's text reads back as
        assert back["nested"] == expected["nested"] and back["n"] == 3
        assert len(back["values"]) == len(values)
        assert all(same(a, b) and same(a, v) for a, b, v in zip(back["values"], expected["values"], values))
        assert all(type(a) is float for a in back["values"])
    finally:
        table.drop(engine)
        engine.dispose()
