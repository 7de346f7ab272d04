"""Every baseline scheduler on every scenario over several seeds: mean JCT, 95% CI, latency.

    python benchmarks/baselines.py [--seeds 5] [--scenarios synthetic-3 ...] [--schedulers optimus ...]
                                   [--workers 2] [--train] [--json] [key=value ...]

A scheduler may carry constructor options: ``optimus:preemptive=false,oracle=true``
(values parsed as YAML); the table labels it by that spec.

Each (scenario, scheduler, seed) episode runs through :func:`envs.scheduling.run_episode` on
the scenario's evaluation variant (:meth:`ScenarioConfig.for_evaluation`; ``--train`` keeps
the training variant), in ``--workers`` processes. Seeds are ``0..K-1``, so every scheduler
sees the same workloads. ``key=value`` overrides apply to every scenario (e.g.
``num_tasks=30`` for a quick run).

Per scheduler and scenario: the mean over seeds of the per-seed mean JCT with its 95%
confidence interval (t-distribution over the per-seed means), the mean decision time in
milliseconds per real step, and counts of truncated episodes and invalid requests. The
``bound`` row is, per workload, the mean over tasks of their fastest possible duration (best
allocation on the best reachable cluster, no waiting: :mod:`envs.bound`), summarised the same
way. Scenarios whose progress functions cannot be built (``testbed-*`` without
``envs/data/testbed_progress.json``) are skipped with a message on stderr.

Output: a Markdown table, then one JSON line (``--json``: the JSON line only).
Exit codes: 0 success, 2 bad input (message on stderr), 1 internal error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from agents.baselines import available_schedulers, make_scheduler  # noqa: E402
from agents.evaluation.schedulers import is_scheduler_spec as is_spec  # noqa: E402
from agents.evaluation.schedulers import parse_scheduler_spec as parse_spec  # noqa: E402
from agents.evaluation.summary import json_safe, mean_halfwidth  # noqa: E402
from envs.bound import bound_mean_jct  # noqa: E402
from envs.config import ConfigError, ScenarioConfig, available_scenarios, load_scenario  # noqa: E402
from envs.core import Simulator  # noqa: E402
from envs.progress import ProgressFunction, build_progress_functions  # noqa: E402
from envs.scheduling import run_episode  # noqa: E402

BOUND = "bound"
_CACHE: dict[str, tuple[ScenarioConfig, list[ProgressFunction]]] = {}


def _make(spec: str):
    name, options = parse_spec(spec)
    return make_scheduler(name, **options)


def scenario_config(name: str, overrides: list[str], train: bool) -> ScenarioConfig:
    """The scenario as benchmarked: overrides applied, evaluation variant unless ``train``."""
    cfg = load_scenario(name, overrides)
    return cfg if train else cfg.for_evaluation()


def _setup(name: str, overrides: list[str], train: bool) -> tuple[ScenarioConfig, list[ProgressFunction]]:
    if name not in _CACHE:  # once per worker process
        cfg = scenario_config(name, overrides, train)
        _CACHE[name] = (cfg, build_progress_functions(cfg))
    return _CACHE[name]


def run_job(job: tuple[str, str, int, list[str], bool]) -> dict[str, Any]:
    """One episode (or the bound when the scheduler is ``bound``) -> plain numbers."""
    scenario, scheduler, seed, overrides, train = job
    cfg, functions = _setup(scenario, overrides, train)
    if scheduler == BOUND:
        return {"scenario": scenario, "scheduler": BOUND, "seed": seed,
                "mean_jct": bound_mean_jct(Simulator(cfg, seed, functions))}
    try:
        result = run_episode(cfg, _make(scheduler), seed, functions)
    except Exception as exc:  # one broken scheduler must not sink the whole table
        return {"scenario": scenario, "scheduler": scheduler, "seed": seed, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "scenario": scenario, "scheduler": scheduler, "seed": seed,
        "mean_jct": result.mean_jct, "decision_ms": result.decision_ms, "steps": result.steps,
        "truncated": bool(result.truncated), "invalid": int(result.invalid),
        "finished": int(result.jct.size), "tasks": int(result.records["jct"].size),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-scheduler summary over seeds of one scenario's rows."""
    errors = sorted({r["error"] for r in rows if "error" in r})
    if errors:
        return {"error": "; ".join(errors), "mean_jct": float("nan"), "ci95": float("nan")}
    rows = sorted(rows, key=lambda r: r["seed"])
    per_seed = [r["mean_jct"] for r in rows]
    mean, half = mean_halfwidth(per_seed)
    out: dict[str, Any] = {
        "mean_jct": mean, "ci95": half, "ci95_range": [mean - half, mean + half],
        "per_seed": per_seed, "seeds": [r["seed"] for r in rows],
    }
    if rows and rows[0]["scheduler"] != BOUND:
        out["decision_ms"] = float(np.mean([r["decision_ms"] for r in rows]))
        out["steps"] = float(np.mean([r["steps"] for r in rows]))
        out["truncated"] = int(sum(r["truncated"] for r in rows))
        out["invalid"] = int(sum(r["invalid"] for r in rows))
    return out


