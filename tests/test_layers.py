"""The service's layers are one-way: routes -> features -> store and engine, never back.

Each module of ``service/`` belongs to one layer (:data:`LAYERS`, top first); a module may import
modules of its own layer or of the layers below, never one above (the graph of
:func:`tests.test_import_graph.import_graph`: every import that runs, ``if TYPE_CHECKING:`` ones
left out). A route also never reads the engine's learned or private state (``tasks_``,
``n_features_in_``, ``_record``): what it needs of a model it asks of the store or a feature.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_import_graph import _write, import_graph, module_names

ROOT = Path(__file__).resolve().parents[1]

#: Top first: the app and its server; the HTTP edge (routes, dependencies, middleware, error
#: mapping, keys); the models a process hosts (what wires a model's parts together); the
#: features; what every feature writes and reads through (the store, the write guards); the
#: settings, engines, logs and metrics every layer uses.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("app", ("service.main", "service.server")),
    ("http", ("service.api", "service.middleware", "service.errors", "service.security")),
    ("hosting", ("service.hosting",)),
    ("features", ("service.learning", "service.labels", "service.take_back", "service.models",
                  "service.evaluation", "service.events", "service.records")),
    ("store", ("service.store", "service.writing")),
    ("base", ("service", "service.config", "service.db", "service.logs", "service.metrics", "service.memory",
              "service.refusals")),
]


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int:
    """The index in ``layers`` of the layer holding ``module`` (its longest listed prefix)."""
    best, depth = None, -1
    for i, (_, prefixes) in enumerate(layers):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and p.count(".") > depth:
                best, depth = i, p.count(".")
    if best is None:
        raise KeyError(f"{module} is in no layer: add it to LAYERS")
    return best


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> list[str]:
    """Every import of ``graph`` from a lower layer into a higher one, as ``a (layer) -> b (layer)``."""
    out = []
    for module, targets in sorted(graph.items()):
        here = layer_of(module, layers)
        for t in sorted(targets):
            there = layer_of(t, layers)
            if there < here:
                out.append(f"{module} ({layers[here][0]}) -> {t} ({layers[there][0]})")
    return out


def engine_state_reads(path: Path) -> list[str]:
    """``line: attribute`` of each read of learned state (a name ending in ``_``: ``tasks_``,
    ``scaler_``) or of a private attribute of another object than ``self`` (``obj._x``), as an
    attribute or through ``getattr(obj, "...")``, in the module at ``path``."""
    def bad(name: str, owner: ast.AST | None) -> bool:
        if name.startswith("__") and name.endswith("__"):
            return False
        if name.endswith("_"):
            return True
        return name.startswith("_") and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls"))

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and bad(node.attr, node.value):
            found.append(f"{node.lineno}: .{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and bad(node.args[1].value, node.args[0])):
            found.append(f"{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


# ----------------------------------------------------------------------------- the checks themselves
def test_an_import_from_a_lower_layer_into_a_higher_one_is_found(tmp_path):
    _write(tmp_path, {"app/__init__.py": "", "app/routes.py": "from app import store\n",
                      "app/store.py": "def f():\n    from app import routes\n"})
    layers = [("routes", ("app.routes",)), ("store", ("app", "app.store"))]
    assert upward_imports(import_graph(tmp_path, ["app"]), layers) == ["app.store (store) -> app.routes (routes)"]


def test_a_type_checking_import_is_no_upward_import(tmp_path):
    _write(tmp_path, {"app/__init__.py": "", "app/routes.py": "from app import store\n",
                      "app/store.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app import routes\n"})
    layers = [("routes", ("app.routes",)), ("store", ("app", "app.store"))]
    assert upward_imports(import_graph(tmp_path, ["app"]), layers) == []


def test_reads_of_learned_or_private_state_are_found(tmp_path):
    route = tmp_path / "route.py"
    route.write_text("def f(snap, self):\n    a = snap.learner.tasks_\n    b = getattr(snap.learner, 'tasks_', {})\n"
                     "    c = snap.learner._record('t')\n    d = self._cache\n    e = snap.has_task('t')\n"
                     "    return a, b, c, d, e, type(snap).__name__\n")
    assert engine_state_reads(route) == ["2: .tasks_", "3: getattr(..., 'tasks_')", "4: ._record"]


# ----------------------------------------------------------------------------- the service
def test_every_service_module_has_a_layer():
    for module in module_names(ROOT, "service"):
        layer_of(module)


def test_no_layer_imports_a_higher_one():
    assert upward_imports(import_graph(ROOT, ["service"])) == []


@pytest.mark.parametrize("path", sorted((ROOT / "service" / "api").rglob("*.py")), ids=lambda p: p.name)
def test_no_route_reads_the_engines_learned_or_private_state(path):
    assert engine_state_reads(path) == []
