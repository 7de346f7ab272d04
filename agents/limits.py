"""Ceilings of the command lines' integer flags (``train.py``, ``evaluate.py``).

A value beyond its ceiling is a typo or a misunderstanding, never a plan: it is refused with one
line before anything is built (``--steps 100000000000000000000`` would otherwise start training).
Pure Python: ``train.py`` checks its flags before torch is imported. The run seed's ceiling is
:data:`agents.training.config.MAX_SEED` (what every RNG the run seeds accepts).
"""

from __future__ import annotations

#: env steps of one run (``--steps``, ``--max-steps``): decades at thousands of env steps per second
MAX_STEPS = 10**12
#: training envs (``--envs``): each is a simulator with its observation and buffer rows
MAX_ENVS = 1_000_000
#: workload seeds of one evaluation (``--seeds``) and episodes run in lockstep (``--policy-batch``)
MAX_EPISODES = 100_000
#: parallel worker processes (``--workers``)
MAX_WORKERS = 1_024
#: the largest workload seed (``--seed-offset`` + ``--seeds`` - 1): training workloads are drawn below 2**62
MAX_WORKLOAD_SEED = 2**62 - 1


def check_range(flag: str, value: int | None, low: int, high: int, why: str = "") -> str | None:
    """The one-line error when ``value`` (None: the flag was not given) lies outside ``[low, high]``,
    else None; ``why`` says what the ceiling protects."""
    if value is None or low <= value <= high:
        return None
    if value < low:
        return f"{flag} must be >= {low}, got {value}"
    return f"{flag} must be <= {high}{f' ({why})' if why else ''}, got {value}"
