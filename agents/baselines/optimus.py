"""``optimus``: Optimus-style marginal-gain allocation (a TapFinger baseline; see step 2 for its fix).

What it knows
    By default only what a real scheduler observes: pending sets, free resources, minimum
    requirements, each running task's allocation and its *observed* progress
    (``sim.progress``). It never calls the progress functions. Its speed model
    ``f(c, g) = 1 / ([1/g, 1, g/c, g, c]·θ)`` (see :mod:`.speed_model`) is fitted per task type
    by NNLS from the per-step progress gains it has seen: after every real step it records,
    for each task that ran, the gain at the allocation it held, skipping paused or
    below-minimum allocations, zero gains and steps that paid the switching overhead.
    With ``oracle=True`` it instead fits, once at reset, on samples of the true progress
    functions (``sim.functions``) over every feasible allocation at progress 0, 0.25, 0.5 and
    0.75; it still reads the remaining work from the observed progress.

Cold start (observed mode)
    Before a type has been observed at all, its speed is a neutral prior with diminishing
    returns in both resources, ``f ∝ 1 / ((1 + 1/g)(1 + 1/c))``, scaled so that its speed at the
    minimum requirement is the mean gain observed over all types (1 before any). Once it has
    data, every fit also includes pseudo-observations of that prior (now scaled by the type's
    own mean gain) at a 3 x 3 grid of its feasible allocations, worth ``prior_weight``
    (default 0.1) observations in total: with few distinct allocations seen, the prior fills the directions
    the data cannot identify; with many, it is negligible.

Each decision
    1. Admission (Optimus's "1 PS + 1 worker for every job"): pending tasks in arrival order
       (earliest first), each started at its minimum requirement on the eligible cluster
       whose reserved minima leave the largest dominant share free after it (lowest index on
       ties), if that minimum fits; a task goes to one cluster only. In ``single`` mode a
       cluster starts at most one task per real step.
    2. Greedy marginal gain per cluster: repeatedly give one CPU or one GPU to the task whose
       estimated remaining time ``(1 - progress) / f(c, g)`` drops most (earliest-arrived task
       first on ties), until no unit has a gain or nothing is left. The gain is the plain
       reduction of remaining time (not divided by the current allocation, unlike the
       reference code). A unit counts as a gain only if it cuts that task's estimated time by
       more than the fraction ``min_gain`` (default 1%): a fitted model is never exactly flat,
       and without this tolerance near-zero fitted gains would hoard idle CPUs.

``preemptive=True`` (default) re-sizes every running task each real step (each starts from
its minimum); a changed allocation pays the scenario's switching overhead, which the
simulator applies. ``preemptive=False`` leaves running tasks alone and only sizes new tasks
from the free resources. The speed model needs at least one CPU and one GPU, so minima of 0
are treated as 1.
"""

from __future__ import annotations

import numpy as np

from envs.config import ConfigError
from envs.core import Simulator
from envs.scheduling import Decision

from .speed_model import SpeedObservations, fit_speed_model, inverse_speed

ORACLE_PROGRESS_LEVELS = (0.0, 0.25, 0.5, 0.75)


