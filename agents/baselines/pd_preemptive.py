"""``pd-preemptive``: seed 001's A_online / A_greedy with HAPRF preemption, edge-only.

Adaptation of the paper's A_online (typed workers, chunks, HAPRF) to edge clusters:

* Each cluster ``c`` is carved into ``W_c`` identical **bundles** ``b_c`` (the paper's typed
  workers): ``(m_cpu, m_gpu)`` = componentwise max of the task types' minimum requirements,
  ``W_c = min(C_cpu // m_cpu, C_gpu // m_gpu)``, ``b_c = C_c // W_c``. A task's allocation is
  always ``m·b_c`` (``m`` = bundles it heads); any remainder of the cluster stays idle.
* A task is split into ``k`` equal **chunks** (the paper's ``D_j``), each pinned to one
  bundle of one cluster. A chunk has weight ``1/k``, processing time ``p = T_j(k·b_c)`` (the
  task's duration at allocation ``k·b_c``) and priority ``γ = 1/(k·p)``. ``time="discrete"``
  (default) counts ``T`` in whole real steps, as the simulator runs them; ``"continuous"``
  counts the last step fractionally, which underestimates the time the simulator takes (it runs
  whole steps) and gives a higher mean JCT.
* **A_greedy** at arrival: for every eligible cluster and every ``k`` with ``k·b_c <=
  per_task_max``, the ``k`` chunks are dispatched one by one to the bundle of least marginal
  cost ``Q`` (paper Eq. 5 with upload delay 0): ``Q = (Σ_{γ'>=γ} p̂' + p)/k + p·Σ_{γ'<γ} 1/k'``
  over the chunks already on that bundle (``p̂`` = remaining planned time). The task is
  committed to the ``(cluster, k)`` of least ``Σ Q`` (first in (cluster, k) order within
  1e-12); ties between bundles go to the least planned load, then the lowest index.
  ``k_rule="threshold"`` instead fixes ``k`` as the smallest with speed ``>= θ·`` the speed
  at the largest ``k`` and only chooses the cluster by ``Σ Q``.
* **HAPRF** every real step: each bundle runs its highest-``γ`` runnable chunk (FIFO on equal
  ``γ``), preempting lower-``γ`` chunks at arrivals; a task gets ``m·b_c`` for the ``m``
  bundles it heads, is re-sized when ``m`` changes and paused at ``(0, 0)`` when ``m = 0``
  (the simulator charges the scenario's switching overhead). A committed task that cannot
  start yet (not in its cluster's pending set, or ``single`` mode's one start per cluster
  per step already used by a higher-priority chunk) is treated as not released: its bundles
  run their next runnable chunk.
* After every real step the observed progress gain of each task is removed equally from its
  running chunks (surplus spills to its other chunks); a chunk with no work left is finished.

What it knows
    ORACLE durations: ``T_j(a)`` comes from the noise-free progress functions
    ``sim.functions`` (:class:`envs.durations.DurationTable`), standing in for the paper's known job
    sizes. Everything else is observed: arrivals, eligibility, pending sets, allocations and
    the observed progress ``sim.progress`` (used to update the chunks' remaining work).

Dual variables (diagnostics only)
    ``α_jd`` (the ``Q`` each chunk was dispatched at) and the realised ``β_c(t)`` (sum of
    ``1/k`` over unfinished chunks on cluster ``c`` at step ``t``) are recorded; see
    :meth:`PDPreemptiveScheduler.diagnostics`. They are bookkeeping, not prices: no decision
    reads ``β``, and the paper's dual-feasibility claim does not hold in this setting, so nothing
    here asserts it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.config import ConfigError
from envs.core import DONE, RUNNING, WAITING, Simulator
from envs.durations import NEVER, DurationTable, duration_table
from envs.scheduling import Decision

_CHUNK_DONE = 1e-9


def bundles(sim: Simulator) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster the bundle count ``W_c`` and bundle size ``b_c`` (see the module docstring)."""
    used = [k for k, t in enumerate(sim.cfg.task_types) if t.prob > 0] or list(range(sim.num_types))
    m = np.maximum(sim.min_req[used].max(axis=0), 1)
    W = (sim.capacity // m[None, :]).min(axis=1)
    size = np.where(W[:, None] > 0, sim.capacity // np.maximum(W, 1)[:, None], 0)
    return W.astype(np.int64), size.astype(np.int64)


class PDPreemptiveScheduler:
    """A_online-E: A_greedy dispatch of equal chunks to bundles, HAPRF preemptive execution."""

    name = "pd-preemptive"

    def __init__(self, k_rule: str = "min_alpha", theta: float = 0.9, time: str = "discrete") -> None:
        if k_rule not in ("min_alpha", "threshold"):
            raise ConfigError(f"pd-preemptive: k_rule must be 'min_alpha' or 'threshold', got {k_rule!r}")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not 0 < theta <= 1:
            raise ConfigError(f"pd-preemptive: theta must be a number in (0, 1], got {theta!r}")
        if time not in ("continuous", "discrete"):
            raise ConfigError(f"pd-preemptive: time must be 'continuous' or 'discrete', got {time!r}")
        self.k_rule = k_rule
        self.theta = float(theta)
        self.time = time
        self._oracle: DurationTable | None = None

    # ------------------------------------------------------------------ set-up
    def reset(self, sim: Simulator) -> None:
        self._oracle = duration_table(sim.cfg, sim.functions)
        self.W, self.bundle = bundles(sim)
        N = sim.num_clusters
        per_max = sim.max_alloc
        # largest k per cluster: k bundles within per_task_max and the cluster
        kcap = np.where(self.bundle > 0, per_max[None, :] // np.maximum(self.bundle, 1), 0).min(axis=1)
        self.kmax = np.minimum(self.W, kcap).astype(np.int64)
        # per (type, cluster): chunk time p_k for k = 1..kmax (NEVER where it cannot finish)
        table = self._oracle.cont if self.time == "continuous" else self._oracle.disc
        self.ptime: list[list[np.ndarray]] = []
        for k in range(sim.num_types):
            row = []
            for c in range(N):
                ks = np.arange(1, self.kmax[c] + 1)
                idx = self._oracle.index(ks * self.bundle[c, 0], ks * self.bundle[c, 1])
                row.append(np.asarray(table[k][idx], dtype=np.float64))
            self.ptime.append(row)
        T = sim.workload.num_tasks
        # chunk store (kept sorted by seq; dead chunks compacted away every step)
        self.c_task = np.zeros(0, dtype=np.int64)
        self.c_cluster = np.zeros(0, dtype=np.int64)
        self.c_bundle = np.zeros(0, dtype=np.int64)
        self.c_gamma = np.zeros(0)
        self.c_weight = np.zeros(0)
        self.c_rem = np.zeros(0)
        self.c_seq = np.zeros(0, dtype=np.int64)
        self._seq = 0
        self._next = 0  # next task id to dispatch
        self._t = -1
        self._heads = np.zeros(0, dtype=np.int64)  # seq of the chunks run last step
        self._prog = np.zeros(T)
        # diagnostics
        self.task_cluster = np.full(T, -1, dtype=np.int64)
        self.task_k = np.zeros(T, dtype=np.int64)
        self.task_alpha = np.zeros(T)
        self.chunk_alpha: dict[int, list[float]] = {}
        self.beta: list[np.ndarray] = []
        self.pauses = 0
        self.resizes = 0

    # ------------------------------------------------------------------ decisions
    def decide(self, sim: Simulator) -> Decision:
        if sim.t == self._t:  # a later round of the same real step: the plan is already applied
            return Decision()
        self._t = sim.t
        self._sync(sim)
        while self._next < sim.next_arrival:
            self._dispatch(sim, self._next)
            self._next += 1
        self.beta.append(np.bincount(self.c_cluster, weights=self.c_weight, minlength=sim.num_clusters))
        return self._execute(sim)

    def diagnostics(self) -> dict[str, Any]:
        """α/β bookkeeping and preemption counts (diagnostics only, see the module docstring)."""
        beta = np.array(self.beta) if self.beta else np.zeros((0, len(self.W)))
        sum_alpha = float(self.task_alpha.sum())
        sum_beta = float(beta.sum())
        return {
            "sum_alpha": sum_alpha,
            "sum_beta": sum_beta,
            "alpha_beta_ratio": sum_alpha / sum_beta if sum_beta > 0 else float("nan"),
            "beta": beta,
            "task_alpha": self.task_alpha.copy(),
            "chunk_alpha": {j: list(a) for j, a in self.chunk_alpha.items()},
            "task_k": self.task_k.copy(),
            "task_cluster": self.task_cluster.copy(),
            "bundles": [(int(w), (int(b[0]), int(b[1]))) for w, b in zip(self.W, self.bundle)],
            "pauses": self.pauses,
            "resizes": self.resizes,
        }

    # ------------------------------------------------------------------ progress sync
    def _sync(self, sim: Simulator) -> None:
        """Charge last step's observed progress to the chunks that ran; drop finished chunks."""
        if self._heads.size:
            pos = np.searchsorted(self.c_seq, self._heads)
            tasks = self.c_task[pos]
            gain = sim.progress[tasks] - self._prog[tasks]
            n_run = np.bincount(tasks, minlength=sim.workload.num_tasks)[tasks]
            new = self.c_rem[pos] - gain / n_run
            self.c_rem[pos] = np.maximum(new, 0.0)
            surplus = np.bincount(tasks, weights=np.maximum(-new, 0.0), minlength=sim.workload.num_tasks)
            for j in np.flatnonzero(surplus > 1e-12).tolist():
                self._spill(j, surplus[j])
        alive = sim.status[self.c_task] != DONE  # tasks drop all their chunks
        live = alive & (self.c_rem > _CHUNK_DONE)
        # an unfinished task keeps at least one chunk (its plan said done, the simulator did not)
        lost = np.setdiff1d(self.c_task[alive], self.c_task[live])
        for j in lost.tolist():
            idx = np.flatnonzero(self.c_task == j)
            last = idx[-1]
            live[last] = True
            self.c_rem[last] = max(1.0 - float(sim.progress[j]), _CHUNK_DONE * 2)
        if not live.all():
            self._keep(live)
        self._prog = sim.progress.copy()

    def _spill(self, task: int, amount: float) -> None:
        for i in np.flatnonzero(self.c_task == task).tolist():
            take = min(amount, self.c_rem[i])
            self.c_rem[i] -= take
            amount -= take
            if amount <= 1e-12:
                break

    def _keep(self, mask: np.ndarray) -> None:
        for name in ("c_task", "c_cluster", "c_bundle", "c_gamma", "c_weight", "c_rem", "c_seq"):
            setattr(self, name, getattr(self, name)[mask])

    # ------------------------------------------------------------------ A_greedy
    def _cluster_costs(self, c: int, ptime: np.ndarray) -> np.ndarray:
        """``Σα`` of dispatching ``k = 1..kmax`` chunks into cluster ``c`` (NEVER if impossible)."""
        K = ptime.size
        W = int(self.W[c])
        ks = np.arange(1, K + 1, dtype=np.float64)
        gam = 1.0 / (ks * ptime)
        m = self.c_cluster == c
        q0 = ptime / ks  # empty bundles: (0 + p)/k
        Q0 = np.repeat(q0[:, None], W, axis=1)
        if m.any():
            g = self.c_gamma[m]
            ph = self.c_rem[m] / g
            w = self.c_weight[m]
            onehot = np.zeros((g.size, W))
            onehot[np.arange(g.size), self.c_bundle[m]] = 1.0
            ge = g[None, :] >= gam[:, None]
            S1 = (ge * ph) @ onehot
            S2 = ((~ge) * w) @ onehot
            Q0 = (S1 + ptime[:, None]) / ks[:, None] + ptime[:, None] * S2
        # k chunks go greedily to the k smallest of Q0[w] + n·p/k (n chunks already there)
        n = np.arange(K, dtype=np.float64)
        vals = Q0[:, :, None] + n[None, None, :] * (ptime / ks)[:, None, None]
        vals = np.where(n[None, None, :] < ks[:, None, None], vals, np.inf).reshape(K, -1)
        vals.sort(axis=1)
        totals = np.cumsum(vals[:, :K], axis=1)[np.arange(K), np.arange(K)]
        return np.where(ptime >= NEVER, NEVER, totals)

    def _dispatch(self, sim: Simulator, j: int) -> None:
        ttype = int(sim.task_type[j])
        clusters = [c for c in np.flatnonzero(sim.eligible[j]).tolist() if self.kmax[c] > 0]
        options: list[tuple[int, np.ndarray]] = []
        for c in clusters:
            totals = self._cluster_costs(c, self.ptime[ttype][c])
            if self.k_rule == "threshold":
                speed = 1.0 / self.ptime[ttype][c]
                k_fix = int(np.flatnonzero(speed >= self.theta * speed[-1] - 1e-12)[0])
                totals = np.where(np.arange(totals.size) == k_fix, totals, np.inf)
            options.append((c, totals))
        if not options:  # unreachable by config validation (every task reaches a cluster)
            return
        lowest = min(float(t.min()) for _, t in options)
        # the first (cluster, k) in (cluster, k) order within 1e-12 of the least Σα
        c, totals = next((c, t) for c, t in options if t.min() <= lowest + 1e-12)
        k = int(np.flatnonzero(totals <= lowest + 1e-12)[0]) + 1
        self._commit(sim, j, c, k, self.ptime[ttype][c][k - 1])

    def _commit(self, sim: Simulator, j: int, c: int, k: int, p: float) -> None:
        """Dispatch ``k`` chunks of task ``j`` on cluster ``c`` greedily and record ``α``."""
        W = int(self.W[c])
        gam = 1.0 / (k * p)
        wgt = 1.0 / k
        m = self.c_cluster == c
        S1 = np.zeros(W)
        S2 = np.zeros(W)
        load = np.zeros(W)
        if m.any():
            g = self.c_gamma[m]
            ph = self.c_rem[m] / g
            b = self.c_bundle[m]
            ge = g >= gam
            S1 = np.bincount(b[ge], weights=ph[ge], minlength=W)
            S2 = np.bincount(b[~ge], weights=self.c_weight[m][~ge], minlength=W)
            load = np.bincount(b, weights=ph, minlength=W)
        Q0 = wgt * (S1 + p) + p * S2
        n = np.arange(k, dtype=np.float64)
        vals = (Q0[:, None] + n[None, :] * wgt * p).ravel()
        loads = (load[:, None] + n[None, :] * p).ravel()
        which = np.repeat(np.arange(W), k)
        pick = np.lexsort((which, loads, vals))[:k]
        chosen = which[pick]
        alphas = vals[pick]
        seqs = self._seq + np.arange(k, dtype=np.int64)
        self._seq += k
        self.c_task = np.concatenate([self.c_task, np.full(k, j, dtype=np.int64)])
        self.c_cluster = np.concatenate([self.c_cluster, np.full(k, c, dtype=np.int64)])
        self.c_bundle = np.concatenate([self.c_bundle, chosen])
        self.c_gamma = np.concatenate([self.c_gamma, np.full(k, gam)])
        self.c_weight = np.concatenate([self.c_weight, np.full(k, wgt)])
        self.c_rem = np.concatenate([self.c_rem, np.full(k, wgt)])
        self.c_seq = np.concatenate([self.c_seq, seqs])
        self.task_cluster[j] = c
        self.task_k[j] = k
        self.task_alpha[j] = float(alphas.sum())
        self.chunk_alpha[j] = alphas.tolist()

    # ------------------------------------------------------------------ HAPRF execution
    def _execute(self, sim: Simulator) -> Decision:
        out = Decision()
        heads_all: list[np.ndarray] = []
        for c in range(sim.num_clusters):
            idx = np.flatnonzero(self.c_cluster == c)
            if idx.size == 0:
                self._pause_idle(sim, c, np.zeros(0, dtype=np.int64), out)
                continue
            idx = idx[np.lexsort((self.c_seq[idx], -self.c_gamma[idx], self.c_bundle[idx]))]
            tasks = self.c_task[idx]
            status = sim.status[tasks]
            startable = (status == WAITING) & np.isin(tasks, sim.pending_tasks(c))
            if sim.single and sim.placed_this_step[c]:
                startable[:] = False
            runnable = (status == RUNNING) | startable
            while True:
                r = idx[runnable]
                bun = self.c_bundle[r]
                first = np.ones(r.size, dtype=bool)
                first[1:] = bun[1:] != bun[:-1]
                heads = r[first]
                new = (sim.status[self.c_task[heads]] == WAITING)
                if not sim.single or np.unique(self.c_task[heads[new]]).size <= 1:
                    break
                # single mode: only the best new task (highest γ, earliest chunk) may start
                cand = heads[new]
                order = np.lexsort((self.c_seq[cand], -self.c_gamma[cand]))
                winner = self.c_task[cand[order[0]]]
                runnable &= ~((tasks != winner) & startable)
            heads_all.append(heads)
            counts = np.bincount(self.c_task[heads], minlength=0)
            run_tasks = np.unique(self.c_task[heads])
            b = self.bundle[c]
            changes: dict[int, tuple[int, int]] = {}
            for j in run_tasks.tolist():
                a = (int(counts[j] * b[0]), int(counts[j] * b[1]))
                if sim.status[j] == WAITING:
                    out.placements.append((c, j, a[0], a[1]))
                elif (int(sim.alloc[j, 0]), int(sim.alloc[j, 1])) != a:
                    if sim.alloc[j].any():
                        self.resizes += 1
                    changes[j] = a
            if changes:
                out.allocations[c] = changes
            self._pause_idle(sim, c, run_tasks, out)
        self._heads = np.sort(self.c_seq[np.concatenate(heads_all)]) if heads_all else np.zeros(0, dtype=np.int64)
        return out

    def _pause_idle(self, sim: Simulator, c: int, running: np.ndarray, out: Decision) -> None:
        """Pause (0, 0) the cluster's running tasks that head no bundle this step."""
        keep = set(running.tolist())
        for j in sim.running_tasks(c).tolist():
            if j not in keep and sim.alloc[j].any():
                out.allocations.setdefault(c, {})[j] = (0, 0)
                self.pauses += 1
