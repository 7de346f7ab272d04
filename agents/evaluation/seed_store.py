"""A recipe's finished seeds, kept as files: ``<out>/seeds/<scenario>/s<seed>.json``.

``benchmarks/reproduce.py`` evaluates each seed's ``best.pt`` on the held-out workloads as soon as the
seed's training run finishes (:func:`evaluate_seed`) and writes what the results page takes from that
seed into one file (:func:`write_seed`), so the page can be written again, over more seeds, on a
machine without the run directories. A seed file holds:

* ``recipe``: the :func:`~agents.evaluation.seed_runs.recipe_fingerprint` of the resolved recipe the
  seed trained (scenario, policy and train values, the train place keys left out; ``train.seed`` is
  the seed), checked against what the command resolves to now (:func:`check_recipe`);
* ``training``: the run's ``result.json`` (env steps, wall time, device, ``best_env_step``, critic);
* ``validation_curve``: the run's validation points ``[env_step, mean_jct]``;
* ``heldout``: the workload seeds and the policy's mean JCT on each (NaN stored as null);
* ``split``: :func:`~agents.evaluation.diagnosis.time_split` of its held-out episodes (per task type,
  per cluster size, unfinished tasks, lost claims, coordination) and ``episodes``: each episode's
  lost claims and coordination tallies, from which the seeds' pooled split is rebuilt (:func:`pooled_split`);
* ``counterfactual``: the same weights under the other conflict mode
  (:func:`~agents.evaluation.diagnosis.counterfactual_conflicts`), per workload, or null;
* ``best_sha256``: the hash of the ``best.pt`` evaluated (the file ``--ship`` copies).

Baselines do not depend on the seed and are not stored: the page runs them again (cheap beside training).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agents.json_files import write_json
from envs.config import ConfigError, ScenarioConfig

from .curves import RunCurve
from .diagnosis import counterfactual_conflicts, time_split
from .runner import EvaluationRun, run_evaluation
from .summary import coordination_stats, paired_from_means, per_seed_means, scheduler_stats

#: the folder of the seed files under the results directory
SEEDS_DIR = "seeds"
#: the layout version of a seed file
SEED_FORMAT = 1
#: the means of a :func:`~agents.evaluation.diagnosis.time_split` row, pooled over seeds weighted by tasks
SPLIT_MEANS = ("wait", "run", "jct", "cpu", "gpu")


def seed_dir(out: Path, scenario: str) -> Path:
    """Where a scenario's seed files live: ``<out>/seeds/<scenario>``."""
    return Path(out) / SEEDS_DIR / scenario


def seed_path(out: Path, scenario: str, seed: int) -> Path:
    """The file of one training seed: ``<out>/seeds/<scenario>/s<seed>.json``."""
    return seed_dir(out, scenario) / f"s{seed}.json"


def stored_seeds(out: Path, scenario: str, prefix: str = "s") -> dict[int, Path]:
    """Every seed file ``<prefix><seed>.json`` of ``scenario`` under ``out``, by training seed."""
    found = {}
    for path in sorted(seed_dir(out, scenario).glob(f"{prefix}*.json")):
        tail = path.stem[len(prefix):]
        if tail.isdigit():
            found[int(tail)] = path
    return dict(sorted(found.items()))


