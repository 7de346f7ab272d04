"""No import cycles among the project's modules (``envs``, ``networks``, ``agents``).

The graph is built from the source, not by importing it: every ``import`` and ``from ... import``
statement of a module is an edge, wherever it stands (top level, inside a function, under
``if TYPE_CHECKING:``), so a cycle hidden by a lazy import inside a function is found too.
``from package import name`` points at the submodule ``package.name`` when there is one, else at
``package`` itself (its ``__init__``). A cycle is a strongly connected component of two or more
modules.

Run as a script (``python tests/test_import_graph.py``) to print the cycles, if any.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "networks", "agents")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> source file of every module of :data:`PACKAGES` (a package is its ``__init__``)."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def import_base(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` statement imports from."""
    if not node.level:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a project module (None: not the project's)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules its import statements name, self-references left out."""
    modules = project_modules(root)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets: set[str | None] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(_known(alias.name, modules) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = import_base(module, path, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in modules else _known(base, modules))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two or more modules (Tarjan), each sorted, in name order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    """One line per cycle: its modules and the edges between them."""
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return f"{', '.join(component)}: " + "; ".join(edges)


def test_graph_sees_the_project():
    graph = import_graph()
    assert {"envs", "networks", "agents"} <= set(graph)
    # the builder resolves relative imports and imports inside functions
    assert "envs.config" in graph["envs.gym_env"]
    assert "agents.training.budget" in graph["agents.training.prepare"]  # inside check_environment


def test_cycle_finder_finds_a_lazy_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles among project modules:\n" + "\n".join(describe(c, graph) for c in found)


#: the layers, lowest first: a module may import its own layer and the ones below, never one above.
#: ``agents``'s own top-level modules (``agents.output_dirs``, ``agents.json_files``...) are
#: shared helpers, a layer just above ``envs``.
LAYERS = ("envs", "networks", "agents.baselines", "agents.policy", "agents.training", "agents.evaluation")

def layer_of(module: str) -> float:
    """The index of ``module``'s layer: its package's place in :data:`LAYERS` (helpers: between
    ``envs`` and ``networks``, as 0.5)."""
    for i, prefix in sorted(enumerate(LAYERS), key=lambda p: -len(p[1])):
        if module == prefix or module.startswith(prefix + "."):
            return i
    if module == "agents" or module.startswith("agents."):
        return 0.5
    raise ValueError(f"{module} is in no layer")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a module ``b`` in a layer above ``a``'s (the ``agents``
    package's own ``__init__`` re-exports nothing and is left out)."""
    return [f"{a} -> {b}" for a in sorted(graph) for b in sorted(graph[a])
            if a != "agents" and layer_of(b) > layer_of(a)]


def test_the_layer_test_finds_an_upward_import():
    assert upward_imports({"agents.policy.x": {"agents.training.y", "envs.z"}, "envs.z": set()}) == [
        "agents.policy.x -> agents.training.y"]
    assert upward_imports({"agents.evaluation.a": {"agents.policy.b", "agents.output_dirs"}}) == []
    assert upward_imports({"agents.output_dirs": {"networks.gemm"}}) == ["agents.output_dirs -> networks.gemm"]


def test_layers_run_one_way():
    """envs <- networks <- agents/baselines <- agents/policy <- agents/training <- agents/evaluation."""
    found = upward_imports(import_graph())
    assert not found, "imports that run upward through the layers:\n" + "\n".join(found)


#: modules imported before torch is (train.py's argument parser, evaluation without a policy)
LIGHT = ("agents.policy", "agents.policy.variants", "agents.training", "agents.training.config",
         "agents.evaluation.runner", "agents.output_dirs")


def test_light_modules_and_the_train_parser_import_no_torch():
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import importlib, train\n"
            f"for name in {LIGHT!r}: importlib.import_module(name)\n"
            "train.check_arguments(train.build_parser().parse_args(['--config', 'sjf-3']))\n"
            "heavy = sorted(m for m in ('torch', 'tianshou', 'torch_geometric') if m in sys.modules)\n"
            "assert not heavy, heavy")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


#: packages whose ``__init__`` is their module map only (a docstring): callers import every name
#: from the module that owns it
MAP_ONLY = ("agents", "agents.policy", "agents.training", "networks")


def test_packages_that_are_module_maps_reexport_nothing():
    modules = project_modules()
    for package in MAP_ONLY:
        body = ast.parse(modules[package].read_text()).body
        assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), package
        assert body[1:] == [], f"{package}/__init__.py holds more than its docstring"


if __name__ == "__main__":
    g = import_graph()
    cs = cycles(g)
    print(f"{len(g)} modules, {sum(len(t) for t in g.values())} import edges, {len(cs)} cycle(s)")
    for c in cs:
        print(describe(c, g))
    sys.exit(1 if cs else 0)
