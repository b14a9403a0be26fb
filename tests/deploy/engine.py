"""What tests/deploy needs around the project's docker-compose.yml: a Docker engine of its own,
base images made from Debian's packages, a wheelhouse, and compose itself.

Nothing here reaches an image registry. The slow parts are cached outside the repository
(``FCL3_DEPLOY_CACHE``, default ``/var/cache/fcl3-deploy`` when writable, else
``~/.cache/fcl3-deploy``), keyed by what they are made of; every part is made anew from
Debian's packages and PyPI when its cache entry is missing:

* :func:`rootfs` — ``debootstrap --variant=minbase --include=...`` from this machine's own apt
  source, trimmed (apt lists and archives, documentation) and kept as a tar file, with the
  marker environment of its ``python3`` beside it;
* :func:`wheelhouse` — the project's runtime dependencies (pyproject.toml) and its build backend,
  downloaded by the host's pip as wheels for that ``python3`` (its version, ABI and glibc), with
  the dependencies that only its markers ask for (e.g. ``python_full_version < "3.11.3"``);
* :class:`Engine` — ``dockerd`` with its own data root, exec root, socket and containerd
  namespace, no iptables and no default bridge, storage driver vfs; stopped, its processes and
  mounts gone and its directory removed by :meth:`Engine.close`, also after a failure.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
#: The base images: the API's (the issue's recipe) and the stand-ins for postgres and redis.
API_PACKAGES = ("python3", "python3-venv", "python3-pip")
SERVICE_PACKAGES = ("postgresql-15", "redis-server")
#: The PATH a base image declares (`docker import` gives none).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Trimmed from a rootfs before it is kept (every container copies its image on vfs: smaller is
#: faster): package lists and archives, documentation; Debian's default PostgreSQL cluster (the
#: postgres stand-in makes its own in PGDATA) and LLVM, which only PostgreSQL's JIT loads (the
#: stand-in runs with jit = off).
TRIM = ("var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*", "usr/share/doc/*",
        "usr/share/man/*", "usr/share/locale/*", "var/lib/postgresql/15", "etc/postgresql/15",
        "usr/lib/*/libLLVM-*", "usr/lib/*/libz3.so*", "usr/lib/postgresql/15/lib/llvmjit*",
        "usr/lib/postgresql/15/lib/bitcode")
#: Bumped when what a cache entry holds changes in a way its key does not show.
RECIPE = 1


class Unavailable(Exception):
    """What this machine lacks for the deployment test, in words."""


def run(cmd, timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """``cmd`` with its output captured as text; a failure says the command and its output."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    r = subprocess.run([str(c) for c in cmd], timeout=timeout, **kwargs)
    if check and r.returncode != 0:
        out = ((r.stdout or "") + (r.stderr or "")) if kwargs.get("text") else ""
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}:\n{out[-6000:]}")
    return r


def tool(name: str) -> str | None:
    """``name`` on PATH, or in the system's sbin directories (dockerd lives in /usr/sbin)."""
    return shutil.which(name, path=f"{os.environ.get('PATH', '')}:/usr/local/sbin:/usr/sbin:/sbin")


def missing_tools() -> list[str]:
    """The tools of the test that this machine lacks (empty: all there)."""
    out = []
    if os.geteuid() != 0:
        out.append("root (dockerd, debootstrap)")
    for name, package in (("dockerd", "docker.io"), ("docker-compose", "docker-compose"),
                          ("debootstrap", "debootstrap")):
        if tool(name) is None:
            out.append(f"{name} (apt-get install {package})")
    if docker_client() is None:
        out.append("the docker client (apt-get install docker.io)")
    return out


def docker_client() -> str | None:
    """The client that comes with ``dockerd`` (Debian's docker.io: /usr/bin/docker), else the
    first on PATH: a newer client elsewhere on PATH (one without buildx) cannot build."""
    dockerd = tool("dockerd")
    if dockerd:
        beside = Path(dockerd).resolve().parent.parent / "bin" / "docker"
        if beside.exists():
            return str(beside)
    return shutil.which("docker")


