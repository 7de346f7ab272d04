"""One policy for a task family: the scenarios a family recipe's policy acts in, each seed's ``best.pt``
evaluated on every one of them, and the numbers of ``docs/results/generalist.md``.

A family recipe (``configs/generalist-synthetic.yaml``) trains one shared policy on several scenarios
(``train.scenarios``; both modes with ``policy.observe_mode``) and validates on its ``base`` scenario.
Its *family* is every shipped scenario that policy can act in (:func:`family_scenarios`: the same task
types, pending slots and allocation grid; the same mode unless it observes the mode). On each, a seed
acts as that scenario's own recipe acts outside training (:func:`~agents.training.prepare.acting_rule`: its ``train.eval_action``
and conflict rule), on that scenario's held-out workloads, so its numbers stand beside the scenario's
own results page (``docs/results/<scenario>.json``): the recipe trained for that scenario alone, and
the best non-oracle baseline, which runs again here on the same workloads for paired differences.

Each evaluated seed is stored in ``<out>/seeds/<recipe>/family-s<seed>.json`` (:func:`family_path`)
with the recipe fingerprint it trained, read and written by :mod:`agents.evaluation.seed_store`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from envs.config import ConfigError, available_scenarios, load_scenario

from .seed_store import SEED_FORMAT, seed_dir, stored_seeds
#: the name the family policy's column has in its evaluation runs
FAMILY_POLICY = "family"


def family_scenarios(spec: Any) -> list[str]:
    """The shipped scenarios the policy of the resolved recipe ``spec`` (a
    :class:`~agents.training.run_spec.RunSpec`) can act in, by name."""
    from agents.training.scenario_mix import check_family, check_shared_policy

    out = []
    for name in available_scenarios():
        other = load_scenario(name)
        try:
            check_family(spec.scenario, other, name, both_modes=spec.policy.observe_mode)
            check_shared_policy(spec.policy.tied_to_n, [other], spec.scenario)
        except ConfigError:
            continue
        out.append(name)
    return out


def evaluation_scenario(scenario: str) -> Any:
    """The scenario's held-out evaluation config, as its own results page evaluates on it."""
    from agents.training.prepare import prepare_run

    return prepare_run(scenario).scenario.for_evaluation()


#: the name of a family seed file before its seed: ``family-s<seed>.json``
FAMILY_PREFIX = "family-s"


def family_path(out: Path, recipe: str, seed: int) -> Path:
    """The family seed file: ``<out>/seeds/<recipe>/family-s<seed>.json``."""
    return seed_dir(out, recipe) / f"{FAMILY_PREFIX}{seed}.json"


def stored_family_seeds(out: Path, recipe: str) -> dict[int, Path]:
    """Every family seed file of ``recipe`` under ``out``, by training seed."""
    return stored_seeds(out, recipe, prefix=FAMILY_PREFIX)


def evaluate_family_seed(recipe: str, seed: int, best: Path, scenarios: Sequence[str], heldout: Sequence[int],
                         fingerprint: Mapping[str, Any], workers: int = 1) -> dict[str, Any]:
    """The family seed file of one finished run: its ``best.pt`` on every scenario's held-out workloads,
    acting as that scenario's recipe does."""
    from agents.training.checkpoints import RESULT_FILE
    from agents.training.prepare import acting_rule

    from .results import file_sha256
    from .runner import checkpoint_spec, run_evaluation
    from .summary import per_seed_means

    per_scenario = {}
    for name in scenarios:
        cfg = evaluation_scenario(name)
        action, conflicts = acting_rule(name)
        spec = checkpoint_spec(FAMILY_POLICY, best, cfg, action=action, conflicts=conflicts)
        results = run_evaluation(cfg, [spec], heldout, workers=workers, progress=False).results[FAMILY_POLICY]
        per_scenario[name] = {"action": action, "conflicts": conflicts,
                              "mean_jct": [None if np.isnan(v) else float(v) for v in per_seed_means(results)],
                              "truncated": int(sum(bool(r.truncated) for r in results))}
    result = best.parent / RESULT_FILE
    return {"format": SEED_FORMAT, "recipe_name": recipe, "seed": seed, "recipe": dict(fingerprint),
            "best_sha256": file_sha256(best), "training": json.loads(result.read_text()) if result.is_file() else None,
            "heldout": [int(s) for s in heldout], "scenarios": per_scenario}


