"""Every baseline scheduler on every scenario over several seeds: mean JCT, 95% CI, latency.

    python benchmarks/baselines.py [--seeds 5] [--scenarios synthetic-3 ...] [--schedulers optimus ...]
                                   [--workers 2] [--train] [--json] [key=value ...]

A scheduler may carry constructor options: ``optimus:preemptive=false,oracle=true``
(values parsed as YAML, the syntax of ``evaluate.py --schedulers``:
:mod:`agents.baselines.specs`); the table labels it by that spec.

The episodes run through the evaluation runner (:func:`agents.evaluation.runner.run_evaluation`, the
one ``evaluate.py`` uses): per scenario, every scheduler on every seed in ``--workers``
processes, on the scenario's evaluation variant (:meth:`ScenarioConfig.for_evaluation`;
``--train`` keeps the training variant). Seeds are ``0..K-1``, so every scheduler sees the
same workloads. ``key=value`` overrides apply to every scenario (e.g. ``num_tasks=30`` for a
quick run). A scheduler that raises is reported as failed in its scenario's rows (the others
still run) and makes the exit code 1.

Per scheduler and scenario: the mean over seeds of the per-seed mean JCT with its 95%
confidence interval (t-distribution over the per-seed means), the mean decision time in
milliseconds per real step, and counts of truncated episodes and invalid requests. The
``bound`` row is, per workload, the mean over tasks of their fastest possible duration (best
allocation on the best reachable cluster, no waiting: :mod:`envs.bound`), summarised the same
way. Scenarios whose progress functions cannot be built (``testbed-*`` without
``envs/data/testbed_progress.json``) are skipped with a message on stderr.

Output: a Markdown table, then one JSON line (``--json``: the JSON line only).
Exit codes: 0 success, 2 bad input (message on stderr), 1 internal error or a failed scheduler.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any, Sequence

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from agents.baselines.specs import all_schedulers  # noqa: E402
from agents.baselines.specs import is_scheduler_spec as is_spec  # noqa: E402
from agents.evaluation.columns import markdown_lines  # noqa: E402
from agents.evaluation.formatting import MISSING, fmt  # noqa: E402
from agents.evaluation.runner import SchedulerSpec, bound_durations, resolve_schedulers, run_evaluation  # noqa: E402
from agents.evaluation.summary import mean_halfwidth  # noqa: E402
from agents.json_files import json_safe  # noqa: E402
from envs.config import ConfigError, ScenarioConfig, available_scenarios, load_scenario  # noqa: E402
from envs.progress import build_progress_functions  # noqa: E402
from envs.scheduling import EpisodeResult  # noqa: E402

BOUND = "bound"


def scenario_config(name: str, overrides: list[str], train: bool) -> ScenarioConfig:
    """The scenario as benchmarked: overrides applied, evaluation variant unless ``train``."""
    cfg = load_scenario(name, overrides)
    return cfg if train else cfg.for_evaluation()


def scheduler_specs(schedulers: Sequence[str]) -> list[SchedulerSpec]:
    """The runner's specs of ``name[:options]`` texts (bad names/options: :class:`ConfigError`)."""
    specs: list[SchedulerSpec] = []
    for text in schedulers:
        for spec in resolve_schedulers(text):
            if spec.name not in [s.name for s in specs]:
                specs.append(spec)
    return specs


def run_scenario(
    cfg: ScenarioConfig, specs: Sequence[SchedulerSpec], seeds: list[int], workers: int
) -> tuple[dict[str, list[EpisodeResult]], list[np.ndarray], dict[str, str]]:
    """Every scheduler on every seed of one scenario: (results per scheduler, bound per seed, errors).

    One :func:`run_evaluation` call runs them all. If it raises, every scheduler runs again on
    its own so that one broken scheduler does not sink the table: the ones that raise are
    returned in ``errors`` (``"Type: message"``), the others in the results.
    """
    try:
        run = run_evaluation(cfg, specs, seeds, workers=workers, progress=False)
    except Exception:  # noqa: BLE001 - which scheduler failed is found out below
        run = None
    if run is not None:
        return run.results, run.bound, {}
    results: dict[str, list[EpisodeResult]] = {}
    errors: dict[str, str] = {}
    bound = None
    for spec in specs:
        try:
            run = run_evaluation(cfg, [spec], seeds, workers=workers, progress=False)
        except Exception as exc:  # noqa: BLE001 - reported in the table and the exit code
            errors[spec.name] = f"{type(exc).__name__}: {exc}"
            continue
        results[spec.name], bound = run.results[spec.name], run.bound
    if bound is None:
        bound = bound_durations(cfg, seeds, build_progress_functions(cfg))
    return results, bound, errors


def _interval(seeds: Sequence[int], per_seed: list[float]) -> dict[str, Any]:
    mean, half = mean_halfwidth(per_seed)
    return {"mean_jct": mean, "ci95": half, "ci95_range": [mean - half, mean + half],
            "per_seed": per_seed, "seeds": list(seeds)}


