"""``okita``: seed 004's Okita per-slot re-planning, adapted to edge clusters.

Every real step every unfinished task is re-planned from scratch (Okita is a heuristic; it
has no dual variables and no price functions):

1. **Tentative optimum**, each task alone on full capacities: over the candidate clusters
   (its pinned cluster once started, else its eligible ones) and every allocation
   ``min_req <= (x, y) <= min(C_c, per_task_max)`` (``alloc_mode="workers"``: only multiples
   ``N·min_req``, the paper's worker count), take the fewest whole steps to finish
   ``l = ⌈remaining time⌉``. Ties: (i) the task's current (cluster, allocation) if it is among
   the minima; (ii) the smallest footprint ``x/C_cpu + y/C_gpu``, then fewer GPUs; (iii) the
   cluster with the largest free fraction ``Q_c = mean(free/C)`` as the step begins, then the
   lowest index. With a linear latency cost and no bandwidth term, Okita's cost is ``l``.
2. **Priority** ``O = α1·(t − a)/max(t − a) − α2·R`` (``R`` = remaining work ``1 −
   progress``; the first term is 0 when every task arrived now); ties: earlier arrival, lower id.
3. **Packing** by ``O`` descending against the full capacities: a task whose tentative
   allocation fits its cluster gets it. On a conflict a task that has not started *migrates*
   to the eligible cluster with the largest ``Q_c`` (over what is still free) where that
   allocation fits; otherwise it is *delayed* (a started task is paused at ``(0, 0)``, a
   waiting one stays waiting). With ``shrink=True`` (``okita-shrink``, a variant not in the
   paper) a conflicted task may instead take the allocation of fewest steps among those that
   fit, if that does not finish later than waiting for the tasks placed on its cluster
   (``l_wait + l*``).

Started tasks never change cluster (pinning); their allocation may change every step, paying
the scenario's switching overhead (``overhead_aware=True`` adds ``1 − switch_overhead`` of a
step to the estimate of any allocation other than the current one). Environment limits: a
waiting task can start only on a cluster whose pending set holds it, and in ``single`` mode
at most one task starts per cluster per real step; a tentative cluster that cannot take the
task is treated as a conflict.

What it knows
    ORACLE durations: the remaining steps at each allocation come from the noise-free
    progress functions ``sim.functions`` (:class:`envs.durations.DurationTable`, time-shifted
    from the observed progress), standing in for the paper's known job sizes. Everything else
    is observed: arrivals, eligibility, pending sets, allocations, free resources and the
    observed progress ``sim.progress``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.config import ConfigError
from envs.core import RUNNING, WAITING, Simulator
from envs.durations import NEVER, DurationTable, duration_table
from envs.scheduling import Decision

_BIG = np.iinfo(np.int64).max


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"okita: {name} must be a number >= 0, got {value!r}")
    return float(value)


class OkitaScheduler:
    """Per-step tentative optimum, priority order, pack with migrate-or-delay."""

    name = "okita"

    def __init__(
        self,
        alloc_mode: str = "grid",
        shrink: bool = False,
        overhead_aware: bool = False,
        alpha1: float = 1.0,
        alpha2: float = 1.0,
    ) -> None:
        if alloc_mode not in ("grid", "workers"):
            raise ConfigError(f"okita: alloc_mode must be 'grid' or 'workers', got {alloc_mode!r}")
        self.alloc_mode = alloc_mode
        self.shrink = bool(shrink)
        self.overhead_aware = bool(overhead_aware)
        self.alpha1 = _number("alpha1", alpha1)
        self.alpha2 = _number("alpha2", alpha2)
        self._oracle: DurationTable | None = None

    # ------------------------------------------------------------------ set-up
    def reset(self, sim: Simulator) -> None:
        self._oracle = duration_table(sim.cfg, sim.functions)
        orc = self._oracle
        cap = sim.capacity.astype(np.float64)
        N = sim.num_clusters
        self.gcpu: list[np.ndarray] = []  # per type: candidate allocations
        self.ggpu: list[np.ndarray] = []
        self.gidx: list[np.ndarray] = []
        self.fits: list[np.ndarray] = []  # per type: (N, G) allocation fits cluster capacity
        self.rank: list[np.ndarray] = []  # per type: (N, G) tie-break rank (footprint, GPUs)
        self.foot: list[np.ndarray] = []  # per type: (N, G) footprint
        self.l0: list[np.ndarray] = []  # per type: (G,) whole steps from progress 0
        self.best0: list[np.ndarray] = []  # per type: (N,) grid position of the tentative choice at p = 0
        for k in range(sim.num_types):
            lo = sim.min_req[k]
            c, g = orc.cpu, orc.gpu
            ok = (c >= lo[0]) & (g >= lo[1])
            if self.alloc_mode == "workers":
                n = np.where(lo[0] > 0, c // max(int(lo[0]), 1), g // max(int(lo[1]), 1))
                ok &= (n >= 1) & (c == n * lo[0]) & (g == n * lo[1])
            idx = np.flatnonzero(ok)
            gc, gg = c[idx], g[idx]
            fits = (gc[None, :] <= sim.capacity[:, :1]) & (gg[None, :] <= sim.capacity[:, 1:])
            foot = gc[None, :] / cap[:, :1] + gg[None, :] / cap[:, 1:]
            rank = np.empty((N, idx.size), dtype=np.int64)
            for i in range(N):
                rank[i, np.lexsort((gc, gg, foot[i]))] = np.arange(idx.size)
            l0 = orc.disc[k][idx].astype(np.float64)
            L = np.where(fits, l0[None, :], np.inf)
            best = np.full(N, -1, dtype=np.int64)
            for i in range(N):
                if fits[i].any():
                    cand = np.flatnonzero(L[i] == L[i].min())
                    best[i] = cand[np.argmin(rank[i, cand])]
            self.gcpu.append(gc)
            self.ggpu.append(gg)
            self.gidx.append(idx)
            self.fits.append(fits)
            self.rank.append(rank)
            self.foot.append(foot)
            self.l0.append(l0)
            self.best0.append(best)
        self._t = -1
        self.pauses = 0
        self.resizes = 0
        self.migrations = 0
        self.delays = 0
        self.shrinks = 0

    def diagnostics(self) -> dict[str, int]:
        """Counts of Okita's conflict outcomes and of the re-allocations it caused."""
        return {
            "pauses": self.pauses,
            "resizes": self.resizes,
            "migrations": self.migrations,
            "delays": self.delays,
            "shrinks": self.shrinks,
        }

    # ------------------------------------------------------------------ step 1
    def tentative(self, sim: Simulator) -> dict[int, tuple[int, int, int, float]]:
        """Step 1 alone: ``{task: (cluster, cpu, gpu, l)}`` for the started tasks and the
        waiting tasks that are in some pending set (the only ones that can act this step)."""
        N = sim.num_clusters
        q_now = (sim.free / sim.capacity).mean(axis=1)
        started = np.flatnonzero(sim.status[: sim.next_arrival] == RUNNING)
        waiting = np.unique(np.concatenate([sim.pending_tasks(c) for c in range(N)]))
        plans = self._started_plans(sim, started) if started.size else {}
        if waiting.size:
            plans.update(self._waiting_plans(sim, waiting, q_now))
        out = {}
        for j, plan in plans.items():
            k = int(sim.task_type[j])
            out[j] = (plan[0], int(self.gcpu[k][plan[1]]), int(self.ggpu[k][plan[1]]), plan[2])
        return out

    def _started_plans(self, sim: Simulator, ids: np.ndarray) -> dict[int, tuple]:
        """Tentative (cluster, grid position, l, L-row) of started tasks (pinned clusters)."""
        out: dict[int, tuple] = {}
        types = sim.task_type[ids]
        for k in np.unique(types).tolist():
            sel = ids[types == k]
            c = sim.cluster[sel]
            rem = self._oracle.remaining(k, sim.progress[sel], self.gidx[k])  # (n, G)
            gc, gg = self.gcpu[k], self.ggpu[k]
            cur = (gc[None, :] == sim.alloc[sel, :1]) & (gg[None, :] == sim.alloc[sel, 1:])
            if self.overhead_aware:
                rem = np.where(cur, rem, rem + (1.0 - sim.cfg.switch_overhead))
            l = np.maximum(np.ceil(rem - 1e-6), 1.0)
            L = np.where(self.fits[k][c] & (rem < NEVER), l, np.inf)
            lmin = L.min(axis=1)
            at_min = L == lmin[:, None]
            pos = np.argmin(np.where(at_min, self.rank[k][c], _BIG), axis=1)
            sticky = (cur & at_min).any(axis=1)
            pos = np.where(sticky, np.argmax(cur, axis=1), pos)
            for r, j in enumerate(sel.tolist()):
                out[j] = (int(c[r]), int(pos[r]), float(lmin[r]), L[r])
        return out

    def _waiting_plans(self, sim: Simulator, ids: np.ndarray, q: np.ndarray) -> dict[int, tuple]:
        """Tentative (cluster, grid position, l) of waiting tasks (progress 0), over eligible clusters."""
        out: dict[int, tuple] = {}
        types = sim.task_type[ids]
        N = sim.num_clusters
        for k in np.unique(types).tolist():
            sel = ids[types == k]
            best = self.best0[k]
            has = best >= 0
            pos = np.maximum(best, 0)
            l = np.where(has, self.l0[k][pos], np.inf)
            foot = np.where(has, self.foot[k][np.arange(N), pos], np.inf)
            gpu = np.where(has, self.ggpu[k][pos], _BIG)
            # cluster order for this type: (l, footprint, GPUs, -Q, index)
            order = np.lexsort((np.arange(N), -q, gpu, foot, l))
            rank = np.empty(N, dtype=np.int64)
            rank[order] = np.arange(N)
            elig = sim.eligible[sel] & has[None, :]
            choice = np.argmin(np.where(elig, rank[None, :], _BIG), axis=1)
            for r, j in enumerate(sel.tolist()):
                c = int(choice[r])
                out[j] = (c, int(best[c]), float(l[c]))
        return out

    # ------------------------------------------------------------------ decisions
    def decide(self, sim: Simulator) -> Decision:
        if sim.t == self._t:  # a later round of the same real step: the plan is already applied
            return Decision()
        self._t = t = sim.t
        n = sim.next_arrival
        st = sim.status[:n]
        alive = np.flatnonzero((st == WAITING) | (st == RUNNING))
        out = Decision()
        if alive.size == 0:
            return out
        N = sim.num_clusters
        cap = sim.capacity
        q_now = (sim.free / cap).mean(axis=1)
        pend = [set(sim.pending_tasks(c).tolist()) for c in range(N)]
        in_pend = set().union(*pend)
        started = alive[sim.status[alive] == RUNNING]
        waiting = np.array(sorted(j for j in in_pend), dtype=np.int64)
        plans = self._started_plans(sim, started) if started.size else {}
        if waiting.size:
            plans.update(self._waiting_plans(sim, waiting, q_now))
        # step 2: priority over every unfinished task
        age = (t - sim.arrival[alive]).astype(np.float64)
        top = age.max()
        O = self.alpha1 * (age / top if top > 0 else np.zeros_like(age)) - self.alpha2 * (1.0 - sim.progress[alive])
        order = alive[np.lexsort((alive, sim.arrival[alive], -O))]
        # step 3: pack
        av = [[int(cap[c, 0]), int(cap[c, 1])] for c in range(N)]
        open_ = [not (sim.single and sim.placed_this_step[c]) for c in range(N)]
        placed_on: list[list[tuple[float, int, int]]] = [[] for _ in range(N)]
        assigned: dict[int, tuple[int, int, int]] = {}
        for j in order.tolist():
            plan = plans.get(j)
            if plan is None:  # waiting outside every pending set: cannot start this step
                continue
            is_started = sim.status[j] == RUNNING
            k = int(sim.task_type[j])
            c, pos, l = plan[0], plan[1], plan[2]
            a = (int(self.gcpu[k][pos]), int(self.ggpu[k][pos]))
            if is_started:
                ok = a[0] <= av[c][0] and a[1] <= av[c][1]
            else:
                ok = open_[c] and j in pend[c] and a[0] <= av[c][0] and a[1] <= av[c][1]
            if not ok:
                choice = self._resolve(sim, j, k, plan, a, is_started, av, open_, pend, placed_on)
                if choice is None:
                    if is_started:
                        if sim.alloc[j].any():
                            self.pauses += 1
                    else:
                        self.delays += 1
                    continue
                c, a, l = choice
            av[c][0] -= a[0]
            av[c][1] -= a[1]
            placed_on[c].append((l, a[0], a[1]))
            assigned[j] = (c, a[0], a[1])
            if not is_started:
                if sim.single:
                    open_[c] = False
                out.placements.append((c, j, a[0], a[1]))
        # step 4: emit re-sizes and pauses of started tasks
        for j in started.tolist():
            c = int(sim.cluster[j])
            new = assigned.get(j, (c, 0, 0))[1:]
            old = (int(sim.alloc[j, 0]), int(sim.alloc[j, 1]))
            if new != old:
                if old != (0, 0) and new != (0, 0):
                    self.resizes += 1
                out.allocations.setdefault(c, {})[j] = new
        return out

    # ------------------------------------------------------------------ conflicts
    def _resolve(
        self, sim: Simulator, j: int, k: int, plan: tuple, a: tuple[int, int], is_started: bool,
        av: list[list[int]], open_: list[bool], pend: list[set], placed_on: list[list],
    ) -> tuple[int, tuple[int, int], float] | None:
        """Migrate (not started), shrink (option) or delay (None) a conflicted task."""
        c0, l_star = plan[0], plan[2]
        N = sim.num_clusters
        if is_started:
            targets = [c0]
        else:
            targets = [c for c in range(N) if sim.eligible[j, c] and open_[c] and j in pend[c]]
        if not self.shrink:
            if is_started:
                return None
            fit = [c for c in targets if a[0] <= av[c][0] and a[1] <= av[c][1]]
            if not fit:
                return None
            cap = sim.capacity
            best = max(fit, key=lambda c: ((av[c][0] / cap[c, 0] + av[c][1] / cap[c, 1]) / 2, -c))
            self.migrations += 1
            return best, a, l_star
        # okita-shrink: the fewest-steps allocation that fits what is left, vs waiting
        gc, gg = self.gcpu[k], self.ggpu[k]
        best: tuple | None = None
        for c in targets:
            fit = self.fits[k][c] & (gc <= av[c][0]) & (gg <= av[c][1])
            if not fit.any():
                continue
            L = plan[3] if is_started else self.l0[k]
            Lc = np.where(fit, L, np.inf)
            lmin = float(Lc.min())
            if not np.isfinite(lmin):
                continue
            cand = np.flatnonzero(Lc == lmin)
            pos = int(cand[np.argmin(self.rank[k][c, cand])])
            cap = sim.capacity
            key = (lmin, float(self.foot[k][c, pos]), int(gg[pos]),
                   -(av[c][0] / cap[c, 0] + av[c][1] / cap[c, 1]) / 2, c)
            if best is None or key < best[0]:
                best = (key, c, pos)
        if best is None:
            return None
        l_wait = self._wait_time(a, av[c0], placed_on[c0])
        if best[0][0] > l_wait + l_star:
            return None
        _, c, pos = best
        new = (int(gc[pos]), int(gg[pos]))
        self.migrations += c != c0
        self.shrinks += new != a
        return c, new, best[0][0]

    @staticmethod
    def _wait_time(a: tuple[int, int], av: list[int], placed: list[tuple[float, int, int]]) -> float:
        """Earliest step at which the tasks placed on the cluster this step free enough for ``a``."""
        free = list(av)
        for l, x, y in sorted(placed):
            free[0] += x
            free[1] += y
            if a[0] <= free[0] and a[1] <= free[1]:
                return l
        return np.inf
