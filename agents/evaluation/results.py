"""Reproduction results: a recipe's training seeds on the held-out range, as generated files.

``benchmarks/reproduce.py`` trains K seeds of a scenario's recipe (``configs/<scenario>.yaml``);
this module evaluates each seed's ``best.pt`` against every baseline on the held-out workloads
:func:`report_seeds` (fixed once, used only to report: validation workloads ``10_000 + j``
choose ``best.pt``) and writes, under the results directory (``docs/results/``):

* ``<scenario>.csv`` -- one row per training seed (:data:`CSV_FIELDS`);
* ``<scenario>.json`` -- the same rows plus the baselines, the validation rival, the verdicts and the command;
* ``<scenario>.md`` -- the table, the mean ± sd over seeds and the verdicts;
* ``<scenario>.png`` -- every seed's validation curve with the baselines' lines;
* ``README.md`` -- one row per scenario that has a ``<scenario>.json``, and one per listed scenario
  that has none yet (:func:`write_index`).

Comparisons are paired by workload seed (every scheduler runs the same workloads): per training
seed, the paired difference of per-workload mean JCTs against the best non-oracle and the best
oracle baseline (lowest held-out mean, :func:`~agents.evaluation.summary.target_check`) with its
95% t-interval; over seeds, the same for the per-workload mean over the training seeds.

Sample efficiency: the env steps until a seed's validation curve first fell below the validation
rival, the best non-oracle baseline on the validation workloads (:func:`validation_rival`).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from agents.baselines.specs import parse_scheduler_spec, split_scheduler_list
from agents.json_files import json_safe, write_json
from agents.policy.modes import CONFLICT_WORDS, PAPER_CONFLICTS
from agents.training.config import options_beyond_the_paper
from agents.training.validation_baselines import VALIDATION_BASELINES, best_baseline
from envs.config import ScenarioConfig

from .reference import CLAIMS, REDUCTION, REFERENCE, SCENARIO_TO_EXPERIMENT, SCHEDULER_TO_ALGORITHM
from .runner import REPORT_SEED_OFFSET, REPORT_SEEDS, EvaluationRun, SchedulerSpec, check_checkpoint, run_evaluation
from .summary import (
    BOUND_RATIO_TARGET,
    paired_from_means,
    per_seed_means,
    scheduler_stats,
    target_check,
    write_rows_csv,
)
from .switching import read_switching, switching_command, switching_sentence
from .tuning import TUNING_DIR

#: the most a seed's held-out mean JCT may spread: sd over training seeds / mean (issue target)
SEED_SPREAD_TARGET = 0.05
#: the issue's CPU budget per training seed: a recipe that needs more says so on its page
CPU_WALL_TARGET_S = 2 * 3600
#: a seed whose best validation point came after this fraction of its env steps was still improving late in its
#: budget (the page names it)
LATE_BEST_FRACTION = 0.9
# VALIDATION_BASELINES (imported above, owned by agents.training.validation_baselines): the validation
# baselines drawn beside the curves; the best of them is the rival a run must beat (:func:`validation_rival`)
#: the rival of result files written when it was fixed (before it was the best validation baseline)
LEGACY_VALIDATION_RIVAL = "optimus"
#: one row per training seed, in this order
CSV_FIELDS = (
    "seed", "env_steps", "wall_s", "device", "env_steps_per_s", "best_env_step", "validation_best",
    "validation_rival", "steps_to_beat_rival", "heldout_mean_jct", "heldout_ci95", "best_non_oracle", "non_oracle_mean_jct",
    "diff_non_oracle", "diff_non_oracle_lo", "diff_non_oracle_hi", "best_oracle", "oracle_mean_jct", "diff_oracle",
    "diff_oracle_lo", "diff_oracle_hi", "bound_ratio",
)


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
    # the critic at the end of the run (result.json's ``critic``: the last updates' means); None before it was recorded
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
    recipe: dict[str, Any] = field(default_factory=dict)  # the resolved train and policy sections
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
        info = check_checkpoint(path, cfg)
        specs.append(SchedulerSpec(name=seed_name(seed), checkpoint=str(path), variant=info["variant"],
                                   trained_on=info["trained_on"], action=info["action"], conflicts=info["conflicts"]))
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
    ci = None
    if finite.size > 1:
        from .summary import mean_halfwidth

        ci = mean_halfwidth(finite)[1]
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


def critic_text(rows: Sequence[SeedRow]) -> str | None:
    """The sentence on the critic's health at the end of each seed's run, None when no row has it."""
    known = [r for r in rows if r.critic_explained_variance is not None]
    if not known:
        return None
    parts = [f"s{r.seed} {r.critic_explained_variance:.2f} (scale {_fmt(r.critic_return_scale, 0)}, "
             f"sd {_fmt(r.critic_return_std, 0)})" for r in known]
    return ("Critic at the end of each run (means over its last updates): explained variance of the returns by "
            "the values, with the return scale the value targets are divided by against the returns' sd: "
            + "; ".join(parts) + ".")


def late_best_text(rows: Sequence[SeedRow]) -> str:
    """The page's sentence on :func:`late_bests`."""
    late = late_bests(rows)
    last = f"the last {1 - LATE_BEST_FRACTION:.0%}"
    if not late:
        return f"Budget: no seed set its best validation point in {last} of its run."
    which = ", ".join(f"s{r.seed} at {r.best_env_step:,} of {r.env_steps:,} env steps" for r in late)
    return (f"Budget: {len(late)} of {len(rows)} seeds set their best validation point in {last} of their runs "
            f"({which}): they were still improving that late in the budget.")


