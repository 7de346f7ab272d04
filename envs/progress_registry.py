"""Registry of progress-function kinds: ``task_types[i].progress.kind`` -> builder and parameters.

The one owner of the progress defaults and of the kinds and trace modes a scenario may name.
It imports nothing from ``envs``, so :mod:`envs.config` validates specs with it and
:func:`envs.progress.build_progress_functions` builds functions with it without import cycles.

A kind names its builder as ``"module:attribute"`` (imported when a scenario's functions are
built, like the baseline registry in ``agents/baselines/__init__.py``); the builder is called
as ``builder(task_type, cfg)`` and returns a :class:`envs.progress.ProgressFunction`.
Its parameters are declared as :class:`Param` and checked by :mod:`envs.config` (missing
optional values get their default). To add a functional form, write one class with ``delta``
(and optionally ``sqrt_form`` / ``power_form``, see :mod:`envs.progress`) and a
``from_task`` classmethod, and register it here with one :func:`register` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: synthetic ``tanh`` task: ``tanh(g / TANH_SCALE) * sqrt(TANH_OFFSET - p)``
TANH_SCALE = 16.0
TANH_OFFSET = 1.2

#: how a test-bed parameter table becomes progress functions (``trace.mode``; the first is the
#: default); see :mod:`envs.trace_models`
TRACE_MODES = ("powerlaw", "legacy", "constant_rate")

_REQUIRED = object()


@dataclass(frozen=True)
class Param:
    """One parameter of a progress spec: ``int``/``float`` (>= ``lo``) or ``str``."""

    type: str
    default: Any = _REQUIRED
    lo: float | None = None
    what: str = ""  # for ``str``: what the value must be, e.g. "must name a measured task"

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


@dataclass(frozen=True)
class ProgressKind:
    """A registered kind: where its builder lives, its parameters, whether it needs a GPU."""

    builder: str  # "module:attribute[.attribute]", called as builder(task_type, cfg)
    params: Mapping[str, Param] = field(default_factory=dict)
    needs_gpu: bool = False  # gains nothing without a GPU: min_req GPU must be >= 1

    def load(self) -> Callable[..., Any]:
        """The builder callable (imports its module)."""
        module, _, attr = self.builder.partition(":")
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj


PROGRESS_KINDS: dict[str, ProgressKind] = {}


def register(kind: str, spec: ProgressKind) -> None:
    """Register (or replace) a progress kind."""
    PROGRESS_KINDS[kind] = spec


register("constant", ProgressKind("envs.progress:ConstantProgress.from_task", {"steps": Param("int", lo=1)}))
register(
    "tanh",
    ProgressKind(
        "envs.progress:TanhProgress.from_task",
        {"scale": Param("float", TANH_SCALE, lo=1e-9), "offset": Param("float", TANH_OFFSET, lo=1.0 + 1e-9)},
        needs_gpu=True,
    ),
)
register(
    "trace",
    ProgressKind(
        "envs.trace_models:trace_progress", {"task": Param("str", what="must name a measured task (e.g. mnist)")}
    ),
)
