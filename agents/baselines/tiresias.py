"""``tiresias``: discretised two-dimensional least-attained-service (Gu et al., NSDI 2019; a TapFinger baseline).

What it knows
    No task durations and no progress: only pending sets, free resources, minimum
    requirements, start times, allocations and each task's attained GPU service
    (``sim.attained_gpu``, GPUs x real steps), which a real cluster manager measures. It never
    reads ``sim.progress`` nor the progress functions.

Each decision, per cluster (clusters with the largest free GPU share first, then CPU share,
then lowest index; a pending task is claimed by the first cluster that starts it)
    * The jobs are the cluster's running tasks (paused ones included) plus the pending tasks
      not yet claimed; a pending task has attained service 0 and start time "now".
    * Two-level queue: a job is in the high queue when its attained service is at most the
      median over the cluster's jobs, else in the low queue; inside a queue jobs are served
      FIFO by start time (then task id).
    * Default (``elastic=False``): walking that order, each job that fits gets its minimum
      requirement (CPUs and GPUs, all or nothing; jobs that do not fit are skipped). This
      matches the reference's stored results (about one GPU per running task).
      ``elastic=True`` is the reference code's variant: GPUs are handed out one at a time to
      the first job of the order recomputed with ``attained + GPUs granted so far`` (a job
      gets its minimum at its first grant; full jobs drop out) until no GPU or taker is left.
    * The spare CPUs are split evenly among the jobs that got resources (one core at a time
      in priority order for the remainder, each capped at the per-task maximum). Unlike the
      reference, each such job first holds its minimum CPUs, so none is starved below it.
    * Running tasks that get nothing are paused at (0, 0); pending tasks that get nothing
      stay pending. In ``single`` mode a cluster starts at most one task per real step.

``preemptive=True`` (default) recomputes every running task's allocation each real step (a
changed allocation pays the scenario's switching overhead in the simulator). The median threshold
moves with the jobs' service: a running job's service grows past it while a paused one's stays, so
jobs of alike service trade the resources step by step, and each resume from a pause pays the
overhead (the hand-worked ping-pong case in ``tests/test_tiresias.py``).
``preemptive=False`` never touches running tasks: pending tasks are served in the same order
from the free resources. As their resources are kept to completion, a starting task gets CPUs
in proportion to its GPUs (the cluster's CPU/GPU ratio, at least its minimum) instead of an
even split of all spare CPUs, and elastic grants stop at a fair share of the cluster's GPUs
(capacity divided by its running plus pending tasks, rounded up), like the reference's
non-preemptive fair-share rule.
``promote_after=n`` (off by default) is Tiresias's starvation knob: a running task paused
for ``n`` consecutive real steps has its attained service reset to 0 (for priority only).
"""

from __future__ import annotations

import numpy as np

from envs.config import ConfigError
from envs.core import Simulator
from envs.scheduling import Decision


