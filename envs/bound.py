"""The ``bound``: a per-workload lower bound on mean JCT that no scheduler can beat.

Each task is credited with its fastest possible duration (best allocation on the best
cluster it can reach, no waiting, no contention); the bound is the mean over tasks.
"""

from __future__ import annotations

import numpy as np

from .core import Simulator


def fastest_durations(sim: Simulator) -> np.ndarray:
    """Per task of the episode: fewest real steps it could possibly take (its JCT floor)."""
    per_cluster = sim.fastest[sim.task_type]  # (T, N), -1 where the type cannot run
    reachable = sim.eligible & (per_cluster > 0)
    big = np.iinfo(np.int64).max
    return np.where(reachable, per_cluster, big).min(axis=1)


def bound_mean_jct(sim: Simulator) -> float:
    """Mean over the episode's tasks of :func:`fastest_durations` (the ``bound`` row)."""
    return float(fastest_durations(sim).mean())
