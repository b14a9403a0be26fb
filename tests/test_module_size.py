"""No module of ``service/`` over 400 lines, and no package of it with more modules than a
reader takes in at a glance: a module does one job a newcomer can name from its file name (one
that grows past the bound is doing more than one), and a package is one feature (a folder that
grows past its bound holds more than one)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
#: Modules (``__init__.py`` included) directly in ``service/``, and in each of its packages.
MAX_TOP_MODULES, MAX_PACKAGE_MODULES = 15, 12


def long_modules(package: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """The modules under ``package`` longer than ``limit`` lines: path (relative to its parent) -> lines."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out[path.relative_to(package.parent).as_posix()] = n
    return out


def test_the_count_finds_a_long_module(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "short.py").write_text("x = 1\n" * 3)
    (pkg / "sub" / "long.py").write_text("x = 1\n" * 4)
    assert long_modules(pkg, limit=3) == {"pkg/sub/long.py": 4}


def test_no_service_module_over_400_lines():
    assert long_modules(ROOT / "service") == {}, f"split by job: modules of service/ over {MAX_LINES} lines"


def crowded_packages(package: Path, top: int, each: int) -> dict[str, int]:
    """The packages under ``package`` (itself with bound ``top``, the others ``each``) that hold
    more modules than their bound: path (relative to its parent) -> modules."""
    out = {}
    for init in sorted(package.rglob("__init__.py")):
        n = len(list(init.parent.glob("*.py")))
        if n > (top if init.parent == package else each):
            out[init.parent.relative_to(package.parent).as_posix()] = n
    return out


def test_the_count_finds_a_crowded_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py", "sub/c.py"):
        (pkg / rel).write_text("")
    assert crowded_packages(pkg, top=2, each=2) == {"pkg/sub": 3}


def test_no_service_package_holds_too_many_modules():
    assert crowded_packages(ROOT / "service", MAX_TOP_MODULES, MAX_PACKAGE_MODULES) == {}, (
        f"at most {MAX_TOP_MODULES} modules directly in service/ and {MAX_PACKAGE_MODULES} in each package: "
        "group them by feature")