class TiresiasScheduler:
    """Two-level median-threshold LAS over attained GPU service, FIFO inside a level."""

    name = "tiresias"

    def __init__(self, preemptive: bool = True, elastic: bool = False, promote_after: int | None = None) -> None:
        if promote_after is not None and (
            isinstance(promote_after, bool) or not isinstance(promote_after, int) or promote_after < 1
        ):
            raise ConfigError(f"tiresias: promote_after must be an integer >= 1 or None, got {promote_after!r}")
        self.preemptive = bool(preemptive)
        self.elastic = bool(elastic)
        self.promote_after = promote_after

    def reset(self, sim: Simulator) -> None:
        T = sim.workload.num_tasks
        self._offset = np.zeros(T, dtype=np.int64)  # attained service before the last promotion
        self._paused = np.zeros(T, dtype=np.int64)  # consecutive real steps paused
        self._t_seen = -1

    # ------------------------------------------------------------------ state
    def _new_step(self, sim: Simulator) -> None:
        if sim.t == self._t_seen:
            return
        if self._t_seen >= 0 and self.promote_after is not None:
            ids = sim.run_slots[sim.run_slots >= 0]
            paused = sim.alloc[ids, 1] == 0  # their allocation during the last real step
            self._paused[ids] = np.where(paused, self._paused[ids] + 1, 0)
            promote = ids[self._paused[ids] >= self.promote_after]
            self._offset[promote] = sim.attained_gpu[promote]
            self._paused[promote] = 0
        self._t_seen = sim.t

    def service(self, sim: Simulator, ids: np.ndarray) -> np.ndarray:
        """Attained GPU service that sets the queue level (since the last promotion)."""
        return sim.attained_gpu[ids] - self._offset[ids]

    # ------------------------------------------------------------------ decisions
    def decide(self, sim: Simulator) -> Decision:
        self._new_step(sim)
        N = sim.num_clusters
        share = sim.free / sim.capacity
        order = sorted(range(N), key=lambda i: (-share[i, 1], -share[i, 0], i))
        claimed: set[int] = set()
        out = Decision()
        for i in order:
            running = sim.running_tasks(i)
            if sim.single and sim.placed_this_step[i]:
                cands = np.zeros(0, dtype=np.int64)
            else:
                cands = np.array([t for t in sim.pending_tasks(i).tolist() if t not in claimed], dtype=np.int64)
            if self.preemptive:
                jobs = np.concatenate([running, cands])
                free = sim.capacity[i].copy()
            else:
                jobs = cands
                free = sim.free[i].copy()
            if jobs.size == 0:
                continue
            is_new = np.zeros(jobs.size, dtype=bool)
            is_new[jobs.size - cands.size :] = True
            alloc = self._allocate(sim, i, jobs, is_new, free)
            changes = {}
            for task, new, a in zip(jobs.tolist(), is_new.tolist(), alloc):
                c, g = int(a[0]), int(a[1])
                if new:
                    if c or g:
                        out.placements.append((i, task, c, g))
                        claimed.add(task)
                elif (c, g) != tuple(sim.alloc[task]):
                    changes[task] = (c, g)
            if changes:
                out.allocations[i] = changes
        return out

    def _allocate(
        self, sim: Simulator, cluster: int, jobs: np.ndarray, is_new: np.ndarray, free: np.ndarray
    ) -> np.ndarray:
        """``(len(jobs), 2)`` allocations for the cluster's jobs; (0, 0) = nothing."""
        n = jobs.size
        svc = np.where(is_new, 0, self.service(sim, jobs)).astype(np.float64)
        start = np.where(is_new, sim.t, sim.start[jobs])
        need = sim.min_req[sim.task_type[jobs]]
        cap = sim.max_alloc
        gpu_cap = np.full(n, cap[1])
        if not self.preemptive:  # elastic grants capped at a fair share of the cluster's GPUs
            share = -(-sim.capacity[cluster, 1] // (sim.running_tasks(cluster).size + n))
            gpu_cap = np.maximum(need[:, 1], min(cap[1], share))
        alloc = np.zeros((n, 2), dtype=np.int64)
        held = np.zeros(n, dtype=bool)
        quota = 1 if sim.single else n  # new tasks the cluster may start now
        free = free.copy()

        def priority(las: np.ndarray) -> np.ndarray:
            low = las > np.median(las)
            return np.lexsort((jobs, start, low))

        if not self.elastic:
            for j in priority(svc):
                if is_new[j] and quota == 0:
                    continue
                if np.all(need[j] <= free):
                    alloc[j] = need[j]
                    free -= need[j]
                    held[j] = True
                    quota -= int(is_new[j])
        else:
            while True:
                fits = np.all(need <= free, axis=1) & (~is_new | (quota > 0))
                can = np.where(held, (alloc[:, 1] < gpu_cap) & (free[1] > 0), fits)
                if not can.any():
                    break
                las = np.where(can, svc + alloc[:, 1], np.inf)
                j = next(j for j in priority(las) if can[j])
                if held[j]:
                    alloc[j, 1] += 1
                    free[1] -= 1
                else:
                    alloc[j] = need[j]
                    free -= need[j]
                    held[j] = True
                    quota -= int(is_new[j])
        holders = np.array([j for j in priority(svc) if held[j]], dtype=np.int64)
        if holders.size and free[0] > 0:
            if self.preemptive:
                self._split_cpus(alloc, holders, int(free[0]), np.full(n, cap[0]))
            else:  # CPUs in proportion to GPUs, so that a new task never hoards the cluster
                ratio = sim.capacity[cluster, 0] / sim.capacity[cluster, 1]
                want = np.minimum(cap[0], np.floor(alloc[holders, 1] * ratio).astype(np.int64))
                for j, w in zip(holders.tolist(), want.tolist()):
                    extra = int(min(max(w - alloc[j, 0], 0), free[0]))
                    alloc[j, 0] += extra
                    free[0] -= extra
        return alloc

    @staticmethod
    def _split_cpus(alloc: np.ndarray, holders: np.ndarray, spare: int, limit: np.ndarray) -> None:
        """Even split of ``spare`` CPUs over ``holders`` (priority order), capped at ``limit``."""
        while spare > 0:
            room = limit[holders] - alloc[holders, 0]
            takers = holders[room > 0]
            if takers.size == 0:
                return
            q = spare // takers.size
            if q == 0:
                alloc[takers[:spare], 0] += 1
                return
            add = np.minimum(q, limit[takers] - alloc[takers, 0])
            alloc[takers, 0] += add
            spare -= int(add.sum())
