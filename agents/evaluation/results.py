"""Reproduction results: what a recipe's training seeds give on the held-out range, as data.

``benchmarks/reproduce.py`` trains K seeds of a scenario's recipe (``configs/<scenario>.yaml``);
this module evaluates each seed's ``best.pt`` against every baseline on the held-out workloads
:func:`report_seeds` (fixed once, used only to report: validation workloads ``10_000 + j``
choose ``best.pt``) and holds what the pages show: one :class:`SeedRow` per training seed, and the
recipe's :class:`RecipeResults` (the ``<scenario>.json`` file, :func:`read_results`). The pages
themselves are written by :mod:`.results_page` (``<scenario>.{csv,json,md}``) and
:mod:`.results_index` (the results index, the top-level README's table, the checkpoint index).

Comparisons are paired by workload seed (every scheduler runs the same workloads): per training
seed, the paired difference of per-workload mean JCTs against the best non-oracle and the best
oracle baseline (lowest held-out mean, :func:`~agents.evaluation.summary.target_check`) with its
95% t-interval; over seeds, the same for the per-workload mean over the training seeds.

Sample efficiency: the env steps until a seed's validation curve first fell below the validation
rival, the best non-oracle baseline on the validation workloads (:func:`validation_rival`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agents.baselines.specs import parse_scheduler_spec, split_scheduler_list
from agents.training.validation_baselines import VALIDATION_BASELINES, best_baseline
from envs.config import ScenarioConfig

from .reference import REDUCTION, REFERENCE, SCENARIO_TO_EXPERIMENT, SCHEDULER_TO_ALGORITHM
from .runner import REPORT_SEED_OFFSET, REPORT_SEEDS, EvaluationRun, SchedulerSpec, checkpoint_spec, run_evaluation
from .summary import mean_halfwidth, paired_from_means, per_seed_means, scheduler_stats, target_check

#: the most a seed's held-out mean JCT may spread: sd over training seeds / mean (a target on every page)
SEED_SPREAD_TARGET = 0.05
#: the CPU wall time a training seed should need at most: a recipe that needs more says so on its page
CPU_WALL_TARGET_S = 2 * 3600
#: a seed whose best validation point came after this fraction of its env steps was still improving late in its
#: budget (the page names it)
LATE_BEST_FRACTION = 0.9
#: the validation rival of a result file that names none: its rows count the env steps to beat optimus
#: (field ``steps_to_beat_optimus``), read as ``steps_to_beat_rival`` (:func:`read_results`)
UNNAMED_FILE_RIVAL = "optimus"


def report_seeds(count: int = REPORT_SEEDS) -> list[int]:
    """The first ``count`` workload seeds of the held-out range (all of it by default)."""
    if not 1 <= count <= REPORT_SEEDS:
        raise ValueError(f"the held-out range has {REPORT_SEEDS} seeds; asked for {count}")
    return list(range(REPORT_SEED_OFFSET, REPORT_SEED_OFFSET + count))


@dataclass
class SeedRow:
    """What one training seed of a recipe gave (the CSV row)."""

    seed: int
    env_steps: int
    wall_s: float
    device: str
    env_steps_per_s: float | None
    best_env_step: int | None
    validation_best: float | None
    steps_to_beat_rival: int | None  # env steps until the validation curve fell below the validation rival
    heldout_mean_jct: float | None
    heldout_ci95: float | None
    best_non_oracle: str | None
    non_oracle_mean_jct: float | None
    diff_non_oracle: float | None
    diff_non_oracle_lo: float | None
    diff_non_oracle_hi: float | None
    best_oracle: str | None
    oracle_mean_jct: float | None
    diff_oracle: float | None
    diff_oracle_lo: float | None
    diff_oracle_hi: float | None
    bound_ratio: float | None
    # the critic at the end of the run (result.json's ``critic``: the last updates' means); None when it has none
    critic_explained_variance: float | None = None
    critic_return_scale: float | None = None
    critic_return_std: float | None = None

    @property
    def beats_non_oracle(self) -> bool:
        """The paired 95% interval against the best non-oracle baseline lies below zero."""
        return self.diff_non_oracle_hi is not None and self.diff_non_oracle_hi < 0.0


@dataclass
class RecipeResults:
    """Everything ``<scenario>.json`` holds."""

    scenario: str
    command: str
    heldout_seeds: list[int]
    validation_seeds: list[int]
    rows: list[SeedRow]
    baselines: dict[str, dict[str, Any]]  # held out: mean_jct, ci95, oracle
    bound: float
    validation_baselines: dict[str, float | None]
    validation_rival: str | None = None  # the baseline of ``validation_baselines`` the seeds had to beat
    over_seeds: dict[str, Any] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)  # the resolved train and policy sections, and the learned reward (scenario.reward)
    seed0_sha256: str | None = None  # of seed 0's best.pt: the file ``--ship`` copies to checkpoints/
    diagnosis: dict[str, Any] = field(default_factory=dict)  # :func:`~.diagnosis.diagnose` (held out)
    conflict_counterfactual: dict[str, Any] | None = None  # :func:`~.diagnosis.conflict_counterfactual`


# ---------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------
def seed_name(seed: int) -> str:
    """A training seed's scheduler name in the evaluation (``tapfinger-s0``)."""
    return f"tapfinger-s{seed}"


