"""The package's shape, checked: the engine imports no method, a method imports only the
methods the table in docs/architecture.md allows, no sub-package cycle, and no cycle
between any two modules (lazy imports included).

Every ``import`` in ``src/deepfault`` is read with :mod:`ast` (those inside functions
too, since a lazy import is still a dependency) and resolved to a top-level sub-package or
to a module; only imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import deepfault

ROOT = Path(deepfault.__file__).parent
DOC = ROOT.parents[1] / "docs" / "architecture.md"
#: The shared engine: knows no method.
ENGINE = {"core", "models", "data", "experiment", "corpus", "errors", "_io", "_version", "provenance",
          "checks", "_signals", "_deprecation"}
#: What sits on top: the method list, the CLI, the package's re-exports, test oracles.
TOP = {"methods", "cli", "__init__", "__main__", "testing"}


def _methods() -> set[str]:
    """The method packages: whatever ``deepfault/methods.py`` (their only list) imports."""
    return _imports(ROOT / "methods.py") - ENGINE - TOP


def _unit(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path) -> set[str]:
    """Top-level sub-packages of deepfault that ``path`` imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package = path.relative_to(ROOT.parent).parts[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - node.level + 1])
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "deepfault":
                unit = parts[1] if len(parts) > 1 else "__init__"
                known = (ROOT / unit).is_dir() or (ROOT / f"{unit}.py").is_file()
                out.add(unit if known else "__init__")  # a name defined in deepfault/__init__.py
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        unit = _unit(path)
        graph.setdefault(unit, set()).update(u for u in _imports(path) if u != unit)
    return graph


def test_every_unit_is_classified():
    methods = _methods()
    assert {"localization", "coverage", "xplore", "fuzz"} <= methods
    assert set(_graph()) <= ENGINE | methods | TOP, set(_graph()) - ENGINE - methods - TOP


def test_the_engine_imports_no_method():
    upward = {(u, v) for u, deps in _graph().items() if u in ENGINE for v in deps if v in _methods() | TOP}
    assert not upward, f"engine modules import methods or the CLI: {sorted(upward)}"


def test_methods_do_not_import_the_cli_or_the_method_list():
    upward = {(u, v) for u, deps in _graph().items() if u in _methods() for v in deps if v in TOP}
    assert not upward, sorted(upward)


def test_no_cycle_between_sub_packages():
    graph = _graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


def test_the_method_list_is_the_only_place_that_names_every_method():
    from deepfault import methods
    from deepfault.experiment.method import list_methods

    assert {m.name for m in methods.ALL} == set(list_methods())
    assert {m.name for m in methods.ALL} >= {"deepfault", "coverage", "deepxplore", "drfuzz"}
    # Nothing below the top imports every method package: only the list does.
    everything = {u for u, deps in _graph().items() if _methods() <= deps}
    assert everything <= {"methods", "__init__", "cli"}, everything


# --- which method may import which (docs/architecture.md) ------------------------------------


def _allowed() -> dict[str, set[str]]:
    """``method -> the methods it may import``, from the page's table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Which method may import which", 1)[1].split("\n## ", 1)[0]
    table: dict[str, set[str]] = {}
    for line in section.splitlines():
        row = re.fullmatch(r"\| `(\w+)` \| (.+) \|", line.strip())
        if row:
            table[row.group(1)] = set(re.findall(r"`(\w+)`", row.group(2)))
    return table


def test_the_table_lists_every_method_package():
    assert set(_allowed()) == _methods()


def test_a_method_imports_only_the_methods_the_table_allows():
    allowed, graph, methods = _allowed(), _graph(), _methods()
    extra = {(m, d) for m in methods for d in graph.get(m, set()) & methods if d not in allowed[m]}
    assert not extra, f"method imports the table in docs/architecture.md does not allow: {sorted(extra)}"


def test_the_table_names_only_imports_that_exist():
    allowed, graph = _allowed(), _graph()
    stale = {(m, d) for m, deps in allowed.items() for d in deps if d not in graph.get(m, set())}
    assert not stale, f"docs/architecture.md names method imports that are gone: {sorted(stale)}"


# --- cycles between modules ------------------------------------------------------------------

def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(*, typing_only: bool = False) -> dict[str, set[str]]:
    """Module -> the deepfault modules it imports, lazy imports included and imports under
    ``if TYPE_CHECKING:`` left out (they never run) unless ``typing_only``. ``from package import
    name`` is an edge to the sub-module ``package.name`` when there is one, else to the package's
    ``__init__``.
    """
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}

    def resolve(name: str) -> str:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped = set() if typing_only else {
            id(n) for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for stmt in node.body for n in ast.walk(stmt)}
        deps = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in paths else mod for a in node.names]
            else:
                continue
            deps |= {resolve(n) for n in names if n.split(".")[0] == "deepfault"}
        graph[module] = deps - {module, ""}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that import each other, directly or not (Tarjan), of two or more."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


def test_no_cycle_between_modules():
    groups = _strongly_connected(_module_graph())
    assert not groups, f"modules that import each other (directly or through others): {groups}"


def test_the_module_cycle_check_finds_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _strongly_connected(graph) == [{"a", "b", "c"}]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_fuzz_has_no_module_cycle():
    assert not [g for g in _strongly_connected(_module_graph()) if any(".fuzz" in m for m in g)]


def _fuzz_only(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if d.startswith("deepfault.fuzz.")}
            for m, deps in graph.items() if m.startswith("deepfault.fuzz.")}


def test_fuzz_has_no_module_cycle_even_through_type_only_imports():
    """Inside ``deepfault/fuzz/`` an import under ``if TYPE_CHECKING:`` counts too: a type that
    names a module above its user is the same tangle as a run-time import of it (issue 40)."""
    groups = _strongly_connected(_fuzz_only(_module_graph(typing_only=True)))
    assert not groups, f"fuzz modules that import each other, type-only imports counted: {groups}"


def test_type_only_imports_are_counted_when_asked():
    with_types, without = _module_graph(typing_only=True), _module_graph()
    assert all(without[m] <= with_types[m] for m in without)  # every run-time edge, and more
    assert any(without[m] < with_types[m] for m in without)
