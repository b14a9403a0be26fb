"""The project's docker-compose.yml deployed on a real Docker engine (issue 57).

The test starts a ``dockerd`` of its own (tests/deploy/engine.py), builds the API image from
docker/Dockerfile on a Debian base made by debootstrap (pip installing from a wheelhouse served
on 127.0.0.1: no index), builds stand-ins for postgres and redis from Debian's packages
(docker-compose.test.yml, given after the project's file), and runs Debian's ``docker-compose``
(1.29, v1; builds with BuildKit, as compose v2 does) on them. Then, in order, on one deployment:

1. ``up -d --scale api=2``: the one-shot migration exits 0, both replicas become healthy;
2. a stream learned through both replicas (the shipped client spreading over them); one replica's
   main process killed with SIGKILL while it holds a batch, the engine restarting it by its
   restart policy; every acknowledged batch stored exactly once, nothing else stored; then
   ``docker kill`` of the other, which Docker takes for a manual stop (no restart) until ``up -d``;
3. ``down`` then ``up``: the model, its version, tasks and stored batches intact (the volume);
4. the image on its embedded default (no DATABASE_URL): its SQLite file in SQLITE_PATH, owned by
   the non-root user, kept in a volume across containers;
5. ``pg_dump`` of the deployment, ``down -v``, ``pg_restore`` into a new one: the same model;
6. ``down -v`` leaves no container, volume or network on the engine.

Traffic goes to 127.0.0.1 only (published ports) and between the test's own containers. Needs
root, ``dockerd`` and ``docker-compose`` (Debian's docker.io and docker-compose) and
``debootstrap``: skipped with the reason elsewhere; failed instead with ``FCL3_REQUIRE_DOCKER=1``
(CI). The slow parts are cached (bases.py: ``FCL3_DEPLOY_CACHE``).
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from benchmarks.faults import read_back as _read_back
from benchmarks.replicas import PARAMS, Writers, batches_per_host, problems
from fcl3 import Client
from fcl3.hosts import Spread

from . import bases
from . import engine as eng
from .conftest import NOTES, STEPS, timer

pytestmark = pytest.mark.slow

MODEL = "deploy"
WRITE_KEY, READ_KEY = secrets.token_hex(12), secrets.token_hex(12)
N_BATCHES, KILL_AFTER, WRITERS, AFTER_RESTART = 60, 20, 3, 12
API_UID = 10001  # docker/Dockerfile's user


class Compose:
    """``docker-compose`` (v1) on the project's file and the test's override, for one project."""

    def __init__(self, engine: eng.Engine, project: str, env: dict[str, str]):
        self.engine, self.project = engine, project
        self.env = {**engine.env, **env}
        self.base = ["docker-compose", "-p", project, "-f", bases.ROOT / "docker-compose.yml",
                     "-f", bases.HERE / "docker-compose.test.yml"]

    def __call__(self, *args, timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return eng.run([*self.base, *args], timeout=timeout, check=check, env=self.env, cwd=bases.ROOT, **kwargs)

    def containers(self, service: str, all: bool = False) -> list[str]:
        """Ids of ``service``'s containers (by compose's labels: the same in v1 and v2)."""
        args = ["ps", "-q", *(["-a"] if all else []),
                "--filter", f"label=com.docker.compose.project={self.project}",
                "--filter", f"label=com.docker.compose.service={service}"]
        return self.engine.docker(*args).stdout.split()

    def inspect(self, container: str) -> dict:
        return json.loads(self.engine.docker("inspect", container).stdout)[0]

    def published(self, container: str, port: int) -> tuple[str, int]:
        """The host address and port ``container``'s ``port`` is published on."""
        bindings = self.inspect(container)["NetworkSettings"]["Ports"][f"{port}/tcp"]
        assert bindings and len(bindings) == 1, bindings
        return bindings[0]["HostIp"], int(bindings[0]["HostPort"])

    def wait_healthy(self, containers: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = {c: self.inspect(c)["State"] for c in containers}
            health = {c: s.get("Health", {}).get("Status") for c, s in states.items()}
            if all(h == "healthy" for h in health.values()):
                return
            if time.monotonic() > deadline:
                logs = {c: self.engine.docker("logs", "--tail", "30", c, check=False).stdout[-3000:]
                        for c in containers}
                raise AssertionError(f"not healthy in {timeout:.0f} s: {health}\n{logs}")
            time.sleep(1)

    def api_urls(self) -> list[str]:
        urls = []
        for c in self.containers("api"):
            host, port = self.published(c, 8000)
            assert host == "127.0.0.1", f"the API is published on {host}, not on the loopback"
            urls.append(f"http://127.0.0.1:{port}")
        return urls

    def db_url(self) -> str:
        (c,) = self.containers("postgres")
        host, port = self.published(c, 5432)
        assert host == "127.0.0.1"
        return f"postgresql+psycopg://fcl3:{self.env['POSTGRES_PASSWORD']}@127.0.0.1:{port}/fcl3"

    def up_and_healthy(self, replicas: int = 2) -> list[str]:
        self("up", "-d", "--scale", f"api={replicas}", timeout=900)
        api = self.containers("api")
        assert len(api) == replicas, api
        self.wait_healthy([*api, *self.containers("postgres"), *self.containers("redis")])
        return api

    def migration(self) -> tuple[int, str]:
        """The one-shot migration's exit code and log."""
        (c,) = self.containers("migrate", all=True)
        state = self.inspect(c)["State"]
        assert state["Status"] == "exited", state
        return state["ExitCode"], self.engine.docker("logs", c).stderr


def read_back(db_url: str, model: str) -> dict:
    """The model's row, tasks and batches as stored (benchmarks.faults.read_back), tasks in order."""
    store = _read_back(db_url, model)
    return {**store, "tasks": sorted(store["tasks"])}


def compose_version() -> str:
    return eng.run(["docker-compose", "version", "--short"], check=False).stdout.strip()


def client(urls: list[str], key: str = WRITE_KEY, **kwargs) -> Client:
    if len(urls) == 1:
        return Client(urls[0], api_key=key, timeout=30, trust_env=False, **kwargs)
    spread = kwargs.pop("transport", None) or Spread(urls, cooldown=0.05)
    return Client(spread.url, api_key=key, timeout=30, trust_env=False, transport=spread, **kwargs)


def tasks_of(c: Client) -> dict[str, tuple[int, int]]:
    return {t.task_id: (t.n_samples, t.n_batches) for t in c.tasks(MODEL).tasks}


PROBE = np.random.default_rng(57).normal(size=(3, 4)).tolist()


def predictions(urls: list[str], version: int) -> list[list[float]]:
    out = []
    for url in urls:
        with client([url], READ_KEY) as c:
            out.append(c.predict(MODEL, "t0", PROBE, min_version=version).predictions)
    return out


# ----------------------------------------------------------------------------- the deployment
class Deployment:
    def __init__(self):
        self.engine: eng.Engine | None = None
        self.compose: Compose | None = None
        self.sent = []  # every batch of the stream (benchmarks.faults.Batch)
        self.store = None  # read_back after the stream
        self.version = None


@pytest.fixture(scope="module")
def deployment(request):
    required = os.environ.get("FCL3_REQUIRE_DOCKER") == "1"

    def unavailable(why: str):
        if required:
            pytest.fail(f"the deployment test is required (FCL3_REQUIRE_DOCKER=1) but: {why}", pytrace=False)
        pytest.skip(f"deployment test (a Docker engine of its own): {why}")

    missing = eng.missing_tools()
    if missing:
        unavailable("missing " + ", ".join(missing))
    timed = timer(request.config)
    for stale in eng.remove_stale_engines():
        request.config.stash[NOTES].append(f"removed the engine of a run that did not clean up: {stale}")
    d = Deployment()
    server = None
    try:
        with timed("cache: base rootfs (debootstrap) and wheelhouse"):
            try:
                with ThreadPoolExecutor(1) as pool:  # the services' debootstrap beside the API's and the wheels
                    services = pool.submit(bases.rootfs, bases.SERVICE_PACKAGES)
                    api_tar, py_env = bases.rootfs(bases.API_PACKAGES)
                    wheels = bases.wheelhouse(py_env)
                    services_tar, _ = services.result()
                bases.prune_cache(keep=(api_tar, services_tar, wheels))
            except (eng.Unavailable, AssertionError, subprocess.TimeoutExpired) as exc:
                unavailable(f"cannot make the base images or the wheelhouse: {exc}")
        d.engine = eng.Engine()
        with timed("engine: dockerd started"):
            try:
                d.engine.start()
            except eng.Unavailable as exc:
                unavailable(str(exc))
        request.config.stash[NOTES].append(f"dockerd {d.engine.version}, storage driver {d.engine.storage_driver}"
                                           f"{' (data root on a tmpfs)' if d.engine.tmpfs else ''}, "
                                           f"docker-compose {compose_version()}")
        with timed("engine: base images imported (docker import)"):
            d.engine.import_rootfs(api_tar, "fcl3-deploy-base:python")
            d.engine.import_rootfs(services_tar, "fcl3-deploy-base:services")
        server = bases.WheelServer(wheels).__enter__()
        d.compose = Compose(d.engine, f"fcl3deploy{d.engine.token}", {
            "DEPLOY_API_BASE": "fcl3-deploy-base:python", "DEPLOY_SERVICES_BASE": "fcl3-deploy-base:services",
            "DEPLOY_WHEELS": server.url,
            # compose v1 builds with the docker CLI, and so with BuildKit (v2 always does)
            "COMPOSE_DOCKER_CLI_BUILD": "1", "DOCKER_BUILDKIT": "1",
            # what a user sets (the keys are required, the rest has defaults)
            "API_WRITE_KEYS": WRITE_KEY, "API_READ_KEYS": READ_KEY, "POSTGRES_PASSWORD": secrets.token_hex(8),
            "MODEL_NAME": MODEL, "FCL3_PARAMS": json.dumps(PARAMS), "LOG_LEVEL": "WARNING",
        })
        with timed("build: docker-compose build (API from docker/Dockerfile, postgres, redis)"):
            d.compose("build", timeout=1500)
        yield d
    finally:
        if server is not None:
            server.__exit__(None, None, None)
        if d.engine is not None:
            if d.compose is not None:
                with timed("cleanup: down -v --remove-orphans (nothing left, unless a step failed)"):
                    d.compose("down", "-v", "--remove-orphans", check=False, timeout=300)
            d.engine.close()
            for part, seconds in d.engine.times.items():
                request.config.stash[STEPS].append((f"cleanup: {part}", seconds))
            assert not d.engine.dir.exists()
            assert d.engine.own_processes() == []


# ----------------------------------------------------------------------------- the steps
def test_up_runs_the_migration_once_then_the_api_replicas_are_healthy(deployment, step):
    compose = deployment.compose
    with step("1. up -d --scale api=2: migration, 2 healthy replicas"):
        compose.up_and_healthy(2)
    code, log = compose.migration()
    assert code == 0, log
    assert "Running upgrade" in log  # the schema was made by the one-shot migration
    urls = compose.api_urls()
    assert len(set(urls)) == 2
    for url in urls:
        ready = httpx.get(f"{url}/readyz", timeout=10, trust_env=False).json()
        assert ready == {"status": "ready", "database": "ok", "schema": "ok", "lock": "ok"}, ready
        assert httpx.get(f"{url}/model", timeout=10, trust_env=False).status_code == 401  # the keys are on
    with client(urls[:1], READ_KEY) as c:
        m = c.get_model(MODEL)
    assert (m.version, m.estimator, m.hyperparameters["n_components"]) == (0, "FCL3", PARAMS["n_components"])


def test_a_stream_through_two_replicas_survives_one_killed_and_restarted_by_its_policy(deployment, step):
    compose = deployment.compose
    api = compose.containers("api")
    urls = compose.api_urls()
    victim = api[1]
    assert compose.inspect(victim)["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    with step("2. stream of 60 batches over 2 replicas, one SIGKILLed mid-stream"):
        spread = Spread(urls, cooldown=0.05)
        busy, _ = batches_per_host(spread)
        with client(urls, transport=spread) as c:
            writers = Writers(c, MODEL, WRITERS, seed=57, total=N_BATCHES).start()
            deadline = time.monotonic() + 120
            while (len(writers.acks()) < KILL_AFTER or not busy[1]) and time.monotonic() < deadline:
                time.sleep(0.001)  # after KILL_AFTER batches, while the victim holds one
            assert busy[1], "the victim never held a batch"
            served_before = list(spread.served.values())
            # The way a crash or the OOM killer ends it. (`docker kill` would not do: Docker takes
            # it for a manual stop and disables the restart policy until the next start.)
            pid = compose.inspect(victim)["State"]["Pid"]
            os.kill(pid, signal.SIGKILL)
            assert writers.join(120) == 0, "writers still running after 120 s"
        served_after = list(spread.served.values())
    sent = writers.batches
    assert [b.error for b in sent if b.error] == []  # the client failed over: every batch acknowledged
    assert len(writers.acks()) == N_BATCHES
    assert served_before[1] > 0 and served_after[0] > served_before[0]  # the survivor took the rest

    with step("2. the killed replica restarted by its policy and healthy"):
        deadline = time.monotonic() + 120
        while compose.inspect(victim)["RestartCount"] < 1 and time.monotonic() < deadline:
            time.sleep(0.5)
        state = compose.inspect(victim)
        assert state["RestartCount"] >= 1 and state["State"]["Pid"] != pid, state["State"]
        compose.wait_healthy([victim])
    assert compose.containers("api") == api  # the same two containers: restarted, not replaced
    urls = compose.api_urls()  # the restarted replica may be published on another port

    with step("2. more batches through both replicas after the restart"):
        spread = Spread(urls, cooldown=0.05)
        with client(urls, transport=spread) as c:
            more = Writers(c, MODEL, 2, seed=58, total=AFTER_RESTART).start()
            assert more.join(120) == 0
    assert [b.error for b in more.batches if b.error] == []
    assert all(n > 0 for n in spread.served.values()), spread.served  # the restarted replica learns again
    deployment.sent = sent + more.batches

    store = read_back(compose.db_url(), MODEL)
    assert problems(deployment.sent, store) == []  # acknowledged = stored, exactly once each
    assert store["model_version"] == N_BATCHES + AFTER_RESTART
    deployment.store, deployment.version = store, store["model_version"]
    p = predictions(urls, deployment.version)
    assert p[0] == p[1]  # both replicas serve the same model
    deployment.predictions = p[0]

    with step("2. docker kill: a manual stop, the replica stays down until up -d"):
        compose.engine.docker("kill", api[0])
        time.sleep(3)  # the policy restarted the SIGKILLed one within a second (backoff 100 ms)
        state = compose.inspect(api[0])
        assert state["State"]["Status"] == "exited" and state["RestartCount"] == 0, state["State"]
        compose.up_and_healthy(2)
    assert sorted(compose.containers("api")) == sorted(api)  # started again, not replaced


def test_down_then_up_keeps_the_model_its_version_and_tasks(deployment, step):
    compose = deployment.compose
    with client(compose.api_urls()[:1], READ_KEY) as c:
        before = tasks_of(c)
    with step("3. down (volumes kept)"):
        compose("down", timeout=300)
    assert compose.containers("api", all=True) == [] and compose.containers("postgres", all=True) == []
    volumes = compose.engine.docker("volume", "ls", "-q").stdout.split()
    assert f"{compose.project}_pgdata" in volumes
    with step("3. up again: migration (nothing to do), 2 healthy replicas"):
        compose.up_and_healthy(2)
    code, log = compose.migration()
    assert code == 0 and "Running upgrade" not in log, log  # at head already
    urls = compose.api_urls()
    with client(urls[:1], READ_KEY) as c:
        assert c.get_model(MODEL).version == deployment.version
        assert tasks_of(c) == before
    assert read_back(compose.db_url(), MODEL) == deployment.store
    assert predictions(urls, deployment.version) == [deployment.predictions] * 2


def test_the_image_on_its_embedded_default_writes_its_sqlite_file_as_its_user(deployment, step):
    """No DATABASE_URL: the image's own CMD on SQLite (SQLITE_PATH), as its non-root user, the file
    in a volume mounted at SQLITE_PATH's directory (read from the host: the engine's own)."""
    docker = deployment.engine.docker
    name = f"{deployment.compose.project}-embedded"
    env = ["-e", f"API_WRITE_KEYS={WRITE_KEY}", "-e", f"API_READ_KEYS={READ_KEY}", "-e", f"MODEL_NAME={MODEL}",
           "-e", f"FCL3_PARAMS={json.dumps(PARAMS)}"]
    image = json.loads(docker("image", "inspect", "fcl3-api:latest").stdout)[0]["Config"]
    sqlite_path = next(e.split("=", 1)[1] for e in image["Env"] if e.startswith("SQLITE_PATH="))
    assert os.path.isabs(sqlite_path), sqlite_path  # not relative to the root-owned WORKDIR
    docker("network", "create", name)
    docker("volume", "create", name)
    try:
        with step("4. embedded default: the image's CMD on a volume, 3 batches learned"):
            c = docker("run", "-d", "--network", name, "-p", "127.0.0.1::8000",
                       "-v", f"{name}:{os.path.dirname(sqlite_path)}", *env, "fcl3-api:latest").stdout.strip()
            deployment.compose.wait_healthy([c], timeout=120)  # the image's own HEALTHCHECK
            host, port = deployment.compose.published(c, 8000)
            assert host == "127.0.0.1"
            with client([f"http://127.0.0.1:{port}"]) as cl:
                versions = [cl.learn(MODEL, f"t{t}", PROBE, [1.0, 2.0, 3.0]).version for t in range(3)]
                assert cl.get_model(MODEL).version == 3
            uid = docker("exec", c, "id", "-u").stdout.strip()
            docker("stop", c)
            docker("rm", c)
        assert versions == [1, 2, 3] and uid == str(API_UID)
        # the file in the volume, the service's user's: it outlives the container
        volume = json.loads(docker("volume", "inspect", name).stdout)[0]["Mountpoint"]
        db = os.path.join(volume, os.path.basename(sqlite_path))
        assert os.stat(db).st_uid == API_UID and os.path.getsize(db) > 0
        import sqlite3

        with contextlib.closing(sqlite3.connect(db)) as conn:
            assert conn.execute("SELECT version FROM models WHERE name = ?", (MODEL,)).fetchone() == (3,)
    finally:
        for c in docker("ps", "-aq", "--filter", f"volume={name}").stdout.split():
            docker("rm", "-f", c, check=False)
        docker("volume", "rm", name, check=False)
        docker("network", "rm", name, check=False)


def test_pg_dump_then_down_v_then_pg_restore_gives_the_same_model(deployment, step):
    compose = deployment.compose
    dump = "pg_dump -U fcl3 -d fcl3 -Fc".split()
    with step("5. pg_dump (custom format) from the postgres service"):
        backup = compose("exec", "-T", "postgres", *dump, text=False).stdout
    assert backup[:5] == b"PGDMP" and len(backup) > 10_000
    with step("5. down -v: the deployment and its volume gone"):
        compose("down", "-v", timeout=300)
    assert f"{compose.project}_pgdata" not in compose.engine.docker("volume", "ls", "-q").stdout.split()
    with step("5. up postgres, pg_restore, up: migration (nothing to do), 2 healthy replicas"):
        compose("up", "-d", "postgres", timeout=300)
        compose.wait_healthy(compose.containers("postgres"))
        r = compose("exec", "-T", "postgres", "pg_restore", "-U", "fcl3", "-d", "fcl3", "--no-owner", "--exit-on-error",
                    input=backup, text=False, check=False)
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
        compose.up_and_healthy(2)
    code, log = compose.migration()
    assert code == 0 and "Running upgrade" not in log, log
    urls = compose.api_urls()
    assert read_back(compose.db_url(), MODEL) == deployment.store
    with client(urls[:1], READ_KEY) as c:
        assert c.get_model(MODEL).version == deployment.version
    assert predictions(urls, deployment.version) == [deployment.predictions] * 2
    with client(urls) as c:  # and it learns on from there
        assert c.learn(MODEL, "t1", PROBE, [0.5, 0.1, -0.2]).version == deployment.version + 1


def test_down_v_leaves_nothing_behind(deployment, step):
    docker = deployment.engine.docker
    with step("6. down -v"):
        deployment.compose("down", "-v", timeout=300)
    assert docker("ps", "-aq").stdout.split() == []
    assert docker("volume", "ls", "-q").stdout.split() == []
    assert sorted(docker("network", "ls", "--format", "{{.Name}}").stdout.split()) == ["host", "none"]