def evaluate_seeds(
    cfg: ScenarioConfig, checkpoints: Mapping[int, Path], baselines: Sequence[SchedulerSpec], seeds: Sequence[int],
    workers: int = 1, device: str = "cpu", progress: bool = False,
) -> EvaluationRun:
    """Every baseline and every training seed's checkpoint on the same workload ``seeds``."""
    specs = list(baselines)
    for seed, path in checkpoints.items():
        specs.append(checkpoint_spec(seed_name(seed), path, cfg))
    return run_evaluation(cfg, specs, seeds, workers=workers, device=device, progress=progress)


def mean_bound(run: EvaluationRun) -> float:
    """The pooled mean of every task's fastest possible JCT (the ``bound`` row)."""
    return float(np.concatenate(run.bound).astype(np.float64).mean())


def _interval(paired: Mapping[str, Any] | None) -> tuple[float | None, float | None, float | None]:
    if paired is None:
        return None, None, None
    lo, hi = paired["ci95"]
    return paired["mean_diff"], lo, hi


def policy_verdict(run: EvaluationRun, name: str, policy_means: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`~agents.evaluation.summary.target_check` of one policy (``name``, or the per-workload
    means ``policy_means`` under that name) against the run's baselines, with its paired entries."""
    baselines = [s for s in run.specs if not s.is_policy]
    stats = {s.name: scheduler_stats(run.results[s.name]) for s in baselines}
    means = per_seed_means(run.results[name]) if policy_means is None else policy_means
    finite = means[np.isfinite(means)]
    stats[name] = {"mean_jct": float(finite.mean()) if finite.size else None}
    paired = {s.name: paired_from_means(means, per_seed_means(run.results[s.name])) for s in baselines}
    oracle = [s.name for s in baselines if s.is_oracle]
    target = target_check(stats, paired, oracle, name, mean_bound(run))
    return {"target": target, "paired": paired, "stats": stats}


def seed_row(run: EvaluationRun, seed: int, training: Mapping[str, Any], validation: Mapping[str, Any],
             means: np.ndarray | None = None) -> SeedRow:
    """The CSV row of training seed ``seed``: its run's ``result.json`` (``training``), its
    validation curve summary (``validation``) and its held-out comparison in ``run``, from its
    per-workload mean JCTs there or, given, ``means`` (stored, :mod:`.seed_store`)."""
    name = seed_name(seed)
    means = per_seed_means(run.results[name]) if means is None else means
    verdict = policy_verdict(run, name, means)
    target, paired, stats = verdict["target"], verdict["paired"], verdict["stats"]
    finite = means[np.isfinite(means)]
    ci = mean_halfwidth(finite)[1] if finite.size > 1 else None
    on, oo = target["best_non_oracle"], target["best_oracle"]
    critic = training.get("critic") or {}
    d_on, lo_on, hi_on = _interval(paired.get(on) if on else None)
    d_or, lo_or, hi_or = _interval(paired.get(oo) if oo else None)
    return SeedRow(
        seed=seed,
        env_steps=int(training.get("env_steps", 0)),
        wall_s=float(training.get("wall_s", math.nan)),
        device=str(training.get("device", "")),
        env_steps_per_s=training.get("env_steps_per_s"),
        best_env_step=training.get("best_env_step"),
        validation_best=validation.get("best"),
        steps_to_beat_rival=validation.get("steps_to_beat"),
        heldout_mean_jct=stats[name]["mean_jct"],
        heldout_ci95=ci,
        best_non_oracle=on,
        non_oracle_mean_jct=stats[on]["mean_jct"] if on else None,
        diff_non_oracle=d_on, diff_non_oracle_lo=lo_on, diff_non_oracle_hi=hi_on,
        best_oracle=oo,
        oracle_mean_jct=stats[oo]["mean_jct"] if oo else None,
        diff_oracle=d_or, diff_oracle_lo=lo_or, diff_oracle_hi=hi_or,
        bound_ratio=target["bound_ratio"],
        critic_explained_variance=critic.get("explained_variance"),
        critic_return_scale=critic.get("return_scale"),
        critic_return_std=critic.get("return_std"),
    )


def over_seeds(run: EvaluationRun, seeds: Sequence[int], means: Mapping[int, np.ndarray] | None = None) -> dict[str, Any]:
    """The recipe over its training seeds: mean and sd of the seeds' held-out mean JCTs, and the
    paired comparison of the per-workload mean over seeds with the best baselines (each seed's
    per-workload means from ``run`` or, given, ``means``, by seed)."""
    per_seed = np.array([per_seed_means(run.results[seed_name(s)]) if means is None else means[s]
                         for s in seeds])  # (seeds, workloads)
    jcts = np.nanmean(per_seed, axis=1)
    mean = float(np.mean(jcts))
    sd = float(np.std(jcts, ddof=1)) if len(jcts) > 1 else None
    verdict = policy_verdict(run, "tapfinger (mean over seeds)", np.nanmean(per_seed, axis=0))
    target = verdict["target"]
    on, oo = target["best_non_oracle"], target["best_oracle"]
    return {
        "seeds": list(seeds),
        "mean_jct": mean,
        "sd": sd,
        "sd_over_mean": None if sd is None else sd / mean,
        "best_non_oracle": on,
        "vs_non_oracle": verdict["paired"].get(on) if on else None,
        "best_oracle": oo,
        "vs_oracle": verdict["paired"].get(oo) if oo else None,
        "bound_ratio": target["bound_ratio"],
    }


def baseline_table(run: EvaluationRun) -> dict[str, dict[str, Any]]:
    """Held-out mean JCT and 95% interval of every baseline (lowest first)."""
    out = {}
    for spec in run.specs:
        if spec.is_policy:
            continue
        stats = scheduler_stats(run.results[spec.name])
        out[spec.name] = {"mean_jct": stats["mean_jct"], "ci95": stats["ci95"], "oracle": spec.is_oracle}
    return dict(sorted(out.items(), key=lambda kv: math.inf if kv[1]["mean_jct"] is None else kv[1]["mean_jct"]))


def validation_rival(vmeans: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The rival a run must beat on validation (the sample-efficiency figure: env steps until it did):
    the best non-oracle baseline of :data:`VALIDATION_BASELINES` by its mean JCT on the validation
    workloads ``vmeans`` (name -> mean), as ``(name, mean)``. Ties go to the first listed; a baseline
    missing from ``vmeans`` or with a non-finite mean is ignored; None when none is left
    (:func:`~agents.training.validation_baselines.best_baseline`)."""
    names = split_scheduler_list(VALIDATION_BASELINES)
    return best_baseline(vmeans, ((name, *parse_scheduler_spec(name)) for name in names))


def late_bests(rows: Sequence[SeedRow]) -> list[SeedRow]:
    """The seeds whose best validation point came after :data:`LATE_BEST_FRACTION` of their env steps:
    still improving that late in their budget."""
    return [r for r in rows if r.best_env_step is not None and r.env_steps > 0
            and r.best_env_step > LATE_BEST_FRACTION * r.env_steps]


def steps_to_beat(points: Sequence[tuple[int, float]], rival: float | None) -> int | None:
    """The env step of the first validation point below ``rival`` (None: never, or no rival)."""
    if rival is None:
        return None
    for step, value in points:
        if value < rival:
            return int(step)
    return None


def paper_comparison(results: RecipeResults) -> list[dict[str, Any]]:
    """The paper's figure for the scenario (:mod:`.reference`) beside ours, one entry per scheduler it
    shows: ``name``, the paper's and our mean JCT (``paper``, ``ours``; TapFinger's: the mean over seeds)
    and TapFinger's reduction against it, 1 - JCT(TapFinger) / JCT(scheduler), the paper's and ours
    (``paper_reduction``, ``reduction``; None for TapFinger itself). Empty for a scenario the paper has no
    figure of."""
    if results.scenario not in SCENARIO_TO_EXPERIMENT:
        return []
    exp, _ = SCENARIO_TO_EXPERIMENT[results.scenario]
    ref, paper_red = REFERENCE[exp], REDUCTION.get(exp, {})
    ours_tf = results.over_seeds.get("mean_jct")
    out = []
    for name, alg in SCHEDULER_TO_ALGORITHM.items():
        if alg not in ref:
            continue
        itself = alg == "TapFinger"
        ours = ours_tf if itself else (results.baselines.get(name) or {}).get("mean_jct")
        out.append({"name": name, "paper": ref[alg][0], "ours": ours,
                    "paper_reduction": None if itself else paper_red.get(alg, (None,))[0],
                    "reduction": 1 - ours_tf / ours if not itself and ours_tf is not None and ours else None})
    return out


def read_results(path: Path) -> RecipeResults:
    """A ``<scenario>.json`` written by :func:`~.results_page.write_scenario_results`. A file that names no
    validation rival (rows with ``steps_to_beat_optimus``) reads with :data:`UNNAMED_FILE_RIVAL`."""
    return _results(json.loads(path.read_text()))


def _results(doc: dict[str, Any]) -> RecipeResults:
    rows = []
    for row in doc["rows"]:
        if "steps_to_beat_optimus" in row:
            row["steps_to_beat_rival"] = row.pop("steps_to_beat_optimus")
        rows.append(SeedRow(**row))
    doc["rows"] = rows
    doc.setdefault("validation_rival", UNNAMED_FILE_RIVAL)
    return RecipeResults(**doc)


def read_all(out: Path, order: Sequence[str] = ()) -> list[RecipeResults]:
    """Every ``<scenario>.json`` in ``out`` (scenarios in ``order`` first, then by name): the JSON files
    that name their own stem as their scenario (the directory's other pages, such as the ablations and
    ``generalist.json``, do not)."""
    docs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
    found = {stem: _results(doc) for stem, doc in docs.items() if isinstance(doc, dict) and doc.get("scenario") == stem}
    names = [n for n in order if n in found] + [n for n in sorted(found) if n not in order]
    return [found[n] for n in names]


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
