"""Simulator core: edge clusters, pending sets, queues, running tasks, progress, metrics.

Pure numpy, no Gymnasium. One :class:`Simulator` runs one episode of a scenario:

* Tasks arrive online (the :class:`~envs.workload.Workload` drawn from the seed) into the
  waiting list of every cluster they can reach. Each cluster shows its ``P`` earliest
  waiting tasks as its *pending set*; the pending set is refilled (FIFO, arrival order)
  only when real time advances, so a slot freed inside a real step stays empty until then.
* :meth:`Simulator.place` starts a pending task on one cluster at an allocation between its
  minimum requirement and ``min(free, per_task_max)``; the task leaves every other
  cluster's pending set and queue. Invalid requests are refused and counted, never raised.
* :meth:`Simulator.set_allocations` lets preemptive schedulers re-size or pause (0, 0)
  running tasks; a task whose allocation differs from the previous real step's pays the
  switching overhead (its gain is multiplied by ``switch_overhead``) on the next step.
* :meth:`Simulator.advance` performs a real step: progress, completions, arrivals, refill.

``single`` mode allows one placement per cluster per real step; ``multi`` mode allows many
(the Gymnasium env advances time once every agent is void).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .config import ScenarioConfig
from .durations import fastest_steps
from .progress import DONE_THRESHOLD, ProgressFunction, ProgressTable, build_progress_functions
from .workload import Workload, generate_workload, rng_streams

# task status codes
NOT_ARRIVED, WAITING, RUNNING, DONE = 0, 1, 2, 3


_INTEGER = (int, np.integer)


def _all_int(*values: object) -> bool:
    """All are Python or numpy integers (booleans excluded)."""
    for v in values:
        if not isinstance(v, _INTEGER) or isinstance(v, bool):
            return False
    return True


class ProgressStep:
    """The progress rule of one real step, for every running task at once.

    The one owner of this rule: :class:`Simulator` and :class:`envs.batched.BatchedEdgeClusters`
    both call it. A task gains ``f(cpu, gpu, progress)`` from its type's progress function (one
    :class:`~envs.progress.ProgressTable` gather when the types share a closed form), nothing
    below its type's minimum requirement, plus uniform noise of width ``progress_noise`` (also
    never below 0), times ``switch_overhead`` when its allocation differs from the previous real
    step's.
    """

    def __init__(self, cfg: ScenarioConfig, functions: list[ProgressFunction]) -> None:
        self.functions = functions
        self.table = ProgressTable.build(functions, cfg.alloc_dims)  # None: per-type fallback
        self.min_req = np.array([t.min_req for t in cfg.task_types], dtype=np.int64)  # (K, 2)
        c1, g1 = cfg.alloc_dims  # runnable[type, c, g]: the allocation meets the type's minimum
        self.runnable = (np.arange(c1)[None, :, None] >= self.min_req[:, None, None, 0]) & (
            np.arange(g1)[None, None, :] >= self.min_req[:, None, None, 1]
        )
        self.noise = cfg.progress_noise
        self.switch_overhead = cfg.switch_overhead

    def _raw(self, types: np.ndarray, c: np.ndarray, g: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Ungated gains and whether each allocation meets its type's minimum."""
        if self.table is not None:
            return self.table.delta(types, c, g, p), self.runnable[types, c, g]
        if len(self.functions) == 1:
            gain = np.asarray(self.functions[0].delta(c, g, p), dtype=np.float64)
        else:
            gain = np.zeros(types.size)
            for k, fn in enumerate(self.functions):
                m = types == k
                if m.any():
                    gain[m] = fn.delta(c[m], g[m], p[m])
        mins = self.min_req[types]
        return gain, (c >= mins[:, 0]) & (g >= mins[:, 1])

    def gain(
        self, types: np.ndarray, c: np.ndarray, g: np.ndarray, p: np.ndarray,
        last_c: np.ndarray, last_g: np.ndarray, draw_noise: Callable[[int], np.ndarray],
    ) -> np.ndarray:
        """This step's gain of tasks of ``types`` at allocation ``(c, g)`` with progress ``p``
        (previous real step's allocation ``(last_c, last_g)``); ``draw_noise(k)`` gives ``k``
        uniform draws, in task order, and is called only when the scenario has noise."""
        gain, ok = self._raw(types, c, g, p)
        gain = np.maximum(gain, 0.0)
        all_ok = bool(ok.all())
        if not all_ok:  # paused / below-minimum tasks make no progress
            gain[~ok] = 0.0
        if self.noise > 0:
            noise = (draw_noise(types.size) - 0.5) * self.noise
            gain = np.maximum(gain + noise, 0.0)
            if not all_ok:
                gain[~ok] = 0.0
        if self.switch_overhead != 1.0:
            switched = (c != last_c) | (g != last_g)
            if switched.any():
                gain[switched] *= self.switch_overhead
        return gain