def read_seed(path: Path) -> dict[str, Any]:
    """A seed file (:class:`ConfigError`, one line, when it is not one)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable seed file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != SEED_FORMAT:
        raise ConfigError(f"{path}: not a seed file of format {SEED_FORMAT} (delete it, or rerun with --restart)")
    return doc


def write_seed(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write one seed file (atomically; its folder made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_json(path, dict(doc))


def check_recipe(path: Path, doc: Mapping[str, Any], spec: Any) -> None:
    """:class:`ConfigError` naming the keys in which the seed file ``path`` (``doc``) was trained with
    another recipe than the resolved ``spec`` of its seed."""
    from .seed_runs import fingerprint_differences, shown_differences

    diffs = fingerprint_differences(doc.get("recipe"), spec, what="stored")
    if diffs:
        raise ConfigError(f"{path} holds a seed of another recipe ({shown_differences(diffs)}); rerun with --restart "
                          "to delete the stored seeds of this scenario and train them again, or give --out another "
                          "directory")


# ---------------------------------------------------------------------------------------
# Evaluating one seed
# ---------------------------------------------------------------------------------------
def evaluate_seed(scenario: str, cfg: ScenarioConfig, seed: int, run_dir: Path, heldout: Sequence[int],
                  recipe: Mapping[str, Any], workers: int = 1) -> dict[str, Any]:
    """The seed file of a finished run: its ``best.pt`` on the ``heldout`` workloads of ``cfg`` (the
    evaluation scenario), and again under the counterfactual conflict mode, with the run's
    ``result.json`` and validation curve; ``recipe`` is its :func:`~.seed_runs.recipe_fingerprint`."""
    from agents.training.checkpoints import BEST, RESULT_FILE

    from .curves import read_curve
    from .results import evaluate_seeds, file_sha256, seed_name

    name, best = seed_name(seed), run_dir / BEST
    run = evaluate_seeds(cfg, {seed: best}, [], heldout, workers=workers)
    results = run.results[name]
    split = time_split(results, [t.name for t in cfg.task_types], preemptive=run.preemptive.get(name, False),
                       capacities=cfg.capacities)
    return {
        "format": SEED_FORMAT,
        "scenario": scenario,
        "seed": seed,
        "recipe": dict(recipe),
        "run_dir": str(run_dir),
        "best_sha256": file_sha256(best),
        "training": json.loads((run_dir / RESULT_FILE).read_text()),
        "validation_curve": [[step, value] for step, value in read_curve(run_dir, f"seed {seed}").points],
        "heldout": {"seeds": [int(s) for s in heldout], "mean_jct": per_seed_means(results).tolist()},
        "split": split,
        "episodes": [{"conflicts": int(r.conflicts), "coordination": r.extra.get("coordination")} for r in results],
        "counterfactual": _counterfactual(run, name, workers),
    }


def _counterfactual(run: EvaluationRun, name: str, workers: int) -> dict[str, Any] | None:
    """``name``'s weights on ``run``'s workloads under :func:`counterfactual_conflicts` of the mode it
    acted in: per-workload mean JCTs, mean JCT and lost claims; None when that mode has none."""
    spec = next(s for s in run.specs if s.name == name)
    conflicts = counterfactual_conflicts(spec.conflicts)
    if conflicts is None:
        return None
    other = f"{name}-{conflicts}"
    again = run_evaluation(run.cfg, [replace(spec, name=other, conflicts=conflicts)], run.seeds, workers=workers,
                           progress=False)
    stats = scheduler_stats(again.results[other])
    return {"acted": spec.conflicts, "conflicts": conflicts, "mean_jct": stats["mean_jct"],
            "lost_claims": stats["conflicts"], "heldout_mean_jct": per_seed_means(again.results[other]).tolist()}


# ---------------------------------------------------------------------------------------
# The page's numbers from stored seeds
# ---------------------------------------------------------------------------------------
def _array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], dtype=np.float64)


def heldout_means(doc: Mapping[str, Any]) -> np.ndarray:
    """The seed's mean JCT on each held-out workload (NaN: none of its tasks finished)."""
    return _array(doc["heldout"]["mean_jct"])


def stored_curve(doc: Mapping[str, Any], name: str | None = None) -> RunCurve:
    """The seed's validation curve, as :func:`~.curves.read_curve` read it from its run directory
    (``name``: the curve's, default ``seed <seed>``)."""
    return RunCurve(name or f"seed {doc['seed']}", Path(doc["run_dir"]),
                    [(int(s), float(v)) for s, v in doc["validation_curve"]])


