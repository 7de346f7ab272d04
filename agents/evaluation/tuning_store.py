"""A tuning page's finished runs, kept as files: ``<out>/seeds/<stem>/<candidate>-s<seed>.json``.

``benchmarks/tune.py`` scores each run on the recipe's validation workloads as soon as its training
has finished (:func:`score_run`) and writes what the page takes from that run into one file, so the
page can be written again, over more seeds or candidates, on a machine without the run directories.
A file holds:

* ``recipe``: the :func:`~agents.evaluation.seed_runs.recipe_fingerprint` of the resolved run (the
  recipe with the candidate's overrides, and a probe's steps), checked against what the command
  resolves to now (:func:`~agents.evaluation.seed_store.check_recipe`);
* ``validation_seeds``: the workloads it was scored on;
* ``validation_curve``: the run's own validation points ``[env_step, mean_jct]``;
* ``row``: the :class:`~.tuning.TuningRow` fields that depend on the run alone (its ``best.pt`` and
  ``last.pt`` scored, its training signals; a family recipe's ``best.pt`` on each other validation
  scenario too); the difference from the recipe's seed, the relative JCT and the env steps to beat the
  rival are the page's, from the rows and baselines it has.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from .curves import (Validation, baseline_means, baseline_specs, read_curve, read_scalars, recipe_validation, run_means,
                     validation_run)
from .diagnosis import time_split
from .runner import checkpoint_spec
from .seed_store import SEED_FORMAT, SEEDS_DIR
from .tuning import TRAINING_SIGNALS, OtherScenario, TuningRow, end_split, training_signals

def run_path(out: Path, stem: str, candidate: str, seed: int) -> Path:
    """The file of one (candidate, seed) run of a tuning page: ``<out>/seeds/<stem>/<candidate>-s<seed>.json``."""
    return Path(out) / SEEDS_DIR / stem / f"{candidate}-s{seed}.json"


def other_scenarios(spec: Any) -> list[tuple[OtherScenario, Validation]]:
    """A family recipe's other validation scenarios (``train.also_validate_on`` of the resolved recipe
    ``spec``): how the policy acts on each (its own recipe's rule) and its workloads (the recipe's
    validation seeds on its validation variant), as the trainer replays them."""
    from agents.training.envs import evaluation_scenario
    from agents.training.prepare import other_validation_rules

    train, seeds = spec.train, recipe_validation(spec).seeds
    return [(OtherScenario(s.name, *rule), Validation(evaluation_scenario(s, train), seeds, train.eval_scenario))
            for s, rule in other_validation_rules(spec)]


def with_rivals(others: Sequence[tuple[OtherScenario, Validation]], workers: int = 1) -> list[OtherScenario]:
    """Each other scenario with its validation rival: the validation baselines run on its workloads."""
    from agents.training.validation_baselines import VALIDATION_BASELINES

    from .results import validation_rival

    out = []
    for other, where in others:
        means, _ = baseline_means(where, baseline_specs(VALIDATION_BASELINES, where), workers=workers)
        name, mean = validation_rival(means) or (None, None)
        out.append(replace(other, rival=name, rival_mean=mean))
    return out


def score_run(validation: Validation, candidate: str, seed: int, run_dir: Path, recipe: Mapping[str, Any],
              workers: int = 1, others: Sequence[tuple[OtherScenario, Validation]] = ()) -> dict[str, Any]:
    """One finished run scored on ``validation``: its ``best.pt`` (chosen on these workloads) and its
    ``last.pt`` (where it ended) in one pass, its validation curve and training signals; ``others``: a
    family recipe's other validation scenarios, where ``best.pt`` is scored too, acting by each one's
    rule. The run file's document (``recipe``: its fingerprint)."""
    from agents.training.checkpoints import BEST, LAST, RESULT_FILE

    specs = [checkpoint_spec(name, run_dir / name, validation.scenario) for name in (BEST, LAST)]
    scored = validation_run(validation, specs, workers=workers)
    means, _ = run_means(scored)
    also = {}
    for other, where in others:
        spec = checkpoint_spec(BEST, run_dir / BEST, where.scenario, action=other.action, conflicts=other.conflicts)
        also[other.name] = run_means(validation_run(where, [spec], workers=workers))[0][BEST]
    training = json.loads((run_dir / RESULT_FILE).read_text())
    curve = read_curve(run_dir)
    types = [t.name for t in validation.scenario.task_types]
    row = {
        "env_steps": int(training.get("env_steps", 0)), "wall_s": float(training.get("wall_s", float("nan"))),
        "device": str(training.get("device", "")), "best_env_step": curve.best[0], "logged_best": curve.best[1],
        "validation_best": means[BEST],
        **training_signals(read_scalars(run_dir, [tag for _, tag in TRAINING_SIGNALS])),
        "last_mean_jct": means[LAST],
        "last_split": end_split(time_split(scored.results[LAST], types, preemptive=False)["rows"]),
        "validation_also": also,
    }
    return {"format": SEED_FORMAT, "candidate": candidate, "seed": seed, "run_dir": str(run_dir),
            "recipe": dict(recipe), "validation_seeds": list(validation.seeds),
            "validation_curve": [[int(s), float(v)] for s, v in curve.points], "row": row}


def stored_row(doc: Mapping[str, Any], scenario: str) -> TuningRow:
    """A run file's :class:`~.tuning.TuningRow`, the page's fields left unset."""
    return TuningRow(scenario=scenario, candidate=doc["candidate"], seed=int(doc["seed"]), diff_vs_recipe=None,
                     steps_to_beat_rival=None, **doc["row"])


def same_workloads(doc: Mapping[str, Any], seeds: Sequence[int], others: Sequence[str] = ()) -> bool:
    """Whether a run file was scored on the workloads ``seeds``, on each of the ``others`` scenarios too."""
    also = (doc.get("row") or {}).get("validation_also") or {}
    return list(doc.get("validation_seeds") or []) == list(seeds) and all(name in also for name in others)