class OptimusScheduler:
    """Greedy marginal-gain CPU/GPU allocation with an NNLS-fitted speed model."""

    name = "optimus"

    def __init__(
        self,
        preemptive: bool = True,
        oracle: bool = False,
        prior_weight: float = 0.1,
        min_gain: float = 0.01,
    ) -> None:
        if not isinstance(prior_weight, (int, float)) or isinstance(prior_weight, bool) or prior_weight < 0:
            raise ConfigError(f"optimus: prior_weight must be a number >= 0, got {prior_weight!r}")
        if not isinstance(min_gain, (int, float)) or isinstance(min_gain, bool) or min_gain < 0:
            raise ConfigError(f"optimus: min_gain must be a number >= 0, got {min_gain!r}")
        self.preemptive = bool(preemptive)
        self.oracle = bool(oracle)
        self.prior_weight = float(prior_weight)
        self.min_gain = float(min_gain)

    # ------------------------------------------------------------------ set-up
    def reset(self, sim: Simulator) -> None:
        K = sim.num_types
        self.max_alloc = sim.max_alloc.copy()
        self.floor = np.maximum(sim.min_req, 1)  # smallest allocation the model can price
        mc, mg = int(self.max_alloc[0]), int(self.max_alloc[1])
        c, g = np.meshgrid(np.arange(mc + 1), np.arange(mg + 1), indexing="ij")
        self._grid = (np.maximum(c, 1), np.maximum(g, 1))
        self._prior_shape = (1.0 + 1.0 / self._grid[1]) * (1.0 + 1.0 / self._grid[0])
        # inverse speed (steps per unit progress) for every type and allocation
        self.inv = np.empty((K, mc + 1, mg + 1))
        self.theta: list[np.ndarray | None] = [None] * K
        self.obs = SpeedObservations(K, mc, mg)
        self._fit_points = [0] * K  # distinct allocations and observations at the last fit
        self._fit_count = [0] * K
        self._t_seen = -1
        self._p_snap = np.zeros(sim.workload.num_tasks)
        self._a_snap = np.zeros((sim.workload.num_tasks, 2), dtype=np.int64)
        if self.oracle:
            for k in range(K):
                self.theta[k] = self._oracle_fit(sim, k)
        for k in range(K):
            self._update_table(k)

    def set_model(self, k: int, theta: np.ndarray) -> None:
        """Use speed-model parameters ``theta`` (5 values >= 0) for type ``k``, as if fitted.

        With ``oracle=True`` they stay fixed (nothing is refitted); otherwise the next refit
        of that type replaces them.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (5,) or np.any(theta < 0) or not np.any(theta > 0):
            raise ValueError(f"theta must be 5 non-negative numbers, not all 0, got {theta!r}")
        self.theta[k] = theta
        self._update_table(k)

    def _oracle_fit(self, sim: Simulator, k: int) -> np.ndarray:
        lo = self.floor[k]
        c, g = np.meshgrid(np.arange(lo[0], self.max_alloc[0] + 1), np.arange(lo[1], self.max_alloc[1] + 1), indexing="ij")
        c, g = c.ravel(), g.ravel()
        levels = np.repeat(np.array(ORACLE_PROGRESS_LEVELS), c.size)
        c, g = np.tile(c, len(ORACLE_PROGRESS_LEVELS)), np.tile(g, len(ORACLE_PROGRESS_LEVELS))
        s = np.asarray(sim.functions[k].delta(c, g, levels), dtype=np.float64)
        ok = np.isfinite(s) & (s > 0)
        try:
            return fit_speed_model(c[ok], g[ok], s[ok])
        except ValueError:  # never progresses (or no fit): a flat model
            return np.array([0.0, 1.0, 0.0, 0.0, 0.0])

    def _prior_points(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The prior's speed at a 3 x 3 grid of type ``k``'s feasible allocations."""
        lo, hi = self.floor[k], np.maximum(self.max_alloc, self.floor[k])
        c, g = np.meshgrid(*[np.unique(np.array([lo[r], (lo[r] + hi[r]) // 2, hi[r]])) for r in (0, 1)], indexing="ij")
        c, g = c.ravel(), g.ravel()
        return c, g, 1.0 / self._prior_inv(k)[c, g], self.prior_weight

    def _prior_inv(self, k: int) -> np.ndarray:
        scale = self.obs.mean_gain(k)
        if not np.isfinite(scale):
            scale = self.obs.mean_gain()
        if not np.isfinite(scale) or scale <= 0:
            scale = 1.0
        lo = self.floor[k]
        return self._prior_shape / (self._prior_shape[lo[0], lo[1]] * scale)

    def _update_table(self, k: int) -> None:
        theta = self.theta[k]
        if theta is not None and theta.sum() > 0:
            inv = inverse_speed(theta, *self._grid)
        else:
            inv = self._prior_inv(k)
        self.inv[k] = np.maximum(inv, 1e-12)
        self._inv_list = self.inv.tolist()  # scalar look-ups in the greedy are cheaper on lists

    # ------------------------------------------------------------------ learning
    def observe(self, sim: Simulator) -> None:
        """Record the gains of the last real step and refit the types that got data."""
        t = sim.t
        if t == self._t_seen:
            return
        if self._t_seen >= 0 and not self.oracle:
            ran = (sim.start >= 0) & (sim.start <= t - 1) & ((sim.finish < 0) | (sim.finish >= t))
            ids = np.flatnonzero(ran)
            if ids.size:
                used = sim.last_alloc[ids]
                gain = sim.progress[ids] - self._p_snap[ids]
                types = sim.task_type[ids]
                ok = np.all(used >= self.floor[types], axis=1) & (gain > 0)
                if sim.cfg.switch_overhead != 1.0:
                    before = np.where((sim.start[ids] < t - 1)[:, None], self._a_snap[ids], sim.first_alloc[ids])
                    switched = np.any(used != before, axis=1)
                    ok &= ~switched
                if ok.any():
                    self.obs.add(types[ok], used[ok, 0], used[ok, 1], gain[ok])
                    self._refit()
        self._t_seen = t
        self._p_snap = sim.progress.copy()
        self._a_snap = sim.last_alloc.copy()

    def _refit(self) -> None:
        """Refit a type when it shows a new allocation or 10% more observations than at its last fit."""
        for k in range(len(self.theta)):
            n, pts = int(self.obs.count[k].sum()), self.obs.num_points(k)
            if n and (pts > self._fit_points[k] or n >= 1.1 * self._fit_count[k]):
                try:
                    self.theta[k] = self.obs.fit(k, self._prior_points(k))
                except ValueError:  # keep the previous model
                    pass
                self._fit_points[k], self._fit_count[k] = pts, n
                self._update_table(k)
            elif self.theta[k] is None:  # unseen type: its prior's scale follows the other types
                self._update_table(k)

    # ------------------------------------------------------------------ decisions
    def decide(self, sim: Simulator) -> Decision:
        self.observe(sim)
        N = sim.num_clusters
        cap = sim.capacity
        jobs: list[list[int]] = []
        reserved = np.zeros((N, 2), dtype=np.int64)
        for i in range(N):
            run = sim.running_tasks(i)
            if self.preemptive:
                run = np.sort(run)
                jobs.append(run.tolist())
                reserved[i] = self.floor[sim.task_type[run]].sum(axis=0) if run.size else 0
            else:
                jobs.append([])
                reserved[i] = cap[i] - sim.free[i]
        new_tasks = self._admit(sim, reserved)
        out = Decision()
        for i in range(N):
            ids = np.array(sorted(jobs[i] + [t for t, _ in new_tasks[i]]), dtype=np.int64)
            if ids.size == 0:
                continue
            alloc = self._greedy(sim, ids, cap[i] - reserved[i])
            is_new = set(t for t, _ in new_tasks[i])
            changes = {}
            for task, a in zip(ids.tolist(), alloc):
                if task in is_new:
                    out.placements.append((i, task, int(a[0]), int(a[1])))
                elif np.any(sim.alloc[task] != a):
                    changes[task] = (int(a[0]), int(a[1]))
            if changes:
                out.allocations[i] = changes
        return out

    def _admit(self, sim: Simulator, reserved: np.ndarray) -> list[list[tuple[int, int]]]:
        """Start pending tasks at their floor, earliest first; updates ``reserved`` in place."""
        N = sim.num_clusters
        cap = sim.capacity
        out: list[list[tuple[int, int]]] = [[] for _ in range(N)]
        open_ = ~sim.placed_this_step if sim.single else np.ones(N, dtype=bool)
        where: dict[int, list[int]] = {}
        for i in range(N):
            if open_[i]:
                for task in sim.pending_tasks(i).tolist():
                    where.setdefault(task, []).append(i)
        for task in sorted(where):
            need = self.floor[sim.task_type[task]]
            best, best_share = -1, -np.inf
            for i in where[task]:
                if not open_[i]:
                    continue
                left = cap[i] - reserved[i] - need
                if np.any(left < 0):
                    continue
                share = float(np.min(left / cap[i]))
                if share > best_share:
                    best, best_share = i, share
            if best < 0:
                continue
            reserved[best] += need
            out[best].append((task, best))
            if sim.single:
                open_[best] = False
                if not open_.any():
                    break
        return out

    def _greedy(self, sim: Simulator, ids: np.ndarray, free: np.ndarray) -> np.ndarray:
        """Unit-by-unit marginal-gain allocation of ``free`` on top of each task's floor.

        ``ids`` must be sorted (arrival order), so ``argmax`` breaks ties by earliest task.
        """
        types = sim.task_type[ids]
        a = self.floor[types].copy()
        rem = np.maximum(1.0 - sim.progress[ids], 0.0)
        inv = self.inv
        free = [int(free[0]), int(free[1])]
        cap = (int(self.max_alloc[0]), int(self.max_alloc[1]))
        tol = self.min_gain
        k, c, g = types, a[:, 0], a[:, 1]
        base = inv[k, c, g]
        gains = np.empty((ids.size, 2))
        for r, (nc, ng) in enumerate(((np.minimum(c + 1, cap[0]), g), (c, np.minimum(g + 1, cap[1])))):
            drop = base - inv[k, nc, ng]
            ok = (a[:, r] < cap[r]) & (free[r] > 0) & (drop > tol * base)
            gains[:, r] = np.where(ok, rem * drop, -np.inf)
        table = self._inv_list
        while True:
            idx = int(np.argmax(gains))
            l, r = divmod(idx, 2)
            if gains[l, r] == -np.inf:
                break
            a[l, r] += 1
            free[r] -= 1
            if free[r] == 0:
                gains[:, r] = -np.inf
            kl, cl, gl = int(types[l]), int(a[l, 0]), int(a[l, 1])
            row = table[kl]
            b = row[cl][gl]
            for q, (nc, ng) in enumerate(((cl + 1, gl), (cl, gl + 1))):
                if (cl, gl)[q] >= cap[q] or free[q] <= 0:
                    gains[l, q] = -np.inf
                    continue
                drop = b - row[nc][ng]
                gains[l, q] = rem[l] * drop if drop > tol * b else -np.inf
        return a
