"""Package re-exports that import their submodule on first use (PEP 562).

:mod:`agents.policy` and :mod:`agents.training` re-export the public names of their submodules,
but some of those submodules are light (the config dataclasses, the variant registry) and are
imported before torch is, by ``train.py``'s argument parser and by evaluation without a
policy. Importing a package runs its ``__init__`` first, so an ``__init__`` that imported every
submodule would load torch, tianshou and the graph networks for them all; these re-exports load
a submodule only when one of its names is read.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping, Sequence


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package`` that re-export, for every submodule
    named in ``exports`` (relative name -> the names it owns), those names."""
    owner = {name: module for module, names in exports.items() for name in names}
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name not in owner:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(f"{package}.{owner[name]}"), name)
        namespace[name] = value  # later reads find it without this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(owner))

    return __getattr__, __dir__, sorted(owner)