def steps_to_beat(points: Sequence[tuple[int, float]], rival: float | None) -> int | None:
    """The env step of the first validation point below ``rival`` (None: never, or no rival)."""
    if rival is None:
        return None
    for step, value in points:
        if value < rival:
            return int(step)
    return None


# ---------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------
def verdicts(results: RecipeResults) -> list[tuple[str, bool | None, str]]:
    """The issue's targets on this scenario: ``(what, met, evidence)``."""
    o = results.over_seeds
    rows = results.rows
    out: list[tuple[str, bool | None, str]] = []
    vs = o.get("vs_non_oracle")
    if vs is not None:
        hi = vs["ci95"][1]
        out.append((f"mean over seeds beats the best non-oracle baseline ({o['best_non_oracle']})",
                    None if hi is None else bool(hi < 0),
                    f"paired Δ {_fmt(vs['mean_diff'])} [{_fmt(vs['ci95'][0])}, {_fmt(hi)}]"))
    wins = sum(r.beats_non_oracle for r in rows)
    out.append(("every seed's paired 95% interval against it lies below zero", wins == len(rows),
                f"{wins} of {len(rows)} seeds"))
    if o.get("sd_over_mean") is not None:
        out.append((f"seeds agree: sd over seeds ≤ {SEED_SPREAD_TARGET:.0%} of the mean",
                    bool(o["sd_over_mean"] <= SEED_SPREAD_TARGET), f"sd {_fmt(o['sd'], 3)} = {o['sd_over_mean']:.1%}"))
    ratio = o.get("bound_ratio")
    if ratio is not None:
        out.append((f"within {BOUND_RATIO_TARGET}× the bound", bool(ratio <= BOUND_RATIO_TARGET), f"{ratio:.3f}×"))
    beat = [r.steps_to_beat_rival for r in rows]
    rival = results.validation_rival
    out.append((f"every seed beats {rival or 'the best validation baseline'} on validation",
                None if rival is None else all(b is not None for b in beat),
                ", ".join(f"s{r.seed}: " + ("never" if b is None else f"{b:,} steps") for r, b in zip(rows, beat))))
    cpu = [r for r in rows if r.device == "cpu" and r.wall_s is not None and math.isfinite(r.wall_s)]
    if cpu:
        longest = max(cpu, key=lambda r: r.wall_s)
        out.append((f"wall time per seed on the CPU within about {_duration(CPU_WALL_TARGET_S)}",
                    bool(longest.wall_s <= CPU_WALL_TARGET_S), f"longest s{longest.seed}: {_duration(longest.wall_s)}"))
    return out


