"""Shared machinery of the primal-dual schedulers (``pd-maxweight``, ``pd-maxsche``).

* :class:`Catalogue`: noise-free durations of every task type at every allocation, the
  Pareto-minimal candidate allocations per (type, cluster), and the volume normalisation
  ``V_ref`` / ``V_lo`` that makes the papers' assumption 1 hold (weight per normalised volume
  bounded by ``F``).
* :class:`Calendar`: a reservation calendar ``occ[cluster, resource, slot]`` (slot 0 = the
  current real step) with exponential prices ``base ** (occ / capacity) - 1`` and the
  vectorised min-cost schedule search over every (cluster, allocation, start).
* :class:`Plan` and its ``key``: the deterministic candidate order (cost rounded to
  ``COST_DECIMALS`` decimals, then completion, volume, cluster, GPU, CPU, start).

Volumes and costs are measured in capacity fractions: a schedule of ``(c, g)`` for ``d`` slots
on cluster ``k`` has volume ``d * (c / C_k^cpu + g / C_k^gpu)`` and costs
``(1 / V_ref) * sum_slots (c / C_k^cpu * price_cpu + g / C_k^gpu * price_gpu)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from envs.config import ScenarioConfig
from envs.durations import DurationTable, duration_table
from envs.progress import ProgressFunction

#: costs are compared after rounding to this many decimals (absorbs prefix-sum round-off;
#: only costs below the unit weight matter, so this is about 1e-9 relative)
COST_DECIMALS = 9


def price(occupancy: np.ndarray | float, capacity: np.ndarray | float, base: float) -> np.ndarray:
    """Exponential unit price ``base ** (occupancy / capacity) - 1`` (0 when idle, base-1 when full)."""
    return np.power(base, np.asarray(occupancy, dtype=np.float64) / capacity) - 1.0


@dataclass(frozen=True)
class Candidates:
    """Pareto-minimal allocations of one task type on one cluster (sorted by duration)."""

    cpu: np.ndarray  # (M,) int64
    gpu: np.ndarray  # (M,) int64
    dur: np.ndarray  # (M,) int64 noise-free steps from zero progress
    vol: np.ndarray  # (M,) float64 normalised volume d * (c/C + g/G)

    def __len__(self) -> int:
        return int(self.cpu.size)


@dataclass(frozen=True)
class Stacked:
    """Candidates of one task type on all clusters; row ``i`` runs on ``cluster[i]``."""

    cluster: np.ndarray  # (M,) int64
    cpu: np.ndarray
    gpu: np.ndarray
    dur: np.ndarray
    vol: np.ndarray


def pareto_mask(cpu: np.ndarray, gpu: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """True for allocations no other allocation dominates (<= in CPU, GPU and duration)."""
    le = (cpu[None, :] <= cpu[:, None]) & (gpu[None, :] <= gpu[:, None]) & (dur[None, :] <= dur[:, None])
    same = (cpu[None, :] == cpu[:, None]) & (gpu[None, :] == gpu[:, None])
    return ~np.any(le & ~same, axis=1)


class Catalogue:
    """Durations, candidate allocations and volume bounds of a scenario (oracle input).

    ``dur[type, c, g]`` is the noise-free number of real steps a task of ``type`` needs from
    zero progress at the fixed allocation ``(c, g)`` (``-1``: invalid or never finishes within
    ``limit``), read from the scenario's :class:`envs.durations.DurationTable`, i.e. the
    scheduler that uses it is an *oracle* on task speed (like Optimus's pre-run profiling in
    the paper).
    """

    def __init__(self, cfg: ScenarioConfig, functions: Sequence[ProgressFunction], limit: int = 5000) -> None:
        self._setup(duration_table(cfg, functions), cfg.capacities, limit)

    @classmethod
    def from_table(cls, table: DurationTable, capacities: Sequence[Sequence[int]], limit: int = 5000) -> Catalogue:
        """The catalogue of a duration table on clusters of ``capacities``."""
        cat = cls.__new__(cls)
        cat._setup(table, capacities, limit)
        return cat

    def _setup(self, table: DurationTable, capacities: Sequence[Sequence[int]], limit: int) -> None:
        self.table = table
        self.capacity = np.array(capacities, dtype=np.int64)
        self.max_alloc = np.array(table.per_task_max, dtype=np.int64)
        self.min_req = table.min_req
        self.limit = int(limit)
        steps = table.grid_steps()
        self.dur = np.where((steps > 0) & (steps < self.limit), steps, -1)
        self._cands: dict[tuple, Candidates | Stacked | None] = {}
        vols = []
        for k in range(self.dur.shape[0]):
            for i in range(self.capacity.shape[0]):
                v = self._volumes(k, i)
                if v.size:
                    vols.append(v)
        if not vols:
            raise ValueError("no task type can finish on any cluster: primal-dual schedulers have nothing to plan")
        allv = np.concatenate(vols)
        self.v_ref = float(allv.max())
        self.v_lo = float(allv.min())

    @property
    def paper_F(self) -> float:
        """``F = V_ref / V_lo``: the spread of weight per normalised volume (``F="paper"``)."""
        return self.v_ref / self.v_lo

    def _grid(self, ttype: int, cluster: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        hi = np.minimum(self.capacity[cluster], self.max_alloc)
        block = self.dur[ttype, : hi[0] + 1, : hi[1] + 1]
        c, g = np.nonzero(block > 0)
        return c.astype(np.int64), g.astype(np.int64), block[c, g]

    def _volumes(self, ttype: int, cluster: int) -> np.ndarray:
        c, g, d = self._grid(ttype, cluster)
        cap = self.capacity[cluster]
        return d * (c / cap[0] + g / cap[1])

    def candidates(self, ttype: int, cluster: int, min_cpu: bool = False) -> Candidates | None:
        """Pareto-minimal allocations of ``ttype`` on ``cluster`` (``min_cpu``: CPU fixed at the minimum)."""
        key = (ttype, cluster, bool(min_cpu))
        if key not in self._cands:
            c, g, d = self._grid(ttype, cluster)
            if min_cpu:
                keep = c == self.min_req[ttype, 0]
                c, g, d = c[keep], g[keep], d[keep]
            if c.size == 0:
                self._cands[key] = None
            else:
                m = pareto_mask(c, g, d)
                c, g, d = c[m], g[m], d[m]
                order = np.lexsort((c, g, d))
                c, g, d = c[order], g[order], d[order]
                cap = self.capacity[cluster]
                self._cands[key] = Candidates(c, g, d, d * (c / cap[0] + g / cap[1]))
        return self._cands[key]

    def stacked(self, ttype: int, min_cpu: bool = False) -> "Stacked | None":
        """The candidates of ``ttype`` on every cluster, concatenated (for :meth:`Calendar.best_all`)."""
        key = ("stacked", ttype, bool(min_cpu))
        if key not in self._cands:
            parts = [(k, self.candidates(ttype, k, min_cpu)) for k in range(self.capacity.shape[0])]
            parts = [(k, c) for k, c in parts if c is not None]
            if not parts:
                self._cands[key] = None
            else:
                self._cands[key] = Stacked(
                    cluster=np.concatenate([np.full(len(c), k, dtype=np.int64) for k, c in parts]),
                    cpu=np.concatenate([c.cpu for _, c in parts]),
                    gpu=np.concatenate([c.gpu for _, c in parts]),
                    dur=np.concatenate([c.dur for _, c in parts]),
                    vol=np.concatenate([c.vol for _, c in parts]),
                )
        return self._cands[key]

    def duration(self, ttype: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """Vectorised ``dur[type, cpu, gpu]`` (-1 where unknown)."""
        return self.dur[ttype, cpu, gpu]


@dataclass(frozen=True)
class Plan:
    """One schedule of one task: cluster, allocation, start slot (relative to now), duration."""

    cluster: int
    cpu: int
    gpu: int
    start: int
    dur: int
    cost: float
    vol: float

    #: sort key: rounded cost, completion, volume, cluster, GPU, CPU, start
    key: tuple = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = (round(self.cost, COST_DECIMALS), self.end, self.vol, self.cluster, self.gpu, self.cpu, self.start)
        object.__setattr__(self, "key", key)

    @property
    def end(self) -> int:
        return self.start + self.dur


def better(a: Plan | None, b: Plan | None) -> bool:
    """True if ``a`` is a plan that precedes ``b`` (None: no plan) in the :attr:`Plan.key` order."""
    return a is not None and (b is None or a.key < b.key)


class Calendar:
    """Occupancy and prices per (cluster, resource, slot) over ``horizon`` slots from now.

    ``bases`` gives the price base of (CPU, GPU); costs are divided by ``v_ref``.
    ``one_start_per_slot`` (single mode) lets at most one planned start use a cluster's slot,
    mirroring the simulator's one placement per cluster per real step.
    """

    def __init__(
        self,
        capacity: np.ndarray,
        bases: tuple[float, float],
        v_ref: float,
        horizon: int,
        one_start_per_slot: bool = False,
    ) -> None:
        if min(bases) <= 1.0:
            raise ValueError(f"price bases must be > 1, got {bases}")
        self.capacity = np.asarray(capacity, dtype=np.int64)
        self.bases = (float(bases[0]), float(bases[1]))
        self.v_ref = float(v_ref)
        self.horizon = int(max(1, horizon))
        K = self.capacity.shape[0]
        self.occ = np.zeros((K, 2, self.horizon), dtype=np.int64)
        self.taken = np.zeros((K, self.horizon), dtype=bool)
        self.one_start = bool(one_start_per_slot)
        self._wprice = np.zeros((K, 2, self.horizon))  # price / (capacity * v_ref)
        self._scale = 1.0 / (self.capacity.astype(np.float64) * self.v_ref)  # (K, 2)

    # ------------------------------------------------------------------ occupancy
    def load(self, cluster: np.ndarray, alloc: np.ndarray, start: np.ndarray, dur: np.ndarray) -> None:
        """Add many reservations at once (running tasks, committed plans) and refresh prices."""
        H = self.horizon
        diff = np.zeros((self.occ.shape[0], 2, H + 1), dtype=np.int64)
        s = np.clip(np.asarray(start, dtype=np.int64), 0, H)
        e = np.clip(np.asarray(start, dtype=np.int64) + np.asarray(dur, dtype=np.int64), 0, H)
        for r in range(2):
            np.add.at(diff, (cluster, r, s), alloc[:, r])
            np.add.at(diff, (cluster, r, e), -alloc[:, r])
        self.occ += np.cumsum(diff, axis=2)[:, :, :H]
        for k in np.unique(cluster):
            self._refresh(int(k))

    def reserve(self, plan: Plan) -> None:
        """Book a planned schedule (A_maxweight lines 13-14 / A_maxsche line 18)."""
        k = plan.cluster
        s, e = max(plan.start, 0), min(plan.end, self.horizon)
        self.occ[k, 0, s:e] += plan.cpu
        self.occ[k, 1, s:e] += plan.gpu
        if 0 <= plan.start < self.horizon:
            self.taken[k, plan.start] = True
        self._refresh(k, s, e)

    def _refresh(self, k: int, s: int = 0, e: int | None = None) -> None:
        e = self.horizon if e is None else e
        for r in range(2):
            p = price(self.occ[k, r, s:e], self.capacity[k, r], self.bases[r])
            self._wprice[k, r, s:e] = p * self._scale[k, r]

    def prices(self, cluster: int) -> np.ndarray:
        """``(2, horizon)`` unit prices (CPU, GPU) of a cluster."""
        return np.stack([price(self.occ[cluster, r], self.capacity[cluster, r], self.bases[r]) for r in range(2)])

    def cost(self, cluster: int, cpu: int, gpu: int, start: int, dur: int) -> float:
        """Normalised cost of ``(cpu, gpu)`` on ``cluster`` over slots ``[start, start + dur)``."""
        w = self._wprice[cluster, :, start : start + dur]
        return float(cpu * w[0].sum() + gpu * w[1].sum())

    # ------------------------------------------------------------------ min-cost search
    def best_all(
        self,
        cands: Stacked,
        lo: int,
        hi: int,
        fixed_start: np.ndarray | None = None,
    ) -> tuple[list[Plan | None], list[Plan | None]]:
        """Cheapest feasible schedule of one task type on every cluster inside slots ``[lo, hi)``.

        Vectorised over every (cluster, candidate allocation, start) with ``lo <= s`` and
        ``s + d <= hi`` (or only ``s = fixed_start[cluster]``; ``-1`` excludes the cluster).
        Feasible iff the allocation fits the free capacity in every slot of ``[s, s + d)`` and,
        with ``one_start_per_slot``, no other plan starts on that cluster at ``s``.
        Returns per cluster the best plan starting now (slot 0) and the best starting later,
        each None when nothing is feasible; ties follow :attr:`Plan.key`.
        """
        K = self.capacity.shape[0]
        now: list[Plan | None] = [None] * K
        later: list[Plan | None] = [None] * K
        hi = min(hi, self.horizon)
        W = hi - lo
        if W <= 0:
            return now, later
        if fixed_start is None:
            sel = cands.dur <= W
        else:
            f = np.asarray(fixed_start)[cands.cluster]
            sel = (f >= lo) & (f + cands.dur <= hi)
        idx = np.flatnonzero(sel)
        if idx.size == 0:
            return now, later
        cl, c, g, d, vol = cands.cluster[idx], cands.cpu[idx], cands.gpu[idx], cands.dur[idx], cands.vol[idx]
        M = idx.size
        occ = self.occ[cl, :, lo:hi]  # (M, 2, W)
        cap = self.capacity[cl]
        bad = (occ[:, 0] > (cap[:, 0] - c)[:, None]) | (occ[:, 1] > (cap[:, 1] - g)[:, None])
        nbad = np.zeros((M, W + 1), dtype=np.int64)
        np.cumsum(bad, axis=1, out=nbad[:, 1:])
        wp = self._wprice[cl, :, lo:hi]
        pre = np.zeros((M, W + 1))
        np.cumsum(c[:, None] * wp[:, 0] + g[:, None] * wp[:, 1], axis=1, out=pre[:, 1:])
        rows = np.arange(M)[:, None]
        if fixed_start is None:
            s = np.broadcast_to(np.arange(W)[None, :], (M, W))
        else:
            s = (f[idx] - lo)[:, None]
        e = s + d[:, None]
        ok = e <= W
        ec = np.minimum(e, W)
        feas = ok & (nbad[rows, ec] == nbad[rows, s])
        start = s + lo
        if self.one_start:
            feas &= ~self.taken[cl[:, None], np.minimum(start, self.horizon - 1)]
        mi, si = np.nonzero(feas)
        if mi.size == 0:
            return now, later
        cost = pre[mi, ec[mi, si]] - pre[mi, s[mi, si]]
        st = start[mi, si]
        comp = st + d[mi]
        group = cl[mi] * 2 + (st > 0)
        order = np.lexsort((st, c[mi], g[mi], vol[mi], comp, np.round(cost, COST_DECIMALS), group))
        gs = group[order]
        heads = order[np.r_[True, gs[1:] != gs[:-1]]]
        for h in heads.tolist():
            m = mi[h]
            plan = Plan(
                cluster=int(cl[m]), cpu=int(c[m]), gpu=int(g[m]), start=int(st[h]),
                dur=int(d[m]), cost=float(cost[h]), vol=float(vol[m]),
            )
            (later if plan.start > 0 else now)[plan.cluster] = plan
        return now, later
