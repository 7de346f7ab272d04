"""The test-bed parameter table: fitted from the trace CSV, written and read as JSON.

The trace CSV (default ``../shared/data/testbed_trace.csv``, next to this repository; not part
of it) has one row per measured run: ``task, cpu, gpu, total_seconds`` and, for training
tasks, one ``"(elapsed_seconds, validation_loss)"`` column per epoch (inference tasks have
none). Every task has at least one row for each cell of the sweep ``cpu 1..C x gpu 1..G``;
repeated runs of a cell are pooled. This module parses it strictly, fits one parameter table
with a single time unit for every task (``step_seconds`` per simulator step) and writes it as
JSON (the only derived artefact the project ships: ``envs/data/testbed_progress.json``).
:mod:`envs.trace_models` turns a table into progress functions; ``python -m envs.trace_fit``
is the command line.

Fitting (per task and measured (cpu, gpu) cell; repetitions are pooled, never overwritten):

* ``T`` = mean total wall time over the repetitions (start-up included).
* Training tasks (rows with epoch tuples): per run, progress
  ``p = (L_first - L) / (L_first - L_last)`` (clipped to [0, 1]) at ``x = elapsed / step_seconds``;
  the points of all repetitions are pooled and ``p(x) = a * x**b`` is fitted with
  ``scipy.optimize.curve_fit``. The default (``powerlaw``) curve is *anchored* at the measured
  completion: ``a = (T / step_seconds)**-b`` and only ``b`` is fitted, so a task held at one
  allocation finishes after exactly ``ceil(T / step_seconds)`` steps, the measured duration.
  (The total time includes start-up; the epoch times are measured from launch too, so the
  start-up shows up as the slow head of the curve, b > 1, not as a shift.) A free two-parameter
  fit ``(a_free, b_free)`` is stored as well: the reference fitted that way, so ``legacy``
  uses it. The free fit's own completion point misses ``T`` by -5 %..+19 % on the shipped
  trace, which is why it is not the default.
* Inference tasks (rows without tuples): a constant gain ``step_seconds / T``.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = PROJECT_ROOT.parent / "shared" / "data" / "testbed_trace.csv"
DEFAULT_TABLE = Path(__file__).resolve().parent / "data" / "testbed_progress.json"
DEFAULT_STEP_SECONDS = 10.0
DEFAULT_OVERHEAD_SECONDS = 14.0
TABLE_FORMAT = "tapfinger-testbed-progress/1"
#: bounds of the fitted exponent: away from 0 so that the inverse k = (p / a)**(1 / b) exists
B_BOUNDS = (0.05, 20.0)
_TASK_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_TUPLE_RE = re.compile(r"^\(\s*([^,()]+?)\s*,\s*([^,()]+?)\s*\)$")


class TraceError(ValueError):
    """A trace CSV or fitted table is missing or malformed; the message names file and line."""


# ---------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TraceRow:
    """One measured run: ``epochs`` holds ``(elapsed_seconds, validation_loss)`` per epoch."""

    line: int
    task: str
    cpu: int
    gpu: int
    total_seconds: float
    epochs: tuple[tuple[float, float], ...]

    @property
    def is_training(self) -> bool:
        return bool(self.epochs)


def _float(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TraceError(f"{where}: {what} {text!r} is not finite")
    return value


def _count(text: str, what: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise TraceError(f"{where}: {what} {text!r} is not a whole number") from None
    if value < 1:
        raise TraceError(f"{where}: {what} must be >= 1, got {value}")
    return value


def _parse_row(fields: list[str], where: str, line: int) -> TraceRow:
    if len(fields) < 4:
        raise TraceError(
            f"{where}: expected at least 4 columns (task, cpu, gpu, total seconds), got {len(fields)}"
        )
    task = fields[0].strip()
    if not _TASK_RE.match(task):
        raise TraceError(f"{where}: bad task name {fields[0]!r}")
    cpu = _count(fields[1], "cpu count", where)
    gpu = _count(fields[2], "gpu count", where)
    total = _float(fields[3], "total seconds", where)
    if total <= 0:
        raise TraceError(f"{where}: total seconds must be > 0, got {total}")
    epochs: list[tuple[float, float]] = []
    for col, text in enumerate(fields[4:], start=5):
        m = _TUPLE_RE.match(text.strip())
        if not m:
            raise TraceError(f"{where}: column {col}: expected \"(elapsed_seconds, validation_loss)\", got {text!r}")
        elapsed = _float(m.group(1), f"column {col}: elapsed seconds", where)
        loss = _float(m.group(2), f"column {col}: validation loss", where)
        if elapsed < 0 or (epochs and elapsed <= epochs[-1][0]):
            before = f" after {epochs[-1][0]}" if epochs else ""
            raise TraceError(
                f"{where}: column {col}: elapsed seconds must be >= 0 and increasing, got {elapsed}{before}"
            )
        epochs.append((elapsed, loss))
    if epochs:
        if len(epochs) < 2:
            raise TraceError(f"{where}: a training row needs at least 2 epochs to normalise its loss")
        if not epochs[0][1] > epochs[-1][1]:
            raise TraceError(
                f"{where}: validation loss does not decrease from the first to the last epoch "
                f"({epochs[0][1]} -> {epochs[-1][1]}), so it cannot be normalised to progress"
            )
        if epochs[-1][0] > total * 1.01 + 1e-6:
            raise TraceError(f"{where}: last epoch at {epochs[-1][0]} s ends after the total time {total} s")
    return TraceRow(line=line, task=task, cpu=cpu, gpu=gpu, total_seconds=total, epochs=tuple(epochs))


def _check_sweep(rows: list[TraceRow], name: str) -> None:
    """Every task: training xor inference, and a row for every cell of cpu 1..C x gpu 1..G."""
    first: dict[str, TraceRow] = {}
    for r in rows:
        f = first.setdefault(r.task, r)
        if r.is_training != f.is_training:
            this, other = ("has", "has none") if r.is_training else ("has no", "has some")
            raise TraceError(
                f"{name}:{r.line}: task {r.task!r}: this row {this} epoch tuples but its first row (line "
                f"{f.line}) {other}; a task is either training (every row has tuples) or inference (none)"
            )
    max_c = max(r.cpu for r in rows)
    max_g = max(r.gpu for r in rows)
    for task in first:
        lines = [r.line for r in rows if r.task == task]
        have = {(r.cpu, r.gpu) for r in rows if r.task == task}
        for c in range(1, max_c + 1):
            for g in range(1, max_g + 1):
                if (c, g) not in have:
                    raise TraceError(
                        f"{name}:{min(lines)}-{max(lines)}: task {task!r} (rows on lines {min(lines)}-{max(lines)}) "
                        f"has no row for cpu={c}, gpu={g}; the sweep is cpu 1..{max_c} x gpu 1..{max_g}"
                    )


def parse_trace(path: str | os.PathLike) -> list[TraceRow]:
    """Read and validate a trace CSV; any defect raises :class:`TraceError` naming ``file:line``."""
    p = Path(path)
    name = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceError(f"{name}: trace file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{name}: cannot read the trace file: {exc}") from None
    rows: list[TraceRow] = []
    reader = csv.reader(text.splitlines(), skipinitialspace=False)
    line = 0
    try:
        for fields in reader:
            line = reader.line_num
            if not fields or all(not f.strip() for f in fields):
                continue  # blank line
            rows.append(_parse_row(fields, f"{name}:{line}", line))
    except csv.Error as exc:
        raise TraceError(f"{name}:{reader.line_num}: not valid CSV: {exc}") from None
    if not rows:
        raise TraceError(f"{name}: the trace has no rows")
    _check_sweep(rows, name)
    return rows


# ---------------------------------------------------------------------------------------
# Fitting
# ---------------------------------------------------------------------------------------
def normalised_progress(row: TraceRow, step_seconds: float) -> tuple[np.ndarray, np.ndarray]:
    """``(x, p)`` of a training row: steps since launch and first-to-last normalised progress."""
    e = np.array([t for t, _ in row.epochs])
    loss = np.array([v for _, v in row.epochs])
    p = (loss[0] - loss) / (loss[0] - loss[-1])
    return e / step_seconds, np.clip(p, 0.0, 1.0)


def fit_power_law(x: np.ndarray, p: np.ndarray, x_end: float) -> dict[str, float]:
    """Anchored ``p = (x / x_end)**b`` and free ``p = a * x**b`` least-squares fits.

    Returns ``a, b`` (anchored: ``a = x_end**-b``), ``a_free, b_free`` and the RMSE of each.
    """
    from scipy.optimize import curve_fit

    x = np.asarray(x, dtype=float)
    p = np.asarray(p, dtype=float)
    lo, hi = B_BOUNDS
    (b,), _ = curve_fit(lambda xx, bb: (xx / x_end) ** bb, x, p, p0=[1.0], bounds=([lo], [hi]))
    (a_free, b_free), _ = curve_fit(
        lambda xx, aa, bb: aa * xx**bb, x, p, p0=[1.0 / x_end, 1.0], bounds=([1e-12, lo], [np.inf, hi])
    )
    a = x_end ** (-b)
    return {
        "a": float(a),
        "b": float(b),
        "rmse": float(np.sqrt(np.mean((a * x**b - p) ** 2))),
        "a_free": float(a_free),
        "b_free": float(b_free),
        "rmse_free": float(np.sqrt(np.mean((a_free * x**b_free - p) ** 2))),
    }


def fit_trace(
    rows: Sequence[TraceRow],
    step_seconds: float = DEFAULT_STEP_SECONDS,
    overhead_seconds: float = DEFAULT_OVERHEAD_SECONDS,
    provenance: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON-ready parameter table of validated rows (see the module docstring)."""
    if not (math.isfinite(step_seconds) and step_seconds > 0):
        raise TraceError(f"step_seconds must be a positive number, got {step_seconds}")
    if not (math.isfinite(overhead_seconds) and overhead_seconds >= 0):
        raise TraceError(f"overhead_seconds must be >= 0, got {overhead_seconds}")
    rows = list(rows)
    if not rows:
        raise TraceError("no trace rows to fit")
    _check_sweep(rows, "<rows>")
    max_c = max(r.cpu for r in rows)
    max_g = max(r.gpu for r in rows)
    cells: dict[tuple[str, int, int], list[TraceRow]] = {}
    for r in rows:
        cells.setdefault((r.task, r.cpu, r.gpu), []).append(r)
    tasks: dict[str, Any] = {}
    for task in dict.fromkeys(r.task for r in rows):
        training = next(r for r in rows if r.task == task).is_training
        fields = ["reps", "total_seconds"] + (["a", "b", "rmse", "a_free", "b_free", "rmse_free"] if training else [])
        grid = {f: np.zeros((max_c, max_g)) for f in fields}
        for c in range(1, max_c + 1):
            for g in range(1, max_g + 1):
                runs = cells[(task, c, g)]
                total = math.fsum(r.total_seconds for r in runs) / len(runs)
                grid["reps"][c - 1, g - 1] = len(runs)
                grid["total_seconds"][c - 1, g - 1] = total
                if training:
                    pts = [normalised_progress(r, step_seconds) for r in runs]
                    x = np.concatenate([q[0] for q in pts])
                    p = np.concatenate([q[1] for q in pts])
                    order = np.lexsort((p, x))  # the fit does not depend on the order of the rows
                    x, p = x[order], p[order]
                    try:
                        fit = fit_power_law(x, p, total / step_seconds)
                    except (RuntimeError, ValueError) as exc:
                        lines = ", ".join(str(r.line) for r in runs)
                        raise TraceError(f"task {task!r} cpu={c} gpu={g} (lines {lines}): fit failed: {exc}") from None
                    for k, v in fit.items():
                        grid[k][c - 1, g - 1] = v
        entry: dict[str, Any] = {"kind": "training" if training else "inference"}
        for f, arr in grid.items():
            entry[f] = arr.astype(int).tolist() if f == "reps" else arr.tolist()
        tasks[task] = entry
    prov = dict(provenance or {})
    prov.update({"step_seconds": float(step_seconds), "overhead_seconds": float(overhead_seconds), "method": METHOD})
    return {
        "format": TABLE_FORMAT,
        "provenance": prov,
        "step_seconds": float(step_seconds),
        "overhead_seconds": float(overhead_seconds),
        "cpu": list(range(1, max_c + 1)),
        "gpu": list(range(1, max_g + 1)),
        "tasks": tasks,
    }


