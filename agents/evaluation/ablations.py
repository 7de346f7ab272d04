"""Ablations: each a scenario's recipe with one change, trained from scratch in its own mode.

:data:`ABLATIONS` is the one list of variants (name -> the ``key=value`` overrides that change the
recipe, and how the trained policy acts when evaluated). ``benchmarks/ablations.py`` trains K
seeds of every variant (:mod:`.seed_runs`), runs every seed's ``best.pt`` with the baselines on
the held-out workloads (:func:`~agents.evaluation.results.report_seeds`), and writes
``ablations.md`` and ``ablations.csv`` (one row per scenario x variant x seed; :mod:`.ablations_page`)
and one validation curve PNG per scenario (every variant's mean over seeds with its min-max band,
:func:`plot_variants`).

Per variant: the mean ± sd over seeds of the held-out mean JCT, the paired difference against the
recipe (per workload, the mean over seeds of the variant minus that of the recipe, with its 95%
t-interval), the env steps its seeds needed to beat the validation rival (the best non-oracle baseline on
the validation workloads, :func:`~agents.evaluation.results.validation_rival`), its wall time and device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .formatting import counted
from .runner import EvaluationRun
from .summary import paired_from_means, per_seed_means

#: the reference variant: the recipe itself
RECIPE = "recipe"


@dataclass(frozen=True)
class Ablation:
    """One change to the recipe: ``overrides`` for ``train.py``, ``floor`` for evaluation
    (where the start floor comes from: ``scenario``, the true durations; ``online``, the policy's own
    estimates)."""

    name: str
    description: str
    overrides: tuple[str, ...] = ()
    floor: str | None = None


#: the start floor's factor in the floor variants (a task is feasible for the policy only if it would
#: finish within this many times its fastest duration with the free resources)
FLOOR_FACTOR = 3
#: the lost-claim penalty of the claim-penalty variant (``train.lost_claim_penalty``): about what a lost
#: claim costs, in task-steps, on synthetic-6's validation workloads (the Bayes-to-room gap over its lost claims)
CLAIM_PENALTY = 4
#: the curve plot's y axis (:func:`curve_ylim`) starts at this multiple of the best baseline's validation mean JCT
CURVE_FLOOR = 0.8
#: ... and ends at this multiple of the worst baseline's, or higher (:data:`CURVE_HEADROOM`)
CURVE_CEILING = 1.6
#: ... but at least at this multiple of the highest of the variants' last mean points, so every curve's end shows
CURVE_HEADROOM = 1.1

ABLATIONS: dict[str, Ablation] = {a.name: a for a in (
    Ablation(RECIPE, "the recipe: the paper's method (HAN, pointer, Bayes conflicts, masking), from scratch"),
    Ablation("imitation", "a warm start by imitation of optimus (non-preemptive) before PPO",
             ("train.imitate=optimus:preemptive=false",)),
    Ablation("room", "agents choose in order of free room (no conflicts)", ("policy.conflicts=room",)),
    Ablation("sequential", "agents choose in index order (no conflicts)", ("policy.conflicts=sequential",)),
    Ablation("floor-online", f"start floor {FLOOR_FACTOR}, from the policy's own duration estimates when evaluated",
             (f"max_start_slowdown={FLOOR_FACTOR}",), floor="online"),
    Ablation("floor-oracle", f"start floor {FLOOR_FACTOR}, from the true durations (reads an oracle)",
             (f"max_start_slowdown={FLOOR_FACTOR}",), floor="scenario"),
    Ablation("no-han", "an MLP encoder instead of the HAN", ("policy.variant=no-han",)),
    Ablation("no-pointer", "a uniform choice among feasible tasks instead of the pointer", ("policy.variant=no-pointer",)),
    Ablation("vanilla", "MLP encoder and FIFO task choice", ("policy.variant=vanilla",)),
    Ablation("paper-size", "the paper's network: plain HANConv stack, hidden 256, 6 layers, one actor per agent",
             ("policy.faithful=true", "policy.hidden=256", "policy.han_layers=6", "policy.shared_actors=false")),
    Ablation("per-cluster-reward", "the paper's per-cluster reward instead of the team reward", ("reward=per_cluster",)),
    Ablation("agent-id", "a learned embedding of each agent's index added to its cluster's (MAPPO's agent id)",
             ("policy.agent_id=true",)),
    Ablation("claim-penalty", f"a penalty of {CLAIM_PENALTY} in the learned reward for each claim lost to a Bayes conflict",
             (f"train.lost_claim_penalty={CLAIM_PENALTY}",)),
)}


def run_dir(runs: Path, scenario: str, variant: str, seed: int) -> Path:
    """Where a variant's seed trains: the recipe's own runs are ``benchmarks/reproduce.py``'s."""
    base = runs / scenario
    return base / f"s{seed}" if variant == RECIPE else base / variant / f"s{seed}"


