#!/usr/bin/env python
"""Recipe tuning on validation workloads: a scenario's recipe against candidate changes, K seeds each.

    python benchmarks/tune.py --config multi-3 --candidate ent0.001:train.ent_coef=0.001 [--candidate ...]
        [--seeds 3] [--first-seed 0] [--device auto|cpu|cuda] [--parallel P] [--threads T]
        [--runs runs/tuning] [--recipe-runs runs/reproduce] [--out docs/results/tuning] [--workers W]
        [--probe STEPS] [--train-only]

A candidate is ``NAME:key=value[,key=value...]``: the recipe with those ``train.py`` overrides. Its
seeds train in ``<runs>/<scenario>/<NAME>/s<seed>/``; the recipe's own seeds are
``benchmarks/reproduce.py``'s runs, ``<recipe-runs>/<scenario>/s<seed>/``. ``--probe STEPS`` screens at a
short budget: every run, the recipe's included, trains STEPS env steps in
``<runs>/<scenario>/probe-<STEPS>/<NAME>/s<seed>/`` and the pages are ``<scenario>-probe-<STEPS>.*``. Finished runs are not
trained again, stopped ones resume, and a run directory holding a run of another recipe is refused.
Then every seed's ``best.pt`` (and ``last.pt``, where the run ended) is scored again on the recipe's
validation workloads beside optimus (preemptive and not; the better of them is the rival whose mean the
env steps to beat count to), and ``<out>/<scenario>.md``, ``.csv``, ``.json`` and ``.png`` are written
(:mod:`agents.evaluation.tuning`, :mod:`agents.evaluation.tuning_page`). Held-out workloads are never run: they only report, in
``benchmarks/reproduce.py``. Exit codes: 0 done, 2 bad input, 1 a training run failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.seed_runs import add_machine_arguments
    from agents.evaluation.tuning import TUNING_DIR

    p = argparse.ArgumentParser(prog="tune.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="scenario name (configs/<name>.yaml) or YAML path: the recipe")
    p.add_argument("--candidate", action="append", default=[], metavar="NAME:key=value[,key=value...]",
                   help="a change to the recipe (repeat for several)")
    p.add_argument("--seeds", type=int, default=3, help="training seeds per candidate (default 3)")
    p.add_argument("--first-seed", type=int, default=0, help="first training seed (default 0)")
    add_machine_arguments(p)
    p.add_argument("--runs", default="runs/tuning", help="parent of the candidates' run directories (default runs/tuning)")
    p.add_argument("--recipe-runs", default="runs/reproduce",
                   help="parent of the recipe's run directories, shared with reproduce.py (default runs/reproduce)")
    out = f"docs/results/{TUNING_DIR}"
    p.add_argument("--out", default=out, help=f"results directory (default {out})")
    p.add_argument("--probe", type=int, default=None, metavar="STEPS",
                   help="a short probe: every run, the recipe's included, trains STEPS env steps in "
                        "<runs>/<scenario>/probe-<STEPS>/ (pages <scenario>-probe-<STEPS>.*)")
    p.add_argument("--train-only", action="store_true", help="train (or resume) the runs and stop")
    return p


def command_text(args: argparse.Namespace) -> str:
    """The command line that regenerates the page (as a user types it)."""
    import shlex

    parts = ["python benchmarks/tune.py", f"--config {args.config}"]
    parts += [f"--candidate {shlex.quote(c)}" for c in args.candidate]
    parts.append(f"--seeds {args.seeds}")
    if args.first_seed:
        parts.append(f"--first-seed {args.first_seed}")
    if args.probe is not None:
        parts.append(f"--probe {args.probe}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    import json

    from agents.evaluation.ablations import RECIPE, plot_variants, policy_name
    from agents.evaluation.curves import baseline_specs, read_curve, read_scalars, read_validation, run_means, validation_run
    from agents.evaluation.diagnosis import time_split
    from agents.evaluation.results import steps_to_beat, validation_rival
    from agents.evaluation.runner import SchedulerSpec, check_checkpoint, default_workers
    from agents.evaluation.seed_runs import SeedRun, machine_device, train_runs
    from agents.json_files import write_json
    from agents.evaluation.tuning import (
        PROBE_KEY, TRAINING_SIGNALS, VALIDATION_KEYS, TuningRow, end_split, page_stem, parse_candidate, probe_overrides, run_dir,
        sets_probe_key, summarise, training_signals,
    )
    from agents.evaluation.tuning_page import document, markdown, write_csv
    from agents.training.checkpoints import BEST, LAST, RESULT_FILE
    from agents.training.prepare import prepare_run
    from agents.training.validation_baselines import VALIDATION_BASELINES
    from envs.config import ConfigError

    for name, low in (("seeds", 1), ("first_seed", 0), ("probe", 1)):
        if getattr(args, name) is not None and getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    device = machine_device(args)
    if not args.candidate:
        raise ConfigError("give at least one --candidate NAME:key=value[,key=value...]")
    candidates = [parse_candidate(c) for c in args.candidate]
    seen = set()
    for c in candidates:
        if c.name in seen:
            raise ConfigError(f"--candidate {c.name!r} is given twice")
        seen.add(c.name)
        if args.probe is not None and sets_probe_key(c):
            raise ConfigError(f"--candidate {c.name} sets {PROBE_KEY}: under --probe every run trains the probe's "
                              f"{args.probe} env steps")
    probe = probe_overrides(args.probe)
    recipe_steps = prepare_run(args.config).train.steps  # the recipe's own budget (bad YAML: ConfigError here)
    spec = prepare_run(args.config, list(probe))  # the recipe as it trains here (a probe: at the probe's steps)
    trains_on = {RECIPE: list(spec.train.scenarios or [spec.scenario.name])}
    for c in candidates:  # every candidate's overrides are valid, and it validates on the recipe's workloads
        try:
            cspec = prepare_run(args.config, [*c.overrides, *probe])
        except ConfigError as exc:
            raise ConfigError(f"--candidate {c.name}: {exc}") from None
        changed = [k for k in VALIDATION_KEYS if getattr(cspec.train, k) != getattr(spec.train, k)]
        if changed:
            raise ConfigError(f"--candidate {c.name} changes train.{changed[0]}: the validation workloads must be the "
                              "recipe's, so that every seed is compared on the same workloads")
        if cspec.scenario.name != spec.scenario.name:
            raise ConfigError(f"--candidate {c.name} renames the scenario ({cspec.scenario.name!r}); "
                              "candidates change the recipe, not the scenario's name")
        trains_on[c.name] = list(cspec.train.scenarios or [cspec.scenario.name])
    scenario = spec.scenario.name
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs, recipe_runs = Path(args.runs), Path(args.recipe_runs)
    everyone = [(RECIPE, probe), *((c.name, (*c.overrides, *probe)) for c in candidates)]
    dirs = {(n, s): run_dir(runs, recipe_runs, scenario, n, s, args.probe) for n, _ in everyone for s in seeds}
    jobs = [SeedRun(f"{n} s{s}", args.config, s, dirs[n, s], tuple(o)) for s in seeds for n, o in everyone]
    failed = train_runs(jobs, device, args.parallel, args.threads)
    if failed:
        print(f"tune.py: training failed for {', '.join(r.label for r in failed)}; nothing scored", file=sys.stderr)
        return 1
    if args.train_only:
        return 0

    validation = read_validation(dirs[RECIPE, seeds[0]])  # the recipe's workloads (every candidate shares them)
    cfg, vseeds = validation.scenario, validation.seeds
    specs = baseline_specs(VALIDATION_BASELINES, validation)
    baseline_names = [s.name for s in specs]
    for (n, s), d in dirs.items():  # each run's best.pt (chosen on these workloads) and last.pt (where it ended)
        for file, name in ((BEST, policy_name(n, s)), (LAST, last_name(n, s))):
            info = check_checkpoint(d / file, cfg)
            specs.append(SchedulerSpec(name=name, checkpoint=str(d / file), variant=info["variant"],
                                       trained_on=info["trained_on"], action=info["action"],
                                       conflicts=info["conflicts"]))
    print(f"scoring {len(dirs)} best.pt and last.pt and {len(baseline_names)} baselines on {len(vseeds)} validation "
          f"workloads {vseeds[0]}..{vseeds[-1]}", flush=True)
    # one pass: each scheduler's mean over the validation seeds of its per-seed mean JCT (the trainer's metric)
    scored = validation_run(validation, specs, workers=args.workers or default_workers())
    means, _ = run_means(scored)
    type_names = [t.name for t in cfg.task_types]
    baselines = {b: means[b] for b in baseline_names}
    rival = validation_rival(baselines)  # the best validation baseline
    rival_name, rival_mean = rival if rival else (None, None)
    rows, curves = [], {}
    for n, _ in everyone:
        curves[n] = []
        for s in seeds:
            d = dirs[n, s]
            training = json.loads((d / RESULT_FILE).read_text())
            curve = read_curve(d, f"{n} s{s}")
            curves[n].append(curve.points)
            best = means[policy_name(n, s)]
            recipe = means[policy_name(RECIPE, s)]
            env_steps = int(training.get("env_steps", 0))
            signals = training_signals(read_scalars(d, [tag for _, tag in TRAINING_SIGNALS]))
            rows.append(TuningRow(
                scenario=scenario, candidate=n, seed=s, env_steps=env_steps,
                wall_s=float(training.get("wall_s", float("nan"))), device=str(training.get("device", "")),
                best_env_step=curve.best[0], logged_best=curve.best[1], validation_best=best,
                diff_vs_recipe=None if n == RECIPE or best is None or recipe is None else best - recipe,
                steps_to_beat_rival=steps_to_beat(curve.points, rival_mean), **signals,
                last_mean_jct=means[last_name(n, s)],
                last_split=end_split(time_split(scored.results[last_name(n, s)], type_names, preemptive=False)["rows"])))
    summaries = summarise(rows, candidates, trains_on)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = command_text(args)
    stem = page_stem(scenario, args.probe)
    page = markdown(command, scenario, vseeds, validation.eval_scenario, baselines, rival_name, summaries, rows,
                    probe=args.probe, recipe_steps=recipe_steps)
    (out / f"{stem}.md").write_text(page)
    write_csv(out / f"{stem}.csv", rows, rival_name)
    write_json(out / f"{stem}.json", document(command, scenario, vseeds, validation.eval_scenario, baselines,
                                              rival_name, summaries, rows, probe=args.probe))
    title = "Recipe tuning" if args.probe is None else f"Recipe tuning, probe of {args.probe:,} env steps"
    plot_variants(out / f"{stem}.png", scenario, curves, baselines, title=title)
    for suffix in ("md", "csv", "json", "png"):
        print(f"wrote {out / f'{stem}.{suffix}'}", flush=True)
    print(page)
    return 0


def last_name(candidate: str, seed: int) -> str:
    """The scheduler name of a run's ``last.pt`` in the scoring pass."""
    return f"{candidate}-s{seed}-last"


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("tune.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
