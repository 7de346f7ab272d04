#!/usr/bin/env python
"""Reproduce a scenario's result: train K seeds of its recipe, evaluate them held out, write the files.

    python benchmarks/reproduce.py --config synthetic-3 --seeds 3 [--first-seed 0] [--device auto|cpu|cuda]
        [--parallel P] [--runs runs/reproduce] [--out docs/results] [--workers 2] [--heldout 30]
        [--ship checkpoints] [--restart] [--train-only] [--index-only]

Each seed ``s`` is ``python train.py --config <scenario> --seed s`` (the recipe in
``configs/<scenario>.yaml``, nothing else), in ``<runs>/<scenario>/s<s>/``, started as its own
process with its output in ``<runs>/<scenario>/s<s>.log``; ``--parallel P`` runs P seeds side by side. On the CPU
the trainers also get the machine settings ``train.torch_threads`` and ``train.shards`` (the cores
shared out between the P runs: the same update, faster); they do not change the recipe. A seed
whose run finished (``result.json`` says so) is not trained again; one that stopped is resumed from
its ``last.pt``. As soon as a seed's run has finished, its ``best.pt`` (chosen by the run on its
validation workloads) runs on the held-out workloads (:func:`agents.evaluation.results.report_seeds`,
``--heldout`` of them; fixed in code, only reported) and what the page takes from that seed is
stored in ``<out>/seeds/<scenario>/s<s>.json`` (:mod:`agents.evaluation.seed_store`), with the
recipe it trained. A stored seed is neither trained nor evaluated again, so the page can be written
over more seeds on a machine without the earlier run directories; a stored seed of another recipe
(its stored recipe differs from what the command resolves to now) is refused, naming the keys, and
``--restart`` deletes the scenario's stored seeds first. Then every baseline runs on the same
held-out workloads, and ``<out>/<scenario>.{csv,json,md,png}`` and ``<out>/README.md`` are written
(:mod:`agents.evaluation.results`, :mod:`agents.evaluation.results_page`, :mod:`agents.evaluation.results_index`). The page also says where the time goes, from the same episodes,
and what lost Bayes claims cost: the first seed's weights run once more with conflicts resolved
without a loss (:mod:`agents.evaluation.diagnosis`; every seed file holds its own such run).
``--ship DIR`` copies seed 0's ``best.pt`` to ``DIR/<scenario>.pt``. ``--train-only`` stops after
training, evaluating and storing nothing (seeds trained on several machines are then evaluated by a
run that finds them finished); ``--index-only`` rewrites every ``<scenario>.md`` and ``README.md`` from the JSON files
already there (with ``--ship DIR`` also ``DIR/README.md``). Exit codes: 0 done, 2 bad input, 1 a training run failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
    p.add_argument("--restart", action="store_true",
                   help="delete the scenario's stored seeds (<out>/seeds/<scenario>/) first: every seed is evaluated "
                        "again, and trained again where its run directory holds no finished run")
    return p


def recipe_command(args: argparse.Namespace) -> str:
    """The command line that regenerates the files (as a user types it)."""
    from agents.evaluation.seed_runs import seeds_command

    return seeds_command("reproduce.py", args)


def load_stored(args: argparse.Namespace, out: Path, scenario: str, runs: dict[int, Any],
                heldout: list[int]) -> dict[int, dict[str, Any]]:
    """The stored seeds of ``runs`` (seed -> seed file) whose files hold this command's held-out
    workloads. Every seed file of the scenario must hold a seed of the recipe the command resolves to
    now (:class:`ConfigError` naming the keys). A seed stored on other held-out workloads is evaluated
    again from its finished run, or refused without one."""
    from agents.evaluation.seed_runs import SeedRun, finished, resolve_recipe
    from agents.evaluation.seed_store import check_recipe, read_seed, stored_seeds
    from envs.config import ConfigError

    stored = {}
    for seed, path in stored_seeds(out, scenario).items():
        doc = read_seed(path)
        check_recipe(path, doc, resolve_recipe(SeedRun(f"seed {seed}", args.config, seed, Path(args.runs))))
        if seed not in runs:
            continue
        have = doc["heldout"]["seeds"]
        if have == heldout:
            stored[seed] = doc
        elif not finished(runs[seed].run_dir):
            raise ConfigError(f"{path} was evaluated on {len(have)} held-out workloads, not {len(heldout)}, and "
                              f"{runs[seed].run_dir} holds no finished run to evaluate again: give --heldout "
                              f"{len(have)}, or --restart to train the seeds again")
    return stored


def run(args: argparse.Namespace) -> int:
    from agents.evaluation.curves import Curves, baseline_means, baseline_specs, plot_curves, recipe_validation
    from agents.evaluation.results import (
        RecipeResults,
        baseline_table,
        evaluate_seeds,
        mean_bound,
        over_seeds,
        report_seeds,
        seed_row,
        steps_to_beat,
        validation_rival,
    )
    from agents.evaluation.results_index import write_indexes
    from agents.evaluation.results_page import write_scenario_results
    from agents.evaluation.runner import default_workers, resolve_schedulers
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
    from agents.evaluation.seed_store import (
        evaluate_seed,
        heldout_means,
        seed_dir,
        seed_path,
        stored_counterfactual,
        stored_curve,
        stored_diagnosis,
        write_seed,
    )
    from agents.training.checkpoints import BEST
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
    seeds = seed_range(args)
    device = machine_device(args)
    try:
        heldout = report_seeds(args.heldout)
    except ValueError as exc:
        raise ConfigError(f"--heldout: {exc}") from None
    spec = prepare_run(args.config)  # the recipe, resolved (bad YAML: ConfigError before anything runs)
    scenario = spec.scenario.name
    runs = {s: SeedRun(f"seed {s}", args.config, s, Path(args.runs) / scenario / f"s{s}") for s in seeds}
    if args.restart and seed_dir(out, scenario).is_dir():
        shutil.rmtree(seed_dir(out, scenario))
        print(f"--restart: deleted the stored seeds of {scenario} ({seed_dir(out, scenario)})", flush=True)
    stored = load_stored(args, out, scenario, runs, heldout)
    check_ship(args, runs, stored)
    for s in stored:
        print(f"seed {s}: finished run stored in {seed_path(out, scenario, s)}; not trained or evaluated again",
              flush=True)

    # each seed evaluated on the held-out workloads, and stored, as soon as its run has finished
    cfg = spec.scenario.for_evaluation()
    workers = args.workers or default_workers()

    def evaluate(run_: SeedRun) -> None:
        print(f"{run_.label}: evaluating its {BEST} on {len(heldout)} held-out workloads", flush=True)
        doc = evaluate_seed(scenario, cfg, run_.seed, run_.run_dir, heldout,
                            recipe_fingerprint(resolve_recipe(run_)), workers=workers)
        stored[run_.seed] = doc
        print(f"{run_.label}: wrote {write_seed(seed_path(out, scenario, run_.seed), doc)}", flush=True)

    code = train_then_evaluate("reproduce.py", [runs[s] for s in seeds if s not in stored], args, device, evaluate,
                               seed_dir(out, scenario))
    if code is not None:
        return code

    # held out: every baseline on the same workloads as the stored seeds
    baselines = resolve_schedulers("all", (), cfg)
    print(f"evaluating {len(baselines)} baselines on {len(heldout)} held-out workloads {heldout[0]}..{heldout[-1]}",
          flush=True)
    run_ = evaluate_seeds(cfg, {}, baselines, heldout, workers=workers)
    means = {s: heldout_means(stored[s]) for s in seeds}

    # validation: the curves and the baselines on the workloads that chose best.pt
    validation = recipe_validation(spec)
    curves = [stored_curve(stored[s]) for s in seeds]
    vmeans, vbound = baseline_means(validation, baseline_specs(VALIDATION_BASELINES, validation), workers=workers)
    rival = validation_rival(vmeans)  # the best validation baseline: the sample-efficiency figure counts to it
    rows = []
    for s, curve in zip(seeds, curves):
        beat = steps_to_beat(curve.points, rival[1] if rival else None)
        rows.append(seed_row(run_, s, stored[s]["training"], {"best": curve.best[1], "steps_to_beat": beat},
                             means[s]))
    # where the time goes, from the same held-out episodes; what lost claims cost, the first seed's weights again
    summary = over_seeds(run_, seeds, means)
    rival_heldout = summary["best_non_oracle"]
    diagnosis, counterfactual = {}, None
    if rival_heldout:
        diagnosis = stored_diagnosis([stored[s] for s in seeds], run_, rival_heldout)
        counterfactual = stored_counterfactual(stored[seeds[0]], run_, rival_heldout)
    results = RecipeResults(
        scenario=scenario, command=recipe_command(args), heldout_seeds=heldout, validation_seeds=validation.seeds,
        rows=rows, baselines=baseline_table(run_), bound=mean_bound(run_),
        validation_baselines=vmeans, validation_rival=rival[0] if rival else None, over_seeds=summary,
        recipe={"policy": spec.policy.to_dict(), "train": spec.train.to_dict(),
                "scenario": {"reward": spec.learned_reward}},
        seed0_sha256=stored[0]["best_sha256"] if 0 in stored else None,
        diagnosis=diagnosis, conflict_counterfactual=counterfactual,
    )
    paths = write_scenario_results(out, results)
    png = plot_curves(Curves(validation, curves, vmeans, vbound), out / f"{scenario}.png")
    if args.ship:
        ship_seed0(args.ship, runs, scenario)
    for p in (*paths, png, *write_indexes(out, Path(args.ship) if args.ship else None)):
        print(f"wrote {p}", flush=True)
    print((out / f"{scenario}.md").read_text())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from agents.evaluation.seed_runs import run_command

    return run_command("reproduce.py", run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
