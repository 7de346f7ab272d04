"""Fixed-shape observation of the simulator for the learned policy (pure numpy, hot path).

The layout is a contract shared by the Gymnasium env, the policy network and the trainer;
it is documented in ``docs/observation.md``. :class:`ObservationSpec` holds the sizes and
value bounds of one scenario; :class:`ObservationBuilder` turns a
:class:`~envs.core.Simulator` into a dict of freshly allocated arrays every call (callers may
keep or modify what they get). Per-episode lookup tables (task type, arrival, reach) are
built once per workload, so a call costs a few dozen vectorised numpy operations and no
Python loop over tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from .config import ScenarioConfig
from .durations import start_gate

#: time and queue features are ``log1p(x) / log1p(LOG_NORM)``: 1.0 at 100 steps / tasks
LOG_NORM = 100.0
#: observation keys, in the documented order
KEYS = (
    "pending_x", "pending_mask", "pending_where", "pending_min", "alloc_high", "feasible",
    "running_x", "running_mask", "cluster_x", "multi_mode",
)


@dataclass(frozen=True)
class FeatureColumns:
    """Column index of every feature of ``pending_x``, ``running_x`` and ``cluster_x`` for ``K`` task
    types (the layout of ``docs/observation.md``); ``ObservationSpec.columns`` gives the spec's.

    Pending and running rows start alike: ``cpu``, ``gpu`` (the pending task's minimum or the
    running task's allocation, over ``per_task_max``), then the ``K`` one-hot type columns from
    ``type_first``; then ``time`` (``L(waiting)`` / ``L(elapsed)``) and, pending, ``reach`` and
    ``dummy`` or, running, ``progress``. Cluster rows do not depend on ``K``.
    """

    K: int
    # -- pending_x and running_x (the K-dependent columns are set from K)
    cpu: ClassVar[int] = 0
    gpu: ClassVar[int] = 1
    resources: ClassVar[slice] = slice(0, 2)  # (cpu, gpu)
    type_first: ClassVar[int] = 2
    types: slice = field(init=False, compare=False)  # the K one-hot type columns
    time: int = field(init=False, compare=False)  # pending: L(t - arrival); running: L(t - start)
    reach: int = field(init=False, compare=False)  # pending: fraction of clusters the task can reach
    dummy: int = field(init=False, compare=False)  # pending: 1 for an empty slot
    progress: int = field(init=False, compare=False)  # running: progress in [0, 1]
    pending_features: int = field(init=False, compare=False)
    running_features: int = field(init=False, compare=False)
    # -- cluster_x: free (CPU, GPU) / scale, capacity (CPU, GPU) / scale, L(queue), running tasks / M
    free_cpu: ClassVar[int] = 0
    free_gpu: ClassVar[int] = 1
    free: ClassVar[slice] = slice(0, 2)  # (free_cpu, free_gpu)
    capacity_cpu: ClassVar[int] = 2
    capacity_gpu: ClassVar[int] = 3
    capacity: ClassVar[slice] = slice(2, 4)  # (capacity_cpu, capacity_gpu)
    queue: ClassVar[int] = 4
    running_tasks: ClassVar[int] = 5
    cluster_features: ClassVar[int] = 6

    def __post_init__(self) -> None:
        K = self.K  # the one place the K-dependent offsets are written
        derived = {
            "types": slice(2, 2 + K), "time": K + 2, "reach": K + 3, "dummy": K + 4,  # pending
            "progress": K + 3,  # running (time: K + 2, as pending)
            "pending_features": K + 5, "running_features": K + 4,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


@lru_cache(maxsize=None)
def feature_columns(K: int) -> FeatureColumns:
    """The :class:`FeatureColumns` of ``K`` task types (one shared instance per ``K``)."""
    return FeatureColumns(K)


#: number of cluster features
CLUSTER_FEATURES = FeatureColumns.cluster_features


def running_slots(cfg: ScenarioConfig) -> int:
    """``M``: most tasks one cluster can run at once when each holds at least its minimum.

    Same rule as :meth:`envs.core.Simulator.running_slots_hint`, computed from the config.
    """
    caps = np.array(cfg.capacities, dtype=np.int64)
    mins = np.maximum(np.array([t.min_req for t in cfg.task_types], dtype=np.int64), 1)
    per_cluster = (caps[:, None, :] // mins[None, :, :]).min(axis=2).max(axis=1)
    return int(max(1, per_cluster.max()))


@dataclass(frozen=True)
class ObservationSpec:
    """Sizes, dtypes and bounds of the observation of one scenario.

    ``N`` clusters (agents), ``P`` pending slots, ``M`` running slots, ``K`` task types,
    ``alloc_dims = (C1, G1)`` the CPU and GPU axes of the allocation index (``A = C1 * G1``),
    ``Fp``/``Fr``/``Fc`` feature sizes of pending, running and cluster rows.
    """

    N: int
    P: int
    M: int
    K: int
    alloc_dims: tuple[int, int]
    per_task_max: tuple[int, int]
    scale: tuple[int, int]  # (S_c, S_g): largest cluster capacity per resource
    max_steps: int  # bounds the waiting / elapsed-time features
    num_tasks: int  # bounds the queue-length feature
    single: bool

    @classmethod
    def from_config(cls, cfg: ScenarioConfig) -> "ObservationSpec":
        caps = np.array(cfg.capacities, dtype=np.int64)
        return cls(
            N=cfg.num_clusters,
            P=cfg.pending_slots,
            M=running_slots(cfg),
            K=cfg.num_types,
            alloc_dims=cfg.alloc_dims,
            per_task_max=tuple(cfg.per_task_max),
            scale=(int(caps[:, 0].max()), int(caps[:, 1].max())),
            max_steps=cfg.max_steps,
            num_tasks=cfg.num_tasks,
            single=cfg.mode == "single",
        )

    # -- derived sizes ------------------------------------------------------------------
    @property
    def A(self) -> int:
        """Number of joint allocation indices (index 0 = void)."""
        return self.alloc_dims[0] * self.alloc_dims[1]

    @property
    def columns(self) -> FeatureColumns:
        """The column of every feature of ``pending_x``, ``running_x`` and ``cluster_x``."""
        return feature_columns(self.K)

    @property
    def Fp(self) -> int:
        return self.columns.pending_features

    @property
    def Fr(self) -> int:
        return self.columns.running_features

    @property
    def Fc(self) -> int:
        return CLUSTER_FEATURES

    @property
    def time_high(self) -> float:
        """Largest value of the waiting / elapsed-time features (``t <= max_steps``)."""
        return math.log1p(self.max_steps) / math.log1p(LOG_NORM)

    @property
    def queue_high(self) -> float:
        """Largest value of the queue-length feature (a queue never exceeds ``num_tasks``)."""
        return math.log1p(self.num_tasks) / math.log1p(LOG_NORM)

    def decode_allocation(self, a: Any) -> tuple[Any, Any]:
        """Allocation index -> ``(cpu, gpu)`` (works on ints and arrays)."""
        return a // self.alloc_dims[1], a % self.alloc_dims[1]

    def encode_allocation(self, cpu: Any, gpu: Any) -> Any:
        """``(cpu, gpu)`` -> allocation index ``cpu * G1 + gpu``."""
        return cpu * self.alloc_dims[1] + gpu

    def shapes(self) -> dict[str, tuple[tuple[int, ...], type]]:
        """``key -> (shape, dtype)`` of every observation array."""
        N, P, M = self.N, self.P, self.M
        return {
            "pending_x": ((N, P, self.Fp), np.float32),
            "pending_mask": ((N, P), np.int8),
            "pending_where": ((N, P, N), np.int8),
            "pending_min": ((N, P, 2), np.int64),
            "alloc_high": ((N, 2), np.int64),
            "feasible": ((N, P), np.int8),
            "running_x": ((N, M, self.Fr), np.float32),
            "running_mask": ((N, M), np.int8),
            "cluster_x": ((N, self.Fc), np.float32),
            "multi_mode": ((1,), np.int8),
        }

    def bounds(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``key -> (low, high)`` arrays (full shape) that contain every value the builder emits."""
        out = {}
        eps = 1e-4  # float32 round-off margin on the log features
        col = self.columns
        for key, (shape, dtype) in self.shapes().items():
            low = np.zeros(shape, dtype=dtype)
            high = np.ones(shape, dtype=dtype)
            out[key] = (low, high)
        ptm = np.array(self.per_task_max, dtype=np.int64)
        out["pending_x"][1][..., col.time] = self.time_high + eps
        out["pending_where"][0][...] = -1
        out["pending_where"][1][...] = self.P - 1
        out["pending_min"][1][...] = ptm
        out["alloc_high"][1][...] = ptm
        out["running_x"][1][..., col.time] = self.time_high + eps
        out["cluster_x"][1][..., col.queue] = self.queue_high + eps
        return out

    def builder(self, start_floor: float | None = None) -> "ObservationBuilder":
        """A builder shared by equal specs (and start floors, :class:`ObservationBuilder`) in this
        process (used by :func:`build_observation`)."""
        return _shared_builder(self, start_floor)


def log_feature_table(n: int) -> np.ndarray:
    """``L(x) = log1p(x) / log1p(LOG_NORM)`` of ``x = 0 .. n - 1`` as float32: the time features."""
    return (np.log1p(np.arange(n, dtype=np.float64)) * (1.0 / math.log1p(LOG_NORM))).astype(np.float32)


@dataclass(frozen=True, eq=False)
class ObservationTables:
    """The float constants and look-up tables of one spec's observation features (treat the arrays
    as read-only). :class:`ObservationBuilder` computes with them and
    :class:`envs.batched.BatchedEdgeClusters` tabulates them with the same numpy expressions, which
    is why the two give bit-identical observations.
    """

    inv_per_task_max: np.ndarray  # float32 (2,): 1 / per_task_max, the (cpu, gpu) scale of task rows
    inv_scale: np.ndarray  # float32 (2,): 1 / (S_c, S_g), the scale of the free / capacity features
    inv_running_slots: np.float32  # 1 / M, the scale of the running-tasks feature
    log_scale: float  # 1 / log1p(LOG_NORM): L(x) = log1p(x) * log_scale
    time_log: np.ndarray  # float32 (max_steps + 2,): L(0 .. max_steps + 1) (an empty run slot may read t + 1)
    type_onehot: np.ndarray  # float32 (K + 1, K): row k the one-hot of type k, row K (empty slot) zeros

    @classmethod
    def from_spec(cls, spec: ObservationSpec) -> "ObservationTables":
        K = spec.K
        type_onehot = np.zeros((K + 1, K), dtype=np.float32)
        type_onehot[np.arange(K), np.arange(K)] = 1.0
        return cls(
            inv_per_task_max=(1.0 / np.array(spec.per_task_max, dtype=np.float64)).astype(np.float32),
            inv_scale=(1.0 / np.array(spec.scale, dtype=np.float64)).astype(np.float32),
            inv_running_slots=np.float32(1.0 / spec.M),
            log_scale=1.0 / math.log1p(LOG_NORM),
            time_log=log_feature_table(spec.max_steps + 2),
            type_onehot=type_onehot,
        )


class ObservationBuilder:
    """Builds observations for one spec; keeps per-workload lookup tables between calls.

    Empty pending / running slots hold ``-1``. Every per-task table has one extra *sentinel*
    row at the end, so indexing it with ``-1`` reads the features of an empty slot without a
    masking pass; ``log1p`` of integer times comes from a precomputed table. ``tables``
    (:class:`ObservationTables`) holds the spec's feature constants, ``columns``
    (:class:`FeatureColumns`) where each feature goes.

    ``start_floor``: the start floor's factor (:mod:`envs.durations`); None: the scenario's
    ``max_start_slowdown``; 0: no start floor whatever the scenario says (an agent that applies
    a start floor of its own, :mod:`agents.baselines.online_floor`).
    """

    def __init__(self, spec: ObservationSpec, start_floor: float | None = None) -> None:
        self.spec = spec
        self.start_floor = start_floor
        P, N = spec.P, spec.N
        self.tables = ObservationTables.from_spec(spec)
        self.columns = spec.columns
        self._slot_ids = np.arange(P, dtype=np.int8)
        self._rows = np.arange(N)[:, None]
        self._clusters = np.arange(N)
        self._workload: Any = None
        self._gate_key: tuple[Any, Any] = (None, None)

    # -- per-workload tables --------------------------------------------------------------
    def _prepare(self, sim: Any) -> None:
        spec = self.spec
        if sim.pending.shape != (spec.N, spec.P):
            raise ValueError(
                f"simulator has pending shape {sim.pending.shape}, observation spec expects {(spec.N, spec.P)}"
            )
        K, tab, col = spec.K, self.tables, self.columns
        T = sim.workload.num_tasks
        task_type = np.asarray(sim.task_type, dtype=np.int64)
        min_req = np.asarray(sim.min_req, dtype=np.int64)
        types = np.append(task_type, K)  # sentinel type K
        self._types = types
        self._arrival = np.append(np.asarray(sim.arrival, dtype=np.int64), 0)  # sentinel set to t per call
        # static part of every task's pending row (waiting-time column filled per call)
        rows = np.zeros((T + 1, spec.Fp), dtype=np.float32)
        rows[:T, col.resources] = (min_req * tab.inv_per_task_max)[task_type]
        rows[:T, col.types] = tab.type_onehot[task_type]
        rows[:T, col.reach] = sim.eligible.sum(axis=1) / spec.N
        rows[T, col.dummy] = 1.0  # dummy flag of an empty slot
        self._pending_rows = rows
        mins = np.zeros((K + 1, 2), dtype=np.int64)
        mins[:K] = min_req
        self._type_min = mins  # (0, 0) for empty slots
        # gate[i, c, g, k]: a type-k task is feasible for cluster i under alloc_high (c, g) (start_gate)
        if sim.cfg is not self._gate_key[0] or sim.functions is not self._gate_key[1]:
            self._gate = start_gate(sim.cfg, sim.functions, self.start_floor)
            self._gate_key = (sim.cfg, sim.functions)
        # slot_of[task, j] = slot of the task in cluster j's pending set, -1 if not there
        self._slot_of = np.full((T + 1, spec.N), -1, dtype=np.int8)
        cap = np.asarray(sim.capacity, dtype=np.float32)
        self._cluster_template = np.zeros((spec.N, CLUSTER_FEATURES), dtype=np.float32)
        self._cluster_template[:, col.capacity] = cap * tab.inv_scale
        self._workload = sim.workload

    # -- the hot path -------------------------------------------------------------------
    def __call__(self, sim: Any) -> dict[str, np.ndarray]:
        if sim.workload is not self._workload:
            self._prepare(sim)
        spec, tab, col = self.spec, self.tables, self.columns
        M = spec.M
        t = sim.t
        time_log = tab.time_log
        if t >= time_log.shape[0] - 1:  # driven past the step cap by non-env code: compute directly
            time_log = log_feature_table(t + 2)
        rows = self._rows

        # ---- pending slots
        pending = sim.pending  # (N, P), -1 = empty
        mask = pending >= 0
        pending_x = self._pending_rows[pending]  # fresh (N, P, Fp); empty slots read the sentinel
        arrival = self._arrival
        arrival[-1] = t  # sentinel: an empty slot has waited 0 steps
        pending_x[..., col.time] = time_log[t - arrival[pending]]
        ptypes = self._types[pending]
        pending_min = np.take(self._type_min, ptypes, axis=0)  # (N, P, 2)

        slot_of = self._slot_of
        slot_of[pending, rows] = self._slot_ids
        slot_of[-1] = -1  # empty slots wrote into the sentinel row
        pending_where = slot_of[pending]  # (N, P, N)
        slot_of[pending, rows] = -1

        alloc_high = np.minimum(sim.free, sim.max_alloc)  # (N, 2)
        fits_type = self._gate[self._clusters, alloc_high[:, 0], alloc_high[:, 1]]  # (N, K + 1)
        feasible = fits_type[rows, ptypes]
        if spec.single and sim.placed_this_step.any():
            feasible[sim.placed_this_step] = False

        # ---- running slots
        run = sim.run_slots
        if run.shape[1] != M:
            run = _first_occupied(run, M)
        rmask = run >= 0
        running_x = np.empty((spec.N, M, col.running_features), dtype=np.float32)
        running_x[..., col.resources] = sim.alloc[run] * tab.inv_per_task_max
        np.take(tab.type_onehot, self._types[run], axis=0, out=running_x[..., col.types])
        running_x[..., col.time] = time_log[t - sim.start[run]]
        running_x[..., col.progress] = sim.progress[run]
        running_x *= rmask[..., None]

        # ---- clusters
        cluster_x = self._cluster_template.copy()
        cluster_x[:, col.free] = sim.free * tab.inv_scale
        queue = np.fromiter(map(len, sim.waiting), dtype=np.int64, count=spec.N) - mask.sum(axis=1)
        cluster_x[:, col.queue] = np.log1p(queue) * tab.log_scale
        cluster_x[:, col.running_tasks] = rmask.sum(axis=1) * tab.inv_running_slots

        return {
            "pending_x": pending_x,
            "pending_mask": mask.view(np.int8),
            "pending_where": pending_where,
            "pending_min": pending_min,
            "alloc_high": alloc_high,
            "feasible": feasible.view(np.int8),
            "running_x": running_x,
            "running_mask": rmask.view(np.int8),
            "cluster_x": cluster_x,
            "multi_mode": np.array([not spec.single], dtype=np.int8),
        }


def _first_occupied(run: np.ndarray, m: int) -> np.ndarray:
    """The first ``m`` occupied slots of every row, in slot order, padded with -1."""
    if run.shape[1] < m:  # never with the shipped simulator; pad defensively
        return np.concatenate([run, np.full((run.shape[0], m - run.shape[1]), -1, run.dtype)], axis=1)
    order = np.argsort(run < 0, axis=1, kind="stable")[:, :m]
    return np.take_along_axis(run, order, axis=1)


@lru_cache(maxsize=32)
def _shared_builder(spec: ObservationSpec, start_floor: float | None) -> ObservationBuilder:
    return ObservationBuilder(spec, start_floor)


def build_observation(sim: Any, spec: ObservationSpec) -> dict[str, np.ndarray]:
    """The observation of ``sim`` (a dict of new arrays, layout in ``docs/observation.md``).

    Uses a builder shared per spec, whose lookup tables are rebuilt whenever it sees another
    workload; code that alternates between simulators (or threads) should own one
    :class:`ObservationBuilder` per simulator instead.
    """
    return spec.builder()(sim)
