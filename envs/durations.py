"""Duration oracle: how many real steps a task needs at a fixed allocation, without noise.

The one owner of forward-simulating a task's progress: ``Simulator.fastest`` and the ``bound``,
the primal-dual catalogue (``pd-maxweight``, ``pd-maxsche``), ``pd-preemptive`` and ``okita``
all read it. The rule is the simulator's (:class:`envs.core.ProgressStep`) without noise: each
real step a task gains ``max(f(c, g, p), 0)``, times ``first_factor`` on the first step (the
scenario's ``switch_overhead`` for a task whose allocation just changed; starting a task is not
a switch), and it is done once its progress reaches :data:`~envs.progress.DONE_THRESHOLD`.
A gain of 0 (or NaN) means the task never finishes: the gain depends only on the progress,
which then stays put. :func:`forward` takes allocations as given; :class:`DurationTable` also
applies the simulator's gate (below the type's minimum requirement nothing is gained).

**The start floor** (an option beyond the paper, off by default) is defined here, by
:func:`start_gate`. Its factor is the scenario's ``max_start_slowdown = f``: with ``f > 0`` a
pending task is held back from a cluster's agent unless, started there at ``alloc_high`` (the
cluster's free resources, up to ``per_task_max``), it would finish within ``f`` times its fastest
duration on that cluster (noise-free, from progress 0). What it offers an agent is the
observation's ``feasible`` mask: it changes that mask only, never what the simulator accepts
(:mod:`envs.joint_action`). ``f = 0`` is no start floor, the paper's ``feasible``. It reads the
true durations; :mod:`agents.baselines.online_floor` applies the same factor to durations
estimated in the episode, and :mod:`agents.baselines.start_floor` puts a baseline behind either.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .progress import DONE_THRESHOLD, ProgressFunction, build_progress_functions

if TYPE_CHECKING:
    from .config import ScenarioConfig

#: default step limit of a forward simulation
DEFAULT_LIMIT = 100_000
#: :attr:`DurationTable.disc` / ``cont`` value of "never finishes" (keeps arithmetic finite)
NEVER = 1e12


@dataclass(frozen=True)
class Finish:
    """Result of :func:`forward` for ``n`` tasks (flat arrays)."""

    steps: np.ndarray  # int64: real steps until done (0: already done); -1: not within the limit
    time: np.ndarray  # float64: the same with the last step counted fractionally; NEVER if not done
    trajectory: np.ndarray | None  # (n, S + 1) progress after each step, frozen once done or stuck


def forward(
    fn: ProgressFunction,
    cpu: Any,
    gpu: Any,
    progress: Any = 0.0,
    first_factor: Any = 1.0,
    limit: int = DEFAULT_LIMIT,
    record: bool = False,
) -> Finish:
    """Simulate tasks of one type at fixed allocations ``(cpu, gpu)`` from ``progress``.

    Arguments broadcast together; results are flattened. ``first_factor`` multiplies the first
    step's gain (switching overhead). ``record=True`` also returns the progress trajectories.
    """
    cpu, gpu = np.asarray(cpu), np.asarray(gpu)
    p0 = np.asarray(progress, dtype=np.float64)
    shape = np.broadcast_shapes(cpu.shape, gpu.shape, p0.shape)
    c = np.broadcast_to(cpu, shape).ravel()
    g = np.broadcast_to(gpu, shape).ravel()
    p = np.array(np.broadcast_to(p0, shape).ravel(), dtype=np.float64)
    scaled = np.ndim(first_factor) > 0 or float(first_factor) != 1.0
    factor = np.broadcast_to(np.asarray(first_factor, dtype=np.float64), shape).ravel() if scaled else None
    steps = np.full(p.size, -1, dtype=np.int64)
    time = np.full(p.size, NEVER)
    undone = p < DONE_THRESHOLD
    steps[~undone] = 0
    time[~undone] = 0.0
    active = np.flatnonzero(undone)
    hist = [p.copy()] if record else []
    for step in range(1, int(limit) + 1):
        if active.size == 0:
            break
        gain = np.maximum(np.asarray(fn.delta(c[active], g[active], p[active]), dtype=np.float64), 0.0)
        stuck = ~(gain > 0)
        if factor is not None and step == 1:
            gain = gain * factor[active]
        prev = p[active]
        p[active] = prev + np.where(stuck, 0.0, gain)
        done = ~stuck & (p[active] >= DONE_THRESHOLD)
        idx = active[done]
        steps[idx] = step
        time[idx] = step - 1 + np.clip((1.0 - prev[done]) / gain[done], 0.0, 1.0)
        if record:
            hist.append(p.copy())
        active = active[~stuck & ~done]
    return Finish(steps, time, np.stack(hist, axis=1) if record else None)


def steps_to_finish(
    fn: ProgressFunction,
    cpu: Any,
    gpu: Any,
    limit: int = DEFAULT_LIMIT,
    progress: Any = 0.0,
    first_factor: Any = 1.0,
) -> np.ndarray:
    """Noise-free steps to finish at fixed allocations ``(cpu, gpu)`` (vectorised, ungated).

    From progress 0 unless ``progress`` is given; ``limit`` for allocations that do not finish
    within ``limit`` steps. The result has the broadcast shape of the arguments.
    """
    shape = np.broadcast_shapes(np.shape(cpu), np.shape(gpu), np.shape(progress))
    s = forward(fn, cpu, gpu, progress, first_factor, limit).steps
    return np.where(s < 0, limit, s).reshape(shape)


class DurationTable:
    """Noise-free durations from progress 0 of every task type at every grid allocation.

    The grid is ``(c, g)`` in ``[0..per_task_max]``, flattened as ``index(c, g) = c * num_gpu + g``
    (``cpu``, ``gpu`` hold the flat grid). ``steps[k, a]``: whole real steps a task of type ``k``
    needs at allocation ``a`` (-1: below the type's minimum or not within ``limit``);
    ``disc``/``cont``: the same as floats, ``cont`` with the last step counted fractionally,
    :data:`NEVER` where it cannot finish. Build it through :func:`duration_table` (cached).
    """

    def __init__(
        self,
        functions: Sequence[ProgressFunction],
        min_req: Sequence[Sequence[int]],
        per_task_max: Sequence[int],
        limit: int = DEFAULT_LIMIT,
        resolution: int = 1024,
    ) -> None:
        self.functions = tuple(functions)
        self.min_req = np.array(min_req, dtype=np.int64).reshape(-1, 2)
        self.per_task_max = (int(per_task_max[0]), int(per_task_max[1]))
        self.limit = int(limit)
        self.resolution = int(resolution)
        self.num_gpu = self.per_task_max[1] + 1
        c, g = np.meshgrid(np.arange(self.per_task_max[0] + 1), np.arange(self.num_gpu), indexing="ij")
        self.cpu, self.gpu = c.ravel(), g.ravel()
        K, A = len(self.functions), self.cpu.size
        self.steps = np.full((K, A), -1, dtype=np.int64)
        self.cont = np.full((K, A), NEVER)
        for k, fn in enumerate(self.functions):
            ok = self.runnable(k)
            fin = forward(fn, self.cpu[ok], self.gpu[ok], limit=self.limit)
            self.steps[k, ok] = fin.steps
            self.cont[k, ok] = fin.time
        self.disc = np.where(self.steps < 0, NEVER, self.steps.astype(np.float64))
        self._shift: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def index(self, cpu: Any, gpu: Any) -> Any:
        """Flat allocation index of ``(cpu, gpu)`` (vectorised)."""
        return np.asarray(cpu) * self.num_gpu + np.asarray(gpu)

    def runnable(self, k: int) -> np.ndarray:
        """Flat grid mask of the allocations that meet type ``k``'s minimum requirement."""
        lo = self.min_req[k]
        return (self.cpu >= lo[0]) & (self.gpu >= lo[1])

    def grid_steps(self) -> np.ndarray:
        """``steps`` as a ``(type, cpu, gpu)`` array."""
        return self.steps.reshape(len(self.functions), self.per_task_max[0] + 1, self.num_gpu)

    def fastest(self, capacities: Sequence[Sequence[int]]) -> np.ndarray:
        """``[type, cluster]`` fewest steps over the allocations between the type's minimum and
        ``min(capacity, per_task_max)`` (``limit`` if none finishes; -1: the type cannot run there)."""
        grid = self.grid_steps()
        grid = np.where(grid < 0, self.limit, grid)
        out = np.full((len(self.functions), len(capacities)), -1, dtype=np.int64)
        for k, lo in enumerate(self.min_req.tolist()):
            for i, cap in enumerate(capacities):
                hi_c, hi_g = min(cap[0], self.per_task_max[0]), min(cap[1], self.per_task_max[1])
                if lo[0] <= hi_c and lo[1] <= hi_g:
                    out[k, i] = int(grid[k, lo[0] : hi_c + 1, lo[1] : hi_g + 1].min())
        return out

    def remaining_steps(
        self, types: Any, cpu: Any, gpu: Any, progress: Any, limit: int, first_factor: Any = 1.0
    ) -> np.ndarray:
        """Exact noise-free steps each task still needs from its ``progress`` at its fixed
        allocation: at least 1 (a complete task counts 1), ``limit`` if not within ``limit``;
        below its type's minimum a task never finishes. ``first_factor`` as in :func:`forward`."""
        types = np.asarray(types, dtype=np.int64)
        cpu, gpu = np.asarray(cpu), np.asarray(gpu)
        progress = np.asarray(progress, dtype=np.float64)
        factor = np.broadcast_to(np.asarray(first_factor, dtype=np.float64), types.shape)
        out = np.full(types.shape, int(limit), dtype=np.int64)
        for k, fn in enumerate(self.functions):
            lo = self.min_req[k]
            m = np.flatnonzero((types == k) & (cpu >= lo[0]) & (gpu >= lo[1]))
            if m.size:
                s = forward(fn, cpu[m], gpu[m], progress[m], factor[m], limit).steps
                out[m] = np.where(s < 0, limit, np.maximum(s, 1))
        return out

    def remaining(self, k: int, progress: Any, alloc: Any) -> np.ndarray:
        """``(n, len(alloc))`` continuous steps left for tasks of type ``k`` at each flat allocation.

        A time shift of the trajectory from progress 0: from progress ``p`` the remaining time is
        ``T - tau(p)``, ``tau`` the interpolated time at which the trajectory reaches ``p`` (exact
        for constant-rate tasks and on the trajectory, an approximation elsewhere).
        """
        inverse, tab, tcls = self._shift_table(k)
        cls = inverse[np.asarray(alloc)]
        x = np.clip(np.asarray(progress, dtype=np.float64), 0.0, 1.0) * self.resolution
        i0 = np.minimum(np.floor(x).astype(np.int64), self.resolution - 1)
        f = x - i0
        tau = tab[:, i0] * (1.0 - f) + tab[:, i0 + 1] * f  # (classes, n)
        T = tcls[:, None]
        rem = np.where(T >= NEVER, NEVER, np.maximum(T - tau, 0.0))[cls]  # (G, n)
        return rem.T

    def _shift_table(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Allocations grouped by identical trajectory: class of each allocation, ``tau`` on a
        progress grid per class, finishing time per class (built on first use)."""
        if k not in self._shift:
            ok = self.runnable(k)
            fin = forward(self.functions[k], self.cpu[ok], self.gpu[ok], limit=self.limit, record=True)
            traj = np.zeros((self.cpu.size, fin.trajectory.shape[1]))
            traj[ok] = fin.trajectory
            cont = self.cont[k]
            traj[cont >= NEVER] = 0.0
            classes, inverse = np.unique(traj, axis=0, return_inverse=True)
            inverse = inverse.ravel()
            grid = np.linspace(0.0, 1.0, self.resolution + 1)
            tau = np.zeros((classes.shape[0], grid.size))
            tcls = np.full(classes.shape[0], NEVER)
            for r in range(classes.shape[0]):
                first = np.flatnonzero(inverse == r)[0]
                tcls[r] = cont[first]
                if cont[first] >= NEVER:
                    continue
                n = int(self.disc[k, first])
                tau[r] = np.interp(grid, classes[r, : n + 1], np.arange(n + 1, dtype=np.float64))
            self._shift[k] = (inverse, tau, tcls)
        return self._shift[k]


@functools.lru_cache(maxsize=16)
def _cached_table(functions: tuple, min_req: tuple, per_task_max: tuple, limit: int) -> DurationTable:
    return DurationTable(functions, min_req, per_task_max, limit)


def duration_table(
    cfg: ScenarioConfig, functions: Sequence[ProgressFunction], limit: int = DEFAULT_LIMIT
) -> DurationTable:
    """The :class:`DurationTable` of a scenario's task types and progress functions.

    Cached (least recently used, at most 16 tables) by the functions (built-in progress
    classes compare by value), minimum requirements, ``per_task_max`` and ``limit``; functions
    that cannot be hashed get a fresh table.
    """
    key = (tuple(functions), tuple(tuple(t.min_req) for t in cfg.task_types), tuple(cfg.per_task_max), int(limit))
    try:
        hash(key)
    except TypeError:
        return DurationTable(*key)
    return _cached_table(*key)


def fastest_steps(cfg: ScenarioConfig, functions: Sequence[ProgressFunction] | None = None) -> np.ndarray:
    """``[type, cluster]`` -> fewest steps a task of that type needs on that cluster.

    Searches every allocation between the minimum requirement and ``min(capacity,
    per_task_max)``. Entries are ``-1`` where the type cannot run on the cluster.
    """
    functions = functions if functions is not None else build_progress_functions(cfg)
    return duration_table(cfg, functions).fastest(cfg.capacities)


def start_gate(
    cfg: ScenarioConfig, functions: Sequence[ProgressFunction], factor: float | None = None
) -> np.ndarray:
    """``gate[i, c, g, k]``: a pending type-``k`` task is ``feasible`` for cluster ``i``'s agent
    when ``alloc_high`` there is ``(c, g)``, under the start floor of factor ``factor`` (None: the
    scenario's ``max_start_slowdown``; module doc).

    It is feasible when its minimum requirement fits ``(c, g)`` and, with a factor ``f > 0``,
    when started at ``(c, g)`` it would finish within ``f`` times its fastest duration on cluster
    ``i`` (a type that cannot finish within the table's limit there is not held back). Shape
    ``(N, C1, G1, K + 1)``; index ``K`` (an empty slot) is never feasible.
    """
    c1, g1 = cfg.alloc_dims
    K, N = cfg.num_types, cfg.num_clusters
    mins = np.array([t.min_req for t in cfg.task_types], dtype=np.int64)  # (K, 2)
    gate = np.zeros((N, c1, g1, K + 1), dtype=bool)
    gate[..., :K] = (mins[:, 0] <= np.arange(c1)[:, None, None]) & (mins[:, 1] <= np.arange(g1)[None, :, None])
    factor = float(cfg.max_start_slowdown if factor is None else factor)
    if factor > 0:
        table = duration_table(cfg, functions)
        steps = np.moveaxis(table.grid_steps(), 0, -1)  # (C1, G1, K)
        best = table.fastest(cfg.capacities).T[:, None, None, :]  # (N, 1, 1, K)
        limited = (best >= 0) & (best < table.limit)
        gate[..., :K] &= ((steps >= 0) & (steps <= factor * best)) | ~limited
    return gate
