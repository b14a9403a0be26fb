"""No module of the service or the engine rebinds a module variable at run time (a ``global``
statement): state that outlives a call lives in the objects that own it (the app's state,
:class:`service.hosting.Shared`), and what is computed once per process is a cached function."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def global_statements(root: Path) -> list[str]:
    """``path:line`` of every ``global`` statement in the Python files under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Global):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} global {', '.join(node.names)}")
    return found


def test_the_walker_finds_a_global_statement(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("_n = 0\n\ndef bump():\n    global _n\n    _n += 1\n")
    assert global_statements(pkg) == ["pkg/m.py:4 global _n"]


@pytest.mark.parametrize("package", ["core", "service", "fcl3"])
def test_no_global_statement(package):
    assert global_statements(ROOT / package) == []
