"""Batched simulator: ``B`` independent environments of one scenario stepped together.

:class:`BatchedEdgeClusters` holds the state of ``B`` episodes of one scenario as a struct
of arrays (one row per environment) and applies a joint action to any subset of them in one
call. Every environment behaves *exactly* like an :class:`~envs.gym_env.EdgeClustersEnv`
(that is :class:`~envs.core.Simulator` + :func:`~envs.joint_action.apply_joint_action` +
:class:`~envs.observation.ObservationBuilder`) reset with the same workload seed and given
the same actions: observations (bit for bit), rewards, per-agent rewards, termination,
truncation, step counts and per-task records are identical; ``tests/test_batched_env.py``
checks this property over random scenarios and random (also invalid) actions.
``envs/core.py`` is the readable reference; read it first. This module re-states the same
rules over arrays:

* Task arrays are flat over ``(env, task)``: the global id of task ``k`` of environment ``b``
  is ``b * T + k``; index ``B * T`` (``-1``) is a *sentinel* task (type ``K``, no
  allocation), so gathering with the ``-1`` of an empty pending or run slot reads harmless
  values without masking.
* Waiting lists are not stored. ``waiting[b, i]`` is "arrived, eligible for ``i``, not
  started", so its length is ``eligible arrivals - eligible placements`` (a cumulative count
  per task id and a counter), and the pending refill scans forward from a per
  ``(env, cluster)`` *frontier* ``q``: every waiting task of the cluster with id ``< q`` is in
  its pending set (the pending set is a prefix of the waiting list, arrivals get larger ids,
  and only placements remove tasks). A refill compacts the remaining pending entries (their
  order is kept) and appends the next waiting tasks from ``q`` on. ``q`` never moves back, so
  the scan costs O(1) amortised per task and cluster, whatever the queue length.
* Joint actions follow :func:`envs.joint_action.apply_joint_action` rule for rule, agents in
  index order, each environment against its pending sets as the step began (a placed task
  leaves the pending sets once every agent of that environment has been read).
* Run slots are a ``(B, N, S)`` array with each environment's simulator row width (``M``,
  widened by ``M`` when a row is full, exactly as :meth:`Simulator.commit_placement` does);
  ``S`` is the largest width plus room for one widening. The observation shows the slots
  as they are when the width is ``M``, and the first ``M`` occupied ones otherwise. A running
  task's hot state (type, allocation, previous real step's allocation, start, progress) lives
  in its run slot, so the per-step passes read memory in order. The joint-action API never
  re-sizes a running task, so its allocation is its first allocation, the switching overhead
  is kept (``last_alloc`` semantics) but never triggers, and ``records()`` derives
  ``Simulator.alloc_time`` as ``first allocation x real steps run``.
* Progress gains are computed with the scenario's :class:`~envs.progress.ProgressTable` (or
  the per-type functions) in numpy, for all running tasks of all advancing environments at
  once, with the same float operations as :meth:`Simulator._progress`. With
  ``progress_noise > 0`` each environment owns its noise ``Generator`` (the simulator's
  ``noise`` stream of its seed), so the noise draws loop over the advancing environments
  that run tasks -- the one per-environment Python loop of :meth:`BatchedEdgeClusters.step`.
* The per-element bookkeeping (joint-action rules and placements, gathering running tasks,
  completions, refills, observation assembly) runs in small ``numba.njit(cache=True)``
  kernels that do integer work and copy floats from look-up tables built once with the same
  numpy expressions as :class:`~envs.observation.ObservationBuilder`, from the same
  :class:`~envs.observation.ObservationTables`; they never compute a float themselves, so every
  observation is bit-identical. Feature columns come from :class:`~envs.observation.FeatureColumns`
  (passed to the kernels as plain ints). The kernels are compiled on first
  use in a fresh checkout (a few seconds, once) and loaded from numba's on-disk cache after.

Resets (:meth:`BatchedEdgeClusters.reset`) draw each workload with
:func:`envs.workload.generate_workload` (one Python call per environment; not the hot path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .config import ScenarioConfig
from .core import DONE, RUNNING, ProgressStep
from .durations import start_gate
from .gym_env import resolve_scenario
from .joint_action import ActionShapeError, integer_array
from .metrics import jct_terms, mean_jct
from .observation import CLUSTER_FEATURES, ObservationSpec, ObservationTables
from .progress import DONE_THRESHOLD, build_progress_functions
from .workload import generate_workload, rng_streams

STEP_INFO = ("placed", "void", "invalid", "conflicts")
#: per-episode ``ep_<k>`` info keys: :func:`envs.metrics.episode_metrics`'s (one definition), then
#: ``length`` (logical steps) last
EPISODE_INFO = ("mean_jct", "num_finished", "num_unfinished", "truncated", "steps", "conflicts", "invalid",
                "cpu_util", "gpu_util", "length")


try:  # numba ships with tianshou; without it the kernels run as (slow, identical) Python
    from numba import njit as _njit

    def _kernel(fn):
        return _njit(cache=True, nogil=True)(fn)
except ImportError:  # pragma: no cover
    def _kernel(fn):
        return fn


# Kernels: integer bookkeeping and table look-ups only (every float they write is copied from a
# table built from ObservationTables with the same numpy expression ObservationBuilder uses, so values
# are bit-identical).
@_kernel
def _refill_kernel(rows, tick, t_all, placed_step, arrival, pending, q, na, elig, status, T):  # pragma: no cover
    """(``tick``: ``t += 1`` and a new real step for placements), admit arrivals (``arrival <= t``,
    sorted), then compact each pending row (order kept) and append the next waiting tasks from ``q`` on."""
    N, P = pending.shape[1], pending.shape[2]
    for r in range(rows.size):
        b = rows[r]
        if tick:
            t_all[b] += 1
            for i in range(N):
                placed_step[b, i] = False
        base = b * T
        end = na[b]
        t = t_all[b]
        while end < T and arrival[base + end] <= t:
            end += 1
        na[b] = end
        for i in range(N):
            k = 0
            for p in range(P):
                v = pending[b, i, p]
                if v >= 0:
                    pending[b, i, k] = v
                    k += 1
            qq = q[b, i]
            while k < P and qq < end:
                g = base + qq
                if elig[g, i] and status[g] == 0:
                    pending[b, i, k] = g
                    k += 1
                qq += 1
            for p in range(k, P):
                pending[b, i, p] = -1
            q[b, i] = qq


@_kernel
def _apply_kernel(ids, act, pending, free, placed_step, single, ttype, type_min, max_alloc, g1, num_alloc,
                  status, cluster, start, t_all, first_alloc, elig, wplaced, run, rinfo, rprog, width, M,
                  out_placed, out_invalid, out_conflicts, tot_invalid, tot_conflicts, logical):  # pragma: no cover
    """:func:`envs.joint_action.apply_joint_action` for each environment, rule for rule."""
    R, N, P = act.shape[0], pending.shape[1], pending.shape[2]
    taken = np.empty(N, dtype=np.int64)
    for r in range(R):
        b = ids[r]
        n_placed = 0
        invalid = 0
        conflicts = 0
        for i in range(N):
            slot = act[r, i, 0]
            a = act[r, i, 1]
            lost = act[r, i, 2]
            if lost == 1:
                conflicts += 1
                continue
            if not (0 <= slot < P and 0 <= a < num_alloc and lost == 0):
                invalid += 1
                continue
            if a == 0:
                continue
            task = pending[b, i, slot]  # cluster i's row is unchanged until this env's loop ends
            if task < 0:
                invalid += 1
                continue
            dup = False
            for k in range(n_placed):
                if taken[k] == task:
                    dup = True
            if dup:
                conflicts += 1
                continue
            cpu = a // g1
            gpu = a - cpu * g1
            ty = ttype[task]
            if (cpu < type_min[ty, 0] or gpu < type_min[ty, 1] or cpu > min(free[b, i, 0], max_alloc[0])
                    or gpu > min(free[b, i, 1], max_alloc[1]) or (single and placed_step[b, i])):
                invalid += 1
                continue
            # Simulator.commit_placement
            status[task] = RUNNING
            cluster[task] = i
            start[task] = t_all[b]
            first_alloc[task, 0] = cpu
            first_alloc[task, 1] = gpu
            free[b, i, 0] -= cpu
            free[b, i, 1] -= gpu
            for j in range(N):
                if elig[task, j]:
                    wplaced[b, j] += 1
            w = width[b]
            s = w
            for ss in range(w):
                if run[b, i, ss] < 0:
                    s = ss
                    break
            if s == w:  # the simulator widens every row of this env by M
                width[b] = w + M
            run[b, i, s] = task
            # the running task's record lives in its run slot: type, allocation, previous
            # real step's allocation (starting is not a switch), start, progress
            rinfo[b, i, s, 0] = ty
            rinfo[b, i, s, 1] = cpu
            rinfo[b, i, s, 2] = gpu
            rinfo[b, i, s, 3] = cpu
            rinfo[b, i, s, 4] = gpu
            rinfo[b, i, s, 5] = t_all[b]
            rprog[b, i, s] = 0.0
            placed_step[b, i] = True
            taken[n_placed] = task
            n_placed += 1
        if n_placed:
            for j in range(N):  # the placed tasks leave every pending set
                for p in range(P):
                    g = pending[b, j, p]
                    if g >= 0 and status[g] != 0:
                        pending[b, j, p] = -1
        out_placed[r] = n_placed
        out_invalid[r] = invalid
        out_conflicts[r] = conflicts
        tot_invalid[b] += invalid
        tot_conflicts[b] += conflicts
        logical[b] += 1


@_kernel
def _gather_running(rows, run, rinfo, rprog, capacity, free, used, na, nfin, celig, wplaced, T,
                    team, cluster_rewards):  # pragma: no cover - compiled
    """Running tasks of ``rows`` in row-major (env, cluster, slot) order (``pos``: flat run-slot
    index); usage and rewards as :meth:`Simulator.advance` computes them before any progress."""
    A, N, S = rows.size, run.shape[1], run.shape[2]
    n = 0
    for r in range(A):
        b = rows[r]
        team[r] = -np.float64(na[b] - nfin[b])
        for i in range(N):
            used[b, 0] += capacity[i, 0] - free[b, i, 0]
            used[b, 1] += capacity[i, 1] - free[b, i, 1]
            for s in range(S):
                if run[b, i, s] >= 0:
                    n += 1
    pos = np.empty(n, dtype=np.int64)
    types = np.empty(n, dtype=np.int64)
    c = np.empty(n, dtype=np.int64)
    g = np.empty(n, dtype=np.int64)
    lc = np.empty(n, dtype=np.int64)
    lg = np.empty(n, dtype=np.int64)
    p = np.empty(n, dtype=np.float64)
    counts = np.zeros(A, dtype=np.int64)
    k = 0
    for r in range(A):
        b = rows[r]
        for i in range(N):
            n_here = 0
            for s in range(S):
                if run[b, i, s] >= 0:
                    pos[k] = (b * N + i) * S + s
                    types[k] = rinfo[b, i, s, 0]
                    c[k] = rinfo[b, i, s, 1]
                    g[k] = rinfo[b, i, s, 2]
                    lc[k] = rinfo[b, i, s, 3]
                    lg[k] = rinfo[b, i, s, 4]
                    p[k] = rprog[b, i, s]
                    n_here += 1
                    k += 1
            counts[r] += n_here
            queued = np.float64(celig[b * (T + 1) + na[b], i] - wplaced[b, i])
            cluster_rewards[r, i] = -(queued + np.float64(n_here))
    return pos, types, c, g, lc, lg, p, counts


@_kernel
def _apply_progress(pos, c, g, p, done_threshold, t_all, run, rinfo, rprog, status, finish, nfin, free):  # pragma: no cover - compiled
    """Store new progress; completions free their resources and run slots (integer bookkeeping)."""
    N, S = run.shape[1], run.shape[2]
    for k in range(pos.size):
        ps = pos[k]
        b = ps // (N * S)
        i = (ps // S) % N
        s = ps % S
        rprog[b, i, s] = p[k]
        rinfo[b, i, s, 3] = c[k]  # last_alloc = alloc
        rinfo[b, i, s, 4] = g[k]
        if p[k] >= done_threshold:
            x = run[b, i, s]
            status[x] = DONE
            finish[x] = t_all[b] + 1
            nfin[b] += 1
            free[b, i, 0] += c[k]
            free[b, i, 1] += g[k]
            run[b, i, s] = -1


@_kernel
def _end_kernel(ids, na, nfin, t_all, T, max_steps, over, terminated, truncated, end):  # pragma: no cover
    """``done`` / ``truncated`` of :class:`Simulator`; an ended episode is marked over."""
    for r in range(ids.size):
        b = ids[r]
        term = na[b] >= T and nfin[b] == na[b]
        trunc = (not term) and t_all[b] >= max_steps
        terminated[r] = term
        truncated[r] = trunc
        end[r] = term or trunc
        if term or trunc:
            over[b] = True


@_kernel
def _observe_kernel(ids, t_all, pending, run, width, free_all, placed_step, single, xrow, xtable, arrival, time_log,
                    ttype, type_min, gate, slot_of, atab, rtable, rinfo, rprog, celig, na_all, wplaced, T,
                    fxtab, qlog, rtab, template, max_alloc,
                    time_col, cpu_col, gpu_col, progress_col, free_cpu_col, free_gpu_col, queue_col, running_col,
                    pending_x, pmask, pwhere, pmin, ahigh, feas, running_x, rmask, cluster_x):  # pragma: no cover
    """The observations of ``ids``. Whole rows are copied from tables (``xtable``: a pending task's
    static row, ``rtable``: a running task's by type, ``template``: a cluster's), then the
    per-step features are written at their columns (the ``*_col`` arguments,
    :class:`~envs.observation.FeatureColumns`)."""
    R = ids.size
    N, P = pending.shape[1], pending.shape[2]
    S = run.shape[2]
    M = rmask.shape[2]
    Fp = xtable.shape[1]
    Fr = running_x.shape[3]
    Fc = cluster_x.shape[2]
    for r in range(R):
        b = ids[r]
        t = t_all[b]
        base = b * T
        # scatter slots of this env's pending tasks (scratch indexed by local task id)
        for i in range(N):
            for p in range(P):
                g = pending[b, i, p]
                if g >= 0:
                    slot_of[g - base, i] = p
        for i in range(N):
            hc = min(free_all[b, i, 0], max_alloc[0])
            hg = min(free_all[b, i, 1], max_alloc[1])
            ahigh[r, i, 0] = hc
            ahigh[r, i, 1] = hg
            blocked = single and placed_step[b, i]
            occupied = 0
            for p in range(P):
                g = pending[b, i, p]
                row = xrow[g]
                for f in range(Fp):
                    pending_x[r, i, p, f] = xtable[row, f]
                k = ttype[g]
                pmin[r, i, p, 0] = type_min[k, 0]
                pmin[r, i, p, 1] = type_min[k, 1]
                if g >= 0:
                    occupied += 1
                    pmask[r, i, p] = 1
                    pending_x[r, i, p, time_col] = time_log[t - arrival[g]]
                    for j in range(N):
                        pwhere[r, i, p, j] = slot_of[g - base, j]
                    feas[r, i, p] = 1 if (gate[i, hc, hg, k] and not blocked) else 0
                else:
                    pmask[r, i, p] = 0
                    for j in range(N):
                        pwhere[r, i, p, j] = -1
                    feas[r, i, p] = 0
            # running slots: the simulator's slots when its row width is M, else the first M occupied
            packed = width[b] != M
            m = 0
            n_run = 0
            for s in range(S):
                if m == M:
                    break
                g = run[b, i, s]
                if g < 0:
                    if packed:
                        continue
                    rmask[r, i, m] = 0
                    for f in range(Fr):
                        running_x[r, i, m, f] = 0.0
                    m += 1
                    continue
                rmask[r, i, m] = 1
                k = rinfo[b, i, s, 0]
                for f in range(Fr):
                    running_x[r, i, m, f] = rtable[k, f]
                running_x[r, i, m, cpu_col] = atab[rinfo[b, i, s, 1], 0]
                running_x[r, i, m, gpu_col] = atab[rinfo[b, i, s, 2], 1]
                running_x[r, i, m, time_col] = time_log[t - rinfo[b, i, s, 5]]
                running_x[r, i, m, progress_col] = np.float32(rprog[b, i, s])
                m += 1
                n_run += 1
            for mm in range(m, M):
                rmask[r, i, mm] = 0
                for f in range(Fr):
                    running_x[r, i, mm, f] = 0.0
            for f in range(Fc):
                cluster_x[r, i, f] = template[i, f]
            cluster_x[r, i, free_cpu_col] = fxtab[free_all[b, i, 0], 0]
            cluster_x[r, i, free_gpu_col] = fxtab[free_all[b, i, 1], 1]
            waiting = celig[b * (T + 1) + na_all[b], i] - wplaced[b, i]
            cluster_x[r, i, queue_col] = qlog[waiting - occupied]
            cluster_x[r, i, running_col] = rtab[n_run]
        for i in range(N):
            for p in range(P):
                g = pending[b, i, p]
                if g >= 0:
                    slot_of[g - base, i] = -1



def empty_info(r: int, n: int) -> dict[str, np.ndarray]:
    """The ``info`` of ``r`` environments with ``n`` agents before anything happened: every key of
    :attr:`BatchStep.info` (the schema of every step and reset), all zero."""
    info: dict[str, np.ndarray] = {"agent_rewards": np.zeros((r, n), dtype=np.float64)}
    for k in STEP_INFO:
        info[k] = np.zeros(r, dtype=np.int64)
    info["advanced"] = np.zeros(r, dtype=bool)
    info["episode_end"] = np.zeros(r, dtype=bool)
    for k in EPISODE_INFO:
        info["ep_" + k] = np.zeros(r, dtype=np.float64)
    info["workload_seed"] = np.zeros(r, dtype=np.int64)
    return info


@dataclass
class BatchStep:
    """Result of :meth:`BatchedEdgeClusters.step` for the ``R`` stepped environments."""

    obs: dict[str, np.ndarray]
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    info: dict[str, np.ndarray]


def _as_actions(actions: Any, r: int, n: int) -> np.ndarray:
    """``(R, N, 3)`` int64 actions, or :class:`ActionShapeError` (same rules as one env)."""
    try:
        arr = integer_array(actions)
        if arr.shape != (r, n, 3):
            raise ValueError(f"shape {arr.shape}")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
    except (TypeError, ValueError) as exc:
        raise ActionShapeError(
            f"joint actions must be an integer array of shape ({r}, {n}, 3) [slot, allocation, lost]: {exc}"
        ) from None
    return arr


class BatchedEdgeClusters:
    """B environments of one scenario, stepped together (see module docstring).

    Args:
        scenario: a scenario name, YAML path or :class:`~envs.config.ScenarioConfig`.
        num_envs: ``B``.
        overrides, evaluation: as for :class:`~envs.gym_env.EdgeClustersEnv`
            (resolved by :func:`envs.gym_env.resolve_scenario`).

    ``reset(env_ids, seeds)`` starts episodes (``env_ids=None``: all) with these workload
    seeds, like ``EdgeClustersEnv.reset(seed=s)``, and returns their observations.
    ``step(actions, env_ids=None)`` applies ``(R, N, 3)`` joint actions to the listed
    environments (in that order; the others do not change) and returns a :class:`BatchStep`:
    ``obs`` (``R``-leading arrays of every :data:`envs.observation.KEYS` key), ``reward``,
    ``terminated``, ``truncated`` and ``info`` with ``agent_rewards`` ``(R, N)``, the
    :data:`STEP_INFO` counts, ``advanced``, ``episode_end``, ``ep_<k>`` for ``k`` in
    :data:`EPISODE_INFO` (0.0 unless the episode ended there; a NaN ``mean_jct`` reads 0.0,
    ``ep_length`` counts logical steps) and ``workload_seed``. Stepping an environment whose
    episode is over, or that was never reset, raises ``RuntimeError``; actions that are not
    ``(R, N, 3)`` integers raise :class:`~envs.joint_action.ActionShapeError`.
    """

    def __init__(
        self,
        scenario: str | ScenarioConfig,
        num_envs: int,
        overrides: Sequence[str] | Mapping[str, Any] = (),
        evaluation: bool = False,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        cfg = resolve_scenario(scenario, overrides, evaluation)
        self.cfg = cfg
        self.num_envs = B = int(num_envs)
        self.obs_spec = spec = ObservationSpec.from_config(cfg)
        self.progress_step = ProgressStep(cfg, build_progress_functions(cfg))
        N, P, M, K = spec.N, spec.P, spec.M, spec.K
        self.N, self.P, self.M, self.K = N, P, M, K
        self.T = T = cfg.num_tasks
        self.single = cfg.mode == "single"
        self._team = cfg.reward == "team"
        self.capacity = np.array(cfg.capacities, dtype=np.int64)  # (N, 2)
        self.min_req = np.array([t.min_req for t in cfg.task_types], dtype=np.int64)  # (K, 2)
        self.max_alloc = np.array(cfg.per_task_max, dtype=np.int64)
        self.g1 = cfg.alloc_dims[1]
        self.num_alloc = cfg.num_allocations
        c1, g1 = cfg.alloc_dims
        type_min = np.zeros((K + 1, 2), dtype=np.int64)  # row K: the sentinel / empty slot
        type_min[:K] = self.min_req
        self._type_min = type_min

        # ---- observation tables: the builder's own constants (ObservationTables), so values are bit-identical
        self.columns = col = spec.columns
        self.tables = tab = ObservationTables.from_spec(spec)
        # static pending row by (type, reach): the builder's per-task rows, tabulated
        xt = np.zeros((K + 1, N + 1, spec.Fp), dtype=np.float32)
        xt[:K, :, col.resources] = (self.min_req * tab.inv_per_task_max)[:, None, :]
        xt[:K, :, col.types] = tab.type_onehot[:K, None, :]
        xt[:K, :, col.reach] = (np.arange(N + 1) / N)[None, :]
        xt[K, :, col.dummy] = 1.0
        self._gate = start_gate(cfg, self.progress_step.functions)  # (N, C1, G1, K + 1): feasible by alloc_high
        self._xtable2 = xt.reshape((K + 1) * (N + 1), spec.Fp)
        # static running row by type: the type one-hot (row K: an empty slot, zeros)
        self._rtable = np.zeros((K + 1, spec.Fr), dtype=np.float32)
        self._rtable[:, col.types] = tab.type_onehot
        self._queue_log = np.log1p(np.arange(T + 1, dtype=np.float64)) * tab.log_scale
        # float features as look-up tables, each built with the builder's own expression
        v = max(c1, g1)
        self._atab = (np.arange(v, dtype=np.int64)[:, None] * tab.inv_per_task_max).astype(np.float32)
        s_max = int(self.capacity.max())
        self._fxtab = (np.arange(s_max + 1, dtype=np.int64)[:, None] * tab.inv_scale).astype(np.float32)
        self._rtab = (np.arange(M + 1, dtype=np.int64) * tab.inv_running_slots).astype(np.float32)
        template = np.zeros((N, CLUSTER_FEATURES), dtype=np.float32)
        template[:, col.capacity] = self.capacity.astype(np.float32) * tab.inv_scale
        self._cluster_template = template

        # ---- state: flat task arrays with a sentinel at index B*T (read through -1)
        BT = B * T
        self._ttype = np.full(BT + 1, K, dtype=np.int32)  # hot per-task arrays are int32: fewer cache lines
        self._arrival = np.zeros(BT + 1, dtype=np.int64)
        self._xrow = np.full(BT + 1, K * (N + 1), dtype=np.int32)  # row of _xtable2: type * (N + 1) + reach
        self._elig = np.zeros((BT + 1, N), dtype=bool)
        self._celig = np.zeros((B * (T + 1), N), dtype=np.int32)  # eligible arrivals before id k
        self._status = np.zeros(BT + 1, dtype=np.int8)  # 0: not started, RUNNING, DONE
        self._start = np.full(BT + 1, -1, dtype=np.int64)
        self._finish = np.full(BT + 1, -1, dtype=np.int64)
        self._cluster = np.full(BT + 1, -1, dtype=np.int64)
        self._first_alloc = np.zeros((BT + 1, 2), dtype=np.int64)
        self._slot_of = np.full((T, N), -1, dtype=np.int8)  # scratch for pending_where (local ids)
        # per environment
        self._t = np.zeros(B, dtype=np.int64)
        self._na = np.zeros(B, dtype=np.int64)  # next_arrival
        self._nfin = np.zeros(B, dtype=np.int64)
        self._pending = np.full((B, N, P), -1, dtype=np.int64)
        self._q = np.zeros((B, N), dtype=np.int64)  # refill frontier (local task id)
        self._run = np.full((B, N, M), -1, dtype=np.int64)
        # record of the task in each run slot: type, cpu, gpu, last cpu, last gpu, start; progress
        self._rinfo = np.zeros((B, N, M, 6), dtype=np.int64)
        self._rprog = np.zeros((B, N, M), dtype=np.float64)
        self._width = np.full(B, M, dtype=np.int64)  # each simulator's run_slots width (grows by M)
        self._free = np.tile(self.capacity, (B, 1, 1))
        self._placed_step = np.zeros((B, N), dtype=bool)
        self._wplaced = np.zeros((B, N), dtype=np.int64)  # placed tasks eligible at each cluster
        self._conflicts = np.zeros(B, dtype=np.int64)
        self._invalid = np.zeros(B, dtype=np.int64)
        self._used = np.zeros((B, 2), dtype=np.int64)  # sum over real steps of resources in use
        self._logical = np.zeros(B, dtype=np.int64)
        self._seed = np.zeros(B, dtype=np.int64)
        self._active = np.zeros(B, dtype=bool)  # reset at least once
        self._over = np.ones(B, dtype=bool)
        self._rng_noise: list[np.random.Generator | None] = [None] * B
        self._all = np.arange(B)

    # ------------------------------------------------------------------ helpers
    def env_ids(self, env_ids: Any) -> np.ndarray:
        """``env_ids`` as a checked int64 array (``None``: all); ``ValueError`` if out of range or repeated."""
        if env_ids is None:
            return self._all
        ids = np.asarray(env_ids).reshape(-1)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        if ids.dtype.kind not in "iu":
            raise ValueError(f"env_ids must be integers, got {env_ids!r}")
        ids = ids.astype(np.int64, copy=False)
        if ids.min() < 0 or ids.max() >= self.num_envs:
            raise ValueError(f"env_ids out of range [0, {self.num_envs})")
        if np.unique(ids).size != ids.size:
            raise ValueError("env_ids must not repeat")
        return ids

    def real_time(self, env_ids: Any = None) -> np.ndarray:
        """The real time (steps of the simulator clock) of environments ``env_ids`` (None: all)."""
        return self._t[self.env_ids(env_ids)].copy()

    # ------------------------------------------------------------------ reset
    def reset(self, env_ids: Any, seeds: Any) -> dict[str, np.ndarray]:
        """Start new episodes in ``env_ids`` with these workload seeds; returns their observations."""
        ids = self.env_ids(env_ids)
        seeds = np.asarray(seeds).reshape(-1)
        if seeds.size != ids.size:
            raise ValueError(f"got {seeds.size} seeds for {ids.size} environments")
        T, N, M = self.T, self.N, self.M
        for b, s in zip(ids.tolist(), seeds.tolist()):
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ValueError(f"workload seeds must be integers >= 0, got {s!r}")
            streams = rng_streams(s)
            w = generate_workload(self.cfg, streams)
            self._rng_noise[b] = streams["noise"]
            sl = slice(b * T, (b + 1) * T)
            self._ttype[sl] = w.task_type
            self._arrival[sl] = w.arrival
            self._elig[sl] = w.eligible
            self._xrow[sl] = w.task_type * (N + 1) + w.eligible.sum(axis=1)  # (type, reach) row
            cel = self._celig[b * (T + 1):(b + 1) * (T + 1)]
            cel[0] = 0
            np.cumsum(w.eligible, axis=0, out=cel[1:])
            self._seed[b] = s
        if ids.size:
            tasks = (ids[:, None] * T + np.arange(T)[None, :]).ravel()
            self._status[tasks] = 0
            self._start[tasks] = -1
            self._finish[tasks] = -1
            self._cluster[tasks] = -1
            self._first_alloc[tasks] = 0
            self._t[ids] = 0
            self._na[ids] = 0
            self._nfin[ids] = 0
            self._pending[ids] = -1
            self._q[ids] = 0
            self._run[ids] = -1
            self._width[ids] = M
            self._free[ids] = self.capacity
            self._placed_step[ids] = False
            self._wplaced[ids] = 0
            self._conflicts[ids] = 0
            self._invalid[ids] = 0
            self._used[ids] = 0
            self._logical[ids] = 0
            self._active[ids] = True
            self._over[ids] = False
            self._refill(ids)
        return self._observe(ids)

    # ------------------------------------------------------------------ step
    def step(self, actions: Any, env_ids: Any = None) -> BatchStep:
        """Apply ``actions`` ``(R, N, 3)`` to environments ``env_ids`` (None: all, in order)."""
        ids = self.env_ids(env_ids)
        R, N = ids.size, self.N
        act = _as_actions(actions, R, N)
        if not np.all(self._active[ids] & ~self._over[ids]):
            raise RuntimeError("the episode is over (or never started): call reset() first")
        if R == 0:
            return self._empty_step()
        if self._run.shape[2] < int(self._width.max()) + self.M:  # room for one widening per env
            B, M = self.num_envs, self.M
            self._run = np.concatenate([self._run, np.full((B, N, M), -1, dtype=np.int64)], axis=2)
            self._rinfo = np.concatenate([self._rinfo, np.zeros((B, N, M, 6), dtype=np.int64)], axis=2)
            self._rprog = np.concatenate([self._rprog, np.zeros((B, N, M))], axis=2)
        n_placed = np.empty(R, dtype=np.int64)
        n_inv = np.empty(R, dtype=np.int64)
        n_conf = np.empty(R, dtype=np.int64)
        _apply_kernel(
            ids, act, self._pending, self._free, self._placed_step, self.single, self._ttype, self._type_min,
            self.max_alloc, self.g1, self.num_alloc, self._status, self._cluster, self._start, self._t,
            self._first_alloc, self._elig, self._wplaced, self._run, self._rinfo, self._rprog, self._width,
            self.M, n_placed, n_inv, n_conf, self._invalid, self._conflicts, self._logical,
        )
        adv = np.ones(R, dtype=bool) if self.single else n_placed == 0
        reward = np.zeros(R, dtype=np.float64)
        agent_rewards = np.zeros((R, N), dtype=np.float64)
        if adv.any():
            rows = ids[adv]
            team, cluster_rewards = self._advance(rows)
            if self._team:
                reward[adv] = team
                agent_rewards[adv] = team[:, None]
            else:
                agent_rewards[adv] = cluster_rewards
                reward[adv] = cluster_rewards.sum(axis=1)
        terminated = np.empty(R, dtype=bool)
        truncated = np.empty(R, dtype=bool)
        end = np.empty(R, dtype=bool)
        _end_kernel(ids, self._na, self._nfin, self._t, self.T, self.cfg.max_steps, self._over, terminated, truncated, end)
        info = empty_info(R, N)
        info.update(agent_rewards=agent_rewards, placed=n_placed, void=N - n_placed, invalid=n_inv,
                    conflicts=n_conf, advanced=adv, episode_end=end)
        if end.any():
            rows = ids[end]
            for k, v in self._metrics(rows).items():
                info["ep_" + k][end] = np.nan_to_num(v, nan=0.0)
        info["workload_seed"] = self._seed[ids]  # fancy indexing: a copy
        return BatchStep(self._observe(ids), reward, terminated, truncated, info)

    # ------------------------------------------------------------------ time
    def _empty_step(self) -> BatchStep:
        none = np.zeros(0, dtype=np.int64)
        return BatchStep(self._observe(none), np.zeros(0), np.zeros(0, dtype=bool), np.zeros(0, dtype=bool),
                         empty_info(0, self.N))

    def _advance(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One real step of the environments ``rows``; returns (team, per-cluster) rewards."""
        team = np.empty(rows.size, dtype=np.float64)
        cluster_rewards = np.empty((rows.size, self.N), dtype=np.float64)
        pos, types, c, g, lc, lg, p, counts = _gather_running(
            rows, self._run, self._rinfo, self._rprog, self.capacity, self._free, self._used, self._na, self._nfin,
            self._celig, self._wplaced, self.T, team, cluster_rewards,
        )
        if pos.size:
            p = self._new_progress(types, c, g, lc, lg, p, counts, rows)
            _apply_progress(
                pos, c, g, p, DONE_THRESHOLD, self._t, self._run, self._rinfo, self._rprog, self._status,
                self._finish, self._nfin, self._free,
            )
        self._refill(rows, tick=True)
        return team, cluster_rewards

    def _new_progress(self, types, c, g, lc, lg, p, counts, rows) -> np.ndarray:
        """New progress of running tasks: :class:`~envs.core.ProgressStep`, the simulator's rule."""

        def draw_noise(k: int) -> np.ndarray:
            # per-environment generators, in row order: the one loop over environments
            draws = np.empty(k)
            o = 0
            for b, n in zip(rows.tolist(), counts.tolist()):
                if n:
                    draws[o:o + n] = self._rng_noise[b].random(n)
                    o += n
            return draws

        return p + self.progress_step.gain(types, c, g, p, lc, lg, draw_noise)

    def _refill(self, rows: np.ndarray, tick: bool = False) -> None:
        """Arrivals up to ``t``, then the pending sets of ``rows``: remaining entries compacted,
        then the next waiting tasks (:meth:`Simulator._admit_arrivals` + ``_refill``)."""
        _refill_kernel(rows, tick, self._t, self._placed_step, self._arrival, self._pending, self._q, self._na,
                       self._elig, self._status, self.T)

    # ------------------------------------------------------------------ observation
    def observe(self, env_ids: Any = None) -> dict[str, np.ndarray]:
        """The current observations of ``env_ids`` (fresh arrays, ``(R, ...)`` per key)."""
        ids = self.env_ids(env_ids)
        if not np.all(self._active[ids]):
            raise RuntimeError("call reset() first")
        return self._observe(ids)

    def _observe(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        col = self.columns
        R, N, P, M = ids.size, self.N, self.P, self.M
        out = {
            "pending_x": np.empty((R, N, P, col.pending_features), dtype=np.float32),
            "pending_mask": np.empty((R, N, P), dtype=np.int8),
            "pending_where": np.empty((R, N, P, N), dtype=np.int8),
            "pending_min": np.empty((R, N, P, 2), dtype=np.int64),
            "alloc_high": np.empty((R, N, 2), dtype=np.int64),
            "feasible": np.empty((R, N, P), dtype=np.int8),
            "running_x": np.empty((R, N, M, col.running_features), dtype=np.float32),
            "running_mask": np.empty((R, N, M), dtype=np.int8),
            "cluster_x": np.empty((R, N, col.cluster_features), dtype=np.float32),
        }
        _observe_kernel(
            ids, self._t, self._pending, self._run, self._width, self._free, self._placed_step, self.single, self._xrow,
            self._xtable2, self._arrival, self.tables.time_log, self._ttype, self._type_min, self._gate, self._slot_of,
            self._atab, self._rtable, self._rinfo, self._rprog, self._celig, self._na,
            self._wplaced, self.T, self._fxtab, self._queue_log, self._rtab, self._cluster_template,
            self.max_alloc, col.time, col.cpu, col.gpu, col.progress,
            col.free_cpu, col.free_gpu, col.queue, col.running_tasks, *out.values(),
        )
        out["multi_mode"] = np.full((R, 1), not self.single, dtype=np.int8)
        return out

    # ------------------------------------------------------------------ results
    def _metrics(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """:data:`EPISODE_INFO` of the environments ``rows`` as float64 arrays (JCT terms:
        :func:`envs.metrics.jct_terms`, the definition the single env uses)."""
        nfin = self._nfin[rows]
        steps = self._t[rows]
        T = self.T
        flat = rows[:, None] * T + np.arange(T)
        time_sum, fin, unfin = jct_terms(self._arrival[flat], self._finish[flat], self._na[rows], steps)
        with np.errstate(invalid="ignore", divide="ignore"):
            util = self._used[rows] / self.capacity.sum(axis=0) / np.maximum(steps, 1)[:, None]
        util[steps == 0] = 0.0
        return {
            "mean_jct": mean_jct(time_sum, fin, unfin),
            "num_finished": nfin.astype(np.float64),
            "num_unfinished": unfin.astype(np.float64),
            "truncated": (nfin < T).astype(np.float64),
            "steps": steps.astype(np.float64),
            "conflicts": self._conflicts[rows].astype(np.float64),
            "invalid": self._invalid[rows].astype(np.float64),
            "cpu_util": util[:, 0],
            "gpu_util": util[:, 1],
            "length": self._logical[rows].astype(np.float64),
        }

    def running_mean_jct(self) -> np.ndarray:
        """Per environment, the mean JCT of its current episode so far (:func:`envs.metrics.mean_jct`
        at the current real step: unfinished arrived tasks count their time until now; NaN before the
        episode's first real step, where every arrived task has spent 0 steps)."""
        return np.where(self._t > 0, self._metrics(np.arange(self.num_envs))["mean_jct"], np.nan)

    def episode_metrics(self, env_id: int) -> dict[str, Any]:
        """:func:`envs.metrics.episode_metrics` of that environment (the same keys and values)."""
        b = int(env_id)
        m = self._metrics(np.array([b]))
        return {
            "mean_jct": float(m["mean_jct"][0]),
            "num_finished": int(self._nfin[b]),
            "num_unfinished": int(m["num_unfinished"][0]),
            "truncated": bool(m["truncated"][0]),
            "steps": int(self._t[b]),
            "conflicts": int(self._conflicts[b]),
            "invalid": int(self._invalid[b]),
            "cpu_util": float(m["cpu_util"][0]),
            "gpu_util": float(m["gpu_util"][0]),
        }

    def records(self, env_id: int) -> dict[str, np.ndarray]:
        """Per-task results of that environment, like :meth:`envs.core.Simulator.records`."""
        b = int(env_id)
        if not 0 <= b < self.num_envs:
            raise ValueError(f"env_id {env_id} out of range")
        n = int(self._na[b])
        sl = slice(b * self.T, b * self.T + n)
        t = int(self._t[b])
        arrival, start, finish = self._arrival[sl], self._start[sl], self._finish[sl]
        finished = finish >= 0
        jct = np.where(finished, finish - arrival, -1)
        # allocations never change after a placement, and a running task gains progress (and
        # allocation time) at every real step from its start: Simulator.alloc_time, exactly
        ran = np.where(start >= 0, np.where(finished, finish - start, t - start), 0)
        alloc_time = self._first_alloc[sl] * ran[:, None]
        span = np.maximum(np.where(finished, finish - start, t - start), 1)
        return {
            "task_id": np.arange(n),
            "type": self._ttype[sl].astype(np.int64),
            "arrival": arrival.copy(),
            "start": start.copy(),
            "finish": finish.copy(),
            "jct": jct,
            "cluster": self._cluster[sl].copy(),
            "cpu": self._first_alloc[sl, 0].copy(),
            "gpu": self._first_alloc[sl, 1].copy(),
            "avg_cpu": np.where(start >= 0, alloc_time[:, 0] / span, 0.0),
            "avg_gpu": np.where(start >= 0, alloc_time[:, 1] / span, 0.0),
            "switches": np.zeros(n, dtype=np.int64),  # a placement is never re-sized here
        }

    def state_of(self, env_id: int) -> dict[str, Any]:
        """Bookkeeping of one environment in :class:`~envs.core.Simulator` terms (for tests)."""
        b = int(env_id)
        T = self.T
        sl = slice(b * T, (b + 1) * T)
        base = b * T

        def local(x: np.ndarray) -> np.ndarray:
            return np.where(x >= 0, x - base, -1)

        status = self._status[sl].copy()
        n = int(self._na[b])
        status_sim = status.copy()
        status_sim[:n][status[:n] == 0] = 1  # arrived, not started: WAITING
        w = int(self._width[b])  # slots beyond the env's width are always empty
        run = local(self._run[b, :, :w])
        return {
            "t": int(self._t[b]),
            "next_arrival": n,
            "num_finished": int(self._nfin[b]),
            "status": status_sim.astype(np.int8),
            "free": self._free[b].copy(),
            "pending": local(self._pending[b]),
            "running": [row[row >= 0] for row in run],
            "alloc": self._first_alloc[sl].copy(),  # allocations never change after placement
            "run_progress": self._rprog[b, :, :w].copy(),
            "run_info": self._rinfo[b, :, :w].copy(),
            "placed_this_step": self._placed_step[b].copy(),
            "conflicts": int(self._conflicts[b]),
            "invalid": int(self._invalid[b]),
        }


def random_valid_actions(obs: dict[str, np.ndarray], gpu_axis: int, rng: np.random.Generator) -> np.ndarray:
    """A random valid joint action per environment, ``(R, N, 3)`` (vectorised over environments).

    Like :func:`envs.joint_action.random_valid_action` (not the same random draws): each agent
    with a feasible slot, in index order, picks one uniformly, skipping tasks a lower-index
    agent of the same environment took (found through ``pending_where``), with a uniform
    allocation in ``[pending_min, alloc_high]``; an agent with nothing feasible sends
    ``[0, 0, 0]``. One ``rng.random((R, N, P + 2))`` draw per call.
    """
    feasible = np.ascontiguousarray(obs["feasible"], dtype=np.int8)
    R, N, P = feasible.shape
    u = rng.random((R, N, P + 2))
    action = np.zeros((R, N, 3), dtype=np.int64)
    _random_valid_kernel(
        feasible, np.ascontiguousarray(obs["pending_where"], dtype=np.int8),
        np.ascontiguousarray(obs["pending_min"], dtype=np.int64), np.ascontiguousarray(obs["alloc_high"], dtype=np.int64),
        u, int(gpu_axis), action,
    )
    return action


@_kernel
def _random_valid_kernel(feasible, where, lo, hi, u, g1, action):  # pragma: no cover - compiled
    R, N, P = feasible.shape
    taken = np.zeros((N, P), dtype=np.bool_)
    for r in range(R):
        for i in range(N):
            best = -1
            best_u = -1.0
            for p in range(P):
                if feasible[r, i, p] and not taken[i, p] and u[r, i, p] > best_u:
                    best = p
                    best_u = u[r, i, p]
            if best < 0:
                continue
            span_c = hi[r, i, 0] - lo[r, i, best, 0] + 1
            span_g = hi[r, i, 1] - lo[r, i, best, 1] + 1
            c = lo[r, i, best, 0] + min(int(u[r, i, P] * span_c), span_c - 1)
            g = lo[r, i, best, 1] + min(int(u[r, i, P + 1] * span_g), span_g - 1)
            action[r, i, 0] = best
            action[r, i, 1] = c * g1 + g
            for j in range(N):
                w = where[r, i, best, j]
                if w >= 0:
                    taken[j, w] = True
        for i in range(N):
            for p in range(P):
                taken[i, p] = False


__all__ = ["STEP_INFO", "EPISODE_INFO", "BatchStep", "BatchedEdgeClusters", "empty_info", "random_valid_actions"]
