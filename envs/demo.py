"""Interim demo: every available baseline on one scenario, a JCT table over seeds.

``python -m envs.demo --scenario synthetic-3 --seeds 5 [--schedulers min,random] [key=value ...]``

Each scheduler runs through :func:`envs.scheduling.run_episode` on seeds ``0..K-1`` (the
scenario's evaluation variant, see :meth:`ScenarioConfig.for_evaluation`). The table shows the
mean over seeds of the per-seed mean, median and 90th-percentile JCT, plus the ``bound`` row
(each task's fastest possible duration, :mod:`envs.bound`), sorted best first. One progress
line per scheduler goes to stderr; a scheduler that cannot run (e.g. missing tuned parameters)
is skipped with its reason. Exit codes: 0 success, 2 bad input (one line on stderr), 1 when no
scheduler could run.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from .bound import fastest_durations
from .config import ConfigError, ScenarioConfig, load_scenario
from .core import Simulator
from .progress import ProgressFunction, build_progress_functions
from .scheduling import run_episode


@dataclass
class Row:
    """One table row: seed-averaged JCT statistics of one scheduler (or the bound)."""

    name: str
    mean: float
    median: float
    p90: float
    std: float  # standard deviation over seeds of the per-seed mean JCT
    truncated: int  # seeds whose episode hit the step cap


def jct_stats(jcts: list[np.ndarray]) -> tuple[float, float, float, float]:
    """Mean over seeds of per-seed (mean, median, p90) JCT, and the std of per-seed means."""
    per_seed = np.array(
        [[j.mean(), np.median(j), np.percentile(j, 90)] if j.size else [np.nan] * 3 for j in jcts]
    )
    means = per_seed.mean(axis=0)
    return float(means[0]), float(means[1]), float(means[2]), float(per_seed[:, 0].std())


def bound_row(cfg: ScenarioConfig, seeds: list[int], functions: list[ProgressFunction]) -> Row:
    """The ``bound`` row: per seed, every task's fastest duration on its best reachable cluster."""
    sim = Simulator(cfg, seeds[0], functions)
    durations = []
    for seed in seeds:
        sim.reset(seed)  # keeps the cached fastest-steps table
        durations.append(fastest_durations(sim).astype(float))
    return Row("bound", *jct_stats(durations), truncated=0)


def scheduler_row(
    cfg: ScenarioConfig, name: str, seeds: list[int], functions: list[ProgressFunction]
) -> Row:
    """Run one baseline on every seed and summarise its JCTs."""
    from agents.baselines import make_scheduler

    jcts, truncated = [], 0
    for seed in seeds:
        result = run_episode(cfg, make_scheduler(name), seed, functions)
        jcts.append(result.jct.astype(float))
        truncated += int(result.truncated)
    return Row(name, *jct_stats(jcts), truncated=truncated)


def format_table(cfg: ScenarioConfig, rows: list[Row], num_seeds: int) -> str:
    """The printed table, rows sorted by mean JCT (best first)."""
    lines = [
        f"scenario {cfg.name} ({cfg.mode}, N={cfg.num_clusters}, lambda={cfg.arrival_rate:g}, "
        f"{cfg.num_tasks} tasks), {num_seeds} seed(s); JCT in real steps, mean over seeds",
        f"{'scheduler':<16}{'mean':>9}{'± std':>8}{'median':>9}{'p90':>9}{'truncated':>11}",
    ]
    for r in sorted(rows, key=lambda r: (np.isnan(r.mean), r.mean)):
        lines.append(
            f"{r.name:<16}{r.mean:>9.2f}{r.std:>8.2f}{r.median:>9.2f}{r.p90:>9.2f}{r.truncated:>11d}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m envs.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", default="synthetic-3", help="scenario name or YAML path")
    parser.add_argument("--seeds", type=int, default=5, help="number of seeds (0..K-1)")
    parser.add_argument("--schedulers", default="all", help="comma-separated names, or 'all'")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="scenario overrides")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit code."""
    from agents.baselines import available_schedulers

    args = parse_args(argv)
    try:
        if args.seeds < 1:
            raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
        cfg = load_scenario(args.scenario, args.overrides).for_evaluation()
        known = available_schedulers()
        names = known if args.schedulers == "all" else [s.strip() for s in args.schedulers.split(",") if s.strip()]
        unknown = [s for s in names if s not in known]
        if unknown or not names:
            raise ConfigError(f"unknown scheduler(s) {unknown}; valid: {', '.join(known)}")
        functions = build_progress_functions(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    seeds = list(range(args.seeds))
    rows = [bound_row(cfg, seeds, functions)]
    skipped: list[str] = []
    for k, name in enumerate(names, 1):
        t0 = time.perf_counter()
        try:
            row = scheduler_row(cfg, name, seeds, functions)
        except ConfigError as exc:  # e.g. a scheduler missing its tuned parameters
            skipped.append(name)
            print(f"[{k}/{len(names)}] {name}: skipped ({exc})", file=sys.stderr, flush=True)
            continue
        rows.append(row)
        print(
            f"[{k}/{len(names)}] {name}: {len(seeds)} seed(s) in {time.perf_counter() - t0:.1f} s, "
            f"mean JCT {row.mean:.2f}",
            file=sys.stderr,
            flush=True,
        )
    print(format_table(cfg, rows, len(seeds)))
    if skipped:
        print(f"skipped: {', '.join(skipped)} (see stderr)")
    return 0 if len(rows) > 1 else 1


if __name__ == "__main__":
    sys.exit(main())
