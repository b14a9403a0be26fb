"""A Docker engine of the deployment test's own, and the tools it needs.

:class:`Engine` runs ``dockerd`` with its own data root, exec root, socket and containerd
namespace, no iptables and no default bridge; :meth:`Engine.close` stops it, ends what is left
of its processes, undoes its mounts and removes its directory, also after a failure.
:func:`remove_stale_engines` removes those of runs killed before their cleanup.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

#: The PATH a base image declares (`docker import` gives none).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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
        #: letters and digits only: mkdtemp's suffix may hold "_", which containerd's namespaces
        #: and compose's project names refuse
        self.token = secrets.token_hex(4)
        self.namespace = f"fcl3deploy-{self.token}"
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
