"""``random`` and ``min``: the trivial baselines of the TapFinger reference code.

Both know only what a real scheduler sees: pending sets, free resources and minimum
requirements. Random choices come from the simulator's seeded ``tiebreak`` stream, so the
same seed gives the same decisions.

Default behaviour fixes the reference code's weaknesses: an agent only picks a task
that fits, a task already taken this round is never picked again, and ``random`` never picks
the void allocation. ``faithful=True`` reproduces the reference code instead: uniform slot
choice whether the task fits or not, conflicts lost by the higher cluster index, and (random
only) the void allocation among the uniform choices.
"""

from __future__ import annotations

import numpy as np

from envs.core import Simulator
from envs.scheduling import Decision


class _RandomSlotScheduler:
    name = "base"
    claims_on_void = False  # faithful mode: does a void choice still claim the task?

    def __init__(self, faithful: bool = False) -> None:
        self.faithful = bool(faithful)
        self.rng: np.random.Generator | None = None

    def reset(self, sim: Simulator) -> None:
        self.rng = sim.rng_tiebreak

    def _allocation(self, sim: Simulator, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int] | None:
        raise NotImplementedError

    def decide(self, sim: Simulator) -> Decision:
        rng = self.rng
        taken: set[int] = set()
        out = Decision()
        for i in range(sim.num_clusters):
            if sim.single and sim.placed_this_step[i]:
                continue
            tasks = sim.pending_tasks(i)
            hi = sim.alloc_upper(i)
            if not self.faithful:
                mins = sim.min_req[sim.task_type[tasks]]
                ok = np.all(mins <= hi, axis=1) & ~np.isin(tasks, list(taken))
                tasks = tasks[ok]
            if tasks.size == 0:
                continue
            task = int(tasks[rng.integers(tasks.size)])
            if task in taken:  # faithful mode: the lower cluster index already won it
                sim.conflicts += 1
                continue
            lo = sim.min_req[sim.task_type[task]]
            alloc = self._allocation(sim, lo, hi)
            if alloc is not None or (self.faithful and self.claims_on_void):
                taken.add(task)
            if alloc is None:
                sim.void += 1
                continue
            out.placements.append((i, task, alloc[0], alloc[1]))
        return out


class RandomScheduler(_RandomSlotScheduler):
    """Random task, uniformly random valid allocation."""

    name = "random"
    claims_on_void = True

    def _allocation(self, sim: Simulator, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int] | None:
        if np.any(lo > hi):
            return None
        n_c, n_g = int(hi[0] - lo[0] + 1), int(hi[1] - lo[1] + 1)
        k = int(self.rng.integers(n_c * n_g + (1 if self.faithful else 0)))
        if k == n_c * n_g:  # faithful: the void action is one of the choices
            return None
        return int(lo[0] + k // n_g), int(lo[1] + k % n_g)


class MinScheduler(_RandomSlotScheduler):
    """Random task, exactly its minimum requirement."""

    name = "min"

    def _allocation(self, sim: Simulator, lo: np.ndarray, hi: np.ndarray) -> tuple[int, int] | None:
        if np.any(lo > hi):
            return None
        return int(lo[0]), int(lo[1])