class Simulator:
    """One episode of a scenario, driven by :meth:`place`, :meth:`set_allocations`, :meth:`advance`."""

    def __init__(
        self,
        cfg: ScenarioConfig,
        seed: int = 0,
        progress_functions: list[ProgressFunction] | None = None,
    ) -> None:
        self.cfg = cfg
        self.functions = progress_functions if progress_functions is not None else build_progress_functions(cfg)
        self.num_clusters = cfg.num_clusters
        self.num_types = cfg.num_types
        self.capacity = np.array(cfg.capacities, dtype=np.int64)  # (N, 2)
        self.min_req = np.array([t.min_req for t in cfg.task_types], dtype=np.int64)  # (K, 2)
        self.max_alloc = np.array(cfg.per_task_max, dtype=np.int64)  # (2,)
        self.single = cfg.mode == "single"
        self.progress_step = ProgressStep(cfg, self.functions)
        self._min_req_list = self.min_req.tolist()
        self._max_alloc_list = self.max_alloc.tolist()
        self._fastest: np.ndarray | None = None
        self.reset(seed)

    # ------------------------------------------------------------------ episode set-up
    def reset(self, seed: int) -> None:
        """Start a new episode whose workload is fully determined by ``seed``."""
        cfg = self.cfg
        self.seed = int(seed)
        streams = rng_streams(self.seed)
        self.workload: Workload = generate_workload(cfg, streams)
        self.rng_noise = streams["noise"]
        self.rng_tiebreak = streams["tiebreak"]  # for schedulers' random choices
        T, N = self.workload.num_tasks, self.num_clusters
        self.task_type = self.workload.task_type
        self.arrival = self.workload.arrival
        self.eligible = self.workload.eligible
        self.status = np.zeros(T, dtype=np.int8)
        self.start = np.full(T, -1, dtype=np.int64)
        self.finish = np.full(T, -1, dtype=np.int64)
        self.cluster = np.full(T, -1, dtype=np.int64)
        self.alloc = np.zeros((T, 2), dtype=np.int64)  # current allocation
        self.last_alloc = np.zeros((T, 2), dtype=np.int64)  # allocation at the previous real step
        self.first_alloc = np.zeros((T, 2), dtype=np.int64)  # allocation at start
        self.alloc_time = np.zeros((T, 2), dtype=np.int64)  # sum of allocation over running steps
        self.attained_gpu = np.zeros(T, dtype=np.int64)  # GPU-steps received (for LAS schedulers)
        #: real steps a task ran at an allocation other than its previous step's (a resume after a pause
        #: included): each pays the switching overhead when ``switch_overhead < 1``
        self.switches = np.zeros(T, dtype=np.int64)
        self.progress = np.zeros(T, dtype=np.float64)
        self.free = self.capacity.copy()
        self.waiting: list[list[int]] = [[] for _ in range(N)]
        P = cfg.pending_slots
        self.pending = np.full((N, P), -1, dtype=np.int64)
        self.run_slots = np.full((N, self.running_slots_hint()), -1, dtype=np.int64)
        self.placed_this_step = np.zeros(N, dtype=bool)
        self.t = 0
        self.next_arrival = 0
        self.num_finished = 0
        # metrics
        self.tasks_in_system: list[int] = []
        self.usage: list[np.ndarray] = []
        self.conflicts = 0
        self.invalid = 0
        self.void = 0
        self.placements = 0
        self.last_error = ""
        self.last_cluster_rewards = np.zeros(N)
        self._admit_arrivals()
        self._refill()

    def running_slots_hint(self) -> int:
        """Upper bound on tasks a cluster runs at once when every task holds >= its minimum."""
        mins = np.maximum(self.min_req, 1)
        per_cluster = (self.capacity[:, None, :] // mins[None, :, :]).min(axis=2).max(axis=1)
        return int(max(1, per_cluster.max()))

    # ------------------------------------------------------------------ queries
    @property
    def fastest(self) -> np.ndarray:
        """``[type, cluster]`` fewest steps to finish with no waiting (-1: cannot run there)."""
        if self._fastest is None:
            self._fastest = fastest_steps(self.cfg, self.functions)
        return self._fastest

    @property
    def num_alive(self) -> int:
        """Tasks that have arrived and not finished."""
        return self.next_arrival - self.num_finished

    @property
    def all_arrived(self) -> bool:
        return self.next_arrival >= self.workload.num_tasks

    @property
    def done(self) -> bool:
        """Every task of the episode arrived and completed."""
        return self.all_arrived and self.num_finished == self.next_arrival

    @property
    def truncated(self) -> bool:
        """The real-step cap was reached before the episode finished."""
        return self.t >= self.cfg.max_steps and not self.done

    def pending_tasks(self, cluster: int) -> np.ndarray:
        """Task ids in the cluster's pending slots (slot order = arrival order, gaps removed)."""
        row = self.pending[cluster]
        return row[row >= 0]

    def running_tasks(self, cluster: int) -> np.ndarray:
        """Task ids running (or paused) on the cluster, in start order."""
        row = self.run_slots[cluster]
        return row[row >= 0]

    def queue_length(self, cluster: int) -> int:
        """Waiting tasks of the cluster beyond its pending set."""
        return len(self.waiting[cluster]) - int((self.pending[cluster] >= 0).sum())

    def alloc_upper(self, cluster: int) -> np.ndarray:
        """Largest (CPU, GPU) a new task could get on the cluster now."""
        return np.minimum(self.free[cluster], self.max_alloc)

    def can_place(self, cluster: int, task: int, cpu: int, gpu: int) -> str:
        """Empty string if :meth:`place` would accept the request, else the reason."""
        if not _all_int(cluster, task, cpu, gpu):
            return f"cluster, task and allocation must be integers, got {(cluster, task, cpu, gpu)!r}"
        if not 0 <= cluster < self.num_clusters:
            return f"cluster {cluster} out of range"
        if not 0 <= task < self.workload.num_tasks:
            return f"task {task} out of range"
        if self.status[task] != WAITING:
            return f"task {task} is not waiting"
        if task not in self.pending[cluster].tolist():
            return f"task {task} is not in cluster {cluster}'s pending set"
        if self.single and self.placed_this_step[cluster]:
            return f"cluster {cluster} already placed a task this real step (single mode)"
        lo = self._min_req_list[self.task_type[task]]
        free_c, free_g = self.free[cluster].tolist()
        hi = (min(free_c, self._max_alloc_list[0]), min(free_g, self._max_alloc_list[1]))
        if cpu < lo[0] or gpu < lo[1] or cpu > hi[0] or gpu > hi[1]:
            return (
                f"allocation ({cpu}, {gpu}) outside [{lo[0]}..{hi[0]}] x [{lo[1]}..{hi[1]}] "
                f"for task {task} on cluster {cluster}"
            )
        return ""

    # ------------------------------------------------------------------ actions
    def place(self, cluster: int, task: int, cpu: int, gpu: int) -> bool:
        """Start a pending task on ``cluster``; refused (False, counted invalid) if not allowed."""
        reason = self.can_place(cluster, task, cpu, gpu)
        if reason:
            self.invalid += 1
            self.last_error = reason
            return False
        self.commit_placement(cluster, task, cpu, gpu)
        return True

    def commit_placement(self, cluster: int, task: int, cpu: int, gpu: int) -> None:
        """:meth:`place` without the checks, for callers that validated the request themselves."""
        self.status[task] = RUNNING
        self.cluster[task] = cluster
        self.start[task] = self.t
        for arr in (self.alloc, self.last_alloc, self.first_alloc):  # starting is not a switch
            arr[task, 0] = cpu
            arr[task, 1] = gpu
        self.free[cluster, 0] -= cpu
        self.free[cluster, 1] -= gpu
        for waiting, ok in zip(self.waiting, self.eligible[task].tolist()):
            if ok:
                waiting.remove(task)
        self.pending[self.pending == task] = -1
        slots = self.run_slots[cluster].tolist()
        if -1 not in slots:
            grow = np.full((self.num_clusters, self.run_slots.shape[1]), -1, dtype=np.int64)
            self.run_slots = np.concatenate([self.run_slots, grow], axis=1)
            slots.append(-1)
        self.run_slots[cluster, slots.index(-1)] = task
        self.placed_this_step[cluster] = True
        self.placements += 1

    def set_allocations(self, cluster: int, allocations: Mapping[int, tuple[int, int]]) -> bool:
        """Re-size (or pause with (0, 0)) running tasks of one cluster, all or nothing.

        Each allocation must lie in ``[0, per_task_max]`` and the cluster's total must fit its
        capacity. A changed allocation pays the switching overhead on the next real step.
        Returns False (counted invalid, nothing changed) if the request is not allowed.
        """
        if not allocations:
            return True
        try:
            ids = np.fromiter(allocations.keys(), dtype=np.int64, count=len(allocations))
            new = np.array(list(allocations.values()), dtype=np.int64)
            error = self._allocation_error(cluster, ids, new)
        except (TypeError, ValueError, OverflowError):
            error = "allocations must map task ids to (cpu, gpu) integer pairs"
        if error:
            self.invalid += 1
            self.last_error = error
            return False
        self.free[cluster] += self.alloc[ids].sum(axis=0) - new.sum(axis=0)
        self.alloc[ids] = new
        fresh = self.start[ids] == self.t  # placed this real step and not run yet: no switch to pay
        self.last_alloc[ids[fresh]] = new[fresh]
        self.first_alloc[ids[fresh]] = new[fresh]
        return True

    def _allocation_error(self, cluster: int, ids: np.ndarray, new: np.ndarray) -> str:
        if new.shape != (ids.size, 2):
            return "allocations must map task ids to (cpu, gpu) integer pairs"
        if ids.min() < 0 or ids.max() >= self.workload.num_tasks:
            return "task id out of range"
        if np.any(self.status[ids] != RUNNING) or np.any(self.cluster[ids] != cluster):
            return f"allocations name tasks not running on cluster {cluster}"
        if np.any(new < 0) or np.any(new > self.max_alloc):
            return "allocation outside [0, per_task_max]"
        free_after = self.free[cluster] + self.alloc[ids].sum(axis=0) - new.sum(axis=0)
        if np.any(free_after < 0):
            return f"allocations exceed cluster {cluster}'s capacity"
        return ""

    # ------------------------------------------------------------------ time
    def advance(self) -> float:
        """One real step: progress and completions, then arrivals and pending refill.

        Returns the team reward ``-(tasks alive during the step)``; per-cluster rewards
        (tasks running or waiting at each cluster) are in ``last_cluster_rewards``.
        """
        N = self.num_clusters
        alive = self.num_alive
        self.tasks_in_system.append(alive)
        self.usage.append(self.capacity - self.free)
        occupied = self.run_slots >= 0
        queued = np.fromiter(map(len, self.waiting), dtype=np.float64, count=N)
        self.last_cluster_rewards = -(queued + occupied.sum(axis=1))
        ids = self.run_slots[occupied]
        if ids.size:
            self._progress(ids)
        self.t += 1
        self.placed_this_step[:] = False
        self._admit_arrivals()
        self._refill()
        return -float(alive)

    def _progress(self, ids: np.ndarray) -> None:
        types = self.task_type[ids]
        alloc = self.alloc[ids]
        c, g = alloc[:, 0], alloc[:, 1]
        p = self.progress[ids]
        last = self.last_alloc[ids]
        gain = self.progress_step.gain(types, c, g, p, last[:, 0], last[:, 1], self.rng_noise.random)
        self.switches[ids] += ((c != last[:, 0]) | (g != last[:, 1])) & ((c > 0) | (g > 0))
        p = p + gain
        self.progress[ids] = p
        self.alloc_time[ids] += alloc
        self.attained_gpu[ids] += g
        self.last_alloc[ids] = alloc
        done = ids[p >= DONE_THRESHOLD]
        if done.size:
            self.status[done] = DONE
            self.finish[done] = self.t + 1
            self.num_finished += int(done.size)
            clusters = self.cluster[done]
            np.add.at(self.free, clusters, self.alloc[done])
            rs = self.run_slots  # an empty slot (-1) reads the last task's status: harmless
            rs[self.status[rs] == DONE] = -1

    def _admit_arrivals(self) -> None:
        start = self.next_arrival
        end = int(np.searchsorted(self.arrival, self.t, side="right"))  # arrival is sorted
        if end <= start:
            return
        self.status[start:end] = WAITING
        new = np.arange(start, end)
        for w, col in zip(self.waiting, self.eligible[start:end].T):
            w.extend(new[col].tolist())
        self.next_arrival = end

    def _refill(self) -> None:
        P = self.pending.shape[1]
        pad = [-1] * P
        self.pending[:] = [(w[:P] + pad)[:P] for w in self.waiting]

    # ------------------------------------------------------------------ results
    def records(self) -> dict[str, np.ndarray]:
        """Per-task results of the tasks that have arrived (unfinished: finish = jct = -1).

        ``cpu``/``gpu`` are the allocation at start; ``avg_cpu``/``avg_gpu`` the mean over the
        steps the task was running (differs only for preemptive schedulers).
        """
        n = self.next_arrival
        finish = self.finish[:n]
        finished = finish >= 0
        jct = np.where(finished, finish - self.arrival[:n], -1)
        span = np.maximum(np.where(finished, finish - self.start[:n], self.t - self.start[:n]), 1)
        return {
            "task_id": np.arange(n),
            "type": self.task_type[:n].copy(),
            "arrival": self.arrival[:n].copy(),
            "start": self.start[:n].copy(),
            "finish": finish.copy(),
            "jct": jct,
            "cluster": self.cluster[:n].copy(),
            "cpu": self.first_alloc[:n, 0].copy(),
            "gpu": self.first_alloc[:n, 1].copy(),
            "avg_cpu": np.where(self.start[:n] >= 0, self.alloc_time[:n, 0] / span, 0.0),
            "avg_gpu": np.where(self.start[:n] >= 0, self.alloc_time[:n, 1] / span, 0.0),
            "switches": self.switches[:n].copy(),
        }

    def usage_series(self) -> np.ndarray:
        """``(steps, N, 2)`` CPU and GPU in use per cluster at every real step."""
        if not self.usage:
            return np.zeros((0, self.num_clusters, 2), dtype=np.int64)
        return np.stack(self.usage)
