"""Primal-dual online schedulers from seeds 003 and 000, adapted to edge clusters.

``pd-maxweight`` (:class:`PDMaxWeightScheduler`, seed 003): A_online + A_dual + A_maxweight.
``pd-maxsche``  (:class:`PDMaxScheScheduler`, seed 000): A_online + A_maxsche + COST_C.

Both keep exponential prices per (cluster, resource, slot) on a reservation calendar
(:mod:`agents.baselines.pd_calendar`) and admit a task (weight 1) when its cheapest schedule
costs less than its weight; each admission raises the prices of the slots it books.

Modes:
* ``rolling`` (default): the batch step runs on every real step.
  pd-maxweight plans the pending tasks (arrival order) into sub-windows of ``W0`` slots
  (A_maxweight passes of A_dual), starts the plans that begin now and commits the other plans
  of the first sub-window to their cluster, allocation and start (``commit="first"``; the
  paper's "decided once"). ``commit="all"`` also binds the plans of sub-windows 2..``alpha``
  (the A_dual sub-rounds; they only matter then), ``commit="none"`` re-plans every step.
  pd-maxsche tries to start each pending task *now* (COST_C with the start fixed at the
  current step), else the task waits.
* ``faithful``: the papers' doubling intervals ``tau_i = tau_unit * 2**(i-1)``. At each
  ``tau_i`` every arrived, unscheduled task joins the batch; pd-maxweight places accepted
  tasks in ``[alpha*tau_i, alpha*tau_{i+1})`` (sub-window ``iota`` = ``[alpha*tau_i +
  (iota-1)*tau_i, alpha*tau_i + iota*tau_i)``), pd-maxsche starts them at ``tau_i`` with
  ``d <= tau_i``. Accepted plans are committed; nothing else starts between rounds.

Rolling defaults, each chosen for a lower mean JCT on training seeds than the alternative kept
as an option: ``window="fastest"`` makes ``W0`` the longest *fastest* duration among the queued
types (``window="slowest"``, the longest Pareto duration capped at ``W_cap``, gives long windows,
in which tasks wait for zero-price slots). ``commit="first"`` binds the first sub-window's plans:
re-planning future starts every step (``commit="none"``) lets a task see the emptier future as
cheaper on every step, so it keeps postponing itself, and binding all sub-rounds (``all``)
commits tasks far ahead although capacity frees up sooner.

Price parameter ``F`` (the papers' bound on weight per resource volume):
* ``F="tuned"`` (**default**): the value tuned by ``benchmarks/tune_pd.py`` on training seeds
  (1000+, disjoint from evaluation seeds 0..4) for this scheduler and scenario, read from
  ``agents/baselines/pd_tuned.json`` (the scheduler's ``default`` entry for unknown scenarios).
* ``F="paper"``: ``V_ref / V_lo`` from the task catalogue (:attr:`.pd_calendar.Catalogue.paper_F`).
* a positive number. ``base=`` overrides the price base directly (must be > 1).
Bases: pd-maxweight ``lambda = 2*T*K*R*F + 1`` (R = 2), pd-maxsche
``theta_1 = theta_2 = 2*T*K*F + 1``, with ``T = horizon`` (default
``2 * ceil(num_tasks / arrival_rate)``, about the episode length) and ``K`` clusters.

What the scheduler knows: the simulator's public state (queue of arrived, unstarted tasks with
their types, eligible clusters and minimum requirements; pending sets; running tasks with
their cluster, allocation and start; free capacity) plus, as an **oracle input**, the
noise-free progress functions (``sim.functions``), from which it computes every task type's
duration at every allocation (:mod:`envs.durations`; the papers assume known job sizes and
speed functions; this matches Optimus's pre-run profiling). Running tasks' remaining time is
that duration minus the elapsed steps (with progress noise: simulated forward from the
observed progress).

Env integration: a task starts now only on an eligible cluster
whose pending set holds it, at most one start per cluster per real step in single mode, with
an allocation in ``[min_req, min(free, per_task_max)]`` that the calendar proves feasible, so
the simulator never refuses a placement. Rolling pd-maxweight with commits plans only
pending tasks, on clusters whose pending set holds them (a task stays there until it starts);
with ``commit="none"`` the batch is the whole queue (``batch="queue"``, the papers'
semantics) or the pending tasks (``batch="pending"``). Faithful modes batch the whole queue.
A committed task that cannot start at its slot (not yet in that pending set, busy resources,
single-mode limit) waits one step at a time with the same cluster and allocation and goes
first. In multi mode
the whole batch is emitted in one round per real step. No randomness: ties are broken by
(cost, completion, volume, cluster, GPU, CPU, start), so a seed fully determines the run.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.config import ConfigError, ScenarioConfig
from envs.core import WAITING, Simulator
from envs.durations import DurationTable, duration_table
from envs.scheduling import Decision

from .pd_calendar import Calendar, Candidates, Catalogue, Plan, Stacked, better

TUNED_PATH = Path(__file__).resolve().parent / "pd_tuned.json"
MODES = ("rolling", "faithful")
COMMITS = ("all", "first", "none")


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------
def load_tuned(scheduler: str, scenario: str, path: Path | str = TUNED_PATH) -> float:
    """Tuned ``F`` of ``scheduler`` for ``scenario`` (falls back to the scheduler's ``default``)."""
    path = Path(path)
    try:
        table = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"F='tuned' needs {path}; create it with benchmarks/tune_pd.py") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    entry = table.get(scheduler)
    if not isinstance(entry, dict):
        raise ConfigError(f"{path} has no tuned values for {scheduler!r}")
    value = entry.get(scenario, entry.get("default"))
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{path}: no valid tuned F for {scheduler!r} on {scenario!r} (and no 'default')")
    return float(value)