def summarise(seeds: Sequence[int], results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """One scheduler's summary over the seeds of one scenario (``results`` in seed order)."""
    out = _interval(seeds, [r.mean_jct for r in results])
    out["decision_ms"] = float(np.mean([r.decision_ms for r in results]))
    out["steps"] = float(np.mean([r.steps for r in results]))
    out["truncated"] = int(sum(bool(r.truncated) for r in results))
    out["invalid"] = int(sum(int(r.invalid) for r in results))
    return out


def summarise_bound(seeds: Sequence[int], bound: Sequence[np.ndarray]) -> dict[str, Any]:
    """The ``bound`` row: per seed the mean over tasks of their fastest possible JCT."""
    return _interval(seeds, [float(np.mean(b)) for b in bound])


def table_cells(scenario: str, name: str, s: dict[str, Any]) -> list[str]:
    """One scheduler's row: a failed one says why, its other cells missing."""
    if "error" in s:
        return [scenario, name, f"failed: {s['error']}", *[MISSING] * 5]
    return [scenario, name, fmt(s["mean_jct"]), fmt(s["ci95"]), fmt(s["decision_ms"], 3), fmt(s["steps"], 0),
            str(s["truncated"]), str(s["invalid"])]


def markdown_table(results: dict[str, dict[str, Any]], num_seeds: int) -> str:
    """One row per (scenario, scheduler), schedulers sorted by mean JCT, bound last."""
    rows = []
    for scenario, res in results.items():
        scheds = sorted(res["schedulers"].items(), key=lambda kv: (not math.isfinite(kv[1]["mean_jct"]), kv[1]["mean_jct"]))
        rows += [table_cells(scenario, name, s) for name, s in scheds]
        b = res[BOUND]
        rows.append([scenario, f"*{BOUND}*", fmt(b["mean_jct"]), fmt(b["ci95"]), *[MISSING] * 4])
    return "\n".join([
        f"Mean JCT (real steps) over {num_seeds} seed(s), ± half-width of the 95% CI (t over per-seed means)",
        "",
        *markdown_lines(["scenario", "scheduler", "mean JCT", "± 95% CI", "decision ms/step", "steps", "truncated",
                         "invalid"], rows),
    ])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="number of workload seeds 0..K-1 (default 5)")
    p.add_argument("--scenarios", nargs="+", default=None, help="scenario names (default: all in configs/)")
    p.add_argument("--schedulers", nargs="+", default=None, help="baseline names (default: every available one and optimus:preemptive=false)")
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


def prepare(args: argparse.Namespace) -> tuple[list[str], list[SchedulerSpec], dict[str, str]]:
    """Validate names; returns (scenarios, scheduler specs, skipped scenario -> reason)."""
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    if args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    scenarios = args.scenarios or available_scenarios()
    specs = scheduler_specs(args.schedulers or all_schedulers())  # ConfigError naming the valid ones
    kept, skipped = [], {}
    for name in scenarios:
        cfg = scenario_config(name, args.overrides, args.train)  # bad names/overrides -> ConfigError
        try:
            build_progress_functions(cfg)
        except (ConfigError, OSError, ImportError, ValueError) as exc:
            skipped[name] = f"progress functions unavailable ({exc}); for test-bed scenarios run `python -m envs.trace_fit`"
            continue
        kept.append(name)
    return kept, specs, skipped


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        scenarios, specs, skipped = prepare(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, reason in skipped.items():
        print(f"skipping scenario {name}: {reason}", file=sys.stderr)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    failed: set[str] = set()
    for sc in scenarios:
        cfg = scenario_config(sc, args.overrides, args.train)
        runs, bound, errors = run_scenario(cfg, specs, seeds, args.workers)
        failed.update(errors)
        results[sc] = {
            "schedulers": {
                s.name: ({"error": errors[s.name], "mean_jct": math.nan, "ci95": math.nan} if s.name in errors
                         else summarise(seeds, runs[s.name]))
                for s in specs
            },
            BOUND: summarise_bound(seeds, bound),
        }
    elapsed = time.perf_counter() - t0
    if not args.json:
        print(markdown_table(results, len(seeds)))
        episodes = len(scenarios) * len(specs) * len(seeds)
        print(f"\n{episodes} episodes on {args.workers} worker(s) in {elapsed:.1f} s", file=sys.stderr)
    summary = {
        "benchmark": "baselines", "seeds": seeds, "workers": args.workers, "train_variant": args.train,
        "overrides": list(args.overrides), "elapsed_s": round(elapsed, 2), "skipped": skipped, "results": results,
    }
    print(json.dumps(json_safe(summary)))
    if failed:
        print(f"error: scheduler(s) failed: {', '.join(sorted(failed))} (see the table)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
