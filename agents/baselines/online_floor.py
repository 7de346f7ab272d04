"""An online start floor: the scenario's ``max_start_slowdown`` without the duration oracle.

The scenario's start floor (:mod:`envs.durations`) holds a pending task back from an agent
when, started with everything free there (``alloc_high``), it would take more than ``f`` times
its fastest duration on that cluster. It reads the noise-free durations of the progress
functions, which makes a floored policy oracle-informed. :class:`OnlineStartFloor` applies the
same rule to durations *estimated in the episode*: the speed model of the non-oracle
:class:`~agents.baselines.optimus.OptimusScheduler` (``1/f(c, g) = [1/g, 1, g/c, g, c]·θ`` per task
type, fitted by NNLS on the per-step progress gains observed so far, with its prior), which
never calls the progress functions. The estimated duration of a type at ``(c, g)`` is the
model's ``1/f(c, g)`` (steps per unit of progress).

A type is held back only once its model rests on observations at ``min_points`` (default 2)
distinct allocations, so that the rule acts on observed contrasts, not on the prior alone; until
then no start floor applies to it. The agents' observation is built without the start floor
(``ObservationBuilder(start_floor=0)``) and :meth:`OnlineStartFloor.mask` removes the held-back
slots from its ``feasible``.
"""

from __future__ import annotations

import numpy as np

from agents.baselines.optimus import OptimusScheduler
from envs.config import ConfigError
from envs.core import Simulator

#: start-floor sources of a learned scheduler: the scenario's start floor as the env builds it (the
#: duration oracle when ``max_start_slowdown > 0``), or :class:`OnlineStartFloor`
START_FLOORS = ("scenario", "online")


def check_start_floor(name: str) -> str:
    """``name`` if it is one of :data:`START_FLOORS`, else a :class:`ConfigError`."""
    if name not in START_FLOORS:
        raise ConfigError(f"start floor must be one of {list(START_FLOORS)}, got {name!r}")
    return name


class OnlineStartFloor:
    """Holds back pending tasks whose estimated start at ``alloc_high`` is too slow (module doc)."""

    def __init__(self, factor: float, min_points: int = 2) -> None:
        if not factor > 0:
            raise ConfigError(f"online start floor: factor must be > 0, got {factor!r}")
        if int(min_points) < 1:
            raise ConfigError(f"online start floor: min_points must be >= 1, got {min_points!r}")
        self.factor = float(factor)
        self.min_points = int(min_points)
        self.model = OptimusScheduler(preemptive=False)
        self.held = 0  # slots held back so far in this episode

    def reset(self, sim: Simulator) -> None:
        """Forget every estimate: a new episode starts from the model's prior."""
        self.model.reset(sim)
        c1, g1 = (int(x) + 1 for x in sim.max_alloc)
        c, g = np.meshgrid(np.arange(c1), np.arange(g1), indexing="ij")
        mins = sim.min_req
        runnable = (c[None] >= mins[:, 0, None, None]) & (g[None] >= mins[:, 1, None, None])  # (K, C1, G1)
        top = np.minimum(sim.capacity, sim.max_alloc)  # (N, 2)
        within = (c[None] <= top[:, 0, None, None]) & (g[None] <= top[:, 1, None, None])  # (N, C1, G1)
        self._region = runnable[None] & within[:, None]  # (N, K, C1, G1): where the fastest is sought
        self.held = 0

    def slow_types(self, sim: Simulator) -> np.ndarray:
        """``(N, K)``: types held back from each cluster's agent now (after observing the last step)."""
        model = self.model
        model.observe(sim)
        fitted = np.array([model.obs.num_points(k) >= self.min_points for k in range(sim.num_types)])
        if not fitted.any():
            return np.zeros((sim.num_clusters, sim.num_types), dtype=bool)
        steps = model.inv  # (K, C1, G1): estimated steps per unit of progress at every allocation
        best = np.where(self._region, steps[None], np.inf).min(axis=(2, 3))  # (N, K) fastest per cluster
        high = np.minimum(sim.free, sim.max_alloc)  # (N, 2)
        at_high = steps[:, high[:, 0], high[:, 1]].T  # (N, K)
        fits = np.all(high[:, None, :] >= sim.min_req[None], axis=2)  # (N, K)
        return fitted[None] & fits & np.isfinite(best) & (at_high > self.factor * best)

    def mask(self, sim: Simulator, feasible: np.ndarray) -> np.ndarray:
        """``feasible (N, P)`` without the pending slots of held-back types (same dtype)."""
        slow = self.slow_types(sim)
        if not slow.any():
            return feasible
        pending = sim.pending  # (N, P) task ids, -1 empty
        types = sim.task_type[np.maximum(pending, 0)]
        held = (pending >= 0) & np.take_along_axis(slow, types, axis=1) & feasible.astype(bool)
        self.held += int(held.sum())
        return np.where(held, 0, feasible).astype(feasible.dtype, copy=False)
