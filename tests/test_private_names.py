"""No module uses another project module's private (``_``-prefixed) names.

The project's code (the packages ``envs``, ``networks`` and ``agents``, the top-level scripts and
``benchmarks/``) is read with :mod:`ast`, not imported. A use is

* ``from X import _name`` (relative or absolute), and
* ``m._name`` where ``m`` is bound to a project module by ``import X as m``, ``import X`` (then
  ``X._name``) or ``from package import module``,

where ``X`` is a project module other than the importing one. Dunder names (``__version__``) are
allowed, and so is a module reaching its own names. A helper two modules share is public, named for
what it does; tests may still reach private helpers to test them (they are not scanned).

Run as a module from the project root (``python -m tests.test_private_names``) to print the uses, if any.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.test_import_graph import ROOT, import_base, project_modules


def scanned_files(root: Path = ROOT) -> dict[str, Path]:
    """Every file checked: the project modules, the top-level scripts and the benchmarks (by dotted name)."""
    out = project_modules(root)
    for path in sorted([*root.glob("*.py"), *(root / "benchmarks").glob("*.py")]):
        out[".".join(path.relative_to(root).with_suffix("").parts)] = path
    return out


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a chain of attribute accesses on a name (None for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_uses(module: str, path: Path, modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    """``path:line: text`` of every use of another project module's private name in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    aliases: dict[str, str] = {}  # local name -> the project module it is bound to

    def flag(node: ast.AST, owner: str, name: str) -> None:
        if owner in modules and owner != module and is_private(name):
            found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}: {owner}.{name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = import_base(module, path, node)
            for alias in node.names:
                flag(node, base, alias.name)
                if f"{base}.{alias.name}" in modules:  # from package import module
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    aliases[alias.asname] = alias.name
                elif not alias.asname:  # import a.b.c binds a, reached as a.b.c
                    aliases.setdefault(alias.name.split(".")[0], alias.name.split(".")[0])
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and is_private(node.attr)):
            continue
        dotted = _dotted(node.value)
        if dotted is None:
            continue
        head, _, rest = dotted.partition(".")
        if head in aliases:
            flag(node, f"{aliases[head]}.{rest}" if rest else aliases[head], node.attr)
    return found


def all_private_uses(root: Path = ROOT) -> list[str]:
    modules = project_modules(root)
    return [use for module, path in scanned_files(root).items() for use in private_uses(module, path, modules, root)]


def test_no_module_uses_another_modules_private_names():
    uses = all_private_uses()
    assert not uses, "private names used across modules (make the shared ones public):\n" + "\n".join(uses)


def test_the_check_finds_private_imports_and_attributes(tmp_path):
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "__init__.py").write_text("")
    (tmp_path / "envs" / "a.py").write_text("def _hidden():\n    pass\n\n\ndef _own():\n    return _hidden()\n")
    (tmp_path / "envs" / "b.py").write_text(
        "from .a import _hidden, __doc__\n"  # one private name, one dunder (allowed)
        "from envs.a import _own as own\n"
        "import envs.a as mod\n"
        "import envs.a\n"
        "from envs import a\n"
        "x = mod._hidden, envs.a._own, a._hidden, mod.__name__\n"
    )
    (tmp_path / "envs" / "c.py").write_text("from numpy import _globals\nfrom .c import _self\n")  # not ours / own
    uses = all_private_uses(tmp_path)
    assert sorted(uses) == sorted([
        "envs/b.py:1: envs.a._hidden", "envs/b.py:2: envs.a._own", "envs/b.py:6: envs.a._hidden",
        "envs/b.py:6: envs.a._own", "envs/b.py:6: envs.a._hidden",
    ])


if __name__ == "__main__":
    uses = all_private_uses()
    print("\n".join(uses) if uses else "no module uses another module's private names")
    sys.exit(1 if uses else 0)
