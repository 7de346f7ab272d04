"""A contention-aware lower bound on mean JCT: a linear programme over the pooled clusters.

The ``bound`` (:mod:`envs.bound`) credits every task with its fastest duration as if it had
the clusters to itself. When the clusters are loaded that is far below what any scheduler can
reach. This bound keeps the capacity: it relaxes the scheduling problem to a fluid one and
solves it as a time-indexed linear programme (the classic *mean busy time* relaxation).

Per task ``j`` (arrival ``r_j``), ``y[j, t] >= 0`` is the progress it makes in real step ``t``
(zero before ``r_j``), at most ``cap_j`` per step (its type's fastest gain per step over the
allocation grid and progress), summing to 1. In step ``t`` it holds at least
``alpha_j[res] * y[j, t]`` of each resource, where ``alpha_j[res] = min over allocations of
res / gain``: the least amount of that resource per unit of progress rate; the pooled
capacity of all clusters caps the sum. Steps from the horizon ``H`` on are one bucket without
capacity limit, charged at time ``H`` (so a short horizon only loosens the bound). Each task's
completion is at least its mean busy time plus ``1 / (2 cap_j)`` (it cannot progress faster
than ``cap_j``), so ``sum_j (M_j + 1 / (2 cap_j) - r_j)``, minimised over ``y``, is a lower
bound on the total JCT of every schedule, preemptive or not. The result is the larger of it
and :func:`~envs.bound.bound_mean_jct`.

What it leaves out (each only makes it lower, never invalid): cluster boundaries and
reachability (capacity is pooled), integral allocations, one start per cluster per step in
single mode, switching overhead. The fastest gain is taken over the allocation grid and
a grid of :data:`PROGRESS_GRID` progress values (exact for the constant and tanh kinds, whose
gain does not grow with progress).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from .bound import bound_mean_jct
from .core import Simulator
from .durations import duration_table

#: progress values at which each type's gain is evaluated for its fastest rate
PROGRESS_GRID = 1001


def type_rates(sim: Simulator) -> tuple[np.ndarray, np.ndarray]:
    """Per task type: ``cap (K,)``, the fastest gain per step, and ``alpha (K, 2)``, the least
    (CPU, GPU) per unit of gain, over the allocations from the type's minimum to the per-task
    maximum and progress in ``[0, 1)``."""
    table = duration_table(sim.cfg, sim.functions)  # its allocation grid and minimum-requirement gate
    p = np.linspace(0.0, 1.0, PROGRESS_GRID, endpoint=False)
    caps, alphas = [], []
    for k, (fn, ttype) in enumerate(zip(sim.functions, sim.cfg.task_types)):
        ok = table.runnable(k)
        cc, gg = table.cpu[ok], table.gpu[ok]
        gain = np.asarray(fn.delta(np.repeat(cc, p.size), np.repeat(gg, p.size), np.tile(p, cc.size)), dtype=np.float64)
        best = np.nanmax(np.maximum(gain.reshape(cc.size, p.size), 0.0), axis=1)  # (allocations,)
        if not np.any(best > 0):
            raise ValueError(f"task type {ttype.name!r} makes no progress at any allocation")
        run = best > 0
        caps.append(best.max())
        alphas.append([np.min(cc[run] / best[run]), np.min(gg[run] / best[run])])
    return np.array(caps), np.array(alphas, dtype=np.float64)


def contention_bound_mean_jct(sim: Simulator, horizon: int | None = None) -> float:
    """The bound for the workload ``sim`` was last reset to (see the module docstring).

    ``horizon``: the time-indexed steps (default: the last arrival plus the time to process all
    the work at full pooled capacity and the slowest task's fastest duration, at least).
    """
    arrival = np.asarray(sim.arrival, dtype=np.int64)
    ttype = np.asarray(sim.task_type, dtype=np.int64)
    n = arrival.size
    cap_k, alpha_k = type_rates(sim)
    cap, alpha = cap_k[ttype], alpha_k[ttype]  # (n,), (n, 2)
    capacity = np.asarray(sim.cfg.capacities, dtype=np.float64).sum(axis=0)  # pooled (CPU, GPU)
    if horizon is None:
        work = float(np.max(alpha.sum(axis=0) / np.maximum(capacity, 1e-12)))
        horizon = int(arrival.max() + np.ceil(work) + np.ceil(np.max(1.0 / cap)) + 1)
    H = int(horizon)
    if H <= arrival.max():
        raise ValueError(f"horizon {H} must be after the last arrival {int(arrival.max())}")
    # variables: task j's steps r_j .. H-1, then its bucket (time H, no cap, no capacity)
    lengths = H - arrival  # time-indexed steps per task
    starts = np.concatenate([[0], np.cumsum(lengths + 1)])
    nvar = int(starts[-1])
    task = np.repeat(np.arange(n), lengths + 1)
    offset = np.arange(nvar) - starts[task]
    bucket = offset == lengths[task]
    t = arrival[task] + offset
    cost = np.where(bucket, H, t + 0.5).astype(np.float64)
    upper = np.where(bucket, 1.0, np.minimum(cap[task], 1.0))
    a_eq = sp.csr_matrix((np.ones(nvar), (task, np.arange(nvar))), shape=(n, nvar))
    timed = np.flatnonzero(~bucket)
    rows, cols, vals = [], [], []
    for resource in range(2):  # CPU rows 0 .. H-1, GPU rows H .. 2H-1
        rows.append(resource * H + t[timed])
        cols.append(timed)
        vals.append(alpha[task[timed], resource])
    a_ub = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(2 * H, nvar))
    b_ub = np.repeat(capacity, H)
    res = linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.ones(n),
                  bounds=np.stack([np.zeros(nvar), upper], axis=1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"contention bound LP failed: {res.message}")
    total = float(res.fun) + float(np.sum(0.5 / cap)) - float(arrival.sum())
    return max(total / n, bound_mean_jct(sim))
