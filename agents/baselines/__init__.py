"""Baseline schedulers, created by name through :func:`make_scheduler`.

The registry maps a CLI name to ``module:Class``; modules are imported on demand so a
missing optional dependency of one scheduler never breaks the others.

Options are typed by the scheduler's constructor (:func:`option_types`): an unknown option, a
boolean other than true/false/1/0 (case-insensitive; :func:`parse_bool`), a number that is not
finite or beyond :data:`MAX_OPTION_NUMBER` is refused with one line naming it; the constructors
check their own ranges.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import types
import typing
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


#: the largest magnitude a numeric scheduler option may have (larger is a typo, never a setting)
MAX_OPTION_NUMBER = 10**9
#: the texts a boolean option accepts (case-insensitive)
BOOL_TEXTS = {"true": True, "1": True, "false": False, "0": False}


def _scheduler_class(name: str) -> type:
    module, cls = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)


def option_types(name: str) -> dict[str, Any]:
    """Option -> type hint of baseline ``name``: its constructor's keyword parameters (those a
    ``**kwargs`` passes on to a base class's too) and the start floor's options."""
    from .start_floor import FLOOR_FACTOR_OPTION, FLOOR_OPTION, StartFloorScheduler

    out: dict[str, Any] = {}
    for klass in _scheduler_class(name).__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        hints = typing.get_type_hints(init)
        for p in params:
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                out.setdefault(p.name, hints.get(p.name, Any))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break
    floor = typing.get_type_hints(StartFloorScheduler.__init__)
    out[FLOOR_OPTION], out[FLOOR_FACTOR_OPTION] = floor["source"], floor["factor"]
    return out


def accepts(hint: Any, kind: type) -> bool:
    """Whether the type hint ``hint`` (a type or a union of types) admits ``kind``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(accepts(h, kind) for h in typing.get_args(hint))
    return hint is kind


def parse_bool(value: Any) -> bool | None:
    """``True``/``False`` for a boolean, 0/1 or a text of :data:`BOOL_TEXTS` (quotes allowed); None otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            text = text[1:-1]
        return BOOL_TEXTS.get(text.lower())
    return None


def typed_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` of baseline ``name`` checked against :func:`option_types`: unknown ones refused,
    booleans made ``bool`` (:func:`parse_bool`), numbers finite and within :data:`MAX_OPTION_NUMBER`;
    ConfigError (one line) otherwise. Other values go to the constructor as they are."""
    hints = option_types(name)
    unknown = sorted(set(options) - set(hints))
    if unknown:
        raise ConfigError(f"scheduler {name!r}: unknown option(s) {', '.join(unknown)}; valid: {', '.join(hints)}")
    out = dict(options)
    for key, value in options.items():
        hint = hints[key]
        if accepts(hint, bool):
            flag = parse_bool(value)
            if flag is None:
                raise ConfigError(f"scheduler {name!r}: option {key} must be true or false (or 1/0), got {value!r}")
            out[key] = flag
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            if not (math.isfinite(value) and abs(value) <= MAX_OPTION_NUMBER):
                raise ConfigError(f"scheduler {name!r}: option {key} must be a finite number of magnitude at most "
                                  f"{MAX_OPTION_NUMBER:.0e}, got {value!r}")
    return out


def make_scheduler(name: str, **options: Any) -> Scheduler:
    """Instantiate a baseline by its CLI name; unknown names list the valid ones.

    The options ``floor`` (``scenario`` or ``online``) and ``floor_factor`` put any baseline
    behind the start floor (:class:`agents.baselines.start_floor.StartFloorScheduler`); the
    others go to the scheduler's constructor.
    """
    if name not in REGISTRY or name not in available_schedulers():
        raise ConfigError(f"unknown scheduler {name!r}; valid: {', '.join(available_schedulers())}")
    from .start_floor import FLOOR_FACTOR_OPTION, FLOOR_OPTION, StartFloorScheduler

    options = typed_options(name, options)
    own = {k: v for k, v in options.items() if k not in (FLOOR_OPTION, FLOOR_FACTOR_OPTION)}
    if FLOOR_FACTOR_OPTION in options and FLOOR_OPTION not in options:
        raise ConfigError(f"scheduler {name!r}: {FLOOR_FACTOR_OPTION} needs {FLOOR_OPTION}=scenario|online")
    try:
        scheduler = _scheduler_class(name)(**own)
    except TypeError as exc:
        raise ConfigError(f"scheduler {name!r}: bad option(s) {own}: {exc}") from None
    if FLOOR_OPTION not in options:
        return scheduler
    return StartFloorScheduler(scheduler, options[FLOOR_OPTION], options.get(FLOOR_FACTOR_OPTION))
