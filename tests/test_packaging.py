"""What a non-editable install carries: the packages of the tree (pyproject lists them) and the
migrations (``migrations/`` installed as ``fcl3_migrations``), so an installed service starts
on SQLite with an Alembic history and ``alembic upgrade head`` runs with no checkout."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_lists_every_package_of_the_tree():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("core", "service", "fcl3")
             for p in (ROOT / top).rglob("__init__.py")}
    assert listed == found | {"fcl3_migrations"}
    assert tool["package-dir"] == {"fcl3_migrations": "migrations"}


@pytest.mark.slow
def test_a_wheel_install_migrates_with_no_checkout(tmp_path):
    """Build the wheel from a copy of the sources, install it (no dependencies: they are this
    environment's) into a fresh venv, and from a directory outside the repository: start the
    app on SQLite (embedded default: migrated at start-up) and run ``alembic upgrade head``."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for name in ("core", "service", "fcl3", "migrations"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(wheels), str(src)], check=True, cwd=tmp_path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                 check=True, capture_output=True, text=True).stdout.strip())
    wheel = next(wheels.glob("fcl3-*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(wheel)], check=True)
    # the dependencies from this environment, through a path entry (its .pth files, such as an
    # editable install of this checkout, are not run from there)
    (target / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DATABASE_URL", "REDIS_URL")}
    script = textwrap.dedent("""
        import sqlite3, sys
        import service, fcl3_migrations
        assert "site-packages" in service.__file__ and "site-packages" in fcl3_migrations.__file__, service.__file__
        from fastapi.testclient import TestClient
        from service.config import Settings
        from service.main import create_app
        settings = Settings(_env_file=None, SQLITE_PATH="started.db", DATABASE_URL=None, REDIS_URL=None)
        with TestClient(create_app(settings)) as c:
            assert c.get("/readyz").status_code == 200
        print(sqlite3.connect("started.db").execute("SELECT version_num FROM alembic_version").fetchone()[0])
    """)
    started = subprocess.run([str(python), "-c", script], cwd=work, env=env, capture_output=True, text=True)
    assert started.returncode == 0, started.stderr[-3000:]
    heads = sorted(p.name.split("_")[0] for p in (ROOT / "migrations" / "versions").glob("0*.py"))
    assert started.stdout.split()[-1] == heads[-1]
    assert (target / "fcl3" / "py.typed").is_file()  # the client's annotations ship with it (PEP 561)
    ini = next((target / "fcl3_migrations").glob("alembic.ini"))
    migrated = subprocess.run([str(venv / "bin" / "python"), "-m", "alembic", "-c", str(ini), "upgrade", "head"],
                              cwd=work, env={**env, "SQLITE_PATH": str(work / "cli.db")},
                              capture_output=True, text=True)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    import sqlite3

    with sqlite3.connect(work / "cli.db") as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone()[0] == heads[-1]
        assert {"models", "tasks", "batches", "evaluation_due"} <= {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