# ---------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------
def _fmt(v: float | None, digits: int = 2) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


def _signed(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.2f}"


def _interval_text(d: float | None, lo: float | None, hi: float | None) -> str:
    return "n/a" if d is None else f"{_signed(d)} [{_signed(lo)}, {_signed(hi)}]"


def _duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 120 else f"{minutes / 60:.1f} h"


def write_csv(path: Path, rows: Sequence[SeedRow], rival: str | None) -> Path:
    """One row per seed, :data:`CSV_FIELDS`: the row and the validation ``rival`` its steps count to."""
    return write_rows_csv(path, [{**asdict(row), "validation_rival": rival} for row in rows], CSV_FIELDS)


def recipe_text(recipe: Mapping[str, Mapping[str, Any]]) -> str:
    """The page's sentence on what its recipe does beyond the paper's method (labelled options)."""
    beyond = options_beyond_the_paper(recipe)
    if not beyond:
        return "The recipe is the paper's method, with no option beyond it."
    return "The recipe is the paper's method with these options beyond it: " + "; ".join(beyond) + "."


def _rival_text(r: RecipeResults) -> str:
    """The sentence above a page's table that names the validation rival (what "beat rival" counts to)."""
    if r.validation_rival is None:
        return "Beat rival: no validation baseline had a finite mean JCT, so there was no rival to beat."
    mean = r.validation_baselines.get(r.validation_rival)
    best = validation_rival(r.validation_baselines)
    what = ", the best non-oracle baseline there" if best is not None and best[0] == r.validation_rival else ""
    return (f"Validation rival: **{r.validation_rival}** (mean JCT {_fmt(mean, 3)} on the validation workloads{what}); "
            "beat rival: the env step of a seed's first validation point below it.")


def diagnosis_markdown(diagnosis: Mapping[str, Any], counterfactual: Mapping[str, Any] | None) -> list[str]:
    """The page's section on where the time goes: the time split of :func:`~.diagnosis.diagnose`,
    the lost claims and, when there is one, the conflict counterfactual."""
    label, base = diagnosis["policy"], diagnosis["baseline"]
    ours, theirs = diagnosis["splits"][label], diagnosis["splits"][base]
    lines = [
        "## Where the time goes (held out)",
        "",
        f"Finished tasks of every training seed ({label}) and of {base}, the best non-oracle baseline, on the same "
        "held-out episodes: mean wait (arrival to first start) and run (first start to finish) in real steps, and "
        "the CPUs and GPUs a task held (for a preemptive scheduler, averaged over the steps it ran).",
        "",
        f"| task type | share of tasks | wait: {label} / {base} | run: {label} / {base} | CPUs: {label} / {base} "
        f"| GPUs: {label} / {base} |",
        "|---|---|---|---|---|---|",
    ]
    for a, b in zip(ours["rows"], theirs["rows"]):
        share = "" if a["share"] is None else f"{a['share']:.0%}"
        lines.append(f"| {a['type']} | {share} | {_fmt(a['wait'])} / {_fmt(b['wait'])} | {_fmt(a['run'])} / "
                     f"{_fmt(b['run'])} | {_fmt(a['cpu'], 1)} / {_fmt(b['cpu'], 1)} | {_fmt(a['gpu'], 1)} / "
                     f"{_fmt(b['gpu'], 1)} |")
    mine, theirs_all = ours["rows"][-1], theirs["rows"][-1]  # the "all" rows
    if None not in (mine["jct"], theirs_all["jct"]):
        gap = {k: _signed(mine[k] - theirs_all[k]) for k in ("jct", "wait", "run")}
        lines += ["", f"Mean JCT {label} − {base}: {gap['jct']} = wait {gap['wait']} + run {gap['run']} "
                      "(over every finished task)."]
    if ours.get("by_capacity") and theirs.get("by_capacity"):
        lines += ["", *capacity_markdown(label, base, ours["by_capacity"], theirs["by_capacity"])]
    lines += ["", f"Unfinished tasks: {label} {ours['unfinished']}, {base} {theirs['unfinished']}. Lost claims per "
                  f"episode ({label}: claims that lost a Bayes conflict, the cluster placing nothing that round): "
                  f"{_fmt(ours['lost_claims'], 1)}."]
    if ours.get("coordination"):
        lines += ["", coordination_sentence(label, ours["coordination"])]
    if counterfactual is not None:
        lines += ["", counterfactual_sentence(counterfactual)]
    return lines


