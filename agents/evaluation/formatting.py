"""How a number reads on a page: every markdown table and sentence of the results, tuning and
ablation pages, ``REPORT.md`` and ``benchmarks/baselines.py`` formats its values here.

A value that is absent (``None``) or not finite reads as :data:`MISSING` wherever it appears.
CSV and JSON files hold the values themselves (:mod:`.columns`), not these texts.
"""

from __future__ import annotations

import math
from typing import Any, Callable

#: the text of a missing value (None, NaN, an infinity) or of a cell that has no value
MISSING = "n/a"


def missing(v: Any) -> bool:
    """Whether ``v`` has no value to show: None, or a float that is not finite."""
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def fmt(v: float | None, digits: int = 2) -> str:
    """``v`` with ``digits`` decimals (``4.14``)."""
    return MISSING if missing(v) else f"{v:.{digits}f}"


def fixed(digits: int) -> Callable[[float | None], str]:
    """:func:`fmt` at ``digits`` decimals, as a column's formatter."""
    return lambda v: fmt(v, digits)


def signed(v: float | None, digits: int = 2) -> str:
    """``v`` with its sign always written (``+0.37``, ``-0.37``): a difference."""
    return MISSING if missing(v) else f"{v:+.{digits}f}"


def interval(diff: float | None, lo: float | None = None, hi: float | None = None, digits: int = 2) -> str:
    """A difference and its interval, ``-0.37 [-0.50, -0.25]``; the difference alone when the
    interval is missing (one seed gives none)."""
    if missing(diff):
        return MISSING
    if missing(lo) or missing(hi):
        return signed(diff, digits)
    return f"{signed(diff, digits)} [{signed(lo, digits)}, {signed(hi, digits)}]"


def paired(entry: dict[str, Any] | None, digits: int = 2) -> str:
    """:func:`interval` of a paired comparison (``{"mean_diff": d, "ci95": [lo, hi]}``)."""
    if not entry:
        return MISSING
    lo, hi = entry.get("ci95") or (None, None)
    return interval(entry.get("mean_diff"), lo, hi, digits)


def plus_minus(v: float | None, half: float | None, digits: int = 2) -> str:
    """``v ± half`` (``4.16 ± 0.24``)."""
    return f"{fmt(v, digits)} ± {fmt(half, digits)}"


def mean_sd(mean: float | None, sd: float | None, digits: int = 2) -> str:
    """A mean over seeds with its sd, ``4.14 ± 0.09``; the mean alone without an sd (one seed)."""
    return fmt(mean, digits) + ("" if missing(sd) else f" ± {sd:.{digits}f}")


def percent(v: float | None, digits: int = 1) -> str:
    """A fraction as a percentage (``0.251`` -> ``25.1%``)."""
    return MISSING if missing(v) else f"{100 * v:.{digits}f}%"


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is one (``1 seed``, ``3 seeds``)."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def count(v: int | None) -> str:
    """An integer with thousands separators (``1,966,080``)."""
    return MISSING if missing(v) else f"{v:,}"


def steps_or_never(v: int | None) -> str:
    """Env steps until a run beat its rival: ``never`` when it did not."""
    return "never" if v is None else f"{v:,}"


def steps_list(steps: Any) -> str:
    """Each seed's env steps until it beat its rival (:func:`steps_or_never`); :data:`MISSING` for no seed."""
    return ", ".join(steps_or_never(x) for x in steps) or MISSING


def duration(seconds: float | None) -> str:
    """A wall time: whole minutes below two hours (``49 min``), hours above (``5.5 h``)."""
    if missing(seconds):
        return MISSING
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def yes_no(met: bool | None, bold: bool = False) -> str:
    """A verdict's cell: ``yes`` (``**yes**`` when ``bold``), ``no``, or :data:`MISSING` when undecided."""
    if met is None:
        return MISSING
    return ("**yes**" if bold else "yes") if met else "no"


def code_list(items: Any) -> str:
    """Items as inline code separated by spaces (``train.py`` overrides); :data:`MISSING` for none."""
    return " ".join(f"`{i}`" for i in items) or MISSING
