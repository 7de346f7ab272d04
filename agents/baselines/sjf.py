"""``sjf``: shortest job first with the true durations (an oracle baseline; paper Fig. 14's rule).

What it knows
    The pending sets, free resources and minimum requirements, plus, as an **oracle input**,
    every task type's noise-free duration at every allocation (``envs/durations.py``, the table
    ``okita`` and the ``pd-*`` schedulers read).

Each decision (non-preemptive: a started task keeps its allocation until it finishes)
    1. The tasks of every cluster's pending set, shortest first: by the task's fastest duration
       over the clusters it can reach (fewest whole steps at the best allocation there), then
       by arrival, then by task id.
    2. In that order, each task starts on one of the clusters whose pending set holds it and
       whose free resources fit its minimum (in ``single`` mode: a cluster that has not started a
       task in this real step), at the allocation within ``[minimum, min(free, per_task_max)]``
       that finishes it in the fewest steps, using the fewest resources among those (the sum of
       its CPU and GPU shares of the cluster's capacity; then fewer GPUs, then fewer CPUs). The
       cluster is the one with the fewest steps, then the largest dominant free share left
       after the start, then the lowest index. A task that fits nowhere waits; later, longer
       tasks may still start (no reservation).

On ``sjf-3`` (1- or 10-step tasks at any allocation) this is the classic rule: short tasks first,
each at its minimum requirement.
"""

from __future__ import annotations

import numpy as np

from envs.core import Simulator
from envs.durations import duration_table
from envs.scheduling import Decision


class SJFScheduler:
    """Shortest (true) duration first, each task at its fastest currently free allocation."""

    name = "sjf"

    def __init__(self) -> None:
        self._order: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = []  # [cluster][type]
        self._fastest = np.zeros((0, 0), dtype=np.int64)

    def reset(self, sim: Simulator) -> None:
        table = duration_table(sim.cfg, sim.functions)
        cap = sim.capacity.astype(np.float64)
        share = table.cpu[None, :] / cap[:, :1] + table.gpu[None, :] / cap[:, 1:]  # (N, A)
        # per (cluster, type): the runnable grid allocations, best first (steps, share, gpu, cpu)
        self._order = []
        for i in range(sim.num_clusters):
            per_type = []
            for k in range(len(table.functions)):
                ok = np.flatnonzero(table.steps[k] >= 0)
                rank = np.lexsort((table.cpu[ok], table.gpu[ok], share[i, ok], table.steps[k, ok]))
                idx = ok[rank]
                per_type.append((table.cpu[idx], table.gpu[idx], table.steps[k, idx]))
            self._order.append(per_type)
        fastest = table.fastest(sim.capacity.tolist()).astype(np.float64)  # (K, N), -1: cannot run
        self._fastest = np.where(fastest < 0, np.inf, fastest)

    def _best(self, i: int, k: int, hi: np.ndarray) -> tuple[int, int, int] | None:
        """Fewest-steps, fewest-resources allocation of type ``k`` within ``hi`` on cluster ``i``."""
        c, g, steps = self._order[i][k]
        fits = np.flatnonzero((c <= hi[0]) & (g <= hi[1]))
        if fits.size == 0:
            return None
        j = fits[0]
        return int(steps[j]), int(c[j]), int(g[j])

    def decide(self, sim: Simulator) -> Decision:
        out = Decision()
        N = sim.num_clusters
        pending = [set(sim.pending_tasks(i).tolist()) for i in range(N)]
        tasks = np.array(sorted(set().union(*pending)), dtype=np.int64)
        if tasks.size == 0:
            return out
        types = sim.task_type[tasks]
        reach = np.where(sim.eligible[tasks], self._fastest[types], np.inf).min(axis=1)
        order = tasks[np.lexsort((tasks, sim.arrival[tasks], reach))]
        free = sim.free.copy()
        blocked = sim.placed_this_step.copy() if sim.single else np.zeros(N, dtype=bool)
        cap = sim.capacity.astype(np.float64)
        for task in order.tolist():
            k = int(sim.task_type[task])
            best: tuple | None = None
            for i in range(N):
                if blocked[i] or task not in pending[i]:
                    continue
                choice = self._best(i, k, np.minimum(free[i], sim.max_alloc))  # None: its minimum does not fit
                if choice is None:
                    continue
                steps, c, g = choice
                left = float(np.min((free[i] - (c, g)) / cap[i]))
                key = (steps, -left, i)
                if best is None or key < best[0]:
                    best = (key, i, c, g)
            if best is None:
                continue
            _, i, c, g = best
            free[i] -= (c, g)
            blocked[i] = sim.single
            out.placements.append((i, task, c, g))
        return out