def default_horizon(cfg: ScenarioConfig) -> int:
    """``T`` of the price base: twice the expected arrival span (about one episode)."""
    return 2 * int(math.ceil(cfg.num_tasks / cfg.arrival_rate))


@functools.lru_cache(maxsize=16)
def _catalogue(table: DurationTable, capacities: tuple[tuple[int, int], ...]) -> Catalogue:
    return Catalogue.from_table(table, capacities)


def catalogue_for(sim: Simulator) -> Catalogue:
    """The :class:`Catalogue` of the simulator's scenario and progress functions.

    Cached (least recently used, at most 16) by the scenario's duration table (itself cached
    by value in :func:`envs.durations.duration_table`) and the cluster capacities.
    """
    return _catalogue(duration_table(sim.cfg, sim.functions), tuple(sim.cfg.capacities))


def remaining_steps(sim: Simulator, ids: np.ndarray, cat: Catalogue, cap: int) -> np.ndarray:
    """Estimated real steps each running task still needs (>= 1, at most ``cap``).

    Noise-free scenarios: the catalogue duration at the task's allocation minus the elapsed
    steps (exact for non-preemptive runs). With progress noise: the expected (noise-free)
    progress is simulated forward from the observed progress
    (:meth:`envs.durations.DurationTable.remaining_steps`).
    """
    if ids.size == 0:
        return np.zeros(0, dtype=np.int64)
    types = sim.task_type[ids]
    alloc = sim.alloc[ids]
    if sim.cfg.progress_noise == 0 and np.array_equal(alloc, sim.first_alloc[ids]):
        d = cat.duration(types, alloc[:, 0], alloc[:, 1])
        rem = d - (sim.t - sim.start[ids])
        return np.where(d < 0, cap, np.clip(rem, 1, cap)).astype(np.int64)
    return cat.table.remaining_steps(types, alloc[:, 0], alloc[:, 1], sim.progress[ids], cap)


@dataclass
class _Commit:
    """A committed plan: start at absolute step ``start`` (postponed while it cannot)."""

    cluster: int
    cpu: int
    gpu: int
    start: int
    dur: int