def capacity_markdown(label: str, base: str, ours: Sequence[Mapping[str, Any]],
                      theirs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's table of :func:`~.diagnosis.capacity_split`: per cluster size and task type, where the
    type's tasks started and how long they waited and ran there (clusters of more than one size only)."""
    lines = [
        "By cluster size: the share of each type's finished tasks that started on clusters of that size, and "
        "their mean wait, run and GPUs there.",
        "",
        f"| cluster (CPUs, GPUs) | task type | share of the type: {label} / {base} | wait: {label} / {base} "
        f"| run: {label} / {base} | GPUs: {label} / {base} |",
        "|---|---|---|---|---|---|",
    ]
    theirs_at = {(tuple(b["capacity"]), b["type"]): b for b in theirs}
    for a in ours:
        b = theirs_at.get((tuple(a["capacity"]), a["type"]), {})
        share = " / ".join("–" if r.get("share") is None else f"{r['share']:.0%}" for r in (a, b))
        lines.append(f"| ({a['capacity'][0]}, {a['capacity'][1]}) | {a['type']} | {share} | "
                     f"{_fmt(a['wait'])} / {_fmt(b.get('wait'))} | {_fmt(a['run'])} / {_fmt(b.get('run'))} | "
                     f"{_fmt(a['gpu'], 1)} / {_fmt(b.get('gpu'), 1)} |")
    return lines


def counterfactual_sentence(c: Mapping[str, Any]) -> str:
    """The page's sentence on :func:`~.diagnosis.conflict_counterfactual`: seed 0's weights under the
    other conflict mode (``acted``, absent in files written before it existed: the Bayes rule)."""
    vs_t, vs_b = c["vs_trained"], c["vs_baseline"]
    against = f"against {c['baseline']} {_interval_text(vs_b['mean_diff'], *vs_b['ci95'])}."
    acted = c.get("acted", PAPER_CONFLICTS)
    if acted == PAPER_CONFLICTS:
        return (f"Without lost claims: {c['policy']}'s weights, acting with conflicts resolved so that no claim is "
                f"lost (`{c['conflicts']}`: {CONFLICT_WORDS[c['conflicts']]}; an option beyond the paper, used here "
                "only to measure), "
                f"score mean JCT {_fmt(c['mean_jct'])} with {_fmt(c['lost_claims'], 1)} lost claims per episode. "
                "Paired Δ against the same weights under the Bayes rule "
                f"{_interval_text(vs_t['mean_diff'], *vs_t['ci95'])} (below zero: what the lost claims cost, "
                "net of who now gets a contested task), " + against)
    return (f"Under the paper's conflict rule: {c['policy']}'s weights, its agents choosing at once with conflicts "
            f"resolved by `{c['conflicts']}` (a claim that loses places nothing that round) instead of in turn "
            f"(`{acted}`), score mean JCT {_fmt(c['mean_jct'])} with {_fmt(c['lost_claims'], 1)} lost claims per "
            f"episode. Paired Δ against the same weights acting by `{acted}` "
            f"{_interval_text(vs_t['mean_diff'], *vs_t['ci95'])} (above zero: what choosing in turn buys), " + against)


def coordination_sentence(label: str, c: Mapping[str, Any]) -> str:
    """The page's line on the agents' coordination (:func:`~.summary.coordination_stats`)."""
    way = "n/a" if c["halfway"] is None else f"{100 * c['halfway']:.0f}%"
    return (f"Coordination ({label}, per decision where at least two agents could start a task): "
            f"{_fmt(c['distinct'])} distinct tasks claimed, against {_fmt(c['uniform'])} if each agent chose uniformly "
            f"among its feasible tasks and {_fmt(c['matching'])} for the maximum matching of agents to tasks ({way} of "
            f"the way from uniform to the matching). Real steps that end while a cluster that placed nothing was "
            f"offered a task no cluster started: {_percent(c['idle_share'])}.")


def _percent(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{100 * v:.1f}%"


def paper_markdown(results: RecipeResults) -> list[str]:
    """The paper's figure for the scenario (:mod:`.reference`) beside ours: each scheduler's mean JCT and
    TapFinger's reduction against it, paper and ours, and the paper's claim; nothing for a scenario the
    paper has no figure of."""
    if results.scenario not in SCENARIO_TO_EXPERIMENT:
        return []
    exp, figure = SCENARIO_TO_EXPERIMENT[results.scenario]
    ref, paper_red = REFERENCE[exp], REDUCTION.get(exp, {})
    ours_tf = results.over_seeds.get("mean_jct")
    lines = [f"**The paper's {figure}** (its stored run `{exp}`) beside ours. Paper: the authors' stored result of "
             "that figure (one episode of their code, seed 42; `agents/evaluation/reference.py`). Ours: the held-out "
             f"workloads, TapFinger the mean over the {len(results.rows)} seed(s). The two simulators' JCTs differ in "
             "scale; TapFinger's reduction, 1 − JCT(TapFinger) / JCT(baseline), is the figure to compare.", "",
             "| scheduler | mean JCT, paper | mean JCT, ours | TapFinger's reduction, paper | TapFinger's reduction, ours |",
             "|---|---|---|---|---|"]
    for name, alg in SCHEDULER_TO_ALGORITHM.items():
        if alg not in ref:
            continue
        ours = ours_tf if alg == "TapFinger" else (results.baselines.get(name) or {}).get("mean_jct")
        paper = paper_red.get(alg, (None,))[0]
        red = 1 - ours_tf / ours if alg != "TapFinger" and ours_tf is not None and ours else None
        cells = ("–", "–") if alg == "TapFinger" else (_percent(paper), _percent(red))
        lines.append(f"| {name} | {_fmt(ref[alg][0])} | {_fmt(ours)} | {cells[0]} | {cells[1]} |")
    if CLAIMS.get(exp):
        lines += ["", f"The paper's claim: {CLAIMS[exp]}."]
    return lines


def scenario_markdown(results: RecipeResults, tuning_page: str | None = None, switching: str | None = None) -> str:
    """``<scenario>.md``: the command, the per-seed table, the mean over seeds, the baselines (and
    ``switching``, the sentence on why tiresias is slow, :mod:`.switching`, when measured), the
    verdicts, and a link to ``tuning_page`` (the recipe's changes measured on validation) when there is one."""
    r = results
    seeds = r.heldout_seeds
    lines = [
        f"# {r.scenario}: the recipe over {len(r.rows)} training seed(s)",
        "",
        "Generated by",
        "",
        f"    {r.command}",
        "",
        f"Held-out workloads {seeds[0]}..{seeds[-1]} ({len(seeds)} seeds, only reported); each seed's `best.pt` was "
        f"chosen on the validation workloads {r.validation_seeds[0]}..{r.validation_seeds[-1]}. Mean JCT in real "
        "steps; paired Δ = policy − baseline per workload, mean and 95% t-interval (below zero: the policy is faster).",
        "",
        recipe_text(r.recipe),
        "",
        _rival_text(r),
        "",
        "| seed | env steps | wall time | device | env steps/s | best at | validation best | beat rival (validation) "
        "| held-out mean JCT | vs best non-oracle | vs best oracle | × bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r.rows:
        beat = "never" if row.steps_to_beat_rival is None else f"{row.steps_to_beat_rival:,}"
        lines.append(
            f"| {row.seed} | {row.env_steps:,} | {_duration(row.wall_s)} | {row.device} | {_fmt(row.env_steps_per_s, 0)} "
            f"| {'n/a' if row.best_env_step is None else f'{row.best_env_step:,}'} | {_fmt(row.validation_best, 3)} "
            f"| {beat} | {_fmt(row.heldout_mean_jct)} ± {_fmt(row.heldout_ci95)} "
            f"| {row.best_non_oracle} {_interval_text(row.diff_non_oracle, row.diff_non_oracle_lo, row.diff_non_oracle_hi)} "
            f"| {row.best_oracle} {_interval_text(row.diff_oracle, row.diff_oracle_lo, row.diff_oracle_hi)} "
            f"| {_fmt(row.bound_ratio, 3)} |")
    o = r.over_seeds
    sd = "n/a" if o.get("sd") is None else f"{o['sd']:.3f}"
    lines += ["", f"**Over seeds:** mean {_fmt(o.get('mean_jct'), 3)}, sd {sd}."]
    for key, name_key in (("vs_non_oracle", "best_non_oracle"), ("vs_oracle", "best_oracle")):
        vs = o.get(key)
        if vs is not None:
            lines.append(f"Per-workload mean over seeds against {o[name_key]}: paired Δ "
                         f"{_interval_text(vs['mean_diff'], *vs['ci95'])}.")
    paper = paper_markdown(r)
    critic = critic_text(r.rows)
    lines += ["", *paper, *([""] if paper else []), late_best_text(r.rows), *(["", critic] if critic else [])]
    lines += ["", "| target | met | evidence |", "|---|---|---|"]
    for what, met, evidence in verdicts(r):
        lines.append(f"| {what} | {'n/a' if met is None else ('**yes**' if met else 'no')} | {evidence} |")
    lines += ["", f"Baselines on the same held-out workloads (bound {r.bound:.3f}):", "",
              "| scheduler | mean JCT ± 95% CI |", "|---|---|"]
    for name, b in r.baselines.items():
        tag = " (oracle)" if b["oracle"] else ""
        ci = b["ci95"]
        half = None if ci[0] is None else (ci[1] - ci[0]) / 2
        lines.append(f"| {name}{tag} | {_fmt(b['mean_jct'])} ± {_fmt(half)} |")
    if switching:
        lines += ["", switching]
    if r.diagnosis:
        lines += ["", *diagnosis_markdown(r.diagnosis, r.conflict_counterfactual)]
    vb = ", ".join(f"{k} {_fmt(v, 3)}" for k, v in r.validation_baselines.items())
    lines += ["", f"Validation curves: [{r.scenario}.png]({r.scenario}.png) (baselines on the validation workloads: {vb})."]
    if tuning_page:
        lines += ["", f"Changes to this recipe, measured on the validation workloads across seeds: [{tuning_page}]({tuning_page})."]
    lines.append("")
    return "\n".join(lines)


def write_scenario_results(out: Path, results: RecipeResults) -> list[Path]:
    """``<scenario>.csv``, ``.json`` and ``.md`` under ``out`` (the PNG is drawn by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / results.scenario
    paths = [write_csv(base.with_suffix(".csv"), results.rows, results.validation_rival)]
    doc = asdict(results)
    paths.append(write_json(base.with_suffix(".json"), json_safe(doc)))
    paths.append(write_scenario_page(out, results))
    return paths


def write_scenario_page(out: Path, results: RecipeResults) -> Path:
    """``<scenario>.md`` under ``out``, linking the tuning page and saying the switching measurements
    (:mod:`.switching`) when there are some."""
    md = out / f"{results.scenario}.md"
    tuning = out / TUNING_DIR / f"{results.scenario}.md"
    switching = read_switching(out, results.scenario)
    md.write_text(scenario_markdown(results, f"{TUNING_DIR}/{tuning.name}" if tuning.is_file() else None,
                                    switching_sentence(switching, switching_command(results.scenario))
                                    if switching else None))
    return md


def read_results(path: Path) -> RecipeResults:
    """A ``<scenario>.json`` written by :func:`write_scenario_results`. One written before the rival
    was chosen (rows with ``steps_to_beat_optimus``, no ``validation_rival``) reads with its rival,
    :data:`LEGACY_VALIDATION_RIVAL`."""
    import json

    doc = json.loads(path.read_text())
    rows = []
    for row in doc["rows"]:
        if "steps_to_beat_optimus" in row:
            row["steps_to_beat_rival"] = row.pop("steps_to_beat_optimus")
        rows.append(SeedRow(**row))
    doc["rows"] = rows
    doc.setdefault("validation_rival", LEGACY_VALIDATION_RIVAL)
    return RecipeResults(**doc)


#: the columns of the results index, one row per scenario
INDEX_COLUMNS = ("scenario", "seeds", "tapfinger mean ± sd", "best non-oracle", "paired Δ", "seeds below zero",
                 "best oracle", "paired Δ", "× bound", "wall time per seed", "device", "targets met")


def index_markdown(entries: Sequence[RecipeResults], command: str, not_run: Sequence[str] = ()) -> str:
    """``README.md`` of the results directory: one row per scenario with results, then one per
    scenario of ``not_run`` (no results yet) with the command that makes them."""
    lines = [
        "# Results: the paper's method, trained from each scenario's recipe",
        "",
        "Each row is written by `benchmarks/reproduce.py` (the command heading each scenario's page; this index by",
        "",
        f"    {command}",
        "",
        "). Held-out workloads only report; each seed's `best.pt` was chosen on validation workloads. "
        "Paired Δ: the per-workload mean over training seeds minus the baseline, mean and 95% t-interval. "
        "Why a scenario stands where it does: the section \"Where the time goes\" of its page (the gap split into "
        "wait and run, and what the claims lost to Bayes conflicts cost).",
        "",
        "| " + " | ".join(INDEX_COLUMNS) + " |",
        "|" + "---|" * len(INDEX_COLUMNS),
    ]
    for r in entries:
        o = r.over_seeds
        sd = "" if o.get("sd") is None else f" ± {o['sd']:.2f}"
        on = o.get("vs_non_oracle") or {"mean_diff": None, "ci95": [None, None]}
        oo = o.get("vs_oracle") or {"mean_diff": None, "ci95": [None, None]}
        on_jct = r.baselines.get(o.get("best_non_oracle") or "", {}).get("mean_jct")
        oo_jct = r.baselines.get(o.get("best_oracle") or "", {}).get("mean_jct")
        wins = sum(row.beats_non_oracle for row in r.rows)
        walls = [row.wall_s for row in r.rows if row.wall_s is not None and math.isfinite(row.wall_s)]
        devices = sorted({row.device for row in r.rows})
        checks = verdicts(r)
        lines.append(
            f"| [{r.scenario}]({r.scenario}.md) | {len(r.rows)} | {_fmt(o.get('mean_jct'))}{sd} "
            f"| {o.get('best_non_oracle')} {_fmt(on_jct)} | {_interval_text(on['mean_diff'], *on['ci95'])} "
            f"| {wins}/{len(r.rows)} | {o.get('best_oracle')} {_fmt(oo_jct)} "
            f"| {_interval_text(oo['mean_diff'], *oo['ci95'])} | {_fmt(o.get('bound_ratio'), 3)} "
            f"| {_duration(float(np.mean(walls)) if walls else None)} | {', '.join(devices)} "
            f"| {sum(met is True for _, met, _ in checks)} of {len(checks)} |")
    for name in not_run:
        note = f"not run yet: `python benchmarks/reproduce.py --config {name} --seeds 1`"
        lines.append(f"| {name} | 0 | {note} |" + " |" * (len(INDEX_COLUMNS) - 3))  # the other cells empty
    lines.append("")
    return "\n".join(lines)


def read_all(out: Path, order: Sequence[str] = ()) -> list[RecipeResults]:
    """Every ``<scenario>.json`` in ``out`` (scenarios in ``order`` first, then by name)."""
    found = {p.stem: read_results(p) for p in sorted(out.glob("*.json")) if not p.stem.startswith("ablation")}
    names = [n for n in order if n in found] + [n for n in sorted(found) if n not in order]
    return [found[n] for n in names]


def write_index(out: Path, command: str, order: Sequence[str] = ()) -> Path:
    """``README.md`` over every ``<scenario>.json`` in ``out`` (scenarios in ``order`` first); a
    scenario of ``order`` without results gets a row that says so."""
    path = out / "README.md"
    entries = read_all(out, order)
    done = {r.scenario for r in entries}
    path.write_text(index_markdown(entries, command, [n for n in order if n not in done]))
    return path


#: the markers of the generated results table in the top-level README.md
README_BEGIN, README_END = "<!-- results:begin -->", "<!-- results:end -->"


def readme_table(index: str) -> str:
    """The table lines of a results ``README.md`` as the top-level README shows them: links to a
    scenario's page rewritten relative to it (``docs/results/<scenario>.md``)."""
    table = "\n".join(line for line in index.splitlines() if line.startswith("|"))
    return re.sub(r"\]\(([\w.-]+\.md)\)", r"](docs/results/\1)", table)


def update_readme(readme: Path, index: str) -> bool:
    """Put :func:`readme_table` of ``index`` between the results markers of ``readme``; False without markers."""
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        return False
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_BEGIN}\n{readme_table(index)}\n{README_END}{tail}")
    return True


def file_sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def checkpoint_index(checkpoints: Path, out: Path, order: Sequence[str] = ()) -> str:
    """``checkpoints/README.md``: one row per shipped file, from the results of the recipe whose
    seed 0 it is (matched by content); a file that is no such seed says so."""
    by_sha = {r.seed0_sha256: r for r in read_all(out, order) if r.seed0_sha256}
    lines = [
        "# Shipped checkpoints",
        "",
        "Each file is seed 0 of its scenario's recipe, copied by `benchmarks/reproduce.py --ship checkpoints` "
        "(this table is written by the same command). Retrain one with the command shown; "
        "`python train.py --config <scenario> --seed 0` is its training run. Held out: workloads "
        "500000..500029, mean JCT of this file and the mean over the recipe's training seeds.",
        "",
        "| file | command | budget | wall time, device (this seed) | held out: this file | mean over seeds |",
        "|---|---|---|---|---|---|",
    ]
    names = [n for n in order if (checkpoints / f"{n}.pt").is_file()]
    names += sorted(p.stem for p in checkpoints.glob("*.pt") if p.stem not in names)
    for name in names:
        path = checkpoints / f"{name}.pt"
        r = by_sha.get(file_sha256(path))
        if r is None:
            lines.append(f"| `{path.name}` | not a seed of the current recipe: trained before the recipes existed "
                         f"(a chain of hand-run rounds); `reproduce.py --config {name} --ship checkpoints` replaces it "
                         "| | | | |")
            continue
        row = next(x for x in r.rows if x.seed == 0)
        o = r.over_seeds
        sd = "" if o.get("sd") is None else f" ± {o['sd']:.2f}"
        lines.append(f"| `{path.name}` | `{r.command}` | {row.env_steps:,} env steps | {_duration(row.wall_s)}, "
                     f"{row.device} | {_fmt(row.heldout_mean_jct)} | {_fmt(o.get('mean_jct'))}{sd} "
                     f"({len(r.rows)} seed{'s' if len(r.rows) > 1 else ''}) |")
    lines.append("")
    return "\n".join(lines)