METHOD = (
    "T = mean total wall time of the repetitions of each (task, cpu, gpu) cell. Training tasks: per run, "
    "progress (L_first - L) / (L_first - L_last) clipped to [0, 1] at x = elapsed_seconds / step_seconds; "
    "the points of all repetitions pooled; p(x) = a x^b fitted by scipy curve_fit, anchored at the mean "
    "completion (a = (T / step_seconds)^-b, b in [0.05, 20]) -> a, b; an unconstrained fit -> a_free, b_free "
    "(legacy mode). Inference tasks: constant gain step_seconds / T. constant_rate mode: step_seconds / "
    "(T + overhead_seconds) for every task."
)


def dumps_table(table: Mapping[str, Any]) -> str:
    """JSON text of a table with one grid row (innermost number list) per line."""
    text = json.dumps(table, indent=1)
    flat = re.sub(r"\[\s*([-+0-9.eE,\s]+?)\s*\]", lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)
    return flat + "\n"


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fit_file(
    path: str | os.PathLike,
    step_seconds: float = DEFAULT_STEP_SECONDS,
    overhead_seconds: float = DEFAULT_OVERHEAD_SECONDS,
) -> dict[str, Any]:
    """Parse and fit a trace CSV, recording its file name, sha256 and row count as provenance."""
    rows = parse_trace(path)
    prov = {"source": Path(path).name, "sha256": sha256_of(path), "rows": len(rows)}
    return fit_trace(rows, step_seconds, overhead_seconds, prov)


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------
def resolve_table_path(path: str | os.PathLike | None) -> Path:
    """The table file of ``path``: None / "" = the shipped one; a relative path that does not
    exist from the working directory is looked up from the project root."""
    if path is None or str(path) == "":
        return DEFAULT_TABLE
    p = Path(path).expanduser()
    if not p.is_absolute() and not p.exists() and (PROJECT_ROOT / p).exists():
        return PROJECT_ROOT / p
    return p


def load_table(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The parameter table at ``path`` (None / "" = the shipped one); a ``.csv`` path is fitted
    on the fly with the default step and overhead seconds."""
    p = resolve_table_path(path)
    if p.suffix.lower() == ".csv":
        return fit_file(p)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        hint = " (generate it with: python -m envs.trace_fit)" if p == DEFAULT_TABLE else ""
        raise TraceError(f"{p}: trace parameter table not found{hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{p}: cannot read the trace parameter table: {exc}") from None
    try:
        table = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(f"{p}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    return table
