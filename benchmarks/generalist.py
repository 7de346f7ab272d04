#!/usr/bin/env python
"""One policy per task family: train K seeds of a family recipe and evaluate each on every scenario of
its family, beside each scenario's own recipe and best non-oracle baseline.

    python benchmarks/generalist.py --config generalist-synthetic --seeds 3 [--first-seed 0]
        [--device auto|cpu|cuda] [--parallel P] [--runs runs/reproduce] [--out docs/results]
        [--workers 2] [--heldout 30] [--ship checkpoints] [--restart] [--train-only]

Each seed ``s`` is ``python train.py --config <recipe> --seed s`` in ``<runs>/<recipe>/s<s>/`` (as
``benchmarks/reproduce.py`` trains a scenario's seeds; a finished run is not trained again, a stopped
one resumes). As soon as a seed's run has finished, its ``best.pt`` runs on the held-out workloads of
every scenario of the family (:func:`agents.evaluation.family.family_scenarios`), acting as each
scenario's own recipe acts, and is stored in ``<out>/seeds/<recipe>/family-s<s>.json`` with the
recipe it trained (a stored seed is not trained or evaluated again; one of another recipe is refused,
``--restart`` deletes the stored seeds first). Then each scenario's best non-oracle baseline (named by
its results page, ``<out>/<scenario>.json``) runs on the same workloads, and
``<out>/generalist.{json,md}`` are written: one section per family recipe, the others kept; then the
index pages, as ``reproduce.py --index-only`` writes them. ``--ship DIR`` copies seed 0's ``best.pt``
to ``DIR/<recipe>.pt`` and writes ``DIR/README.md`` with its row. Exit codes: 0 done, 2 bad input,
1 a training run failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def build_parser() -> argparse.ArgumentParser:
    from agents.evaluation.results import REPORT_SEEDS
    from agents.evaluation.seed_runs import add_machine_arguments

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a family recipe (configs/<name>.yaml, e.g. generalist-synthetic)")
    p.add_argument("--seeds", type=int, default=3, help="training seeds (default 3)")
    p.add_argument("--first-seed", type=int, default=0, help="first training seed (default 0)")
    add_machine_arguments(p)
    p.add_argument("--runs", default="runs/reproduce", help="parent of the run directories (default runs/reproduce)")
    p.add_argument("--out", default="docs/results", help="results directory (default docs/results)")
    p.add_argument("--heldout", type=int, default=REPORT_SEEDS,
                   help=f"held-out workloads, the first K of the fixed range (default all {REPORT_SEEDS})")
    p.add_argument("--ship", default=None, metavar="DIR", help="copy seed 0's best.pt to DIR/<recipe>.pt")
    p.add_argument("--restart", action="store_true", help="delete the recipe's stored family seeds first")
    p.add_argument("--train-only", action="store_true", help="train (or resume) the seeds and stop")
    return p


def command_line(args: argparse.Namespace) -> str:
    """The command that regenerates this recipe's section."""
    from agents.evaluation.seed_runs import seeds_command

    return seeds_command("generalist.py", args)


