"""Layout: the app and the engine never load the benchmarks or their dependencies.

``benchmarks/`` needs the ``bench`` extra (matplotlib, scikit-learn); the service
(``pip install .``, the Docker image) has only the runtime dependencies, and the engine only
numpy and scipy. The client's httpx and tqdm are runtime dependencies (``fcl3/``), yet the app
never loads them."""
import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH_ONLY = {"matplotlib", "tqdm", "sklearn", "httpx", "benchmarks"}
ENGINE_THIRD_PARTY = {"numpy", "scipy"}

# Prints the top-level names of the modules loaded by the statement given in argv[1]
# (compared with those loaded before it), each with the file it came from.
PROBE = """
import json, sys
before = set(sys.modules)
exec(sys.argv[1])
out = {}
for name in set(sys.modules) - before:
    top = name.split(".")[0]
    mod = sys.modules.get(top)
    out[top] = getattr(mod, "__file__", None)
print(json.dumps(out))
"""


def run_python(code: str, *args: str, tmp_path) -> str:
    """Run ``code`` in a fresh interpreter from an empty directory, the checkout on its path,
    the app's SQLite file in ``tmp_path``; returns the last line of its output."""
    env = {"PATH": "/usr/bin:/bin", "SQLITE_PATH": str(tmp_path / "fcl3.db"), "HOME": str(tmp_path),
           "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def loaded_by(statement: str, tmp_path) -> dict[str, str | None]:
    """Top-level names of the modules ``statement`` loads, each with its file (or None)."""
    return json.loads(run_python(PROBE, statement, tmp_path=tmp_path))


def third_party(modules: dict[str, str | None]) -> set[str]:
    """Top-level modules installed in site-packages (not the standard library, not built in,
    not this checkout's own packages)."""
    out = set()
    for name, path in modules.items():
        if name in sys.stdlib_module_names or name in sys.builtin_module_names or path is None:
            continue
        parts = Path(path).resolve().parts
        if "site-packages" in parts or "dist-packages" in parts:
            out.add(name)
    return out


def test_the_probe_sees_what_a_statement_loads(tmp_path):
    """The check below can fail: importing a benchmark is seen."""
    mods = loaded_by("import benchmarks.paper, tqdm", tmp_path)
    assert {"benchmarks", "core", "numpy", "tqdm"} <= set(mods)
    assert {"tqdm", "numpy"} <= third_party(mods) and "core" not in third_party(mods)


def test_the_app_loads_no_benchmark_module(tmp_path):
    mods = loaded_by("import service.main", tmp_path)
    assert "service" in mods and "fastapi" in mods
    assert not BENCH_ONLY & set(mods), sorted(BENCH_ONLY & set(mods))


def test_the_engine_loads_only_numpy_and_scipy(tmp_path):
    """Anything else third-party in sys.modules after ``import core`` must come from numpy or
    scipy themselves (optional imports of theirs): the same modules appear when exactly the
    numpy/scipy modules core loaded are imported without core."""
    mods = loaded_by("import core", tmp_path)
    assert {"numpy", "scipy"} <= third_party(mods)
    extra = third_party(mods) - ENGINE_THIRD_PARTY
    if extra:  # e.g. numpy.f2py's optional charset_normalizer, loaded through scipy
        numeric = json.loads(run_python("import core, json, sys; print(json.dumps(sorted(m for m in sys.modules "
                                        "if m.split('.')[0] in ('numpy', 'scipy'))))", tmp_path=tmp_path))
        baseline = loaded_by("import importlib\nfor m in %r:\n    importlib.import_module(m)" % numeric, tmp_path)
        extra -= third_party(baseline)
    assert not extra, f"core loads third-party modules other than numpy/scipy: {sorted(extra)}"
    assert not BENCH_ONLY & set(mods)


def test_engine_and_service_sources_import_no_benchmark_dependency():
    """Also the imports inside functions (which sys.modules only sees when they run)."""
    stdlib = set(sys.stdlib_module_names)
    for package, allowed in (("core", stdlib | ENGINE_THIRD_PARTY | {"core"}), ("service", None)):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    assert top not in BENCH_ONLY, f"{path.relative_to(ROOT)} imports {name}"
                    if allowed is not None:
                        assert top in allowed, f"{path.relative_to(ROOT)} imports {name} (engine: numpy/scipy only)"


def test_dependencies_are_declared_once_runtime_without_bench_tools():
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {Requirement(r).name.lower() for r in project["dependencies"]}
    extras = {k: [Requirement(r) for r in v] for k, v in project["optional-dependencies"].items()}
    bench = {r.name.lower() for r in extras["bench"]}
    assert {"matplotlib", "scikit-learn"} <= bench
    assert {"httpx", "click", "tqdm"} <= runtime  # the client and the fcl3 command (fcl3/)
    assert not runtime & bench, sorted(runtime & bench)
    assert {"numpy", "scipy", "fastapi", "uvicorn", "sqlalchemy", "alembic", "psycopg", "redis"} <= runtime
    assert any(r.name == project["name"] and r.extras == {"bench"} for r in extras["test"])  # fcl3[bench]
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert not any(p.startswith("benchmarks") for p in packages)


def test_docker_image_has_no_benchmarks():
    text = (ROOT / "docker" / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert not any("benchmarks" in ln for ln in lines if ln.startswith(("COPY", "ADD")))
    assert not any("[bench" in ln or "[test" in ln for ln in lines if "pip install" in ln)
    assert not any(ln.startswith(("COPY . ", "ADD . ")) for ln in lines)