def _workload_means(values: Sequence[float | None]) -> np.ndarray:
    """A seed file's per-workload mean JCTs, a truncated workload's None as NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def shipped_seed(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the checkpoint index says of a family seed's ``best.pt`` when it is shipped: its hash, its
    run's budget, wall time and device (None where the file predates them) and its held-out mean JCT
    on every scenario of the family."""
    training = doc.get("training") or {}
    return {"sha256": doc["best_sha256"], "env_steps": training.get("env_steps"), "wall_s": training.get("wall_s"),
            "device": training.get("device"),
            "mean_jct": {name: float(np.nanmean(_workload_means(s["mean_jct"]))) for name, s in doc["scenarios"].items()}}


def seed_training(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the family page says of a seed's run: where its ``best.pt`` was chosen (the env step of its best
    validation point), its budget and its wall time (None where the stored seed predates them)."""
    training = doc.get("training") or {}
    return {"seed": doc["seed"], "best_env_step": training.get("best_env_step"),
            "env_steps": training.get("env_steps"), "wall_s": training.get("wall_s")}


def own_results(out: Path, scenario: str) -> dict[str, Any] | None:
    """The scenario's own results page numbers (``<out>/<scenario>.json``): its recipe's held-out mean
    and sd over seeds, and its best non-oracle baseline's name and mean; None without a page."""
    path = Path(out) / f"{scenario}.json"
    if not path.is_file():
        return None
    doc = json.loads(path.read_text())
    over = doc.get("over_seeds") or {}
    rival = over.get("best_non_oracle")
    return {"mean_jct": over.get("mean_jct"), "sd": over.get("sd"), "seeds": len(over.get("seeds") or []),
            "rival": rival, "rival_mean_jct": (doc.get("baselines") or {}).get(rival, {}).get("mean_jct")}


def family_row(scenario: str, docs: Sequence[Mapping[str, Any]], rival_means: np.ndarray | None,
               own: Mapping[str, Any] | None) -> dict[str, Any]:
    """One scenario's row of the family page from the seeds' files: the policy's mean JCT over seeds
    (each seed's mean over the held-out workloads), its sd, each seed's paired difference to the
    rival baseline (``rival_means``: per workload) with its 95% interval, and the scenario's own recipe."""
    from .summary import paired_from_means

    per_seed = [_workload_means(d["scenarios"][scenario]["mean_jct"]) for d in docs]
    seed_means = np.array([float(np.nanmean(m)) for m in per_seed])
    paired = [paired_from_means(m, rival_means) for m in per_seed] if rival_means is not None else []
    first = docs[0]["scenarios"][scenario]
    return {
        "scenario": scenario,
        "acts": f"{first['action']}, {first['conflicts']}",
        "seeds": [int(d["seed"]) for d in docs],
        "mean_jct": float(seed_means.mean()),
        "sd": float(seed_means.std(ddof=1)) if len(seed_means) > 1 else None,
        "truncated": int(sum(d["scenarios"][scenario]["truncated"] for d in docs)),
        "rival": None if own is None else own["rival"],
        "rival_mean_jct": None if rival_means is None else float(np.nanmean(rival_means)),
        "paired": [{"mean_diff": p["mean_diff"], "ci95": p["ci95"]} for p in paired],
        "own_mean_jct": None if own is None else own["mean_jct"],
        "own_sd": None if own is None else own["sd"],
        "own_seeds": None if own is None else own["seeds"],
    }


def targets_met(row: Mapping[str, Any]) -> dict[str, bool | None]:
    """The family targets of one scenario: below the rival with every seed's paired 95% interval
    below zero; within 2% of (or better than) the scenario's own recipe (each None: nothing to compare)."""
    beats = None
    if row["paired"] and row["rival_mean_jct"] is not None:
        beats = row["mean_jct"] < row["rival_mean_jct"] and all(
            p["ci95"][1] is not None and p["ci95"][1] < 0 for p in row["paired"])
    own = row["own_mean_jct"]
    return {"beats_rival": beats, "within_2pct_of_own": None if own is None else row["mean_jct"] <= 1.02 * own}