def cache_dir() -> Path:
    configured = os.environ.get("FCL3_DEPLOY_CACHE")
    if configured:
        path = Path(configured)
    elif os.access("/var/cache", os.W_OK):
        path = Path("/var/cache/fcl3-deploy")
    else:
        path = Path.home() / ".cache" / "fcl3-deploy"
    path.mkdir(parents=True, exist_ok=True)
    return path


def debian_mirror() -> str:
    """The apt source this machine uses for ``SUITE`` (``FCL3_DEBIAN_MIRROR`` overrides)."""
    if os.environ.get("FCL3_DEBIAN_MIRROR"):
        return os.environ["FCL3_DEBIAN_MIRROR"]
    r = run(["apt-get", "indextargets", "--format", "$(SITE) $(RELEASE) $(COMPONENT)"], check=False)
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == SUITE and parts[2] == "main":
            return parts[0]
    raise Unavailable(f"no apt source for Debian {SUITE} main on this machine (apt-get update; "
                      f"or set FCL3_DEBIAN_MIRROR)")


# ----------------------------------------------------------------------------- removing safely
def mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    return sorted((p for p in points if p.startswith(prefix) or p + "/" == prefix), key=len, reverse=True)


def remove_tree(path: Path) -> None:
    """``rm -rf`` that first unmounts whatever is mounted below ``path`` (debootstrap's /proc and,
    in a container, its bind of /dev; an engine's network namespaces and shm) and never leaves
    ``path``'s file system."""
    if not path.exists():
        return
    for point in mounts_under(path):
        subprocess.run(["umount", "-l", point], capture_output=True)
    left = mounts_under(path)
    if left:
        raise AssertionError(f"still mounted below {path}: {left}")
    run(["rm", "-rf", "--one-file-system", path], timeout=600)


def prune_cache(keep, days: float = 14) -> None:
    """Touch the cache entries in ``keep``; remove the others unused for ``days`` (entries of
    older recipes, dependencies or branches)."""
    now = time.time()
    keep = {Path(k).resolve() for k in keep}
    for k in keep:
        os.utime(k)
        if k.suffix == ".tar":
            os.utime(k.with_suffix(".json"))
    for entry in cache_dir().iterdir():
        resolved = entry.resolve()
        if resolved in keep or resolved.with_suffix(".tar") in keep:
            continue
        if entry.name.startswith(("rootfs-", "wheels-")) and now - entry.stat().st_mtime > days * 86400:
            if entry.is_dir():
                remove_tree(entry)
            else:
                entry.unlink()


# ----------------------------------------------------------------------------- base images
PYTHON_ENV = r"""
import json, os, platform, sys
print(json.dumps({
    "implementation_name": sys.implementation.name,
    "implementation_version": platform.python_version(),
    "os_name": os.name, "platform_machine": platform.machine(),
    "platform_python_implementation": platform.python_implementation(),
    "platform_release": platform.release(), "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "sys_platform": sys.platform, "libc": list(platform.libc_ver()),
    "abi": "cp%d%d" % sys.version_info[:2]}))
"""


