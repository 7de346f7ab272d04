"""Why tiresias is slow: it measured against its variants on each scenario's held-out workloads.

    python benchmarks/switching.py [--config synthetic-3 ...] [--heldout 30] [--workers 2] [--out docs/results]

Per scenario (default: every scenario with results under ``--out``), :func:`agents.evaluation.switching.measure_switching`
runs ``tiresias`` as configured, without the switching overhead, non-preemptive, and ``min``, and
writes ``<out>/switching/<scenario>.json``; the scenario's results page (``benchmarks/reproduce.py
--index-only`` rewrites it) says what was measured in one sentence. Held-out workloads only report:
nothing here chooses a recipe.
Exit codes: 0 success, 2 bad input (message on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from agents.evaluation.results import read_all, report_seeds  # noqa: E402
from agents.evaluation.runner import REPORT_SEEDS, default_workers  # noqa: E402
from agents.evaluation.switching import measure_switching, switching_command, switching_sentence, write_switching  # noqa: E402
from envs.config import ConfigError, load_scenario  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", help="a scenario name (repeatable; default: every scenario with results)")
    p.add_argument("--heldout", type=int, default=REPORT_SEEDS, help=f"the first K held-out workloads (default {REPORT_SEEDS})")
    p.add_argument("--workers", type=int, default=default_workers(), help="evaluation processes (default min(2, CPUs))")
    p.add_argument("--out", default="docs/results", help="results directory (default docs/results)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Path(args.out)
    try:
        seeds = report_seeds(args.heldout)
        names = args.config or [r.scenario for r in read_all(out)]
        if not names:
            raise ConfigError(f"no scenario given and no results under {out}")
        configs = [load_scenario(name) for name in names]
    except (ConfigError, ValueError) as exc:
        print(f"switching.py: {exc}", file=sys.stderr)
        return 2
    for cfg in configs:
        t0 = time.perf_counter()
        doc = measure_switching(cfg, seeds, workers=args.workers)
        path = write_switching(out, doc)
        print(f"{cfg.name} ({time.perf_counter() - t0:.0f} s, wrote {path}): "
              f"{switching_sentence(doc, switching_command(cfg.name))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
