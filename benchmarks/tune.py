#!/usr/bin/env python
"""Recipe tuning on validation workloads: a scenario's recipe against candidate changes, K seeds each.

    python benchmarks/tune.py --config multi-3 --candidate ent0.001:train.ent_coef=0.001 [--candidate ...]
        [--seeds 3] [--first-seed 0] [--device auto|cpu|cuda] [--parallel P] [--threads T]
        [--runs runs/tuning] [--recipe-runs runs/reproduce] [--out docs/results/tuning] [--workers W]
        [--probe STEPS] [--train-only] [--restart]

A candidate is ``NAME:key=value[,key=value...]``: the recipe with those ``train.py`` overrides. Its
seeds train in ``<runs>/<scenario>/<NAME>/s<seed>/``; the recipe's own seeds are
``benchmarks/reproduce.py``'s runs, ``<recipe-runs>/<scenario>/s<seed>/``. ``--probe STEPS`` screens at a
short budget: every run, the recipe's included, trains STEPS env steps in
``<runs>/<scenario>/probe-<STEPS>/<NAME>/s<seed>/`` and the pages are ``<scenario>-probe-<STEPS>.*``. Finished runs are not
trained again, stopped ones resume, and a run directory holding a run of another recipe is refused.
As soon as a run has finished, its ``best.pt`` (and ``last.pt``, where the run ended) is scored on the
recipe's validation workloads and stored in ``<out>/seeds/<page>/<NAME>-s<seed>.json``
(:mod:`agents.evaluation.tuning_store`); a stored run is neither trained nor scored again, so the page
can be written over more seeds or candidates with the run directories gone (a stored run of another
recipe is refused; ``--restart`` deletes the page's stored runs). Then optimus (preemptive and not;
the better of them is the rival whose mean the env steps to beat count to) runs on the same workloads,
a family recipe's (``train.also_validate_on``) on each other scenario's too, where each run's
``best.pt`` is scored as well and the page pairs the seeds' relative JCT (the score ``best.pt`` is
chosen on) with the recipe's; and ``<out>/<page>.md``, ``.csv``, ``.json`` and ``.png`` are written (:mod:`agents.evaluation.tuning`,
:mod:`agents.evaluation.tuning_page`). Held-out workloads are never run: they only report, in
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
    p.add_argument("--restart", action="store_true", help="delete the page's stored runs first (a changed recipe)")
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
    import shutil

    from agents.evaluation.ablations import RECIPE, plot_variants
    from agents.evaluation.curves import baseline_means, baseline_specs, recipe_validation
    from agents.evaluation.results import steps_to_beat, validation_rival
    from agents.evaluation.runner import default_workers
    from agents.evaluation.seed_runs import (
        SeedRun, machine_device, recipe_fingerprint, resolve_recipe, train_then_evaluate,
    )
    from agents.evaluation.seed_store import check_recipe, read_seed, stored_curve, write_seed
    from agents.json_files import write_json
    from agents.evaluation.tuning import (
        PROBE_KEY, VALIDATION_KEYS, page_stem, parse_candidate, probe_overrides, relate, run_dir, sets_probe_key,
        summarise,
    )
    from agents.evaluation.tuning_page import document, markdown, write_csv
    from agents.evaluation.tuning_store import (
        other_scenarios, run_path, same_workloads, score_run, stored_row, with_rivals,
    )
    from agents.training.prepare import prepare_run
    from agents.training.validation_baselines import VALIDATION_BASELINES
    from envs.config import ConfigError, validated_scenario

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
        changed = [k for k in (*VALIDATION_KEYS, "also_validate_on") if getattr(cspec.train, k) != getattr(spec.train, k)]
        if changed:
            raise ConfigError(f"--candidate {c.name} changes train.{changed[0]}: the validation workloads must be the "
                              "recipe's, so that every seed is compared on the same workloads")
        if cspec.scenario.name != spec.scenario.name:
            raise ConfigError(f"--candidate {c.name} renames the scenario ({cspec.scenario.name!r}); "
                              "candidates change the recipe, not the scenario's name")
        trains_on[c.name] = list(cspec.train.scenarios or [cspec.scenario.name])
    scenario = spec.scenario.name
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs, recipe_runs, out = Path(args.runs), Path(args.recipe_runs), Path(args.out)
    stem = page_stem(scenario, args.probe)
    everyone = [(RECIPE, probe), *((c.name, (*c.overrides, *probe)) for c in candidates)]
    jobs = {(n, s): SeedRun(f"{n} s{s}", args.config, s, run_dir(runs, recipe_runs, scenario, n, s, args.probe), tuple(o))
            for s in seeds for n, o in everyone}
    store = run_path(out, stem, RECIPE, 0).parent
    if args.restart and store.is_dir():
        shutil.rmtree(store)
        print(f"--restart: deleted the stored runs of {stem} ({store})", flush=True)

    # each run scored on the validation workloads, and stored, as soon as its training has finished
    validation = recipe_validation(spec)  # the recipe's workloads (every candidate shares them)
    vseeds = validation.seeds
    family = other_scenarios(spec)  # a family recipe's other validation scenarios (none for a scenario's recipe)
    workers = args.workers or default_workers()
    stored = {}
    for key, job in jobs.items():
        path = run_path(out, stem, *key)
        if path.is_file():
            doc = read_seed(path)
            check_recipe(path, doc, resolve_recipe(job))
            if same_workloads(doc, vseeds, [o.name for o, _ in family]):
                stored[key] = doc
                print(f"{job.label}: finished run stored in {path}; not trained or scored again", flush=True)
    by_label = {job.label: key for key, job in jobs.items()}

    def score(job: SeedRun) -> None:
        key = by_label[job.label]
        print(f"{job.label}: scoring its best.pt and last.pt on {len(vseeds)} validation workloads", flush=True)
        doc = score_run(validation, key[0], key[1], job.run_dir, recipe_fingerprint(resolve_recipe(job)), workers,
                        others=family)
        stored[key] = doc
        print(f"{job.label}: wrote {write_seed(run_path(out, stem, *key), doc)}", flush=True)

    code = train_then_evaluate("tune.py", [job for key, job in jobs.items() if key not in stored], args, device, score,
                               store)
    if code is not None:
        return code

    specs = baseline_specs(VALIDATION_BASELINES, validation)
    print(f"evaluating {len(specs)} baselines on {len(vseeds)} validation workloads {vseeds[0]}..{vseeds[-1]}", flush=True)
    means, _ = baseline_means(validation, specs, workers=workers)
    baselines = {b.name: means[b.name] for b in specs}
    rival = validation_rival(baselines)  # the best validation baseline
    rival_name, rival_mean = rival if rival else (None, None)
    others = with_rivals(family, workers)
    rows, curves = [], {}
    for n, _ in everyone:
        curves[n] = []
        for s in seeds:
            doc = stored[n, s]
            row = stored_row(doc, scenario)
            recipe = stored[RECIPE, s]["row"]["validation_best"]
            if n != RECIPE and row.validation_best is not None and recipe is not None:
                row.diff_vs_recipe = row.validation_best - recipe
            curve = stored_curve(doc, f"{n} s{s}")
            row.steps_to_beat_rival = steps_to_beat(curve.points, rival_mean)
            curves[n].append(curve.points)
            rows.append(row)
    if others:
        relate(rows, rival_mean, others)
    summaries = summarise(rows, candidates, trains_on)
    out.mkdir(parents=True, exist_ok=True)
    command = command_text(args)
    page = markdown(command, scenario, vseeds, validation.eval_scenario, baselines, rival_name, summaries, rows,
                    probe=args.probe, recipe_steps=recipe_steps, others=others, validated_on=validated_scenario(args.config))
    (out / f"{stem}.md").write_text(page)
    write_csv(out / f"{stem}.csv", rows, rival_name)
    write_json(out / f"{stem}.json", document(command, scenario, vseeds, validation.eval_scenario, baselines,
                                              rival_name, summaries, rows, probe=args.probe, others=others))
    title = "Recipe tuning" if args.probe is None else f"Recipe tuning, probe of {args.probe:,} env steps"
    plot_variants(out / f"{stem}.png", scenario, curves, baselines, title=title)
    for suffix in ("md", "csv", "json", "png"):
        print(f"wrote {out / f'{stem}.{suffix}'}", flush=True)
    print(page)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("tune.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