def _fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def markdown_table(results: dict[str, dict[str, Any]], num_seeds: int) -> str:
    """One row per (scenario, scheduler), schedulers sorted by mean JCT, bound last."""
    lines = [
        f"Mean JCT (real steps) over {num_seeds} seed(s), ± half-width of the 95% CI (t over per-seed means)",
        "",
        "| scenario | scheduler | mean JCT | ± 95% CI | decision ms/step | steps | truncated | invalid |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario, res in results.items():
        scheds = sorted(res["schedulers"].items(), key=lambda kv: (not math.isfinite(kv[1]["mean_jct"]), kv[1]["mean_jct"]))
        for name, s in scheds:
            if "error" in s:
                lines.append(f"| {scenario} | {name} | failed: {s['error']} | | | | | |")
                continue
            lines.append(
                f"| {scenario} | {name} | {_fmt(s['mean_jct'])} | {_fmt(s['ci95'])} | {_fmt(s['decision_ms'], 3)} "
                f"| {_fmt(s['steps'], 0)} | {s['truncated']} | {s['invalid']} |"
            )
        b = res[BOUND]
        lines.append(f"| {scenario} | *{BOUND}* | {_fmt(b['mean_jct'])} | {_fmt(b['ci95'])} | | | | |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="number of workload seeds 0..K-1 (default 5)")
    p.add_argument("--scenarios", nargs="+", default=None, help="scenario names (default: all in configs/)")
    p.add_argument("--schedulers", nargs="+", default=None, help="baseline names (default: all available)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--train", action="store_true", help="benchmark the training variant, not the evaluation one")
    p.add_argument("--json", action="store_true", help="print only the final JSON line")
    p.add_argument("overrides", nargs="*", help="key=value scenario overrides applied to every scenario")
    args = p.parse_args(argv)
    # ``--schedulers a b num_tasks=30``: key=value tokens swallowed by a list option are overrides
    for attr in ("scenarios", "schedulers"):
        values = getattr(args, attr)
        if values:
            extra = [v for v in values if "=" in v and not is_spec(v)]
            args.overrides = extra + args.overrides
            setattr(args, attr, [v for v in values if v not in extra] or None)
    return args


def prepare(args: argparse.Namespace) -> tuple[list[str], list[str], dict[str, str]]:
    """Validate names; returns (scenarios, schedulers, skipped scenario -> reason)."""
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    scenarios = args.scenarios or available_scenarios()
    schedulers = args.schedulers or available_schedulers()
    for spec in schedulers:
        _make(spec)  # raises ConfigError naming the valid ones / bad options
    kept, skipped = [], {}
    for name in scenarios:
        cfg = scenario_config(name, args.overrides, args.train)  # bad names/overrides -> ConfigError
        try:
            build_progress_functions(cfg)
        except (ConfigError, OSError, ImportError, ValueError) as exc:
            skipped[name] = f"progress functions unavailable ({exc}); for test-bed scenarios run `python -m envs.trace_fit`"
            continue
        kept.append(name)
    return kept, schedulers, skipped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        scenarios, schedulers, skipped = prepare(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, reason in skipped.items():
        print(f"skipping scenario {name}: {reason}", file=sys.stderr)
    seeds = list(range(args.seeds))
    cost = {s: (lambda c: c.num_tasks * c.num_clusters)(scenario_config(s, args.overrides, args.train)) for s in scenarios}
    jobs = [(sc, name, seed, list(args.overrides), args.train)
            for sc in sorted(scenarios, key=lambda s: -cost[s]) for name in [*schedulers, BOUND] for seed in seeds]
    t0 = time.perf_counter()
    if args.workers == 1:
        rows = [run_job(j) for j in jobs]
    else:
        with ProcessPoolExecutor(max_workers=args.workers) as pool:
            rows = list(pool.map(run_job, jobs, chunksize=1))
    elapsed = time.perf_counter() - t0
    results: dict[str, dict[str, Any]] = {}
    for sc in scenarios:
        mine = [r for r in rows if r["scenario"] == sc]
        results[sc] = {
            "schedulers": {n: summarise([r for r in mine if r["scheduler"] == n]) for n in schedulers},
            BOUND: summarise([r for r in mine if r["scheduler"] == BOUND]),
        }
    if not args.json:
        print(markdown_table(results, len(seeds)))
        print(f"\n{len(jobs)} jobs on {args.workers} worker(s) in {elapsed:.1f} s", file=sys.stderr)
    summary = {
        "benchmark": "baselines", "seeds": seeds, "workers": args.workers, "train_variant": args.train,
        "overrides": list(args.overrides), "elapsed_s": round(elapsed, 2), "skipped": skipped, "results": results,
    }
    print(json.dumps(json_safe(summary)))
    failed = sorted({r["scheduler"] for r in rows if "error" in r})
    if failed:
        print(f"error: scheduler(s) failed: {', '.join(failed)} (see the table)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