def rootfs(packages: tuple[str, ...], mirror: str | None = None, log=print) -> tuple[Path, dict]:
    """A Debian ``SUITE`` minbase with ``packages``, as a tar file (cached), and the marker
    environment of its ``python3`` (``{}`` without one)."""
    key = hashlib.sha256(json.dumps([RECIPE, SUITE, sorted(packages), TRIM]).encode()).hexdigest()[:12]
    cache = cache_dir()
    tar, meta = cache / f"rootfs-{SUITE}-{key}.tar", cache / f"rootfs-{SUITE}-{key}.json"
    if tar.exists() and meta.exists():
        return tar, json.loads(meta.read_text())
    mirror = mirror or debian_mirror()
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache))
    try:
        target = work / "root"
        t0 = time.monotonic()
        run([tool("debootstrap"), "--variant=minbase", f"--include={','.join(packages)}", SUITE, target, mirror],
            timeout=1200)
        log(f"debootstrap {','.join(packages)}: {time.monotonic() - t0:.0f} s")
        for pattern in TRIM:
            for p in target.glob(pattern):
                if p.is_dir() and not p.is_symlink():
                    remove_tree(p)
                else:
                    p.unlink()
        env = {}
        if (target / "usr/bin/python3").exists():
            env = json.loads(run(["chroot", target, "/usr/bin/python3", "-c", PYTHON_ENV],
                                 env={"PATH": BASE_PATH, "LANG": "C.UTF-8"}).stdout)
        if mounts_under(target):
            raise AssertionError(f"debootstrap left mounts below {target}: {mounts_under(target)}")
        partial = work / "rootfs.tar"
        run(["tar", "--one-file-system", "-C", target, "-cf", partial, "."], timeout=600)
        meta.write_text(json.dumps(env))
        partial.rename(tar)  # last: a tar in the cache is a whole one
        return tar, env
    finally:
        remove_tree(work)


# ----------------------------------------------------------------------------- the wheelhouse
def project_requirements() -> list[str]:
    """What ``pip install .`` needs: pyproject.toml's runtime dependencies and build backend."""
    import tomllib  # Python 3.11: imported here, so that the module imports on 3.10

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [*project["project"]["dependencies"], *project["build-system"]["requires"]]


def _platforms(env: dict) -> list[str]:
    libc, version = env["libc"]
    machine = env["platform_machine"]
    if libc != "glibc":
        raise Unavailable(f"base python3 on {libc}: no manylinux wheels")
    minor = int(version.split(".")[1])
    tags = [f"manylinux_2_{m}_{machine}" for m in range(minor, 4, -1)]
    return tags + [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}",
                   f"linux_{machine}"]


def _wheels(directory: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, Requires-Dist) of each wheel in ``directory``."""
    import zipfile
    from email.parser import Parser

    from packaging.utils import canonicalize_name, parse_wheel_filename

    out = {}
    for whl in directory.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(whl.name)
        with zipfile.ZipFile(whl) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            msg = Parser().parsestr(z.read(meta).decode())
        out[canonicalize_name(name)] = (str(version), msg.get_all("Requires-Dist") or [])
    return out


def missing_for(requirements: list[str], directory: Path, env: dict) -> list[str]:
    """Requirements (with their markers) of ``requirements``' closure, evaluated in the marker
    environment ``env``, that no wheel in ``directory`` satisfies."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wheels = _wheels(directory)
    markers = {k: v for k, v in env.items() if k not in ("libc", "abi")}
    todo, seen, missing = [Requirement(r) for r in requirements], set(), []
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({**markers, "extra": ""}):
            continue
        key = (canonicalize_name(req.name), str(req.specifier), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        have = wheels.get(key[0])
        if have is None or not req.specifier.contains(have[0], prereleases=True):
            missing.append(f"{req.name}{req.specifier}")
            continue
        for dep in map(Requirement, have[1]):
            extras = [""] + sorted(req.extras)
            if dep.marker is None or any(dep.marker.evaluate({**markers, "extra": e}) for e in extras):
                dep.marker = None  # evaluated here, with the extras asked for
                todo.append(dep)
    return missing


def wheelhouse(env: dict, log=print) -> Path:
    """The wheels ``pip install .`` needs on a ``python3`` of marker environment ``env`` (cached)."""
    import sys

    requirements = project_requirements()
    platforms = _platforms(env)
    stable = {k: v for k, v in env.items() if k not in ("platform_release", "platform_version")}  # the kernel
    key = hashlib.sha256(json.dumps([RECIPE, sorted(requirements), stable, platforms]).encode()).hexdigest()[:12]
    cache = cache_dir()
    done = cache / f"wheels-{key}"
    if done.is_dir():
        return done
    work = Path(tempfile.mkdtemp(prefix="wheels-", dir=cache))
    try:
        base = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                "--dest", work, "--only-binary=:all:", "--python-version", env["python_full_version"],
                "--implementation", "cp", "--abi", env["abi"], *[f"--platform={p}" for p in platforms]]
        # pip evaluates markers against its own interpreter, not --python-version: the rounds
        # after the first fetch what the base's python3 asks for beyond the host's
        wanted = requirements
        t0 = time.monotonic()
        for _ in range(5):
            run([*base, *wanted], timeout=900)
            wanted = missing_for(requirements, work, env)
            if not wanted:
                break
        else:
            raise AssertionError(f"wheelhouse still misses {wanted}")
        log(f"wheelhouse: {len(list(work.glob('*.whl')))} wheels in {time.monotonic() - t0:.0f} s")
        try:
            work.rename(done)
        except OSError:  # another run made it meanwhile
            if not done.is_dir():
                raise
        return done
    finally:
        if work.exists():
            remove_tree(work)


