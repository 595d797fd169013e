"""The package's architecture, read off its imports: no import circles, layers point down.

Every ``import`` statement of ``dpkd_audit`` counts, also those inside functions (a lazy import
still ties two modules together) and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dpkd_audit"

#: Components (the first name under ``dpkd_audit``) from the bottom up; a component may import
#: only its own layer's and lower layers' components. ``__init__`` (the facade) is left out.
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"_validate", "_lazy", "errors", "provenance", "executor", "data", "devices"}),
    frozenset({"_math"}),
    frozenset({"events"}),
    frozenset({"accountants"}),
    frozenset({"ledger", "interop"}),
    frozenset({"mechanisms"}),
    frozenset({"audit"}),
    frozenset({"training_audit"}),
    frozenset({"pipelines", "reports"}),
    frozenset({"cli"}),
)


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        mods[".".join(parts)] = path
    return mods


def _imports(path: Path, mods: dict[str, Path]) -> set[str]:
    """The package modules ``path`` imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods
                     else node.module for a in node.names]
        for name in names:
            if not name.startswith("dpkd_audit"):
                continue
            while name not in mods and "." in name:
                name = name.rsplit(".", 1)[0]
            found.add(name)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(path, mods) - {name} for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter
                counter += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_a_planted_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_back(graph):
    assert _cycles(graph) == []


def test_components_import_only_their_own_or_lower_layers(graph):
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    components = {name.split(".")[1] for name in graph if "." in name}
    assert components <= set(layer_of), f"components without a layer: {components - set(layer_of)}"
    upward = sorted(
        (module, target) for module, targets in graph.items() if "." in module
        for target in targets if "." in target
        and layer_of[target.split(".")[1]] > layer_of[module.split(".")[1]])
    assert upward == []


def test_each_technique_has_its_own_folder():
    assert (PACKAGE / "accountants" / "rdp" / "__init__.py").is_file()
    assert (PACKAGE / "accountants" / "pld" / "__init__.py").is_file()
    assert (PACKAGE / "ledger" / "__init__.py").is_file()
    assert (PACKAGE / "audit" / "controls" / "__init__.py").is_file()
    flat = [p.name for p in [*PACKAGE.glob("*.py"), *(PACKAGE / "accountants").glob("*.py")]
            if p.stem.split("_")[0] in {"rdp", "pld", "ledger"}]
    assert flat == []


def test_public_import_paths_still_work():
    import dpkd_audit
    from dpkd_audit import accountants, ledger
    from dpkd_audit.accountants import pld, rdp
    from dpkd_audit.audit.controls import CONTROLS, HalfNoiseLaplace

    assert dpkd_audit.Ledger is ledger.Ledger is ledger.core.Ledger
    assert accountants.RDPAccountant is rdp.RDPAccountant is rdp.accountant.RDPAccountant
    assert accountants.PLDAccountant is pld.PLDAccountant is pld.accountant.PLDAccountant
    assert any(isinstance(make(), HalfNoiseLaplace) for make in CONTROLS)
