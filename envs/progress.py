"""Progress functions: how much of a task completes in one real step at allocation (c, g).

A task is done when its progress reaches 1. The simulator gates every function: below the
task type's minimum requirement the gain is 0, and on the step after a reallocation the gain
is multiplied by the scenario's switching overhead. All functions are vectorised over the
running tasks of one type.
"""

from __future__ import annotations

from typing import Mapping, Protocol

import numpy as np

from .config import ScenarioConfig

#: progress at or above this counts as complete (absorbs float round-off, e.g. 10 x 0.1)
DONE_THRESHOLD = 1.0 - 1e-9


class ProgressFunction(Protocol):
    """Per-step progress gain of one task type."""

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        """Gain for tasks at allocation ``(cpu, gpu)`` with current ``progress`` (>= 0)."""
        ...


class ConstantProgress:
    """Resource-insensitive: ``1/steps`` per step at any valid allocation (SJF toy, IMG)."""

    def __init__(self, steps: int) -> None:
        self.steps = int(steps)
        self.rate = 1.0 / self.steps

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        return np.full(progress.shape, self.rate)

    def sqrt_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, float, np.ndarray]:
        return np.zeros(dims), 1.0, np.full(dims, self.rate)

    def power_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
        return np.full(dims, self.rate), np.zeros(dims), True, np.ones(dims, dtype=bool)


class TanhProgress:
    """Resource-sensitive synthetic task: ``tanh(g / scale) * sqrt(offset - p)``; CPU-blind.

    With scale 16 and offset 1.2 a task needs 21, 10, 7, 5, 4, 4, 3, 3, 3, 2, ... steps at
    1, 2, 3, ... GPUs (reference §1.3).
    """

    def __init__(self, scale: float = 16.0, offset: float = 1.2) -> None:
        self.scale = float(scale)
        self.offset = float(offset)

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        return np.tanh(gpu / self.scale) * np.sqrt(np.maximum(self.offset - progress, 0.0))

    def sqrt_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, float, np.ndarray]:
        w = np.broadcast_to(np.tanh(np.arange(dims[1]) / self.scale), dims).copy()
        return w, self.offset, np.zeros(dims)