class WheelServer:
    """The wheelhouse on 127.0.0.1 (a directory listing pip reads as ``--find-links``), for
    builds that run with the host's network and no index."""

    def __init__(self, directory: Path):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "WheelServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


# ----------------------------------------------------------------------------- the engine
class Engine:
    """A ``dockerd`` of the test's own under a fresh directory of /tmp (short: containerd's
    socket paths must fit in 108 bytes).

    Storage: ``FCL3_DOCKER_STORAGE_DRIVER`` if set, else overlay2 where the kernel allows it,
    else vfs (any file system; every container and build step a full copy of its image: 2-3
    times slower here). The data root of overlay2 is a tmpfs of its own (``size=TMPFS_SIZE``;
    ``FCL3_DOCKER_TMPFS=0``: on disk), so that removing it is an unmount: on this machine's
    disk, deleting the engine's 2 GB of files took 75 s."""

    TMPFS_SIZE = "8g"

    def __init__(self, storage_driver: str | None = None):
        forced = storage_driver or os.environ.get("FCL3_DOCKER_STORAGE_DRIVER")
        tmpfs = os.environ.get("FCL3_DOCKER_TMPFS", "1") != "0"
        drivers = [forced] if forced else ["overlay2", "vfs"]
        #: (driver, data root on a tmpfs) in the order tried
        self.attempts = [(d, t) for d in drivers for t in ((True, False) if tmpfs and d == "overlay2" else (False,))]
        self.storage_driver: str | None = None
        self.tmpfs = False
        self.dir = Path(tempfile.mkdtemp(prefix="fcl3d-", dir="/tmp"))
        self.sock = self.dir / "sock"
        self.client = docker_client()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "dockerd.log"
        self.namespace = f"fcl3deploy-{self.dir.name[6:]}"
        self.times: dict[str, float] = {}
        (self.dir / "config").mkdir()  # DOCKER_CONFIG: no credentials, no helpers of the machine's
        (self.dir / "daemon.json").write_text("{}")  # nothing from /etc/docker/daemon.json

    @property
    def env(self) -> dict[str, str]:
        """The environment of docker and docker-compose for this engine: its socket, an empty
        client configuration, this engine's client first on PATH (compose v1 builds with it)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKER_", "COMPOSE_"))}
        path = f"{Path(self.client).parent}:{env.get('PATH', BASE_PATH)}:/usr/local/sbin:/usr/sbin:/sbin"  # runc
        return {**env, "PATH": path, "DOCKER_HOST": f"unix://{self.sock}",
                "DOCKER_CONFIG": str(self.dir / "config")}

    def start(self, timeout: float = 90) -> "Engine":
        failures = []
        for driver, tmpfs in self.attempts:
            try:
                if tmpfs:
                    (self.dir / "data").mkdir()
                    run(["mount", "-t", "tmpfs", "-o", f"size={self.TMPFS_SIZE},mode=0711", "fcl3-deploy",
                         self.dir / "data"], timeout=30)
                self._start(driver, timeout)
                self.storage_driver, self.tmpfs = driver, tmpfs
                return self
            except (Unavailable, AssertionError) as exc:
                failures.append(f"--storage-driver={driver}{' on a tmpfs' if tmpfs else ''}: {exc}")
                self._stop()
                for part in ("data", "exec"):
                    remove_tree(self.dir / part)
        raise Unavailable("; ".join(failures))

    def _start(self, driver: str, timeout: float) -> None:
        cmd = [tool("dockerd"), "--config-file", self.dir / "daemon.json",
               "--iptables=false", "--ip-masq=false", "--bridge=none", f"--storage-driver={driver}",
               "--data-root", self.dir / "data", "--exec-root", self.dir / "exec",
               "-H", f"unix://{self.sock}", "--pidfile", self.dir / "dockerd.pid",
               "--containerd-namespace", self.namespace,
               "--containerd-plugins-namespace", f"{self.namespace}-plugins"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, env=self.env)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise Unavailable(f"dockerd exited {self.proc.returncode}: {self.log_tail()}")
            r = self.docker("version", "--format", "{{.Server.Version}}", check=False, timeout=20)
            if r.returncode == 0:
                self.version = r.stdout.strip()
                return
            if time.monotonic() > deadline:
                raise Unavailable(f"dockerd did not answer in {timeout:.0f} s: {self.log_tail()}")
            time.sleep(0.5)

    def log_tail(self, n: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def docker(self, *args, timeout: float = 600, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
        return run([self.client, *args], timeout=timeout, check=check, env=self.env, **kwargs)

    def import_rootfs(self, tar: Path, name: str) -> None:
        with open(tar, "rb") as f:
            run([self.client, "import", "--change", f"ENV PATH={BASE_PATH}", "-", name],
                stdin=f, env=self.env, timeout=600)

    def own_processes(self) -> list[int]:
        """Processes started for this engine (containerd, its shims, docker-proxy) still running."""
        mine = []
        needle = str(self.dir).encode()
        for p in Path("/proc").iterdir():
            if p.name.isdigit() and int(p.name) != os.getpid():
                with contextlib.suppress(OSError):
                    if needle in (p / "cmdline").read_bytes():
                        mine.append(int(p.name))
        return mine

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        for pid in self.own_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Remove every container, stop the engine, end what is left of its processes, unmount
        and remove its directory (``times``: how long each part took)."""
        t0 = time.monotonic()
        try:
            if self.proc is not None and self.proc.poll() is None:
                ids = self.docker("ps", "-aq", check=False, timeout=60).stdout.split()
                if ids:
                    self.docker("rm", "-f", *ids, check=False, timeout=300)
            t1 = time.monotonic()
            self.times["containers removed"] = t1 - t0
            self._stop()
            self.times["dockerd stopped"] = time.monotonic() - t1
        finally:
            t2 = time.monotonic()
            time.sleep(0.2)
            remove_tree(self.dir)
            self.times["directory removed"] = time.monotonic() - t2


def remove_stale_engines(min_age: float = 300) -> list[Path]:
    """The directories of this test's engines whose dockerd is gone (a run killed before its
    cleanup): their leftover processes ended, their mounts undone, the directories removed. An
    engine whose dockerd still runs is another run's, and is left alone."""
    removed = []
    for d in Path("/tmp").glob("fcl3d-*"):
        pidfile = d / "dockerd.pid"
        try:
            if time.time() - d.stat().st_mtime < min_age:
                continue
            pid = int(pidfile.read_text().strip()) if pidfile.exists() else None
        except (OSError, ValueError):
            continue
        with contextlib.suppress(OSError):
            if pid is not None and b"dockerd" in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue  # running
        stale = Engine.__new__(Engine)
        stale.dir, stale.proc = d, None
        stale._stop()  # its containerd, shims and proxies, if any
        remove_tree(d)
        removed.append(d)
    return removed