def policy_name(variant: str, seed: int) -> str:
    """A variant seed's scheduler name in the evaluation (``room-s1``)."""
    return f"{variant}-s{seed}"


@dataclass
class VariantRow:
    """One CSV row: a variant's training seed on one scenario."""

    scenario: str
    variant: str
    seed: int
    env_steps: int
    wall_s: float
    device: str
    heldout_mean_jct: float | None
    diff_vs_recipe: float | None  # this seed minus the recipe's same seed, mean over workloads
    validation_best: float | None
    validation_rival: str | None  # the scenario's validation rival
    steps_to_beat_rival: int | None  # env steps until the run's curve fell below it


@dataclass
class VariantSummary:
    """A variant over its seeds on one scenario (a row of ``ablations.md``)."""

    scenario: str
    variant: str
    seeds: int
    mean_jct: float | None
    sd: float | None
    vs_recipe: dict[str, Any] | None  # paired over workloads: mean_diff, ci95
    steps_to_beat_rival: list[int | None] = field(default_factory=list)
    wall_s: float | None = None
    device: str = ""


def seed_means(run: EvaluationRun, variant: str, seeds: Sequence[int]) -> np.ndarray:
    """``(seeds, workloads)`` per-workload mean JCTs of a variant's seeds."""
    return np.array([per_seed_means(run.results[policy_name(variant, s)]) for s in seeds])


def summarise(run: EvaluationRun, scenario: str, variant: str, seeds: Sequence[int],
              training: Mapping[int, Mapping[str, Any]], beat: Mapping[int, int | None]) -> VariantSummary:
    """A variant's :class:`VariantSummary` against the recipe (same workloads, same seeds)."""
    m = seed_means(run, variant, seeds)
    per_seed = np.nanmean(m, axis=1)
    vs = None
    if variant != RECIPE:
        vs = paired_from_means(np.nanmean(m, axis=0), np.nanmean(seed_means(run, RECIPE, seeds), axis=0))
    walls = [float(training[s].get("wall_s", math.nan)) for s in seeds]
    return VariantSummary(
        scenario=scenario, variant=variant, seeds=len(seeds),
        mean_jct=float(np.mean(per_seed)) if per_seed.size else None,
        sd=float(np.std(per_seed, ddof=1)) if per_seed.size > 1 else None,
        vs_recipe=vs, steps_to_beat_rival=[beat.get(s) for s in seeds],
        wall_s=float(np.nanmean(walls)) if walls else None,
        device=", ".join(sorted({str(training[s].get("device", "")) for s in seeds})),
    )


