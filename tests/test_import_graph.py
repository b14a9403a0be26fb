"""No import circles in ``core/``, ``service/`` or ``fcl3/``.

The graph is read from the source with :mod:`ast` (nothing is imported): every ``import`` and
``from ... import`` of a package's modules, relative or absolute, at module level or inside a
function, is an edge; ``from pkg import name`` is an edge to ``pkg.name`` when that is a
module, else to ``pkg``. Imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module of ``package`` under ``root``, by dotted name (``pkg/__init__.py`` is ``pkg``)."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """The import statements of ``tree`` (nested ones included), without ``if TYPE_CHECKING:`` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports."""
    modules: dict[str, Path] = {}
    for p in packages:
        modules.update(module_names(root, p))
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = name.split(".") if is_package else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = here[:len(here) - (node.level - 1)] if node.level > 1 else here
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                # `import a.b.c` runs a, a.b and a.b.c: the deepest one known stands for it
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    graph[name].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules, the first repeated at the end), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path = [start]
        colour[start] = GREY
        stack = [iter(sorted(graph[start]))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                colour[path.pop()] = BLACK
                continue
            if colour[nxt] == GREY:
                return path[path.index(nxt):] + [nxt]
            if colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


# ----------------------------------------------------------------------------- the walker itself
def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


@pytest.mark.parametrize("files, cycle", [
    # relative imports at module level
    ({"pkg/__init__.py": "", "pkg/a.py": "from . import b\n", "pkg/b.py": "from .c import x\n",
      "pkg/c.py": "from .a import y\n"}, {"pkg.a", "pkg.b", "pkg.c"}),
    # an absolute import inside a function, and a parent-relative one
    ({"pkg/__init__.py": "", "pkg/a.py": "def f():\n    import pkg.sub.b\n",
      "pkg/sub/__init__.py": "", "pkg/sub/b.py": "from ..a import f\n"}, {"pkg.a", "pkg.sub.b"}),
    # a package's __init__ importing a module that imports the package
    ({"pkg/__init__.py": "from .a import x\n", "pkg/a.py": "import pkg\nx = 1\n"}, {"pkg", "pkg.a"}),
])
def test_the_walker_finds_a_circle(tmp_path, files, cycle):
    _write(tmp_path, files)
    found = find_cycle(import_graph(tmp_path, ["pkg"]))
    assert found is not None and found[0] == found[-1] and set(found) == cycle


def test_the_walker_passes_a_graph_without_circles(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from .a import x\n", "pkg/a.py": "from .b import y\nx = y\n",
                      "pkg/b.py": "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from .a import x\ny = 1\n"})
    graph = import_graph(tmp_path, ["pkg"])
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": {"pkg.b"}, "pkg.b": set()}
    assert find_cycle(graph) is None


# ----------------------------------------------------------------------------- the project
@pytest.mark.parametrize("package", ["core", "service", "fcl3"])
def test_no_import_circle(package):
    graph = import_graph(ROOT, [package])
    assert len(graph) > 3
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)
