"""Any baseline behind the start floor a learned scheduler can be given.

The start floor (:mod:`envs.durations`) holds a pending task back from a cluster while, started
there at the cluster's free resources (``alloc_high = min(free, max_alloc)``), it would take more
than ``factor`` times its fastest duration on that cluster. The policy gets it through the
observation's ``feasible``; a baseline gets it through :class:`StartFloorScheduler`, which hides the held-back
pending slots from the wrapped scheduler for the length of one decision, so the comparison of a
floored policy with the baselines is like for like.

Sources (:data:`agents.baselines.online_floor.START_FLOORS`):

``scenario``
    the noise-free durations of the progress functions (:func:`envs.durations.start_gate`):
    the wrapped baseline becomes oracle-informed (:func:`agents.baselines.uses_oracle`);
``online``
    durations estimated in the episode by Optimus's speed model
    (:class:`~agents.baselines.online_floor.OnlineStartFloor`), which reads no oracle.

The factor is the scenario's ``max_start_slowdown`` unless ``factor`` is given; with a factor of
0 nothing is held back. Only the start floor is applied: a task whose minimum does not fit the
free resources stays visible, so a preemptive baseline can still make room for it.

From the command line the start floor is a scheduler option: ``optimus:floor=online`` or
``optimus:preemptive=false,floor=scenario,floor_factor=3`` (:func:`agents.baselines.make_scheduler`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .online_floor import OnlineStartFloor, check_start_floor
from envs.config import ConfigError
from envs.core import Simulator
from envs.durations import start_gate
from envs.scheduling import Decision, Scheduler

#: the scheduler options :func:`agents.baselines.make_scheduler` reads for the wrapper
FLOOR_OPTION, FLOOR_FACTOR_OPTION = "floor", "floor_factor"

class StartFloorScheduler:
    """``inner`` deciding on the pending tasks the start floor offers (module doc)."""

    def __init__(self, inner: Scheduler, source: str, factor: float | None = None) -> None:
        try:
            self.source = check_start_floor(source)
        except ConfigError as exc:
            raise ConfigError(f"{inner.name}: {exc}") from None
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 0):
            raise ConfigError(f"{inner.name}: {FLOOR_FACTOR_OPTION} must be a number >= 0, got {factor!r}")
        self.inner = inner
        self.name = inner.name
        self.factor = None if factor is None else float(factor)
        self.held = 0  # pending slots held back so far in this episode
        self._online: OnlineStartFloor | None = None
        self._gate: np.ndarray | None = None  # scenario source: (N, C1, G1, K + 1) held back by the start floor

    @property
    def preemptive(self) -> Any:
        """The wrapped scheduler's ``preemptive`` flag (None when it has none)."""
        return getattr(self.inner, "preemptive", None)

    def reset(self, sim: Simulator) -> None:
        self.inner.reset(sim)
        factor = float(sim.cfg.max_start_slowdown) if self.factor is None else self.factor
        self.held = 0
        self._online, self._gate = None, None
        if factor <= 0:
            return
        if self.source == "online":
            self._online = OnlineStartFloor(factor)
            self._online.reset(sim)
        else:  # held back by the start floor alone: feasible without it, not with it
            self._gate = start_gate(sim.cfg, sim.functions, 0.0) & ~start_gate(sim.cfg, sim.functions, factor)

    def held_slots(self, sim: Simulator) -> np.ndarray:
        """``(N, P)`` bool: the pending slots the start floor holds back now."""
        pending = sim.pending
        visible = pending >= 0
        if self._online is not None:
            return visible & ~self._online.mask(sim, visible)
        if self._gate is None:
            return np.zeros_like(visible)
        high = np.minimum(sim.free, sim.max_alloc)  # (N, 2)
        slow = self._gate[np.arange(sim.num_clusters), high[:, 0], high[:, 1]]  # (N, K + 1)
        types = np.where(visible, sim.task_type[np.maximum(pending, 0)], slow.shape[1] - 1)
        return np.take_along_axis(slow, types, axis=1) & visible

    def decide(self, sim: Simulator) -> Decision:
        held = self.held_slots(sim)
        if not held.any():
            return self.inner.decide(sim)
        self.held += int(held.sum())
        pending = sim.pending
        saved = pending.copy()
        pending[held] = -1
        try:
            return self.inner.decide(sim)
        finally:
            pending[...] = saved
