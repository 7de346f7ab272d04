"""torch-geometric's generated ``propagate`` modules, written once into one reused cache directory.

torch-geometric 2.8 renders a jinja template into a Python module for every ``MessagePassing``
class it meets (``torch_geometric.template.module_from_template``) and writes it with
``tempfile.NamedTemporaryFile(delete=False)``: a new, randomly named file in the temporary
directory per class and process, never removed, so every process killed by SIGKILL leaked one.
Its supported reuse path is the module name: a module already in ``sys.modules`` under the
generated name is returned as it is. :func:`install` puts :func:`module_from_cache` where
``torch_geometric.nn.conv.message_passing`` looks that function up: the same rendering, written
once to ``<cache>/<module name>-<hash of its text>.py`` (atomically; the text is checked when the
file is reused) and imported from there, so every process reuses one file per class and
torch-geometric version. ``<cache>`` is :func:`cache_dir`, inside torch-geometric's own cache
directory (``$PYG_HOME``, default ``~/.cache/pyg``). Where it cannot be written, torch-geometric's
own function runs and the files it wrote are deleted when the process exits.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

#: the directory under torch-geometric's home (``$PYG_HOME``) that holds the generated modules
CACHE_SUBDIR = "generated"


def cache_dir() -> Path:
    """Where the generated modules live: ``<torch_geometric home>/generated``."""
    import torch_geometric

    return Path(torch_geometric.get_home_dir()) / CACHE_SUBDIR


def render(template_path: str, **kwargs: Any) -> str:
    """The module text torch-geometric renders from ``template_path`` (its own jinja settings)."""
    from jinja2 import Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(os.path.dirname(template_path)))
    return env.get_template(os.path.basename(template_path)).render(**kwargs)


def cached_file(module_name: str, text: str, directory: Path | None = None) -> Path:
    """``<directory>/<module_name>-<sha256 of text>.py`` holding ``text``: reused when it holds it
    already, else written atomically (an ``OSError`` when the directory cannot be written)."""
    directory = cache_dir() if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{module_name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.py"
    try:
        if path.read_text() == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def module_from_cache(module_name: str, template_path: str, tmp_dirname: str, **kwargs: Any) -> Any:
    """``torch_geometric.template.module_from_template`` with the module file in :func:`cache_dir`."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    try:
        path = cached_file(module_name, render(template_path, **kwargs))
    except OSError:  # no writable cache: torch-geometric's temporary file, deleted at exit
        from torch_geometric.template import module_from_template

        _remove_at_exit()
        return module_from_template(module_name, template_path, tmp_dirname, **kwargs)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def install() -> None:
    """Make torch-geometric's ``MessagePassing`` classes take their generated modules from the cache."""
    from torch_geometric.nn.conv import message_passing

    message_passing.module_from_template = module_from_cache


@functools.cache
def _remove_at_exit() -> None:
    """Register :func:`_remove_temporary_modules` at exit (once per process)."""
    import atexit

    atexit.register(_remove_temporary_modules)


def _remove_temporary_modules() -> None:
    """Delete the generated module files torch-geometric wrote into the temporary directory."""
    tmp = Path(tempfile.gettempdir()).resolve()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.endswith(("_propagate", "_edge_updater")) and Path(path).parent.resolve() == tmp:
            Path(path).unlink(missing_ok=True)
