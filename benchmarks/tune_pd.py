"""Tune the price parameter ``F`` of the primal-dual schedulers on *training* seeds.

For every scheduler (``pd-maxweight``, ``pd-maxsche``) and scenario, runs each ``F`` of a grid
on training seeds (>= 1000, disjoint from the evaluation seeds 0..4), scores it by mean JCT
(tasks unfinished at truncation count until the last step) and writes the best ``F`` per
(scheduler, scenario), plus a per-scheduler ``default`` for unknown scenarios (lowest
geometric mean of JCT / best JCT over the tuned scenarios), to ``agents/baselines/pd_tuned.json``,
which ``F="tuned"`` reads. Existing entries of other scenarios are kept. Prints JSON.

    python benchmarks/tune_pd.py                      # all scenarios, seeds 1000-1002
    python benchmarks/tune_pd.py --scenarios synthetic-3 --seeds 1000-1004 --dry-run
    python benchmarks/tune_pd.py --compare --seeds 0-4 --schedulers min random pd-maxsche

``--compare`` only reports (mean JCT and decision ms per scheduler and scenario); it never
writes the tuned table and is the one mode that may use evaluation seeds. Scheduler options
follow a colon, as in ``evaluate.py --schedulers`` (``pd-maxsche:F=paper,cpu_policy=min``).

The episodes run through the evaluation runner (:func:`agents.evaluation.runner.run_evaluation`):
per scenario, every (scheduler, ``F``) on every seed in ``--workers`` processes.
Exit codes: 0 success, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from agents.baselines import make_scheduler
from agents.baselines.primal_dual import TUNED_PATH
from agents.baselines.specs import parse_scheduler_spec
from agents.evaluation.runner import SchedulerSpec, run_evaluation
from envs.config import ConfigError, available_scenarios, load_scenario

SCHEDULERS = ("pd-maxweight", "pd-maxsche")
GRID = (1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
TRAINING_SEED_MIN = 1000


def parse_seeds(text: str) -> list[int]:
    """``"1000-1002"`` or ``"1000,1001"`` -> list of ints."""
    try:
        out: list[int] = []
        for part in text.split(","):
            if "-" in part.strip()[1:]:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise ConfigError(f"--seeds: expected e.g. 1000-1002 or 1000,1001, got {text!r}") from None
    if not out:
        raise ConfigError("--seeds: no seeds given")
    return out


def episode_score(result) -> float:
    """Mean JCT with tasks unfinished at truncation counted until the last step."""
    rec = result.records
    jct = np.where(rec["finish"] >= 0, rec["jct"], result.steps - rec["arrival"])
    return float(jct.mean()) if jct.size else float("nan")


def run_grid(
    entries: list[tuple[str, dict]], scenarios: list[str], variant: str, seeds: list[int], workers: int
) -> list[tuple]:
    """Every (scheduler, options) entry on every scenario and seed, through the evaluation runner.

    One :func:`agents.evaluation.runner.run_evaluation` call per scenario runs all entries on all seeds
    in ``workers`` processes. Returns one row per episode:
    ``(scheduler, options as sorted JSON, scenario, seed, score, decision_ms, invalid, truncated)``.
    """
    labelled: dict[str, tuple[str, dict]] = {}
    for name, options in entries:  # a repeated entry runs once
        opts = json.dumps(options, sort_keys=True)
        labelled.setdefault(name + ("" if opts == "{}" else opts), (name, options))
    specs = [SchedulerSpec(name=label, baseline=name, options=tuple(options.items()))
             for label, (name, options) in labelled.items()]
    rows = []
    for scenario in sorted(scenarios, key=lambda s: -load_scenario(s).num_tasks):  # the output's order
        cfg = load_scenario(scenario)
        if variant == "eval":
            cfg = cfg.for_evaluation()
        run = run_evaluation(cfg, specs, seeds, workers=workers, progress=False)
        for spec in specs:
            name, options = labelled[spec.name]
            for seed, result in zip(run.seeds, run.results[spec.name]):
                rows.append((name, json.dumps(options, sort_keys=True), scenario, seed,
                             episode_score(result), result.decision_ms, result.invalid, result.truncated))
    return rows


def pick(scores: dict[float, float]) -> float:
    """The F with the lowest score; ties go to the largest F (the most admission control)."""
    best = min(scores.values())
    return max(f for f, s in scores.items() if s <= best * (1 + 1e-9))


def default_F(per_scenario: dict[str, dict[str, float]]) -> float:
    """F with the lowest geometric mean of score / best score over scenarios (all grid values)."""
    grids = [set(s) for s in per_scenario.values()]
    common = set.intersection(*grids) if grids else set()
    if not common:
        raise ConfigError("no F value was scored on every scenario; cannot choose a default")
    ratio = {}
    for f in common:
        logs = [math.log(s[f] / min(s.values())) for s in per_scenario.values()]
        ratio[f] = sum(logs) / len(logs)
    best = min(ratio.values())
    return float(max(float(f) for f, r in ratio.items() if r <= best + 1e-12))


def tune(args: argparse.Namespace) -> dict:
    seeds = parse_seeds(args.seeds)
    if min(seeds) < TRAINING_SEED_MIN:
        raise ConfigError(f"tuning seeds must be >= {TRAINING_SEED_MIN} (evaluation seeds are 0..4), got {seeds}")
    t0 = time.perf_counter()
    entries = [(sch, {"F": f}) for sch in args.schedulers for f in args.grid]
    results = run_grid(entries, args.scenarios, args.variant, seeds, args.workers)
    raw: dict = {}
    for sch, opts, scen, seed, score, ms, invalid, truncated in results:
        if invalid:
            raise RuntimeError(f"{sch} on {scen} seed {seed} ({opts}) made {invalid} invalid requests")
        f = json.loads(opts)["F"]
        raw.setdefault(sch, {}).setdefault(scen, {}).setdefault(f, []).append(score)
    path = Path(args.out)
    table = json.loads(path.read_text()) if path.is_file() else {}
    scores = table.setdefault("scores", {})
    for sch, per_scen in raw.items():
        entry = table.setdefault(sch, {})
        for scen, per_f in per_scen.items():
            means = {f: float(np.mean(v)) for f, v in per_f.items()}
            entry[scen] = pick(means)
            scores.setdefault(sch, {})[scen] = {repr(f): round(m, 4) for f, m in sorted(means.items())}
        stored = {sc: {float(f): m for f, m in v.items()} for sc, v in scores[sch].items()}
        entry["default"] = default_F(stored)
    table["_meta"] = {
        "command": "python benchmarks/tune_pd.py " + " ".join(sys.argv[1:]),
        "seeds": seeds,
        "grid": list(args.grid),
        "variant": args.variant,
        "metric": "mean JCT over seeds (unfinished tasks counted until the last step); "
                  "ties -> the largest F; default = lowest geometric mean of JCT / best JCT",
    }
    ordered = {"_meta": table.pop("_meta")}
    ordered.update({k: table[k] for k in sorted(table) if k != "scores"})
    ordered["scores"] = table.get("scores", {})
    if not args.dry_run:
        path.write_text(json.dumps(ordered, indent=1) + "\n")
    ordered["_meta"]["seconds"] = round(time.perf_counter() - t0, 1)
    ordered["_meta"]["written"] = None if args.dry_run else str(path)
    return ordered


def compare(args: argparse.Namespace) -> dict:
    seeds = parse_seeds(args.seeds)
    specs = [parse_scheduler_spec(s) for s in args.schedulers]
    for name, opts in specs:
        make_scheduler(name, **opts)  # fail fast on bad names/options
    results = run_grid(specs, args.scenarios, args.variant, seeds, args.workers)
    out: dict = {}
    for sch, opts, scen, seed, score, ms, invalid, truncated in results:
        label = sch + ("" if opts == "{}" else opts)
        cell = out.setdefault(scen, {}).setdefault(label, {"jct": [], "ms": [], "invalid": 0, "truncated": 0})
        cell["jct"].append(score)
        cell["ms"].append(ms)
        cell["invalid"] += invalid
        cell["truncated"] += int(truncated)
    for scen in out.values():
        for label, cell in scen.items():
            scen[label] = {
                "mean_jct": round(float(np.mean(cell["jct"])), 3),
                "decision_ms": round(float(np.mean(cell["ms"])), 3),
                "invalid": cell["invalid"],
                "truncated": cell["truncated"],
            }
    return {"seeds": seeds, "variant": args.variant, "results": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedulers", nargs="+", default=None,
                    help=f"tuning: any of {list(SCHEDULERS)}; --compare: name[:key=value,...]")
    ap.add_argument("--scenarios", nargs="+", default=None, help="default: every scenario in configs/")
    ap.add_argument("--seeds", default=None, help="tuning default 1000-1002; --compare default 0-4")
    ap.add_argument("--grid", type=float, nargs="+", default=list(GRID), help="F values to try")
    ap.add_argument("--variant", choices=("eval", "train"), default="eval",
                    help="scenario variant: eval (with eval_overrides, default) or train")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(TUNED_PATH))
    ap.add_argument("--dry-run", action="store_true", help="print, do not write the tuned table")
    ap.add_argument("--compare", action="store_true", help="report mean JCT per scheduler instead of tuning")
    args = ap.parse_args(argv)
    try:
        args.scenarios = args.scenarios or available_scenarios()
        for s in args.scenarios:
            load_scenario(s)
        if args.compare:
            args.seeds = args.seeds or "0-4"
            args.schedulers = args.schedulers or ["min", "random", *SCHEDULERS]
            out = compare(args)
        else:
            args.seeds = args.seeds or "1000-1002"
            args.schedulers = args.schedulers or list(SCHEDULERS)
            bad = [s for s in args.schedulers if s not in SCHEDULERS]
            if bad:
                raise ConfigError(f"can only tune {list(SCHEDULERS)}, got {bad}")
            if any(not f > 0 for f in args.grid):
                raise ConfigError("--grid values must be > 0")
            out = tune(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