def variant_rows(run: EvaluationRun, scenario: str, variant: str, seeds: Sequence[int],
                 training: Mapping[int, Mapping[str, Any]], validation: Mapping[int, float | None],
                 beat: Mapping[int, int | None], rival: str | None) -> list[VariantRow]:
    """The CSV rows of a variant's seeds (``beat``: each seed's env steps to beat the validation ``rival``)."""
    m = seed_means(run, variant, seeds)
    recipe = seed_means(run, RECIPE, seeds)
    rows = []
    for k, s in enumerate(seeds):
        t = training[s]
        rows.append(VariantRow(
            scenario=scenario, variant=variant, seed=s, env_steps=int(t.get("env_steps", 0)),
            wall_s=float(t.get("wall_s", math.nan)), device=str(t.get("device", "")),
            heldout_mean_jct=float(np.nanmean(m[k])),
            diff_vs_recipe=None if variant == RECIPE else float(np.nanmean(m[k] - recipe[k])),
            validation_best=validation.get(s), validation_rival=rival, steps_to_beat_rival=beat.get(s)))
    return rows


def curve_ylim(baselines: Sequence[float | None], last_means: Sequence[float]) -> tuple[float, float] | None:
    """The curve plot's y range, or ``None`` (matplotlib's own) without a finite baseline.

    The axis is cut above so that the first, untrained points do not flatten the part where the
    variants differ: at :data:`CURVE_CEILING` times the worst baseline, raised to
    :data:`CURVE_HEADROOM` times the highest of the variants' last mean points when a variant ends
    above that (a short probe whose runs are still far from the baselines)."""
    finite = [m for m in baselines if m is not None and math.isfinite(m)]
    if not finite:
        return None
    ends = [m for m in last_means if math.isfinite(m)]
    top = max(CURVE_CEILING * max(finite), CURVE_HEADROOM * max(ends, default=0.0))
    return CURVE_FLOOR * min(finite), top


def plot_variants(path: Path, scenario: str, curves: Mapping[str, Sequence[Sequence[tuple[int, float]]]],
                  baselines: Mapping[str, float | None], title: str = "Ablations") -> Path:
    """One PNG: each variant's validation mean JCT (mean over seeds, min-max band) against env steps; the
    recipe drawn thickest, an oracle baseline with the tables' mark."""
    from matplotlib.ticker import FuncFormatter

    from .curves import oracle_baselines, steps_label
    from .plots import colours, pyplot, save_figure, scheduler_label
    from .summary import ORACLE_MARK

    plt = pyplot()
    col = colours([*curves, *baselines])
    fig, ax = plt.subplots(figsize=(9.5, 4.8))
    last_means = []
    for variant, seeds in curves.items():
        seeds = [sorted(pts) for pts in seeds if pts]
        if not seeds:
            continue
        # every seed's points, linearly interpolated onto the steps any seed was validated at inside the span all share
        first, last = max(pts[0][0] for pts in seeds), min(pts[-1][0] for pts in seeds)
        steps = sorted({s for pts in seeds for s, _ in pts if first <= s <= last})
        if not steps:
            continue
        values = np.array([np.interp(steps, [s for s, _ in pts], [v for _, v in pts]) for pts in seeds])
        mean = values.mean(axis=0)
        ax.plot(steps, mean, color=col[variant], linewidth=3.2 if variant == RECIPE else 1.8,
                zorder=4 if variant == RECIPE else 2, label=f"{variant} ({counted(len(seeds), 'seed')})")
        last_means.append(float(mean[-1]))
        if len(seeds) > 1:
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=col[variant], alpha=0.15)
    oracle = oracle_baselines(list(baselines))
    for name, mean in baselines.items():
        if mean is not None:
            ax.axhline(mean, color=col[name], linestyle="-.", linewidth=1.3,
                       label=f"{scheduler_label(name, oracle)} ({mean:.2f})")
    ylim = curve_ylim(list(baselines.values()), last_means)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: steps_label(x)))
    ax.set_xlabel("env steps")
    ax.set_ylabel("validation mean JCT" + (f" (axis cut at {ylim[1]:.2f})" if ylim is not None else ""))
    ax.set_title(f"{title} on {scenario}: mean over seeds, min-max band", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              title=f"{ORACLE_MARK} oracle: reads the true durations" if oracle else None, title_fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, path)
