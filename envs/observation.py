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
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from .config import ScenarioConfig
from .durations import start_gate

#: time and queue features are ``log1p(x) / log1p(LOG_NORM)``: 1.0 at 100 steps / tasks
LOG_NORM = 100.0
#: number of cluster features
CLUSTER_FEATURES = 6
#: observation keys, in the documented order
KEYS = (
    "pending_x", "pending_mask", "pending_where", "pending_min", "alloc_high", "feasible",
    "running_x", "running_mask", "cluster_x",
)


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
    def Fp(self) -> int:
        return self.K + 5

    @property
    def Fr(self) -> int:
        return self.K + 4

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
        }

    def bounds(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``key -> (low, high)`` arrays (full shape) that contain every value the builder emits."""
        out = {}
        eps = 1e-4  # float32 round-off margin on the log features
        K = self.K
        for key, (shape, dtype) in self.shapes().items():
            low = np.zeros(shape, dtype=dtype)
            high = np.ones(shape, dtype=dtype)
            out[key] = (low, high)
        ptm = np.array(self.per_task_max, dtype=np.int64)
        out["pending_x"][1][..., K + 2] = self.time_high + eps
        out["pending_where"][0][...] = -1
        out["pending_where"][1][...] = self.P - 1
        out["pending_min"][1][...] = ptm
        out["alloc_high"][1][...] = ptm
        out["running_x"][1][..., K + 2] = self.time_high + eps
        out["cluster_x"][1][..., 4] = self.queue_high + eps
        return out

    def builder(self, start_floor: float | None = None) -> "ObservationBuilder":
        """A builder shared by equal specs (and start floors, :class:`ObservationBuilder`) in this
        process (used by :func:`build_observation`)."""
        return _shared_builder(self, start_floor)


class ObservationBuilder:
    """Builds observations for one spec; keeps per-workload lookup tables between calls.

    Empty pending / running slots hold ``-1``. Every per-task table has one extra *sentinel*
    row at the end, so indexing it with ``-1`` reads the features of an empty slot without a
    masking pass; ``log1p`` of integer times comes from a precomputed table.

    ``start_floor``: the factor of the offer's start floor (:func:`envs.durations.start_gate`);
    None: the scenario's ``max_start_slowdown``; 0: the paper's offer whatever the scenario says
    (an agent that applies a floor of its own, :mod:`agents.policy.online_floor`).
    """

    def __init__(self, spec: ObservationSpec, start_floor: float | None = None) -> None:
        self.spec = spec
        self.start_floor = start_floor
        K, P, N = spec.K, spec.P, spec.N
        self._inv_ptm = (1.0 / np.array(spec.per_task_max, dtype=np.float64)).astype(np.float32)
        self._inv_scale = (1.0 / np.array(spec.scale, dtype=np.float64)).astype(np.float32)
        self._inv_M = np.float32(1.0 / spec.M)
        self._log_scale = 1.0 / math.log1p(LOG_NORM)
        # log feature of 0 .. max_steps + 1 steps (elapsed of an empty run slot may read t + 1)
        self._time_log = (np.log1p(np.arange(spec.max_steps + 2, dtype=np.float64)) * self._log_scale).astype(
            np.float32
        )
        self._type_onehot = np.zeros((K + 1, K), dtype=np.float32)  # row K: empty slot
        self._type_onehot[np.arange(K), np.arange(K)] = 1.0
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
        K = spec.K
        T = sim.workload.num_tasks
        task_type = np.asarray(sim.task_type, dtype=np.int64)
        min_req = np.asarray(sim.min_req, dtype=np.int64)
        types = np.append(task_type, K)  # sentinel type K
        self._types = types
        self._arrival = np.append(np.asarray(sim.arrival, dtype=np.int64), 0)  # sentinel set to t per call
        # static part of every task's pending row (waiting-time column filled per call)
        rows = np.zeros((T + 1, spec.Fp), dtype=np.float32)
        rows[:T, 0:2] = (min_req * self._inv_ptm)[task_type]
        rows[:T, 2:2 + K] = self._type_onehot[task_type]
        rows[:T, K + 3] = sim.eligible.sum(axis=1) / spec.N
        rows[T, K + 4] = 1.0  # dummy flag of an empty slot
        self._pending_rows = rows
        mins = np.zeros((K + 1, 2), dtype=np.int64)
        mins[:K] = min_req
        self._type_min = mins  # (0, 0) for empty slots
        # gate[i, c, g, k]: a type-k task is offered to cluster i under alloc_high (c, g)
        if sim.cfg is not self._gate_key[0] or sim.functions is not self._gate_key[1]:
            self._gate = start_gate(sim.cfg, sim.functions, self.start_floor)
            self._gate_key = (sim.cfg, sim.functions)
        # slot_of[task, j] = slot of the task in cluster j's pending set, -1 if not there
        self._slot_of = np.full((T + 1, spec.N), -1, dtype=np.int8)
        cap = np.asarray(sim.capacity, dtype=np.float32)
        self._cluster_template = np.zeros((spec.N, CLUSTER_FEATURES), dtype=np.float32)
        self._cluster_template[:, 2:4] = cap * self._inv_scale
        self._workload = sim.workload

    # -- the hot path -------------------------------------------------------------------
    def __call__(self, sim: Any) -> dict[str, np.ndarray]:
        if sim.workload is not self._workload:
            self._prepare(sim)
        spec = self.spec
        K, M = spec.K, spec.M
        t = sim.t
        time_log = self._time_log
        if t >= time_log.shape[0] - 1:  # driven past the step cap by non-env code: compute directly
            time_log = (np.log1p(np.arange(t + 2, dtype=np.float64)) * self._log_scale).astype(np.float32)
        rows = self._rows

        # ---- pending slots
        pending = sim.pending  # (N, P), -1 = empty
        mask = pending >= 0
        pending_x = self._pending_rows[pending]  # fresh (N, P, Fp); empty slots read the sentinel
        arrival = self._arrival
        arrival[-1] = t  # sentinel: an empty slot has waited 0 steps
        pending_x[..., K + 2] = time_log[t - arrival[pending]]
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
        running_x = np.empty((spec.N, M, spec.Fr), dtype=np.float32)
        running_x[..., 0:2] = sim.alloc[run] * self._inv_ptm
        np.take(self._type_onehot, self._types[run], axis=0, out=running_x[..., 2:2 + K])
        running_x[..., K + 2] = time_log[t - sim.start[run]]
        running_x[..., K + 3] = sim.progress[run]
        running_x *= rmask[..., None]

        # ---- clusters
        cluster_x = self._cluster_template.copy()
        cluster_x[:, 0:2] = sim.free * self._inv_scale
        queue = np.fromiter(map(len, sim.waiting), dtype=np.int64, count=spec.N) - mask.sum(axis=1)
        cluster_x[:, 4] = np.log1p(queue) * self._log_scale
        cluster_x[:, 5] = rmask.sum(axis=1) * self._inv_M

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
