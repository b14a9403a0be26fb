"""docker-compose.yml and docker/Dockerfile: what a deployment relies on, read from the parsed
file (health checks, start order, the migration step, required API keys, the image, no
secrets), and the commands it runs working on this machine without containers."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from .conftest import REDIS_URL, ROOT, free_port

COMPOSE = ROOT / "docker-compose.yml"
KEYS = {"API_WRITE_KEYS": "compose-write-key", "API_READ_KEYS": "compose-read-key"}
REQUIRED = re.compile(r"^\$\{(\w+):\?[^}]+\}$")  # ${VAR:?message}: compose refuses to start without VAR
DEFAULT = re.compile(r"\$\{(\w+):-([^}]*)\}")  # ${VAR:-default}


def at_defaults(value) -> str:
    """A compose value with every ``${VAR:-default}`` at its default (VAR unset)."""
    return DEFAULT.sub(lambda m: m.group(2), str(value))


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose):
    return compose["services"]


def test_postgres_redis_and_api_are_health_checked(services):
    checks = {name: " ".join(services[name]["healthcheck"]["test"]) for name in ("postgres", "redis", "api")}
    assert "pg_isready" in checks["postgres"]
    assert "redis-cli ping" in checks["redis"]
    assert "/readyz" in checks["api"]  # ready = database, schema and lock reachable
    for name in checks:
        assert services[name]["healthcheck"]["retries"] >= 1, name


def test_start_order_waits_for_health_and_for_the_migration(services):
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert services["api"]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }


def test_migrate_runs_alembic_once_with_the_api_image_and_settings(services):
    migrate, api = services["migrate"], services["api"]
    assert migrate["command"] == ["python", "-m", "service.db", "upgrade"]  # alembic upgrade head, installed
    assert migrate["restart"] == "no"
    assert migrate["image"] == api["image"] and migrate["build"] == api["build"]
    assert migrate["environment"] == api["environment"]


def test_api_keys_are_required(services):
    env = services["api"]["environment"]
    for name in KEYS:
        m = REQUIRED.match(env[name])
        assert m and m.group(1) == name, f"{name}: {env[name]!r} is not ${{{name}:?...}}"


def test_api_image_is_built_from_docker_dockerfile(services):
    build = services["api"]["build"]
    assert build["dockerfile"] == "docker/Dockerfile"
    dockerfile = ROOT / build["context"] / build["dockerfile"]
    text = dockerfile.read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", text, re.M).group(1))
    assert [at_defaults(c) for c in services["api"]["command"]] == cmd  # the image's own CMD, same workers
    assert cmd[:2] == ["uvicorn", "service.main:app"]
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {tool["package-dir"].get(p, p.split(".")[0]) for p in tool["packages"]}  # what `pip install .` reads
    assert {"core", "service", "fcl3", "migrations"} <= packages
    for path in ("pyproject.toml", *packages):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", text, re.M), path
    install = re.search(r"^RUN (?:[^\n]*\\\n)*[^\n]*\bpip install \.", text, re.M)  # one RUN, maybe continued
    assert install, "no RUN ... pip install ."
    assert text.index("COPY fcl3") < install.start()  # the app imports its schemas
    assert text.index("COPY migrations") < install.start()  # installed as fcl3_migrations


def test_api_replicas_can_scale(services):
    api = services["api"]
    (port,) = api["ports"]
    address, host_port, container_port = at_defaults(port).rsplit(":", 2)
    assert host_port == "" and container_port == "8000"  # an ephemeral host port: any number of replicas
    assert address == "127.0.0.1"  # by default on the loopback only (API_PUBLISH_ADDRESS): behind a proxy
    assert "container_name" not in api


def test_the_file_is_for_compose_v1_and_v2():
    """No key that only compose v2 knows at the top (`name:`: Debian's docker-compose 1.29
    refuses it); tests/deploy runs the file on v1 for real."""
    top = set(yaml.safe_load(COMPOSE.read_text()))
    assert {k for k in top if not k.startswith("x-")} <= {"services", "volumes", "networks", "configs", "secrets"}, top


def test_no_secrets_in_the_file(services):
    """Keys and passwords come from the environment: a variable reference, never a literal."""
    secret = re.compile(r"KEY|PASSWORD|SECRET|TOKEN", re.I)
    for name, service in services.items():
        for var, value in (service.get("environment") or {}).items():
            value = str(value)
            if secret.search(var):
                assert value.startswith("${"), f"{name}.{var} is a literal"
            if "://" in value:
                password = urlsplit(value).password
                assert password is None or password.startswith("${"), f"{name}.{var} holds a password"
    env = services["api"]["environment"]
    assert not any(":-" in env[name] for name in KEYS)  # no default API key


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
    env = {k: at_defaults(v) for k, v in compose["services"]["api"]["environment"].items()}
    env.update(KEYS)
    env.update(DATABASE_URL=pg_url(db), REDIS_URL=REDIS_URL, REDIS_PREFIX=prefix,
               PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    full_env = {**os.environ, **env}
    proc = None
    try:
        migrate = compose["services"]["migrate"]["command"]
        assert migrate[0] == "python"
        r = subprocess.run([sys.executable, *migrate[1:]], cwd=ROOT, env=full_env, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr

        port = str(free_port())
        cmd = [at_defaults(c) for c in compose["services"]["api"]["command"]]
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