# ---------------------------------------------------------------------------------------
# Shared scheduler skeleton
# ---------------------------------------------------------------------------------------
class _PrimalDualBase:
    """Calendar building, price bases, pending-set bookkeeping and committed plans."""

    name = "pd"
    R = 2  # resource types in the price base

    def __init__(
        self,
        F: float | str = "tuned",
        mode: str = "rolling",
        base: float | None = None,
        W_cap: int = 64,
        horizon: int | None = None,
        tau_unit: int = 1,
        window: str = "fastest",
        tuned_path: str | Path | None = None,
    ) -> None:
        if isinstance(F, str):
            if F not in ("tuned", "paper"):
                try:
                    F = float(F)
                except ValueError:
                    raise ConfigError(f"{self.name}: F must be 'tuned', 'paper' or a number > 0, got {F!r}") from None
        if not isinstance(F, str) and (isinstance(F, bool) or not isinstance(F, (int, float)) or not F > 0):
            raise ConfigError(f"{self.name}: F must be 'tuned', 'paper' or a number > 0, got {F!r}")
        if window not in ("slowest", "fastest"):
            raise ConfigError(f"{self.name}: window must be 'slowest' or 'fastest', got {window!r}")
        if mode not in MODES:
            raise ConfigError(f"{self.name}: mode must be one of {list(MODES)}, got {mode!r}")
        if base is not None and (isinstance(base, bool) or not isinstance(base, (int, float)) or not base > 1):
            raise ConfigError(f"{self.name}: base must be a number > 1, got {base!r}")
        ints = [("W_cap", W_cap), ("tau_unit", tau_unit)] + ([("horizon", horizon)] if horizon is not None else [])
        for label, v in ints:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{self.name}: {label} must be an integer >= 1, got {v!r}")
        self.F_option = F
        self.window = window
        self.mode = mode
        self.base_option = None if base is None else float(base)
        self.W_cap = int(W_cap)
        self.horizon_option = horizon
        self.tau_unit = int(tau_unit)
        self.tuned_path = Path(tuned_path) if tuned_path is not None else TUNED_PATH
        self.F: float = float("nan")
        self.bases: tuple[float, float] = (2.0, 2.0)
        self.catalogue: Catalogue | None = None
        self.calendar: Calendar | None = None  # the last step's calendar (tests, plots)
        self.last_plans: dict[int, Plan] = {}
        self.commits: dict[int, _Commit] = {}

    # ------------------------------------------------------------------ set-up
    def _base_from_F(self, T: int, K: int, F: float) -> tuple[float, float]:
        raise NotImplementedError

    def reset(self, sim: Simulator) -> None:
        cfg = sim.cfg
        self.catalogue = cat = catalogue_for(sim)
        if self.base_option is not None:
            self.F = float("nan")  # the base is given directly; F plays no part
        elif self.F_option == "paper":
            self.F = cat.paper_F
        elif self.F_option == "tuned":
            self.F = load_tuned(self.name, cfg.name, self.tuned_path)
        else:
            self.F = float(self.F_option)
        self.T = self.horizon_option or default_horizon(cfg)
        if self.base_option is not None:
            self.bases = (self.base_option, self.base_option)
        else:
            self.bases = self._base_from_F(self.T, cfg.num_clusters, self.F)
        K = cfg.num_clusters
        self._bits = (sim.eligible.astype(np.int64) << np.arange(K)).sum(axis=1)
        self._clusters: dict[int, tuple[int, ...]] = {}
        # per type: fastest candidate on the slowest hostable cluster, slowest Pareto candidate
        self._fast = np.zeros(cfg.num_types, dtype=np.int64)
        self._slow = np.zeros(cfg.num_types, dtype=np.int64)
        for t in range(cfg.num_types):
            for k in range(K):
                cands = self._cands(t, k)
                if cands is not None:
                    self._fast[t] = max(self._fast[t], int(cands.dur.min()))
                    self._slow[t] = max(self._slow[t], int(cands.dur.max()))
        self.commits = {}
        self.last_plans = {}
        self.calendar = None
        self._sim = sim
        self._last_t = -1

    def _cands(self, ttype: int, cluster: int) -> Candidates | None:
        return self.catalogue.candidates(ttype, cluster)

    def _clusters_of(self, bits: int) -> tuple[int, ...]:
        out = self._clusters.get(bits)
        if out is None:
            out = self._clusters[bits] = tuple(k for k in range(self._sim.num_clusters) if bits >> k & 1)
        return out

    def _window(self, types: np.ndarray, window: str) -> int:
        """``W0`` for the queued ``types``, capped at ``W_cap`` but never below the longest
        fastest allocation (so every task keeps a candidate on every cluster).

        ``slowest``: every Pareto allocation fits. ``fastest``: the shortest window
        in which every queued task can run at its fastest allocation.
        """
        present = np.unique(types)
        fast = int(self._fast[present].max())
        if window == "fastest":
            return fast
        return int(max(min(self.W_cap, int(self._slow[present].max())), fast))

    # ------------------------------------------------------------------ state
    @staticmethod
    def _queue(sim: Simulator) -> np.ndarray:
        """Arrived, unstarted task ids in arrival order."""
        return np.flatnonzero(sim.status[: sim.next_arrival] == WAITING)

    @staticmethod
    def _pending_bits(sim: Simulator) -> dict[int, int]:
        """Task id -> bitmask of clusters whose pending set holds it (where it can start now)."""
        out: dict[int, int] = {}
        for k in range(sim.num_clusters):
            for j in sim.pending_tasks(k).tolist():
                out[j] = out.get(j, 0) | (1 << k)
        return out

    def _calendar(self, sim: Simulator, horizon: int, extra: list[tuple[int, int, int, int, int]] = ()) -> Calendar:
        """Calendar over ``horizon`` slots holding running tasks and ``extra`` (k, c, g, start, dur)."""
        cal = Calendar(sim.capacity, self.bases, self.catalogue.v_ref, horizon, one_start_per_slot=sim.single)
        ids = sim.run_slots[sim.run_slots >= 0]
        rem = remaining_steps(sim, ids, self.catalogue, cal.horizon)
        clusters = [sim.cluster[ids]]
        allocs = [sim.alloc[ids]]
        starts = [np.zeros(ids.size, dtype=np.int64)]
        durs = [rem]
        if extra:
            e = np.array(extra, dtype=np.int64).reshape(-1, 5)
            clusters.append(e[:, 0])
            allocs.append(e[:, 1:3])
            starts.append(e[:, 3])
            durs.append(e[:, 4])
            for k, s in zip(e[:, 0], e[:, 3]):
                if 0 <= s < cal.horizon:
                    cal.taken[k, s] = True
        cal.load(np.concatenate(clusters), np.concatenate(allocs), np.concatenate(starts), np.concatenate(durs))
        if sim.single:
            cal.taken[:, 0] |= sim.placed_this_step
        return cal

    # ------------------------------------------------------------------ committed plans
    def _launch_commits(self, sim: Simulator, pend: dict[int, int]) -> tuple[list, list]:
        """Start due commits that can start now; postpone the others by one step.

        A due task not (yet) in its cluster's pending set (faithful mode batches the whole
        queue) starts, with the same allocation, on the first eligible cluster whose pending
        set holds it and which has room now: pending sets full of tasks committed elsewhere
        would otherwise wait for each other forever.
        Returns (placements, reservations of the launched tasks as (k, c, g, 0, d)).
        """
        t0 = sim.t
        free = sim.free.copy()
        used = sim.placed_this_step.copy()
        placements, booked = [], []
        due = sorted((c.start, j) for j, c in self.commits.items() if c.start <= t0)
        for _, j in due:
            c = self.commits[j]
            bits = pend.get(j, 0)
            targets = (c.cluster,) if bits >> c.cluster & 1 else self._clusters_of(bits)
            k = next((k for k in targets if free[k, 0] >= c.cpu and free[k, 1] >= c.gpu
                      and not (sim.single and used[k])), None)
            if k is not None:
                placements.append((k, j, c.cpu, c.gpu))
                booked.append((k, c.cpu, c.gpu, 0, c.dur))
                free[k] -= (c.cpu, c.gpu)
                used[k] = True
                del self.commits[j]
            else:
                c.start = t0 + 1
        return placements, booked

    def _commit_reservations(self, t0: int) -> list[tuple[int, int, int, int, int]]:
        return [(c.cluster, c.cpu, c.gpu, c.start - t0, c.dur) for c in self.commits.values()]

    def _emit(
        self, plans: dict[int, Plan], pend: dict[int, int], t0: int, commit: bool, commit_until: int | None = None
    ) -> list:
        """Placements for plans starting now; with ``commit``, the others (starting before
        ``commit_until``, if given) become commits.

        A plan for now whose task is not (yet) in that cluster's pending set (faithful modes)
        is committed and postponed to the next step.
        """
        out = []
        for j, p in plans.items():
            if p.start == 0 and pend.get(j, 0) >> p.cluster & 1:
                out.append((p.cluster, j, p.cpu, p.gpu))
            elif commit and (commit_until is None or p.start < commit_until):
                self.commits[j] = _Commit(p.cluster, p.cpu, p.gpu, t0 + max(p.start, 1), p.dur)
        return out

    def _is_round(self, t: int) -> bool:
        """``t`` is a doubling point ``tau_unit * 2**(i-1)``, i >= 1."""
        if t < self.tau_unit or t % self.tau_unit:
            return False
        q = t // self.tau_unit
        return q & (q - 1) == 0

    # ------------------------------------------------------------------ protocol
    def decide(self, sim: Simulator) -> Decision:
        if sim is not getattr(self, "_sim", None):
            self.reset(sim)
        if sim.t == self._last_t:
            return Decision()  # multi mode: the whole batch went out in this step's first round
        self._last_t = sim.t
        placements = self._decide(sim)
        return Decision(placements=placements)

    def _decide(self, sim: Simulator) -> list[tuple[int, int, int, int]]:
        raise NotImplementedError

    # ------------------------------------------------------------------ one task's min cost
    def _stacked(self, ttype: int) -> Stacked | None:
        return self.catalogue.stacked(ttype)

    def _best(
        self,
        cal: Calendar,
        ttype: int,
        clusters: tuple[int, ...],
        now_bits: int,
        lo: int,
        hi: int,
        tables: dict,
        fixed_start: np.ndarray | None = None,
    ) -> Plan | None:
        """Cheapest schedule of a task over ``clusters`` (slot 0 only where ``now_bits`` allows).

        ``tables`` caches the per-cluster bests of each type until the next booking clears it.
        """
        table = tables.get(ttype)
        if table is None:
            stacked = self._stacked(ttype)
            K = cal.capacity.shape[0]
            table = tables[ttype] = (
                cal.best_all(stacked, lo, hi, fixed_start) if stacked is not None else ([None] * K, [None] * K)
            )
        now, later = table
        best = None
        for k in clusters:
            plan = later[k]
            if better(plan, best):
                best = plan
            if now_bits >> k & 1:
                plan = now[k]
                if better(plan, best):
                    best = plan
        return best