class ProgressTable:
    """Every task type of a scenario as lookup tables of one closed form (the simulator's fast path).

    ``sqrt``:  ``gain = W[k, c, g] * sqrt(max(O[k] - p, 0)) + B[k, c, g]`` (constant, tanh);
    ``power``: ``gain = A * ((p / A)**(1 / E) + 1)**E - R[k] * p`` (test-bed power law; ``R = 0``
    for the legacy absolute variant) and exactly ``gain = A`` where ``E = 0`` (constant and
    constant-rate gains), 0 where the table says the allocation cannot run. One gather evaluates all running tasks, whatever their types.
    A function joins a form by providing ``sqrt_form(dims)`` or ``power_form(dims)`` over the
    full allocation grid ``dims = (per_task_max_cpu + 1, per_task_max_gpu + 1)``.
    """

    def __init__(self, form: str, tables: dict[str, np.ndarray]) -> None:
        self.form = form
        self.t = tables

    @classmethod
    def build(cls, functions: list[ProgressFunction], dims: tuple[int, int]) -> "ProgressTable | None":
        """The table for these functions, or None if they share no closed form."""
        if all(hasattr(f, "sqrt_form") for f in functions):
            w, o, b = zip(*(f.sqrt_form(dims) for f in functions))
            return cls("sqrt", {"W": np.stack(w), "O": np.array(o, dtype=float), "B": np.stack(b)})
        if all(hasattr(f, "power_form") for f in functions):
            a, e, rel, ok = zip(*(f.power_form(dims) for f in functions))
            a = np.where(np.stack(ok), np.stack(a), 1.0)  # placeholder where it cannot run
            return cls("power", {"A": a, "E": np.stack(e), "R": np.array(rel, dtype=float), "OK": np.stack(ok)})
        return None

    def delta(self, types: np.ndarray, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        """Gain of each task given its type index, allocation and progress."""
        t = self.t
        if self.form == "sqrt":
            return t["W"][types, cpu, gpu] * np.sqrt(np.maximum(t["O"][types] - progress, 0.0)) + t["B"][types, cpu, gpu]
        a = t["A"][types, cpu, gpu]
        e = t["E"][types, cpu, gpu]
        const = e == 0.0
        if const.all():
            gain = a
        else:
            e = np.where(const, 1.0, e)
            gain = np.where(const, a, a * ((progress / a) ** (1.0 / e) + 1.0) ** e - t["R"][types] * progress)
        return np.where(t["OK"][types, cpu, gpu], gain, 0.0)


def build_progress_functions(cfg: ScenarioConfig) -> list[ProgressFunction]:
    """One progress function per task type of the scenario, in ``cfg.task_types`` order."""
    trace_models: Mapping[str, ProgressFunction] | None = None
    out: list[ProgressFunction] = []
    for t in cfg.task_types:
        spec = t.progress
        if spec["kind"] == "constant":
            out.append(ConstantProgress(spec["steps"]))
        elif spec["kind"] == "tanh":
            out.append(TanhProgress(spec.get("scale", 16.0), spec.get("offset", 1.2)))
        else:
            if trace_models is None:
                from .trace_fit import load_trace_models

                trace_models = load_trace_models(cfg.trace.params or None, cfg.trace.mode)
            if spec["task"] not in trace_models:
                from .config import ConfigError

                raise ConfigError(
                    f"task type {t.name!r}: trace task {spec['task']!r} is not in the fitted table "
                    f"(has {sorted(trace_models)})"
                )
            out.append(trace_models[spec["task"]])
    return out


def steps_to_finish(fn: ProgressFunction, cpu: np.ndarray, gpu: np.ndarray, limit: int = 100_000) -> np.ndarray:
    """Noise-free steps a task needs at fixed allocations ``(cpu, gpu)`` (vectorised).

    Returns ``limit`` for allocations that never finish within ``limit`` steps.
    """
    cpu = np.asarray(cpu)
    gpu = np.asarray(gpu)
    p = np.zeros(np.broadcast(cpu, gpu).shape)
    steps = np.full(p.shape, limit, dtype=np.int64)
    active = np.ones(p.shape, dtype=bool)
    for k in range(1, limit + 1):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        c = np.broadcast_to(cpu, p.shape).ravel()[idx]
        g = np.broadcast_to(gpu, p.shape).ravel()[idx]
        pv = p.ravel()
        pv[idx] += np.maximum(fn.delta(c, g, pv[idx]), 0.0)
        done = idx[pv[idx] >= DONE_THRESHOLD]
        steps.ravel()[done] = k
        active.ravel()[done] = False
        if k > 1000 and np.all(pv[idx] == 0):
            break
    return steps


def fastest_steps(cfg: ScenarioConfig, functions: list[ProgressFunction] | None = None) -> np.ndarray:
    """``[type, cluster]`` -> fewest steps a task of that type needs on that cluster.

    Searches every allocation between the minimum requirement and ``min(capacity,
    per_task_max)``. Entries are ``-1`` where the type cannot run on the cluster.
    """
    functions = functions if functions is not None else build_progress_functions(cfg)
    out = np.full((cfg.num_types, cfg.num_clusters), -1, dtype=np.int64)
    for k, (t, fn) in enumerate(zip(cfg.task_types, functions)):
        for i, cap in enumerate(cfg.capacities):
            hi_c = min(cap[0], cfg.per_task_max[0])
            hi_g = min(cap[1], cfg.per_task_max[1])
            if t.min_req[0] > hi_c or t.min_req[1] > hi_g:
                continue
            c, g = np.meshgrid(np.arange(t.min_req[0], hi_c + 1), np.arange(t.min_req[1], hi_g + 1), indexing="ij")
            out[k, i] = int(steps_to_finish(fn, c.ravel(), g.ravel()).min())
    return out
