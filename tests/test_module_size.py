"""No module of ``service/`` over 400 lines: a module does one job a newcomer can name from
its file name, and one that grows past this bound is doing more than one (issue 21)."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


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