# ---------------------------------------------------------------------------------------
# pd-maxweight (seed 003)
# ---------------------------------------------------------------------------------------
class PDMaxWeightScheduler(_PrimalDualBase):
    """A_online + A_dual + A_maxweight of seed 003 (centralised all-reduce case).

    Options: ``F`` ("tuned" default, "paper" or a number), ``base`` (price base, overrides F),
    ``mode`` ("rolling" default, "faithful"), ``alpha`` A_dual sub-rounds (4; faithful mode
    and ``commit="all"``), ``window`` ("fastest" default, "slowest"), ``W_cap`` cap of a
    "slowest" window (64), ``commit`` ("first" default, "all", "none"), ``batch`` ("queue"
    default or "pending", only with ``commit="none"``), ``horizon`` (T of the price base),
    ``tau_unit`` (faithful mode).
    """

    name = "pd-maxweight"

    def __init__(
        self,
        alpha: int = 4,
        commit: str = "first",
        batch: str = "queue",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if commit not in COMMITS:
            raise ConfigError(f"{self.name}: commit must be one of {list(COMMITS)}, got {commit!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, int) or alpha < 1:
            raise ConfigError(f"{self.name}: alpha must be an integer >= 1, got {alpha!r}")
        if batch not in ("queue", "pending"):
            raise ConfigError(f"{self.name}: batch must be 'queue' or 'pending', got {batch!r}")
        self.alpha = int(alpha)
        self.commit = commit
        self.batch = batch

    def _base_from_F(self, T: int, K: int, F: float) -> tuple[float, float]:
        lam = 2.0 * T * K * self.R * F + 1.0
        return lam, lam

    def _decide(self, sim: Simulator) -> list[tuple[int, int, int, int]]:
        t0 = sim.t
        pend = self._pending_bits(sim)
        faithful = self.mode == "faithful"
        committed = faithful or self.commit != "none"
        placements, booked = self._launch_commits(sim, pend) if committed else ([], [])
        self.last_plans = {}
        if faithful and not self._is_round(t0):
            return placements
        launched = {p[1] for p in placements}
        queue = [j for j in self._queue(sim).tolist() if j not in self.commits and j not in launched]
        # rolling commits only use clusters whose pending set holds the task (it stays there
        # until it starts, so a commit never waits for a pending slot)
        restrict = self.commit != "none" and not faithful
        if self.batch == "pending" or restrict:
            queue = [j for j in queue if j in pend]
        if not queue:
            return placements
        types = sim.task_type
        if faithful:
            W0 = t0  # sub-windows of length tau_i ...
            first = (self.alpha - 1) * t0  # ... from alpha * tau_i (relative to t0 = tau_i)
        else:
            W0 = self._window(types[queue], self.window)
            first = 0
        extra = booked + self._commit_reservations(t0)
        rounds = self.alpha if faithful or self.commit == "all" else 1
        horizon = max([first + rounds * W0] + [s + d for _, _, _, s, d in extra])
        cal = self.calendar = self._calendar(sim, horizon, extra)
        plans: dict[int, Plan] = {}
        remaining = queue
        # A_dual sub-rounds 2..alpha only matter when their plans bind (faithful, commit="all"):
        # they never change the first sub-window's plans, which are made first
        for iota in range(rounds):
            lo = first + iota * W0
            hi = lo + W0
            tables: dict = {}
            rejected: set[tuple[int, int, int]] = set()
            left = []
            for j in remaining:
                bits = pend[j] if restrict else int(self._bits[j])
                # slot 0 (now): rolling needs the task in the cluster's pending set; faithful
                # fixes the schedule and lets the env postpone a start it cannot make yet
                now_bits = (bits if faithful else pend.get(j, 0)) if lo == 0 else 0
                key = (int(types[j]), bits, now_bits)
                plan = None
                if key not in rejected:
                    plan = self._best(cal, key[0], self._clusters_of(bits), now_bits, lo, hi, tables)
                if plan is not None and plan.cost < 1.0:  # dual utility u_j = w_j - cost > 0
                    plans[j] = plan
                    cal.reserve(plan)
                    tables.clear()
                    rejected.clear()
                else:
                    rejected.add(key)
                    left.append(j)
            remaining = left
            if not remaining:
                break
        self.last_plans = plans
        until = W0 if self.commit == "first" and not faithful else None
        return placements + self._emit(plans, pend, t0, committed, until)


# ---------------------------------------------------------------------------------------
# pd-maxsche (seed 000)
# ---------------------------------------------------------------------------------------
class PDMaxScheScheduler(_PrimalDualBase):
    """A_online + A_maxsche + COST_C of seed 000 (centralised case; COST_D never applies).

    Options: ``F`` ("tuned" default, "paper" or a number), ``base``, ``mode``
    ("rolling" default: start now or wait, on every real step; "faithful": doubling rounds
    with every accepted task starting at ``tau_i`` and ``d <= tau_i``), ``cpu_policy``
    ("enumerate" default: every CPU count is a candidate; "min": CPU fixed at the minimum, as
    the paper's single PS), ``window`` ("fastest" default, "slowest": bounds the candidate durations), ``W_cap`` (64),
    ``horizon``, ``tau_unit``.
    In single mode the faithful variant starts the n-th task accepted on a cluster in a round
    n-1 steps after ``tau_i`` (one placement per cluster per real step).
    """

    name = "pd-maxsche"
    R = 1  # U = V = 1 worker / PS type per cluster: theta = 2*T*K*F + 1

    def __init__(self, cpu_policy: str = "enumerate", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if cpu_policy not in ("enumerate", "min"):
            raise ConfigError(f"{self.name}: cpu_policy must be 'enumerate' or 'min', got {cpu_policy!r}")
        self.cpu_policy = cpu_policy

    def _base_from_F(self, T: int, K: int, F: float) -> tuple[float, float]:
        theta = 2.0 * T * K * self.R * F + 1.0
        return theta, theta  # theta_2 (CPU, the paper's PS) and theta_1 (GPU, its workers)

    def _cands(self, ttype: int, cluster: int) -> Candidates | None:
        return self.catalogue.candidates(ttype, cluster, min_cpu=self.cpu_policy == "min")

    def _stacked(self, ttype: int) -> Stacked | None:
        return self.catalogue.stacked(ttype, min_cpu=self.cpu_policy == "min")

    def _decide(self, sim: Simulator) -> list[tuple[int, int, int, int]]:
        t0 = sim.t
        pend = self._pending_bits(sim)
        faithful = self.mode == "faithful"
        placements, booked = self._launch_commits(sim, pend) if faithful else ([], [])
        self.last_plans = {}
        if faithful and not self._is_round(t0):
            return placements
        launched = {p[1] for p in placements}
        if faithful:  # the batch: every arrived task not scheduled yet
            queue = [j for j in self._queue(sim).tolist() if j not in self.commits and j not in launched]
        else:  # rolling starts tasks now, and only tasks in a pending set can start now
            queue = sorted(j for j in pend if j not in launched)
        if not queue:
            return placements
        types = sim.task_type
        W0 = t0 if faithful else self._window(types[queue], self.window)
        extra = booked + self._commit_reservations(t0)
        horizon = max([W0] + [s + d for _, _, _, s, d in extra])
        cal = self.calendar = self._calendar(sim, horizon, extra)
        tables: dict = {}
        plans: dict[int, Plan] = {}
        starts = np.zeros(sim.num_clusters, dtype=np.int64)
        for j in queue:
            if not tables and faithful and sim.single:
                # each cluster's start: the first slot of the round no other start uses
                free_slot = ~cal.taken[:, :W0]
                starts = np.where(free_slot.any(axis=1), free_slot.argmax(axis=1), -1)
            # rolling: the start is now (single mode: unless the cluster already started one)
            bits = int(self._bits[j]) if faithful else pend[j]
            plan = self._best(cal, int(types[j]), self._clusters_of(bits), bits, 0, W0, tables, starts)
            if plan is not None and plan.cost < 1.0:  # eta_j = 1 - cost > 0
                plans[j] = plan
                cal.reserve(plan)
                tables.clear()  # prices (and single-mode starts) changed
        self.last_plans = plans
        return placements + self._emit(plans, pend, t0, faithful)
