#!/usr/bin/env python
"""Ablations at an equal budget: every variant of :data:`agents.evaluation.ablations.ABLATIONS`
(the scenario's recipe with one change) trained from scratch for K seeds, evaluated held out.

    python benchmarks/ablations.py --scenarios synthetic-3,multi-3 --seeds 3 [--variants all|a,b,...]
        [--device auto|cpu|cuda] [--parallel P] [--threads T] [--runs runs/reproduce] [--out docs/results]
        [--workers 2] [--heldout 30] [--train-only]

Each run is ``train.py --config <scenario> --seed s <the variant's overrides>`` in
``<runs>/<scenario>/<variant>/s<s>/`` (the recipe's own seeds are ``benchmarks/reproduce.py``'s runs,
``<runs>/<scenario>/s<s>/``, shared with it); finished runs are not trained again, stopped ones
resume. Then every seed's ``best.pt`` runs with every baseline on the held-out workloads, the
floor variants with their start floor beside optimus (preemptive and not) behind the same floor
(the same workloads, so every comparison is paired), and
``<out>/ablations.md``, ``<out>/ablations.csv`` and ``<out>/ablations-<scenario>.png`` are written.
Exit codes: 0 done, 2 bad input, 1 a training run failed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.runner import REPORT_SEEDS
    from agents.evaluation.seed_runs import add_machine_arguments

    p = argparse.ArgumentParser(prog="ablations.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", required=True, help="comma-separated scenario names or YAML paths")
    p.add_argument("--variants", default="all", help="comma-separated variants (default all; the recipe always runs)")
    p.add_argument("--seeds", type=int, default=3, help="training seeds per variant (default 3)")
    add_machine_arguments(p)
    p.add_argument("--runs", default="runs/reproduce", help="parent of the run directories (default runs/reproduce)")
    p.add_argument("--out", default="docs/results", help="results directory (default docs/results)")
    p.add_argument("--heldout", type=int, default=REPORT_SEEDS, help=f"held-out workloads (default {REPORT_SEEDS})")
    p.add_argument("--train-only", action="store_true", help="train (or resume) the runs and stop")
    return p


def command_text(args: argparse.Namespace) -> str:
    parts = ["python benchmarks/ablations.py", f"--scenarios {args.scenarios}", f"--seeds {args.seeds}"]
    if args.variants != "all":
        parts.append(f"--variants {args.variants}")
    if args.heldout != build_parser().get_default("heldout"):
        parts.append(f"--heldout {args.heldout}")
    return " ".join(parts)


def chosen_variants(text: str) -> list[str]:
    from agents.evaluation.ablations import ABLATIONS, RECIPE
    from envs.config import ConfigError

    names = list(ABLATIONS) if text.strip() == "all" else [v.strip() for v in text.split(",") if v.strip()]
    unknown = [v for v in names if v not in ABLATIONS]
    if unknown or not names:
        raise ConfigError(f"unknown variant(s) {unknown}; valid: {', '.join(ABLATIONS)}")
    return [RECIPE] + [v for v in names if v != RECIPE]


#: the baselines that also run behind the start floor of the floor variants
FLOORED_BASELINES = ("optimus", "optimus:preemptive=false")


def evaluate_scenario(spec, variants: list[str], seeds: list[int], runs: Path, heldout: list[int], workers: int):
    """Baselines and every variant seed on the held-out workloads; floor variants in a second pass
    over the same workloads with the start floor on, beside :data:`FLOORED_BASELINES` behind the
    same floor (:mod:`agents.baselines.start_floor`)."""
    from agents.baselines.start_floor import FLOOR_OPTION
    from agents.evaluation.ablations import ABLATIONS, FLOOR_FACTOR, policy_name, run_dir
    from agents.evaluation.runner import EvaluationRun, SchedulerSpec, checkpoint_spec, resolve_schedulers, run_evaluation
    from agents.training.checkpoints import BEST
    from envs.config import ScenarioConfig

    cfg = spec.scenario.for_evaluation()
    groups: dict[str | None, list[SchedulerSpec]] = {}
    for variant in variants:
        floor = ABLATIONS[variant].floor
        for s in seeds:
            path = run_dir(runs, spec.scenario.name, variant, s) / BEST
            groups.setdefault(floor, []).append(checkpoint_spec(
                policy_name(variant, s), path, cfg, start_floor=floor or SchedulerSpec.start_floor))
    baselines = resolve_schedulers("all", (), cfg)
    run = run_evaluation(cfg, baselines + groups.pop(None, []), heldout, workers=workers, progress=False)
    floored = ScenarioConfig.from_dict({**cfg.to_dict(), "max_start_slowdown": FLOOR_FACTOR})
    for floor, specs in groups.items():
        rivals = resolve_schedulers(",".join(f"{b}{',' if ':' in b else ':'}{FLOOR_OPTION}={floor}"
                                             for b in FLOORED_BASELINES), (), floored)
        extra = run_evaluation(floored, rivals + specs, heldout, workers=workers, progress=False)
        run.results.update(extra.results)
        run.specs.extend(extra.specs)
    return EvaluationRun(cfg=run.cfg, seeds=run.seeds, specs=run.specs, results=run.results, bound=run.bound,
                         preemptive=run.preemptive)


def run(args: argparse.Namespace) -> int:
    from agents.baselines.start_floor import FLOOR_OPTION
    from agents.evaluation.ablations import ABLATIONS, plot_variants, run_dir, summarise, variant_rows
    from agents.evaluation.ablations_page import markdown, write_csv
    from agents.evaluation.curves import baseline_means, baseline_specs, read_curve, read_validation
    from agents.evaluation.results import report_seeds, steps_to_beat, validation_rival
    from agents.evaluation.runner import default_workers
    from agents.evaluation.seed_runs import SeedRun, machine_device, train_runs
    from agents.evaluation.summary import scheduler_stats
    from agents.json_files import write_json
    from agents.training.checkpoints import RESULT_FILE
    from agents.training.prepare import prepare_run, resolved_config
    from agents.training.validation_baselines import VALIDATION_BASELINES
    from envs.config import ConfigError

    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {args.seeds}")
    device = machine_device(args)
    try:
        heldout = report_seeds(args.heldout)
    except ValueError as exc:
        raise ConfigError(f"--heldout: {exc}") from None
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if not scenarios:
        raise ConfigError("--scenarios is empty")
    variants = chosen_variants(args.variants)
    specs = {}
    for scenario in scenarios:
        specs[scenario] = prepare_run(scenario)
        for v in variants:  # every variant's overrides are valid for, and change, the scenario's recipe
            variant = prepare_run(scenario, list(ABLATIONS[v].overrides))
            if ABLATIONS[v].overrides and resolved_config(variant) == resolved_config(specs[scenario]):
                raise ConfigError(f"variant {v} ({' '.join(ABLATIONS[v].overrides)}) is {scenario}'s recipe already; "
                                  "leave it out with --variants")
    seeds = list(range(args.seeds))
    runs = Path(args.runs)
    jobs = [SeedRun(f"{name} {v} s{s}", scenario, s, run_dir(runs, name, v, s), ABLATIONS[v].overrides)
            for scenario, spec in specs.items() for name in [spec.scenario.name] for s in seeds for v in variants]
    failed = train_runs(jobs, device, args.parallel, args.threads)
    if failed:
        print(f"ablations.py: training failed for {', '.join(r.label for r in failed)}; nothing evaluated",
              file=sys.stderr)
        return 1
    if args.train_only:
        return 0

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workers = args.workers or default_workers()
    rows, summaries, baselines, rivals = [], [], {}, {}
    document = {"command": command_text(args), "heldout_seeds": heldout}
    for scenario, spec in specs.items():
        name = spec.scenario.name
        print(f"{name}: evaluating {len(variants)} variant(s) x {len(seeds)} seed(s) on {len(heldout)} workloads",
              flush=True)
        result = evaluate_scenario(spec, variants, seeds, runs, heldout, workers)
        base = {s.name: scheduler_stats(result.results[s.name])["mean_jct"] for s in result.specs if not s.is_policy}
        floored = {s.name for s in result.specs if FLOOR_OPTION in dict(s.options)}
        ranked = sorted(base.items(), key=lambda kv: float("inf") if kv[1] is None else kv[1])
        baselines[name] = dict([kv for kv in ranked if kv[0] not in floored][:4] + [kv for kv in ranked if kv[0] in floored])
        validation = read_validation(run_dir(runs, name, variants[0], seeds[0]))
        vmeans, _ = baseline_means(validation, baseline_specs(VALIDATION_BASELINES, validation), workers=workers)
        rival = validation_rival(vmeans)  # the best validation baseline
        rivals[name] = rival[0] if rival else None
        curves = {}
        for v in variants:
            training, best, beat, points = {}, {}, {}, []
            for s in seeds:
                d = run_dir(runs, name, v, s)
                training[s] = json.loads((d / RESULT_FILE).read_text())
                curve = read_curve(d)
                best[s], beat[s] = curve.best[1], steps_to_beat(curve.points, rival[1] if rival else None)
                points.append(curve.points)
            curves[v] = points
            rows += variant_rows(result, name, v, seeds, training, best, beat, rivals[name])
            summaries.append(summarise(result, name, v, seeds, training, beat))
        plot_variants(out / f"ablations-{name}.png", name, curves, vmeans)
    write_csv(out / "ablations.csv", rows)
    (out / "ablations.md").write_text(markdown(command_text(args), heldout, summaries, baselines, rivals))
    from dataclasses import asdict

    write_json(out / "ablations.json", {**document, "summaries": [asdict(s) for s in summaries], "baselines": baselines,
                                        "validation_rivals": rivals})
    for p in ("ablations.md", "ablations.csv", "ablations.json", *(f"ablations-{n}.png" for n in baselines)):
        print(f"wrote {out / p}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("ablations.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
