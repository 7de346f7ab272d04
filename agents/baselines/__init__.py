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
    (the :data:`ORACLE_BASELINES`, Optimus fitted on true progress samples, ``oracle=true``, or
    any baseline behind the true-duration start floor, ``floor=scenario``)."""
    from .start_floor import FLOOR_OPTION

    options = options or {}
    return name in ORACLE_BASELINES or bool(options.get("oracle", False)) or options.get(FLOOR_OPTION) == "scenario"


def available_schedulers() -> list[str]:
    """Names of the baseline schedulers whose module is present."""
    names = []
    for name, target in REGISTRY.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(module) is not None:
            names.append(name)
    return names


def make_scheduler(name: str, **options: Any) -> Scheduler:
    """Instantiate a baseline by its CLI name; unknown names list the valid ones.

    The options ``floor`` (``scenario`` or ``online``) and ``floor_factor`` put any baseline
    behind the start floor (:class:`agents.baselines.start_floor.StartFloorScheduler`); the
    others go to the scheduler's constructor.
    """
    if name not in REGISTRY or name not in available_schedulers():
        raise ConfigError(f"unknown scheduler {name!r}; valid: {', '.join(available_schedulers())}")
    from .start_floor import FLOOR_FACTOR_OPTION, FLOOR_OPTION, StartFloorScheduler

    own = {k: v for k, v in options.items() if k not in (FLOOR_OPTION, FLOOR_FACTOR_OPTION)}
    if FLOOR_FACTOR_OPTION in options and FLOOR_OPTION not in options:
        raise ConfigError(f"scheduler {name!r}: {FLOOR_FACTOR_OPTION} needs {FLOOR_OPTION}=scenario|online")
    module, cls = REGISTRY[name].split(":")
    try:
        scheduler = getattr(importlib.import_module(module), cls)(**own)
    except TypeError as exc:
        raise ConfigError(f"scheduler {name!r}: bad option(s) {own}: {exc}") from None
    if FLOOR_OPTION not in options:
        return scheduler
    return StartFloorScheduler(scheduler, options[FLOOR_OPTION], options.get(FLOOR_FACTOR_OPTION))
