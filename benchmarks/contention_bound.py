"""How far is the ``bound``? The contention-aware LP lower bound per scenario, beside it.

    python benchmarks/contention_bound.py [--scenarios sjf-3 ...] [--seeds 10] [--seed-offset 100000]
                                          [--results results/report] [--json] [key=value ...]

For each scenario's evaluation variant and workload seeds ``S .. S+K-1`` (default: the held-out
seeds of ``evaluate.py``): the ``bound`` (every task at its fastest, no waiting) and the
contention bound of :mod:`envs.contention_bound` (a linear programme that keeps the pooled
capacity; never below the ``bound``), both as the mean over seeds of the per-seed mean JCT.
Both are lower bounds on every scheduler's mean JCT, so where ``1.3 x bound`` lies below the
contention bound the 1.3x half of the quality target is out of every scheduler's reach
(``target_excluded``); where it does not, the bound cannot tell.
``--results DIR`` (the ``--out`` of ``evaluate.py --report``, or one scenario's output
directory) adds each scheduler's mean JCT from ``DIR/<scenario>/summary.json`` (or
``DIR/summary.json``) divided by the contention bound, when that run used the same seeds.

Output: a Markdown table, then one JSON line (``--json``: the JSON line only).
Exit codes: 0 success, 2 bad input (message on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation.runner import DEFAULT_SEED_OFFSET
from agents.evaluation.summary import BOUND_RATIO_TARGET
from envs.bound import bound_mean_jct
from envs.config import ConfigError, ScenarioConfig, available_scenarios, load_scenario
from envs.contention_bound import contention_bound_mean_jct
from envs.core import Simulator


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenarios", nargs="+", default=None, help="scenario names (default: every shipped one)")
    p.add_argument("--seeds", type=int, default=10, help="number of workload seeds K (default 10)")
    p.add_argument("--seed-offset", type=int, default=DEFAULT_SEED_OFFSET,
                   help=f"first workload seed (default {DEFAULT_SEED_OFFSET}, evaluate.py's)")
    p.add_argument("--results", type=Path, default=None, help="evaluate.py output to set against the bound")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="scenario overrides")
    return p.parse_args(argv)


def scenario_bounds(cfg: ScenarioConfig, seeds: list[int]) -> dict[str, Any]:
    """Per seed and on average: the ``bound`` and the contention bound of one scenario."""
    sim = Simulator(cfg, seeds[0])
    plain, lp = [], []
    for seed in seeds:
        sim.reset(seed)
        plain.append(bound_mean_jct(sim))
        lp.append(contention_bound_mean_jct(sim))
    return {"bound": float(np.mean(plain)), "contention_bound": float(np.mean(lp)),
            "per_seed": {"bound": plain, "contention_bound": lp}}


def scheduler_ratios(results: Path, name: str, seeds: list[int], lower: float) -> dict[str, float]:
    """Each scheduler's mean JCT over ``lower`` from an ``evaluate.py`` summary of ``name``."""
    for path in (results / name / "summary.json", results / "summary.json"):
        if path.is_file():
            summary = json.loads(path.read_text())
            if summary.get("scenario") not in (name, None) or list(summary.get("seeds", [])) != seeds:
                continue
            return {s: row["mean_jct"] / lower for s, row in summary["schedulers"].items()}
    return {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.seeds < 1 or args.seed_offset < 0:
            raise ConfigError(f"--seeds must be >= 1 and --seed-offset >= 0, got {args.seeds} and {args.seed_offset}")
        # every name and override is checked (load_scenario) before any programme is solved
        configs = {n: load_scenario(n, args.overrides).for_evaluation() for n in args.scenarios or available_scenarios()}
        if args.results is not None and not args.results.is_dir():
            raise ConfigError(f"--results {args.results} is not a directory")
        seeds = list(range(args.seed_offset, args.seed_offset + args.seeds))
        t0 = time.perf_counter()
        rows = {n: scenario_bounds(cfg, seeds) for n, cfg in configs.items()}
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for n, row in rows.items():
        row["ratio"] = row["contention_bound"] / row["bound"]
        row["target_excluded"] = BOUND_RATIO_TARGET * row["bound"] < row["contention_bound"]
        if args.results is not None:
            row["over_contention_bound"] = scheduler_ratios(args.results, n, seeds, row["contention_bound"])
    if not args.json:
        print(f"| scenario | bound | contention bound | ratio | {BOUND_RATIO_TARGET:g}x bound excluded |")
        print("|---|---|---|---|---|")
        for n, row in rows.items():
            print(f"| {n} | {row['bound']:.2f} | {row['contention_bound']:.2f} | {row['ratio']:.3f} | "
                  f"{'yes' if row['target_excluded'] else 'no'} |")
            for s, r in sorted(row.get("over_contention_bound", {}).items(), key=lambda kv: kv[1]):
                print(f"|   {s} | | | {r:.3f} | |")
        print(f"\n{len(rows)} scenario(s) x {len(seeds)} seed(s) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(json.dumps({"benchmark": "contention_bound", "seeds": seeds, "overrides": list(args.overrides),
                      "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
