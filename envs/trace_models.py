"""Test-bed progress functions: a fitted parameter table turned into per-allocation gains.

Modes (``trace.mode``, :data:`~envs.progress_registry.TRACE_MODES`) of :func:`load_trace_models`:

* ``powerlaw`` (default): gain at progress p is the difference ``p(k + 1) - p(k)`` with
  ``k = (p / a)**(1 / b)`` (anchored a, b); inference tasks a constant ``step_seconds / T``.
* ``legacy``: the reference's bug, the *absolute* ``a_free * (k + 1)**b_free`` returned as the
  gain (progress compounds); inference tasks as above (one time unit, unlike the reference).
* ``constant_rate``: the reference HEAD model, ``step_seconds / (T + overhead_seconds)`` for
  every task (``overhead_seconds`` defaults to 14).

Allocations above the measured grid use the largest measured CPU / GPU count; an allocation
with 0 CPUs or 0 GPUs (a paused task) gains nothing. The table format and fitting are
:mod:`envs.trace_table`; the ``trace`` progress kind builds its functions with
:func:`trace_progress`.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import ConfigError
from .progress import ValueEquality
from .progress_registry import TRACE_MODES
from .trace_table import TABLE_FORMAT, TraceError, load_table, resolve_table_path

if TYPE_CHECKING:
    from .config import ScenarioConfig, TaskType
    from .progress import ProgressFunction


def _cell_index(cpu: np.ndarray, gpu: np.ndarray, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Table indices of allocations (clipped to the grid) and the mask of runnable ones (>= 1 each)."""
    c = np.asarray(cpu).astype(np.int64)
    g = np.asarray(gpu).astype(np.int64)
    ok = (c >= 1) & (g >= 1)
    # np.minimum/np.maximum: np.clip on integer arrays builds np.iinfo on every call (slow)
    return np.minimum(np.maximum(c, 1), shape[0]) - 1, np.minimum(np.maximum(g, 1), shape[1]) - 1, ok


def _array_value(*parts: Any) -> tuple:
    """Exact, hashable value of a table-backed function's arrays (shape and bytes) and flags."""
    return tuple((a.shape, a.tobytes()) if isinstance(a, np.ndarray) else a for a in parts)


class PowerLawProgress(ValueEquality):
    """Gain from the curve ``p(x) = a[c, g] * x**b[c, g]`` (x in steps) at the task's progress.

    ``absolute=False``: the difference ``p(k + 1) - p(k)`` with ``k = (p / a)**(1 / b)``.
    ``absolute=True`` reproduces the reference bug and returns ``p(k + 1)`` itself.
    """

    def __init__(self, a: np.ndarray, b: np.ndarray, absolute: bool = False) -> None:
        self.a = np.asarray(a, dtype=float)
        self.b = np.asarray(b, dtype=float)
        if self.a.shape != self.b.shape or self.a.ndim != 2:
            raise ValueError("a and b must be 2-D arrays of the same shape (cpu x gpu)")
        self.absolute = bool(absolute)

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        ci, gi, ok = _cell_index(cpu, gpu, self.a.shape)
        a = self.a[ci, gi]
        b = self.b[ci, gi]
        p = np.maximum(np.asarray(progress, dtype=float), 0.0)
        k = (p / a) ** (1.0 / b)
        nxt = a * (k + 1.0) ** b
        gain = nxt if self.absolute else nxt - p
        return np.where(ok, gain, 0.0)

    def power_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
        c, g = np.meshgrid(np.arange(dims[0]), np.arange(dims[1]), indexing="ij")
        ci, gi, ok = _cell_index(c, g, self.a.shape)
        return self.a[ci, gi], self.b[ci, gi], not self.absolute, ok

    def _value(self) -> tuple:
        return _array_value(self.a, self.b, self.absolute)

    def __repr__(self) -> str:
        return f"PowerLawProgress(shape={self.a.shape}, absolute={self.absolute})"


class ConstantRateProgress(ValueEquality):
    """A constant gain ``rate[c, g]`` per step, whatever the progress."""

    def __init__(self, rate: np.ndarray) -> None:
        self.rate = np.asarray(rate, dtype=float)
        if self.rate.ndim != 2:
            raise ValueError("rate must be a 2-D array (cpu x gpu)")

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        ci, gi, ok = _cell_index(cpu, gpu, self.rate.shape)
        return np.where(ok, self.rate[ci, gi], 0.0)

    def power_form(self, dims: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, bool, np.ndarray]:
        c, g = np.meshgrid(np.arange(dims[0]), np.arange(dims[1]), indexing="ij")
        ci, gi, ok = _cell_index(c, g, self.rate.shape)
        return self.rate[ci, gi], np.zeros(dims), True, ok

    def _value(self) -> tuple:
        return _array_value(self.rate)

    def __repr__(self) -> str:
        return f"ConstantRateProgress(shape={self.rate.shape})"


