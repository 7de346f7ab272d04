"""Progress functions: how much of a task completes in one real step at allocation (c, g).

A task is done when its progress reaches 1. The simulator gates every function: below the
task type's minimum requirement the gain is 0, and on the step after a reallocation the gain
is multiplied by the scenario's switching overhead. All functions are vectorised over the
running tasks of one type. Which class a ``progress.kind`` builds, and its parameters, is
registered in :mod:`envs.progress_registry`; how many steps a task needs is
:mod:`envs.durations`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from .progress_registry import PROGRESS_KINDS, TANH_OFFSET, TANH_SCALE

if TYPE_CHECKING:
    from .config import ScenarioConfig, TaskType

#: progress at or above this counts as complete (absorbs float round-off, e.g. 10 x 0.1)
DONE_THRESHOLD = 1.0 - 1e-9


class ProgressFunction(Protocol):
    """Per-step progress gain of one task type.

    ``delta`` must be elementwise and deterministic (the gain depends only on the allocation and
    the progress). A class may also offer one closed form for the simulator's one-gather fast
    path (:class:`ProgressTable`): :class:`SqrtFormProgress` or :class:`PowerFormProgress`.
    Classes meant for caching (:func:`envs.durations.duration_table`) compare and hash by value.
    """

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        """Gain for tasks at allocation ``(cpu, gpu)`` with current ``progress`` (>= 0)."""
        ...


@runtime_checkable
class SqrtFormProgress(ProgressFunction, Protocol):
    """Optional fast path: ``gain = W[c, g] * sqrt(max(O - p, 0)) + B[c, g]``."""

    def sqrt_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, float, np.ndarray]:
        """``(W, O, B)`` over the allocation grid ``dims = (max cpu + 1, max gpu + 1)``."""
        ...


@runtime_checkable
class PowerFormProgress(ProgressFunction, Protocol):
    """Optional fast path: ``gain = A * ((p / A)**(1 / E) + 1)**E - R * p`` (``gain = A`` where ``E = 0``)."""

    def power_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
        """``(A, E, R, OK)`` over the allocation grid; ``R`` is a bool (1: relative gain),
        ``OK`` marks allocations that can run (the gain is 0 elsewhere)."""
        ...


class ValueEquality:
    """Progress functions compare and hash by value (class and :meth:`_value`), so caches keyed
    on them (:func:`envs.durations.duration_table`) hit across episodes and schedulers."""

    def _value(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._value() == self._value()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value()))


class ConstantProgress(ValueEquality):
    """Resource-insensitive: ``1/steps`` per step at any valid allocation (SJF toy, IMG)."""

    def __init__(self, steps: int) -> None:
        self.steps = int(steps)
        self.rate = 1.0 / self.steps

    @classmethod
    def from_task(cls, task: TaskType, cfg: ScenarioConfig) -> ConstantProgress:
        return cls(task.progress["steps"])

    def _value(self) -> tuple:
        return (self.steps,)

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        return np.full(progress.shape, self.rate)

    def sqrt_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, float, np.ndarray]:
        return np.zeros(dims), 1.0, np.full(dims, self.rate)

    def power_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
        return np.full(dims, self.rate), np.zeros(dims), True, np.ones(dims, dtype=bool)


class TanhProgress(ValueEquality):
    """Resource-sensitive synthetic task: ``tanh(g / scale) * sqrt(offset - p)``; CPU-blind.

    With scale 16 and offset 1.2 (the defaults) a task needs 21, 10, 7, 5, 4, 4, 3, 3, 3, 2, ...
    steps at 1, 2, 3, ... GPUs (``tests/test_progress.py`` checks the table).
    """

    def __init__(self, scale: float = TANH_SCALE, offset: float = TANH_OFFSET) -> None:
        self.scale = float(scale)
        self.offset = float(offset)

    @classmethod
    def from_task(cls, task: TaskType, cfg: ScenarioConfig) -> TanhProgress:
        spec = task.progress
        return cls(spec.get("scale", TANH_SCALE), spec.get("offset", TANH_OFFSET))

    def _value(self) -> tuple:
        return (self.scale, self.offset)

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
    constant-rate gains), 0 where the table says the allocation cannot run. One gather evaluates
    all running tasks, whatever their types. A function joins a form by implementing
    :class:`SqrtFormProgress` or :class:`PowerFormProgress` over the full allocation grid
    ``dims = (per_task_max_cpu + 1, per_task_max_gpu + 1)``.
    """

    def __init__(self, form: str, tables: dict[str, np.ndarray]) -> None:
        self.form = form
        self.t = tables

    @classmethod
    def build(cls, functions: list[ProgressFunction], dims: tuple[int, int]) -> "ProgressTable | None":
        """The table for these functions, or None if they share no closed form."""
        if all(isinstance(f, SqrtFormProgress) for f in functions):
            w, o, b = zip(*(f.sqrt_form(dims) for f in functions))
            return cls("sqrt", {"W": np.stack(w), "O": np.array(o, dtype=float), "B": np.stack(b)})
        if all(isinstance(f, PowerFormProgress) for f in functions):
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
    """One progress function per task type of the scenario, in ``cfg.task_types`` order.

    Each type's ``progress.kind`` picks its builder from :data:`~envs.progress_registry.PROGRESS_KINDS`.
    """
    return [PROGRESS_KINDS[t.progress["kind"]].load()(t, cfg) for t in cfg.task_types]