def _pool_rows(groups: Sequence[Sequence[Mapping[str, Any]]], totals: Sequence[int],
               extra: Mapping[str, Any]) -> dict[str, Any]:
    """One split row pooled over seeds: tasks summed, each mean weighted by its seed's tasks,
    ``share`` the pooled tasks over ``sum(totals)``."""
    rows = [r for group in groups for r in group]
    n = sum(int(r["tasks"]) for r in rows)
    total = sum(totals)
    out = {**extra, "type": rows[0]["type"], "tasks": n, "share": n / total if total else None}
    for key in SPLIT_MEANS:
        out[key] = sum(r["tasks"] * r[key] for r in rows if r["tasks"]) / n if n else None
    return out


@dataclass(frozen=True)
class _Episode:
    """The two fields of an episode that :func:`~.summary.coordination_stats` reads, from a seed file."""

    conflicts: int
    extra: dict[str, Any]


def pooled_split(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`~agents.evaluation.diagnosis.time_split` of every seed's held-out episodes pooled, rebuilt
    from each seed's split (means weighted by tasks) and episodes (lost claims, coordination)."""
    splits = [d["split"] for d in docs]
    n_rows = len(splits[0]["rows"])
    totals = [int(s["rows"][-1]["tasks"]) for s in splits]  # the "all" row: every finished task
    rows = [_pool_rows([[s["rows"][i]] for s in splits], totals, {}) for i in range(n_rows)]
    by_capacity = None
    if all(s.get("by_capacity") for s in splits):
        types = [r["type"] for r in splits[0]["rows"][:-1]]
        per_type = {t: [r["tasks"] for r in rows if r["type"] == t] for t in types}
        caps = sorted({tuple(e["capacity"]) for s in splits for e in s["by_capacity"]})
        by_capacity = []
        for cap in caps:
            for t in types:
                found = [[e for e in s["by_capacity"] if tuple(e["capacity"]) == cap and e["type"] == t] for s in splits]
                if any(found):
                    by_capacity.append(_pool_rows(found, per_type[t], {"capacity": list(cap)}))
                else:
                    by_capacity.append({"capacity": list(cap), "type": t, "tasks": 0, "share": 0.0,
                                        **{k: None for k in SPLIT_MEANS}})
    episodes = [_Episode(e["conflicts"], {"coordination": e["coordination"]}) for d in docs for e in d["episodes"]]
    return {"rows": rows, "unfinished": sum(int(s["unfinished"]) for s in splits),
            "lost_claims": float(np.mean([e.conflicts for e in episodes])) if episodes else None,
            "coordination": coordination_stats(episodes) if episodes else None,  # type: ignore[arg-type]
            "by_capacity": by_capacity}


def stored_diagnosis(docs: Sequence[Mapping[str, Any]], run: EvaluationRun, baseline: str,
                     label: str = "tapfinger") -> dict[str, Any]:
    """:func:`~agents.evaluation.diagnosis.diagnose` from stored seeds: their pooled split beside
    that of ``baseline`` in ``run`` (the baselines' held-out evaluation)."""
    names = [t.name for t in run.cfg.task_types]
    theirs = time_split(run.results[baseline], names, preemptive=run.preemptive.get(baseline, False),
                        capacities=run.cfg.capacities)
    return {"policy": label, "baseline": baseline, "splits": {label: pooled_split(docs), baseline: theirs}}


def stored_counterfactual(doc: Mapping[str, Any], run: EvaluationRun, baseline: str) -> dict[str, Any] | None:
    """:func:`~agents.evaluation.diagnosis.conflict_counterfactual` from a stored seed: its
    counterfactual compared per workload with the seed as it acted and with ``baseline`` in ``run``."""
    from .results import seed_name

    c = doc.get("counterfactual")
    if c is None:
        return None
    means = _array(c["heldout_mean_jct"])
    return {
        "policy": seed_name(int(doc["seed"])),
        "acted": c["acted"],
        "conflicts": c["conflicts"],
        "mean_jct": c["mean_jct"],
        "lost_claims": c["lost_claims"],
        "vs_trained": paired_from_means(means, heldout_means(doc)),
        "baseline": baseline,
        "vs_baseline": paired_from_means(means, per_seed_means(run.results[baseline])),
    }
