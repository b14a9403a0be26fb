"""The deployment test's base images and wheelhouse, made from Debian's packages and PyPI
(no image registry is reached), cached outside the repository (``FCL3_DEPLOY_CACHE``, default
``/var/cache/fcl3-deploy`` when writable, else ``~/.cache/fcl3-deploy``), keyed by what they are
made of, and made anew when their entry is missing:

* :func:`rootfs` — ``debootstrap --variant=minbase --include=...`` from this machine's own apt
  source, trimmed and kept as a tar file for ``docker import``, with the marker environment of
  its ``python3`` beside it;
* :func:`wheelhouse` — the project's runtime dependencies (pyproject.toml) and its build backend,
  downloaded by the host's pip as wheels for that ``python3`` (its version, ABI and glibc), with
  the dependencies that only its markers ask for (e.g. ``python_full_version < "3.11.3"``);
  :class:`WheelServer` serves it on 127.0.0.1 for ``pip --find-links``.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from .engine import BASE_PATH, Unavailable, mounts_under, remove_tree, run, tool

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SUITE = "bookworm"
#: The base images: the API's (the issue's recipe) and the stand-ins for postgres and redis.
API_PACKAGES = ("python3", "python3-venv", "python3-pip")
SERVICE_PACKAGES = ("postgresql-15", "redis-server")
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