def run(args: argparse.Namespace) -> int:
    from agents.evaluation.family import (
        evaluate_family_seed,
        family_path,
        family_row,
        family_scenarios,
        evaluation_scenario,
        own_results,
        seed_training,
        shipped_seed,
        stored_family_seeds,
        targets_met,
    )
    from agents.evaluation.family_page import PAGE, PAGE_JSON, read_sections, render_family_page
    from agents.evaluation.results import report_seeds
    from agents.evaluation.results_index import write_indexes
    from agents.evaluation.runner import default_workers, resolve_schedulers, run_evaluation
    from agents.evaluation.seed_runs import (
        SeedRun,
        check_ship,
        ship_seed0,
        machine_device,
        recipe_fingerprint,
        resolve_recipe,
        seed_range,
        train_then_evaluate,
    )
    from agents.evaluation.seed_store import check_recipe, read_seed, write_seed
    from agents.evaluation.summary import per_seed_means
    from agents.json_files import write_json
    from agents.training.checkpoints import BEST
    from agents.training.prepare import prepare_run
    from envs.config import ConfigError, validated_scenario

    seeds = seed_range(args)
    try:
        heldout = report_seeds(args.heldout)
    except ValueError as exc:
        raise ConfigError(f"--heldout: {exc}") from None
    spec = prepare_run(args.config)
    recipe = spec.scenario.name
    scenarios = family_scenarios(spec)
    if len(scenarios) < 2:
        raise ConfigError(f"{args.config}: its policy acts in {len(scenarios)} shipped scenario(s) "
                          f"({', '.join(scenarios) or 'none'}); a family recipe acts in two or more")
    device = machine_device(args)
    out = Path(args.out)
    runs = {s: SeedRun(f"seed {s}", args.config, s, Path(args.runs) / recipe / f"s{s}") for s in seeds}
    if args.restart:
        for path in stored_family_seeds(out, recipe).values():
            path.unlink()
        print(f"--restart: deleted the stored family seeds of {recipe}", flush=True)
    stored: dict[int, dict[str, Any]] = {}
    for seed, path in stored_family_seeds(out, recipe).items():
        if seed in runs:
            doc = read_seed(path)
            check_recipe(path, doc, resolve_recipe(runs[seed]))
            if doc["heldout"] == list(heldout) and set(doc["scenarios"]) == set(scenarios):
                stored[seed] = doc
                print(f"seed {seed}: stored in {path}; not trained or evaluated again", flush=True)
    check_ship(args, runs, stored)
    workers = args.workers or default_workers()

    def evaluate(run_: SeedRun) -> None:
        print(f"{run_.label}: evaluating its {BEST} on {len(heldout)} held-out workloads of "
              f"{', '.join(scenarios)}", flush=True)
        doc = evaluate_family_seed(recipe, run_.seed, run_.run_dir / BEST, scenarios, heldout,
                                   recipe_fingerprint(resolve_recipe(run_)), workers=workers)
        stored[run_.seed] = doc
        print(f"{run_.label}: wrote {write_seed(family_path(out, recipe, run_.seed), doc)}", flush=True)

    code = train_then_evaluate("generalist.py", [runs[s] for s in seeds if s not in stored], args, device, evaluate,
                               family_path(out, recipe, 0).parent)
    if code is not None:
        return code

    docs = [stored[s] for s in seeds]
    rows = []
    for name in scenarios:
        own = own_results(out, name)
        rival_means = None
        if own is not None and own["rival"]:
            cfg = evaluation_scenario(name)
            rival = resolve_schedulers(own["rival"], (), cfg)
            print(f"{name}: {own['rival']} on {len(heldout)} held-out workloads", flush=True)
            results = run_evaluation(cfg, rival, heldout, workers=workers, progress=False).results
            rival_means = per_seed_means(results[rival[0].name])
        row = family_row(name, docs, rival_means, own)
        row["targets"] = targets_met(row)
        rows.append(row)
    page_json = out / PAGE_JSON
    sections = read_sections(out)
    sections[recipe] = {"command": command_line(args), "trained_on": [s.name for s in spec.trained_on],
                        "validated_on": validated_scenario(args.config),
                        "also_validated_on": [s.name for s in spec.validation_others],
                        "training": [seed_training(doc) for doc in docs], "heldout_seeds": list(heldout), "rows": rows,
                        "seed0": shipped_seed(stored[0]) if 0 in stored else None}
    write_json(page_json, dict(sorted(sections.items())))
    page = out / PAGE
    page.write_text(render_family_page(sections))
    if args.ship:
        ship_seed0(args.ship, runs, recipe)
    print(f"wrote {page_json}\nwrote {page}", flush=True)
    for path in write_indexes(out, Path(args.ship) if args.ship else None):
        print(f"wrote {path}", flush=True)
    print(page.read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("generalist.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
