"""The package's shape, read from its source with :mod:`ast` (nothing of k8sddp is imported):

- the module import graph of ``k8sddp/`` has no cycle;
- no module is much over the ~500-line budget;
- the runtime (``k8sddp/runtime/``) imports only the stdlib, torch, itself and the contract modules.

Every ``import`` statement counts, wherever it stands: at module level, inside a function (a
dependency all the same, only a later one) and under ``if TYPE_CHECKING:`` (the type checker
follows it). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg`` (whose ``__init__`` defines or re-exports ``name``). A module's edges to its own parent
packages are left out: Python has run those ``__init__`` files before the module's first line.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "k8sddp"

#: Design rule "modules under ~500 lines": the test allows a little over, and names the file.
MAX_LINES = 520

#: What k8sddp/runtime/ may import from k8sddp outside itself: the contract every part shares
#: (CONTRACT.md), kept in stdlib-only modules at the top of the package: the guard variables'
#: names and defaults (guardvars), the user-facing errors behind exit 2 (errors.UsageError), the
#: bounds that runtime, render and validate share (bounds: "one source per bound") and the
#: version stamped into run records (_version). The process exit codes (runtime/exitcodes.py)
#: live inside the runtime. The diagnosis the launcher can run is passed in by ``k8sddp launch``.
RUNTIME_ALLOWED = frozenset({"k8sddp.guardvars", "k8sddp.errors", "k8sddp.bounds", "k8sddp._version"})
#: Third-party roots the runtime may import besides the stdlib (torch; numpy is what torch's own
#: object collectives would need, and the runtime avoids it: pyproject.toml, extra "train").
RUNTIME_THIRD_PARTY = frozenset({"torch"})


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int]]:
    """Every ``(absolute dotted name, line)`` that module ``name`` imports, anywhere in it.
    ``from x import y`` gives ``x.y`` where that is a k8sddp module, else ``x``."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if _is_package(name) else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level > 1:
                    parts = parts[: -(node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in MODULES else base, node.lineno))
    return out


def _resolve(target: str) -> str | None:
    """The k8sddp module ``target`` names (its longest prefix that is one), or ``None``."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _graph() -> dict[str, dict[str, int]]:
    """Each module's k8sddp imports, each with the first line that makes it; a module's own
    parent packages are left out (Python runs their ``__init__`` before the module)."""
    graph: dict[str, dict[str, int]] = {}
    for name in MODULES:
        edges: dict[str, int] = {}
        for target, line in sorted(_imports(name), key=lambda t: t[1]):
            resolved = _resolve(target) if target.split(".")[0] == "k8sddp" else None
            if resolved is None or resolved == name or name.startswith(resolved + "."):
                continue
            edges.setdefault(resolved, line)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as one cycle
    through it, starting at its first module in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_one_cycle(graph, comp) for comp in components]


def _one_cycle(graph: dict[str, dict[str, int]], comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first back to it)."""
    start = min(comp)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in comp:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return sorted(comp)  # (not reached: a component has a cycle through every member)


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} -> {b} ({MODULES[a].relative_to(REPO)}:{graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return "\n    ".join(steps)


def test_graph_resolution_sees_relative_function_level_and_package_imports() -> None:
    # (the checks below mean something only if the graph holds these known edges)
    graph = _graph()
    assert "k8sddp.runtime.worker" in graph["k8sddp.commands.train"]  # inside a function, relative
    assert "k8sddp.validate.engine" in graph["k8sddp.validate"]  # a package's __init__ re-export
    assert "k8sddp.guardvars" in graph["k8sddp.runtime.worker"]  # `from .. import guardvars as gv`
    assert "k8sddp.runtime" not in graph["k8sddp.runtime.worker"]  # its own parent package


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles = _cycles(graph)
    assert not cycles, "import cycles in k8sddp/ (move what both need into a lower module):\n  " + "\n  ".join(
        _describe(graph, c) for c in cycles
    )


def test_modules_stay_small() -> None:
    too_long = {
        str(path.relative_to(REPO)): n
        for path in MODULES.values()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not too_long, f"modules over {MAX_LINES} lines (split along a seam): {too_long}"


def test_runtime_imports_only_stdlib_torch_and_the_contract() -> None:
    stdlib = set(sys.stdlib_module_names)
    bad: list[str] = []
    for name, path in MODULES.items():
        if not (name == "k8sddp.runtime" or name.startswith("k8sddp.runtime.")):
            continue
        for target, line in _imports(name):
            root = target.split(".")[0]
            where = f"{path.relative_to(REPO)}:{line}: {target}"
            if root == "k8sddp":
                resolved = _resolve(target)
                inside = resolved is not None and (resolved == "k8sddp.runtime" or resolved.startswith("k8sddp.runtime."))
                if not inside and resolved not in RUNTIME_ALLOWED and resolved != "k8sddp":
                    bad.append(where)
            elif root and root not in stdlib and root not in RUNTIME_THIRD_PARTY:
                bad.append(where)
    assert not bad, "k8sddp/runtime/ imports beyond the stdlib, torch and the contract:\n  " + "\n  ".join(bad)
