"""Command line: fit the test-bed trace CSV into the shipped parameter table.

``python -m envs.trace_fit [--trace PATH] [--out PATH] [--step-seconds 10] [--overhead-seconds 14]``
writes the table (default ``envs/data/testbed_progress.json``) and prints, per task, the
measured times, the fitted exponents and the steps to finish in every trace mode. Parsing and
fitting are :mod:`envs.trace_table` (its docstring describes the trace and the fit), the
progress functions :mod:`envs.trace_models`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .durations import steps_to_finish
from .progress_registry import TRACE_MODES
from .trace_models import models_from_table
from .trace_table import (
    DEFAULT_OVERHEAD_SECONDS,
    DEFAULT_STEP_SECONDS,
    DEFAULT_TABLE,
    DEFAULT_TRACE,
    TraceError,
    dumps_table,
    fit_file,
)


def _summary(table: Mapping[str, Any]) -> str:
    c, g = np.meshgrid(table["cpu"], table["gpu"], indexing="ij")
    lines = [f"{'task':8s} {'kind':9s} {'T s':>13s} {'b':>11s}  steps: " + "  ".join(f"{m:>13s}" for m in TRACE_MODES)]
    for task, e in table["tasks"].items():
        t = np.array(e["total_seconds"])
        b = f"{np.min(e['b']):.2f}-{np.max(e['b']):.2f}" if "b" in e else "-"
        rng = []
        for mode in TRACE_MODES:
            fn = models_from_table(table, mode)[task]
            s = steps_to_finish(fn, c.ravel(), g.ravel())
            rng.append(f"{s.min():>6d}-{s.max():<6d}")
        lines.append(f"{task:8s} {e['kind']:9s} {t.min():6.1f}-{t.max():<6.1f} {b:>11s}         " + "  ".join(rng))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m envs.trace_fit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default=str(DEFAULT_TRACE), help="trace CSV (default: %(default)s)")
    ap.add_argument("--out", default=str(DEFAULT_TABLE), help="output JSON table (default: %(default)s)")
    ap.add_argument("--step-seconds", type=float, default=DEFAULT_STEP_SECONDS, help="seconds per simulator step")
    ap.add_argument(
        "--overhead-seconds", type=float, default=DEFAULT_OVERHEAD_SECONDS, help="start-up overhead of constant_rate"
    )
    args = ap.parse_args(argv)
    try:
        table = fit_file(args.trace, args.step_seconds, args.overhead_seconds)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(dumps_table(table), encoding="utf-8")
        os.replace(tmp, out)
    except TraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out} from {args.trace} ({table['provenance']['rows']} rows, step {args.step_seconds:g} s)")
    print(_summary(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
