"""Baseline schedulers, created by name through :func:`make_scheduler`.

The registry maps a CLI name to ``module:Class``; modules are imported on demand so a
missing optional dependency of one scheduler never breaks the others.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Mapping

from envs.config import ConfigError
from envs.scheduling import Scheduler

REGISTRY: dict[str, str] = {
    "random": "agents.baselines.simple:RandomScheduler",
    "min": "agents.baselines.simple:MinScheduler",
    "optimus": "agents.baselines.optimus:OptimusScheduler",
    "tiresias": "agents.baselines.tiresias:TiresiasScheduler",
    "pd-maxweight": "agents.baselines.primal_dual:PDMaxWeightScheduler",
    "pd-maxsche": "agents.baselines.primal_dual:PDMaxScheScheduler",
    "pd-preemptive": "agents.baselines.pd_preemptive:PDPreemptiveScheduler",
    "okita": "agents.baselines.okita:OkitaScheduler",
    "sjf": "agents.baselines.sjf:SJFScheduler",
}


#: baselines that read the true task durations (the duration oracle, ``envs/durations.py``):
#: informed by what no online scheduler observes, so they are compared apart ("oracle baselines")
ORACLE_BASELINES = frozenset({"okita", "pd-maxweight", "pd-maxsche", "pd-preemptive", "sjf"})


def uses_oracle(name: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether baseline ``name`` with ``options`` reads the true durations or progress functions
    (the :data:`ORACLE_BASELINES`, or Optimus fitted on true progress samples, ``oracle=true``)."""
    return name in ORACLE_BASELINES or bool((options or {}).get("oracle", False))


def available_schedulers() -> list[str]:
    """Names of the baseline schedulers whose module is present."""
    names = []
    for name, target in REGISTRY.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(module) is not None:
            names.append(name)
    return names


def make_scheduler(name: str, **options: Any) -> Scheduler:
    """Instantiate a baseline by its CLI name; unknown names list the valid ones."""
    if name not in REGISTRY or name not in available_schedulers():
        raise ConfigError(f"unknown scheduler {name!r}; valid: {', '.join(available_schedulers())}")
    module, cls = REGISTRY[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)(**options)
    except TypeError as exc:
        raise ConfigError(f"scheduler {name!r}: bad option(s) {options}: {exc}") from None
