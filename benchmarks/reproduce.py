#!/usr/bin/env python
"""Reproduce a scenario's result: train K seeds of its recipe, evaluate them held out, write the files.

    python benchmarks/reproduce.py --config synthetic-3 --seeds 3 [--first-seed 0] [--device auto|cpu|cuda]
        [--parallel P] [--runs runs/reproduce] [--out docs/results] [--workers 2] [--heldout 30]
        [--ship checkpoints] [--index-only]

Each seed ``s`` is ``python train.py --config <scenario> --seed s`` (the recipe in
``configs/<scenario>.yaml``, nothing else), in ``<runs>/<scenario>/s<s>/``, started as its own
process with its output in ``<runs>/<scenario>/s<s>.log``; ``--parallel P`` runs P seeds side by side. On the CPU
the trainers also get the machine settings ``train.torch_threads`` and ``train.shards`` (the cores
shared out between the P runs: the same update, faster); they do not change the recipe. A seed
whose run finished (``result.json`` says so) is not trained again; one that stopped is resumed from
its ``last.pt``. Then every seed's ``best.pt`` (chosen by the run on its validation workloads) and
every baseline run on the held-out workloads (:func:`agents.evaluation.results.report_seeds`,
``--heldout`` of them; fixed in code, only reported), and ``<out>/<scenario>.{csv,json,md,png}``
and ``<out>/README.md`` are written (:mod:`agents.evaluation.results`). The page also says where
the time goes, from the same episodes, and what lost Bayes claims cost: the first seed's weights
run once more with conflicts resolved without a loss (:mod:`agents.evaluation.diagnosis`).
``--ship DIR`` copies seed 0's ``best.pt`` to ``DIR/<scenario>.pt``. ``--train-only`` stops after
training (seeds trained on several machines are then evaluated together by a run that finds them
finished); ``--index-only`` rewrites every ``<scenario>.md`` and ``README.md`` from the JSON files
already there (with ``--ship DIR`` also ``DIR/README.md``). Exit codes: 0 done, 2 bad input, 1 a training run failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: the command that rewrites the index pages from the results already there
INDEX_COMMAND = "python benchmarks/reproduce.py --index-only --ship checkpoints"
#: the scenarios of the index page, in the order of the paper's figures
SCENARIO_ORDER = ("synthetic-3", "synthetic-6", "multi-3", "hetero-6", "testbed-3", "testbed-6", "sjf-3")


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.runner import REPORT_SEEDS
    from agents.evaluation.seed_runs import add_machine_arguments

    p = argparse.ArgumentParser(prog="reproduce.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", help="scenario name (configs/<name>.yaml) or YAML path: its recipe is trained")
    p.add_argument("--seeds", type=int, default=3, help="training seeds (default 3)")
    p.add_argument("--first-seed", type=int, default=0, help="first training seed (default 0)")
    add_machine_arguments(p)
    p.add_argument("--runs", default="runs/reproduce", help="parent of the run directories (default runs/reproduce)")
    p.add_argument("--out", default="docs/results", help="results directory (default docs/results)")
    p.add_argument("--heldout", type=int, default=REPORT_SEEDS,
                   help=f"held-out workloads, the first K of the fixed range (default all {REPORT_SEEDS})")
    p.add_argument("--ship", metavar="DIR", help="copy seed 0's best.pt to DIR/<scenario>.pt")
    p.add_argument("--train-only", action="store_true",
                   help="train (or resume) the seeds and stop: no evaluation, no files written")
    p.add_argument("--index-only", action="store_true", help="only rewrite the pages and <out>/README.md from the JSON files")
    return p


def write_indexes(out: Path, ship: Path | None) -> list[Path]:
    """Every ``<out>/<scenario>.md`` again from its JSON, ``<out>/README.md``; the top-level README's
    results table when ``out`` is this project's ``docs/results``; ``<ship>/README.md`` when checkpoints
    are shipped."""
    from agents.evaluation.results import checkpoint_index, read_all, update_readme, write_index, write_scenario_page

    written = [write_scenario_page(out, r) for r in read_all(out, SCENARIO_ORDER)]
    index = write_index(out, INDEX_COMMAND, SCENARIO_ORDER)
    written.append(index)
    if out.resolve() == (ROOT / "docs" / "results").resolve() and update_readme(ROOT / "README.md", index.read_text()):
        written.append(ROOT / "README.md")
    if ship is not None:
        path = ship / "README.md"
        path.write_text(checkpoint_index(ship, out, SCENARIO_ORDER))
        written.append(path)
    return written


def recipe_command(args: argparse.Namespace) -> str:
    """The command line that regenerates the files (as a user types it)."""
    parts = ["python benchmarks/reproduce.py", f"--config {args.config}", f"--seeds {args.seeds}"]
    if args.first_seed:
        parts.append(f"--first-seed {args.first_seed}")
    if args.heldout != build_parser().get_default("heldout"):
        parts.append(f"--heldout {args.heldout}")
    return " ".join(parts)


def run(args: argparse.Namespace) -> int:
    import json

    from agents.evaluation.curves import Curves, baseline_means, baseline_specs, plot_curves, read_curve, read_validation
    from agents.evaluation.diagnosis import conflict_counterfactual, diagnose
    from agents.evaluation.results import (
        RecipeResults,
        baseline_table,
        evaluate_seeds,
        file_sha256,
        mean_bound,
        over_seeds,
        report_seeds,
        seed_name,
        seed_row,
        steps_to_beat,
        validation_rival,
        write_scenario_results,
    )
    from agents.evaluation.runner import default_workers, resolve_schedulers
    from agents.evaluation.seed_runs import SeedRun, machine_device, train_runs
    from agents.training.checkpoints import BEST, RESULT_FILE
    from agents.training.prepare import prepare_run
    from agents.training.validation_baselines import VALIDATION_BASELINES
    from envs.config import ConfigError

    out = Path(args.out)
    if args.index_only:
        for p in write_indexes(out, Path(args.ship) if args.ship else None):
            print(f"wrote {p}")
        return 0
    if not args.config:
        raise ConfigError("--config is required (a scenario name, e.g. synthetic-3)")
    for name, low in (("seeds", 1), ("first_seed", 0)):
        if getattr(args, name) < low:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= {low}, got {getattr(args, name)}")
    device = machine_device(args)
    try:
        heldout = report_seeds(args.heldout)
    except ValueError as exc:
        raise ConfigError(f"--heldout: {exc}") from None
    spec = prepare_run(args.config)  # the recipe, resolved (bad YAML: ConfigError before anything runs)
    scenario = spec.scenario.name
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs = {s: Path(args.runs) / scenario / f"s{s}" for s in seeds}
    failed = train_runs([SeedRun(f"seed {s}", args.config, s, d) for s, d in runs.items()], device, args.parallel,
                        args.threads)
    if failed:
        print(f"reproduce.py: training failed for {', '.join(r.label for r in failed)}; nothing evaluated",
              file=sys.stderr)
        return 1
    if args.train_only:
        return 0

    # held out: every baseline and every seed's best.pt on the same workloads
    cfg = spec.scenario.for_evaluation()
    workers = args.workers or default_workers()
    baselines = resolve_schedulers("all", (), cfg)
    print(f"evaluating {len(seeds)} seed(s) and {len(baselines)} baselines on {len(heldout)} held-out workloads "
          f"{heldout[0]}..{heldout[-1]}", flush=True)
    run_ = evaluate_seeds(cfg, {s: runs[s] / BEST for s in seeds}, baselines, heldout, workers=workers)

    # validation: the curves and the baselines on the workloads that chose best.pt
    validation = read_validation(runs[seeds[0]])
    curves = [read_curve(runs[s], f"seed {s}") for s in seeds]
    vmeans, vbound = baseline_means(validation, baseline_specs(VALIDATION_BASELINES, validation), workers=workers)
    rival = validation_rival(vmeans)  # the best validation baseline: the sample-efficiency figure counts to it
    rows = []
    for s, curve in zip(seeds, curves):
        training = json.loads((runs[s] / RESULT_FILE).read_text())
        beat = steps_to_beat(curve.points, rival[1] if rival else None)
        rows.append(seed_row(run_, s, training, {"best": curve.best[1], "steps_to_beat": beat}))
    # where the time goes, from the same held-out episodes; what lost claims cost, seed 0's weights again
    summary = over_seeds(run_, seeds)
    rival_heldout = summary["best_non_oracle"]
    diagnosis, counterfactual = {}, None
    if rival_heldout:
        diagnosis = diagnose(run_, [seed_name(s) for s in seeds], rival_heldout)
        print(f"measuring the conflict counterfactual: {seed_name(seeds[0])} under the other conflict mode on the "
              "held-out workloads", flush=True)
        counterfactual = conflict_counterfactual(run_, seed_name(seeds[0]), rival_heldout, workers=workers)
    results = RecipeResults(
        scenario=scenario, command=recipe_command(args), heldout_seeds=heldout, validation_seeds=validation.seeds,
        rows=rows, baselines=baseline_table(run_), bound=mean_bound(run_),
        validation_baselines=vmeans, validation_rival=rival[0] if rival else None, over_seeds=summary,
        recipe={"policy": spec.policy.to_dict(), "train": spec.train.to_dict()},
        seed0_sha256=file_sha256(runs[0] / BEST) if 0 in runs else None,
        diagnosis=diagnosis, conflict_counterfactual=counterfactual,
    )
    paths = write_scenario_results(out, results)
    png = plot_curves(Curves(validation, curves, vmeans, vbound), out / f"{scenario}.png")
    if args.ship:
        if 0 not in runs:
            raise ConfigError("--ship copies seed 0's best.pt: include seed 0 (--first-seed 0)")
        target = Path(args.ship) / f"{scenario}.pt"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(runs[0] / BEST, target)
        print(f"shipped {runs[0] / BEST} as {target}", flush=True)
    for p in (*paths, png, *write_indexes(out, Path(args.ship) if args.ship else None)):
        print(f"wrote {p}", flush=True)
    print((out / f"{scenario}.md").read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("reproduce.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
