"""docker-compose.yml and docker/Dockerfile: the file parses, has what a deployment needs,
and the commands it runs work on this machine without containers."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import httpx
import pytest
import yaml

from .conftest import REDIS_URL, ROOT, free_port

COMPOSE = ROOT / "docker-compose.yml"


class Required(KeyError):
    """A ${VAR:?message} whose variable is unset: compose refuses to start."""


def interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ${VAR:-default} and ${VAR:?message} with ``env`` (default: empty)."""
    env = env or {}

    def sub(m):
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise Required(f"{name}: {arg}")
        return arg

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", sub, value)


KEYS = {"API_WRITE_KEYS": "compose-write-key", "API_READ_KEYS": "compose-read-key"}


def test_compose_requires_api_keys(compose):
    env = compose["services"]["api"]["environment"]
    for name in KEYS:
        assert ":?" in env[name]
        with pytest.raises(Required):
            interpolate(env[name])
        assert interpolate(env[name], KEYS) == KEYS[name]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_structure(compose):
    s = compose["services"]
    assert {"api", "postgres", "redis", "migrate"} <= set(s)
    assert s["postgres"]["healthcheck"]["test"][-1].startswith("pg_isready")
    assert s["redis"]["healthcheck"]["test"][1:] == ["redis-cli", "ping"]
    assert "readyz" in " ".join(s["api"]["healthcheck"]["test"])
    assert s["migrate"]["command"] == ["alembic", "upgrade", "head"]
    assert s["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    deps = s["api"]["depends_on"]
    assert deps["postgres"]["condition"] == deps["redis"]["condition"] == "service_healthy"
    assert deps["migrate"]["condition"] == "service_completed_successfully"
    assert "pgdata" in compose["volumes"] and any("pgdata:" in v for v in s["postgres"]["volumes"])
    # --scale api=3: no fixed host port on the API.
    assert all(":" not in str(p) for p in s["api"].get("ports", []))
    assert "container_name" not in s["api"]
    env = s["api"]["environment"]
    assert {"DATABASE_URL", "REDIS_URL", "FCL3_KIND"} <= set(env)


def test_dockerfile_runs_the_same_commands(compose):
    text = (ROOT / "docker" / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert cmd[:2] == ["uvicorn", "service.main:app"]
    assert [interpolate(c, KEYS) for c in compose["services"]["api"]["command"]] == cmd
    for path in ("pyproject.toml", "core", "service", "alembic.ini", "migrations"):
        assert f"COPY {path}" in text or f"COPY {path} " in text


def test_docker_compose_config_parses():
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker client not installed")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"`docker compose` not available: {probe.stderr.strip() or probe.stdout.strip()}")
    r = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, **KEYS})
    assert r.returncode == 0, r.stderr


def test_compose_commands_work_here(compose, request, tmp_path):
    """Run migrate's command, then api's command and its healthcheck, against this
    machine's PostgreSQL and Redis, with the environment the compose file sets."""
    from .conftest import create_pg_database, drop_pg_database, pg_url

    request.getfixturevalue("postgres_server")
    _, prefix = request.getfixturevalue("redis_server")
    db = create_pg_database("fcl3_compose")
    env = {k: interpolate(str(v), KEYS) for k, v in compose["services"]["api"]["environment"].items()}
    env.update(DATABASE_URL=pg_url(db), REDIS_URL=REDIS_URL, REDIS_PREFIX=prefix,
               PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    full_env = {**os.environ, **env}
    proc = None
    try:
        migrate = compose["services"]["migrate"]["command"]
        r = subprocess.run([sys.executable, "-m", *migrate], cwd=ROOT, env=full_env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr

        port = str(free_port())
        cmd = [interpolate(c) for c in compose["services"]["api"]["command"]]
        cmd = [port if c == "8000" else "127.0.0.1" if c == "0.0.0.0" else c for c in cmd]
        proc = subprocess.Popen([sys.executable, "-m", *cmd], cwd=ROOT, env=full_env,
                                stdout=open(tmp_path / "api.log", "wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        health = [c.replace("8000", port) for c in compose["services"]["api"]["healthcheck"]["test"][1:]]
        assert health[0] == "python"
        deadline = time.monotonic() + 30
        while True:
            h = subprocess.run([sys.executable, *health[1:]], capture_output=True, timeout=10)
            if h.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert h.returncode == 0, (tmp_path / "api.log").read_text()
        assert httpx.get(f"http://127.0.0.1:{port}/model", timeout=5).status_code == 401  # keys are on
        m = httpx.get(f"http://127.0.0.1:{port}/model", timeout=5,
                      headers={"Authorization": f"Bearer {KEYS['API_READ_KEYS']}"}).json()
        # /metrics aggregates both workers (multiprocess mode)
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert "fcl3_model_version" in text and "fcl3_refused_requests_total" in text
        assert m["estimator"] == env["FCL3_ESTIMATOR"] and m["kind"] == env["FCL3_KIND"]
    finally:
        if proc is not None:
            import signal

            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(15)
        drop_pg_database(db)
