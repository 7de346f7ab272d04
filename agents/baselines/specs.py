"""The scheduler-with-options syntax shared by ``evaluate.py --schedulers`` and ``benchmarks/baselines.py``.

A scheduler is named by its registry name, optionally followed by constructor options after a
colon: ``optimus:preemptive=false,oracle=true`` -> ``("optimus", {"preemptive": False,
"oracle": True})`` (values parsed as YAML, like every ``key=value`` override, then typed by the
baseline's constructor: :func:`agents.baselines.typed_options`; a boolean takes true/false/1/0 only,
so ``preemptive=maybe`` or ``preemptive=yes`` is refused, never read as true). A list of
schedulers is comma-separated (``min,optimus:oracle=true,random``); a comma-separated item of
the form ``key=value`` without a colon continues the options of the scheduler before it, so
``optimus:preemptive=false,oracle=true,random`` is two schedulers.
"""

from __future__ import annotations

from typing import Any

from envs.config import ConfigError, parse_override


#: option variants that ``--schedulers all`` runs beside every baseline's defaults: the quality
#: target's best non-oracle baseline is taken over Optimus both preemptive and not; on
#: the test-bed scenarios the non-preemptive one is the stronger (testbed-3 7.34 vs 9.39)
ALL_VARIANTS: tuple[str, ...] = ("optimus:preemptive=false",)


def all_schedulers() -> list[str]:
    """What ``--schedulers all`` runs: every available baseline, then the :data:`ALL_VARIANTS`
    whose baseline is available (``name:options`` texts, labelled by that text)."""
    from agents.baselines import available_schedulers

    names = available_schedulers()
    return names + [v for v in ALL_VARIANTS if parse_scheduler_spec(v)[0] in names]


def is_scheduler_spec(token: str) -> bool:
    """``name:opt=value,...`` (a scheduler with options), as opposed to a plain ``key=value`` override."""
    return ":" in token.split("=", 1)[0]


def parse_scheduler_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``optimus:preemptive=false,oracle=true`` -> ``("optimus", {"preemptive": False, "oracle": True})``;
    a baseline's options are typed (:func:`agents.baselines.typed_options`: ConfigError on a bad one)."""
    from agents.baselines import REGISTRY, accepts, option_types, typed_options

    name, _, rest = spec.strip().partition(":")
    name = name.strip()
    hints = option_types(name) if name in REGISTRY else {}
    options: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        try:
            key, value = parse_override(item)
        except ConfigError:
            raise ConfigError(f"scheduler {spec!r}: option {item!r} is not of the form key=value") from None
        # a boolean is read from its text: YAML would also take yes/no/on/off
        options[key] = item.split("=", 1)[1].strip() if accepts(hints.get(key), bool) else value
    if ":" in spec and not options:
        raise ConfigError(f"scheduler {spec!r}: no options after ':' (expected e.g. optimus:oracle=true)")
    return name, typed_options(name, options) if name in REGISTRY else options


def split_scheduler_list(text: str) -> list[str]:
    """``min,optimus:preemptive=false,oracle=true,random`` -> ``["min", "optimus:preemptive=false,oracle=true", "random"]``."""
    out: list[str] = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if "=" in item and not is_scheduler_spec(item):
            if not out or not is_scheduler_spec(out[-1]):
                raise ConfigError(
                    f"--schedulers: option {item!r} follows no scheduler; write options after a colon, "
                    "e.g. optimus:preemptive=false,oracle=true"
                )
            out[-1] = f"{out[-1]},{item}"
        else:
            out.append(item)
    return out