def _grid(table: Mapping[str, Any], task: str, key: str, shape: tuple[int, int], name: str) -> np.ndarray:
    where = f"{name}: tasks.{task}.{key}"
    if key not in table["tasks"][task]:
        raise TraceError(f"{where} is missing")
    try:
        arr = np.array(table["tasks"][task][key], dtype=float)
    except (TypeError, ValueError):
        raise TraceError(f"{where} is not a numeric array") from None
    if arr.shape != shape:
        raise TraceError(f"{where} has shape {arr.shape}, expected {shape} (cpu x gpu)")
    bad = np.argwhere(~np.isfinite(arr) | (arr <= 0))
    if bad.size:
        i, j = bad[0]
        raise TraceError(f"{where}[{i}][{j}] = {arr[i, j]} must be a positive finite number")
    return arr


def models_from_table(table: Mapping[str, Any], mode: str, name: str = "<table>") -> dict[str, ProgressFunction]:
    """Progress functions (task name -> ProgressFunction) of a validated-on-the-fly table."""
    _check_mode(mode)
    if not isinstance(table, Mapping):
        raise TraceError(f"{name}: expected a JSON object at the top level")
    if table.get("format") != TABLE_FORMAT:
        raise TraceError(f"{name}: format is {table.get('format')!r}, expected {TABLE_FORMAT!r}")
    for key in ("step_seconds", "overhead_seconds", "cpu", "gpu", "tasks"):
        if key not in table:
            raise TraceError(f"{name}: missing key {key!r}")
    step = table["step_seconds"]
    overhead = table["overhead_seconds"]
    if not isinstance(step, (int, float)) or not step > 0 or not math.isfinite(step):
        raise TraceError(f"{name}: step_seconds must be a positive number, got {step!r}")
    if not isinstance(overhead, (int, float)) or not overhead >= 0 or not math.isfinite(overhead):
        raise TraceError(f"{name}: overhead_seconds must be >= 0, got {overhead!r}")
    for axis in ("cpu", "gpu"):
        vals = table[axis]
        if not isinstance(vals, list) or not vals or vals != list(range(1, len(vals) + 1)):
            raise TraceError(f"{name}: {axis} must list the counts 1..N of the measured grid")
    shape = (len(table["cpu"]), len(table["gpu"]))
    tasks = table["tasks"]
    if not isinstance(tasks, Mapping) or not tasks:
        raise TraceError(f"{name}: tasks must be a non-empty object")
    out: dict[str, ProgressFunction] = {}
    for task, entry in tasks.items():
        if not isinstance(entry, Mapping) or entry.get("kind") not in ("training", "inference"):
            raise TraceError(f"{name}: tasks.{task}.kind must be 'training' or 'inference'")
        total = _grid(table, task, "total_seconds", shape, name)
        if mode == "constant_rate":
            out[task] = ConstantRateProgress(step / (total + overhead))
        elif entry["kind"] == "inference":
            out[task] = ConstantRateProgress(step / total)
        elif mode == "powerlaw":
            out[task] = PowerLawProgress(_grid(table, task, "a", shape, name), _grid(table, task, "b", shape, name))
        else:
            out[task] = PowerLawProgress(
                _grid(table, task, "a_free", shape, name), _grid(table, task, "b_free", shape, name), absolute=True
            )
    return out


def _check_mode(mode: str) -> None:
    if mode not in TRACE_MODES:
        raise TraceError(f"unknown trace mode {mode!r}; expected one of {', '.join(TRACE_MODES)}")


class _ModelCache:
    """Loaded models per (resolved path, file modification time, mode); least recently used
    entries are dropped beyond ``maxsize``."""

    def __init__(self, maxsize: int = 16) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, int, str], dict[str, ProgressFunction]] = OrderedDict()

    def get(self, path: Path, mode: str) -> dict[str, ProgressFunction]:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            mtime = -1
        key = (str(path.resolve()) if path.exists() else str(path), mtime, mode)
        if key in self._entries:
            self._entries.move_to_end(key)
        else:
            self._entries[key] = models_from_table(load_table(path), mode, str(path))
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return self._entries[key]

    def clear(self) -> None:
        self._entries.clear()


_MODELS = _ModelCache()


def load_trace_models(path: str | os.PathLike | None, mode: str) -> dict[str, ProgressFunction]:
    """Task name -> progress function from the table at ``path`` (None = shipped) in ``mode``.

    Cached (at most 16 tables, least recently used dropped) per resolved path, file
    modification time and mode; the caller gets its own dict of the cached functions.
    """
    _check_mode(mode)
    return dict(_MODELS.get(resolve_table_path(path), mode))


def trace_progress(task: TaskType, cfg: ScenarioConfig) -> ProgressFunction:
    """Builder of the ``trace`` progress kind: the fitted function of ``task.progress["task"]``."""
    models = load_trace_models(cfg.trace.params or None, cfg.trace.mode)
    name = task.progress["task"]
    if name not in models:
        raise ConfigError(
            f"task type {task.name!r}: trace task {name!r} is not in the fitted table (has {sorted(models)})"
        )
    return models[name]
