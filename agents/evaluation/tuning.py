"""Recipe tuning on validation workloads only: a scenario's recipe against candidate changes, over seeds.

A :class:`Candidate` is a named set of ``train.py`` overrides (``NAME:key=value[,key=value...]``,
:func:`parse_candidate`). ``benchmarks/tune.py`` trains K seeds of the recipe (the runs of
``benchmarks/reproduce.py``, shared with it) and of every candidate, scores every seed's ``best.pt``
again on the recipe's validation workloads with the evaluator (the decisions ``evaluate.py`` takes,
whatever code version logged the run's curve); this module holds the rows and their summaries over
seeds, and :mod:`.tuning_page` writes them under ``docs/results/tuning/``:

* ``<scenario>.md`` -- per candidate: the validation best of each seed, the mean ± sd, the per-seed
  difference against the recipe's same seed with its t-interval over seeds, how many seeds improve,
  and the env steps each seed needed to beat the validation rival (the best non-oracle baseline on these
  workloads, :func:`~agents.evaluation.results.validation_rival`);
* ``<scenario>.csv`` / ``<scenario>.json`` -- the same rows, the rival, and the command;
* ``<scenario>.png`` -- every candidate's validation curve (mean over seeds, min-max band).

Beside validation, each run's training side (:func:`training_signals`): the mean JCT, GPU use and
lost-claim rate of its own sampled training episodes (its TensorBoard ``training/*`` scalars) over the
first and the last quarter of its collections. A training JCT that rises while validation stalls says
the run learns a worse policy on the very scenarios it trains on; one that falls while validation
stalls says the policy does not carry to the target. And where the run ended: its ``last.pt`` scored
on the same validation workloads, with the CPUs, GPUs, wait and run of each task type's tasks
(:func:`end_split`), so a policy that drifted into, say, the smallest allocation shows it.

A family recipe (``train.also_validate_on``) chooses its ``best.pt`` on every scenario it validates on:
each run's ``best.pt`` is then also scored on each other scenario's validation workloads, acting as that
scenario's own recipe acts (:class:`OtherScenario`), and each seed's *relative JCT* (the score its run
chose ``best.pt`` on, :func:`~agents.training.validation_set.relative_jct`) is paired with the recipe's
same seed (:func:`relate`): a change to a family recipe is judged on the score it is trained for.

A *probe* (``tune.py --probe STEPS``) screens changes at a short budget: every run, the recipe's
included, trains ``STEPS`` env steps (:func:`probe_overrides`) in its own directory
(:func:`run_dir`), and the pages are ``<scenario>-probe-<STEPS>.*`` (:func:`page_stem`), so a probe
never mixes with the full-budget runs and pages.

This is where a recipe change earns its place: validation workloads choose, and the held-out
workloads (:func:`~agents.evaluation.results.report_seeds`) are never run here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from agents.training.validation_baselines import finite_mean
from envs.config import ConfigError

from .ablations import RECIPE  # the recipe's name, as in the ablations
from .summary import t_interval

#: the pages' directory, inside the results directory of ``benchmarks/reproduce.py`` (whose pages link to them)
TUNING_DIR = "tuning"
#: a candidate's name: one plain path component
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: train keys that fix the validation workloads: a candidate may not change them
VALIDATION_KEYS = ("eval_seed", "eval_episodes", "eval_scenario")


@dataclass(frozen=True)
class Candidate:
    """A named change to the recipe: ``overrides`` as ``train.py`` takes them."""

    name: str
    overrides: tuple[str, ...] = ()


def parse_candidate(text: str) -> Candidate:
    """``NAME:key=value[,key=value...]`` -> :class:`Candidate`.

    The name ends at the first colon; the overrides split at each comma that begins a new
    ``key=`` (so list values such as ``capacities=[[16,16]]`` stay whole)."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not rest.strip():
        raise ConfigError(f"--candidate {text!r}: expected NAME:key=value[,key=value...] (e.g. ent01:train.ent_coef=0.01)")
    if not NAME_PATTERN.match(name) or name == RECIPE:
        raise ConfigError(f"--candidate {text!r}: the name {name!r} must be one plain word of letters, digits, '.', "
                          f"'_' or '-', and not {RECIPE!r}")
    overrides = tuple(o.strip() for o in re.split(r",(?=\s*[A-Za-z_][\w.]*=)", rest) if o.strip())
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"--candidate {text!r}: {bad[0]!r} is not key=value")
    return Candidate(name, overrides)


#: the train key a probe sets for every run
PROBE_KEY = "train.steps"


def run_dir(runs: Path, recipe_runs: Path, scenario: str, candidate: str, seed: int, probe: int | None = None) -> Path:
    """Where a seed trains: the recipe's in ``<recipe_runs>/<scenario>/s<seed>`` (``reproduce.py``'s run),
    a candidate's in ``<runs>/<scenario>/<candidate>/s<seed>``; under a ``probe`` of N env steps every
    run, the recipe's included, in ``<runs>/<scenario>/probe-<N>/<candidate>/s<seed>``."""
    if probe is not None:
        return runs / scenario / f"probe-{probe}" / candidate / f"s{seed}"
    if candidate == RECIPE:
        return recipe_runs / scenario / f"s{seed}"
    return runs / scenario / candidate / f"s{seed}"


def probe_overrides(probe: int | None) -> tuple[str, ...]:
    """The overrides a probe adds to every run (none without a probe)."""
    return () if probe is None else (f"{PROBE_KEY}={probe}",)


def sets_probe_key(candidate: Candidate) -> bool:
    """Whether the candidate sets the key a probe owns (``train.steps``)."""
    return any(o.partition("=")[0].strip() == PROBE_KEY for o in candidate.overrides)


def page_stem(scenario: str, probe: int | None = None) -> str:
    """The pages' file name without suffix: ``<scenario>``, or ``<scenario>-probe-<N>`` for a probe."""
    return scenario if probe is None else f"{scenario}-probe-{probe}"


@dataclass
class TuningRow:
    """One training seed of one candidate (or the recipe), scored on validation."""

    scenario: str
    candidate: str
    seed: int
    env_steps: int
    wall_s: float
    device: str
    best_env_step: int | None
    logged_best: float | None  # the best point of the run's own validation curve
    validation_best: float | None  # best.pt scored again now on the validation workloads
    diff_vs_recipe: float | None  # validation_best minus the recipe's same seed
    steps_to_beat_rival: int | None  # env steps until the run's curve fell below the validation rival
    # the run's own training episodes (:func:`training_signals`): first and last quarter of its collections
    training_jct_first: float | None = None
    training_jct_last: float | None = None
    training_gpu_util_first: float | None = None
    training_gpu_util_last: float | None = None
    training_lost_claims_first: float | None = None
    training_lost_claims_last: float | None = None
    last_mean_jct: float | None = None  # last.pt (the run's final weights) on the same validation workloads
    last_split: list[dict] = field(default_factory=list)  # its tasks per type (:func:`end_split`)
    # a family recipe (train.also_validate_on): best.pt on each other scenario's validation workloads, and
    # the relative JCT over all of them with its difference from the recipe's same seed (set by :func:`relate`)
    validation_also: dict[str, float | None] = field(default_factory=dict)
    relative_best: float | None = None
    relative_diff_vs_recipe: float | None = None


@dataclass
class TuningSummary:
    """A candidate over its seeds (one row of ``<scenario>.md``)."""

    candidate: str
    overrides: list[str]
    seeds: int
    mean: float | None
    sd: float | None
    diff_mean: float | None  # mean over seeds of (candidate - recipe), same seed
    diff_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    seeds_better: int = 0
    steps_to_beat_rival: list[int | None] = field(default_factory=list)
    wall_s: float | None = None
    trains_on: list[str] = field(default_factory=list)  # the scenarios its runs train on
    signals: dict[str, float | None] = field(default_factory=dict)  # each signal field's mean over seeds
    last_mean: float | None = None  # last.pt's validation mean JCT, mean over seeds
    last_split: list[dict] = field(default_factory=list)  # each task type's end_split fields, mean over seeds
    # a family recipe: best.pt's mean over seeds on each other scenario, and the relative JCT as ``mean`` .. ``seeds_better``
    also_means: dict[str, float | None] = field(default_factory=dict)
    relative_mean: float | None = None
    relative_sd: float | None = None
    relative_diff_mean: float | None = None
    relative_diff_ci95: list[float | None] = field(default_factory=lambda: [None, None])
    relative_seeds_better: int = 0


@dataclass(frozen=True)
class OtherScenario:
    """Another validation scenario of a family recipe (``train.also_validate_on``): how the policy acts
    there (its own recipe's rule, :func:`~agents.training.prepare.acting_rule`) and its validation rival."""

    name: str
    action: str
    conflicts: str
    rival: str | None = None
    rival_mean: float | None = None


def relate(rows: Sequence[TuningRow], own_rival: float | None, others: Sequence[OtherScenario]) -> None:
    """Set each row's relative JCT over its own scenario and ``others`` (each JCT over that scenario's
    rival mean; ``own_rival``: the recipe's scenario's) and its difference from the recipe's same seed."""
    from agents.training.validation_set import relative_jct

    rivals = [own_rival, *(o.rival_mean for o in others)]
    for r in rows:
        r.relative_best = relative_jct([r.validation_best, *(r.validation_also.get(o.name) for o in others)], rivals)
    recipe = {r.seed: r.relative_best for r in rows if r.candidate == RECIPE}
    for r in rows:
        base = recipe.get(r.seed)
        if r.candidate != RECIPE and r.relative_best is not None and base is not None:
            r.relative_diff_vs_recipe = r.relative_best - base


#: a run's training side beside its validation: (the :class:`TuningRow` field stem, its TensorBoard tag)
TRAINING_SIGNALS = (("training_jct", "training/mean_jct"), ("training_gpu_util", "training/gpu_util"),
                    ("training_lost_claims", "training/conflict_rate"))
#: the share of a run's training points (one per collection, in step order) averaged at each end
SIGNAL_SHARE = 0.25


def signal_fields() -> list[str]:
    """The :class:`TuningRow` fields of the training signals: ``<stem>_first``, ``<stem>_last`` each."""
    return [f"{stem}_{end}" for stem, _ in TRAINING_SIGNALS for end in ("first", "last")]


def end_means(points: Sequence[tuple[int, float]], share: float = SIGNAL_SHARE) -> tuple[float | None, float | None]:
    """The mean of the finite values of the first ``share`` of ``points`` (in step order; one point at
    least) and of the last (None without a finite value)."""
    values = [v for _, v in sorted(points, key=lambda p: p[0]) if math.isfinite(v)]
    if not values:
        return None, None
    k = max(1, round(share * len(values)))
    return float(np.mean(values[:k])), float(np.mean(values[-k:]))


def training_signals(points: Mapping[str, Sequence[tuple[int, float]]]) -> dict[str, float | None]:
    """The :class:`TuningRow` signal fields from a run's ``training/*`` points (tag -> [(step, value)],
    :func:`~.curves.read_scalars`)."""
    out: dict[str, float | None] = {}
    for stem, tag in TRAINING_SIGNALS:
        out[f"{stem}_first"], out[f"{stem}_last"] = end_means(points.get(tag, ()))
    return out


def over_seeds(values: Sequence[float | None], diffs: Sequence[float | None], prefix: str = "") -> dict:
    """A score's :class:`TuningSummary` fields over seeds (``<prefix>mean``, ``sd``, ``diff_mean``,
    ``diff_ci95``, ``seeds_better``) from each seed's value and its difference from the recipe's seed."""
    x = [v for v in values if v is not None]
    d = [v for v in diffs if v is not None]
    return {f"{prefix}mean": float(np.mean(x)) if x else None,
            f"{prefix}sd": float(np.std(x, ddof=1)) if len(x) > 1 else None,
            f"{prefix}diff_mean": float(np.mean(d)) if d else None, f"{prefix}diff_ci95": list(t_interval(d)),
            f"{prefix}seeds_better": sum(v < 0 for v in d)}


def summarise(rows: Sequence[TuningRow], candidates: Sequence[Candidate],
              trains_on: Mapping[str, Sequence[str]] | None = None) -> list[TuningSummary]:
    """One :class:`TuningSummary` per candidate (the recipe first), from its rows; ``trains_on``: each
    candidate's training scenarios."""
    out = []
    for c in [Candidate(RECIPE), *candidates]:
        mine = [r for r in rows if r.candidate == c.name]
        walls = [r.wall_s for r in mine if math.isfinite(r.wall_s)]
        names = list(dict.fromkeys(name for r in mine for name in r.validation_also))
        out.append(TuningSummary(
            candidate=c.name, overrides=list(c.overrides), seeds=len(mine),
            **over_seeds([r.validation_best for r in mine], [r.diff_vs_recipe for r in mine]),
            steps_to_beat_rival=[r.steps_to_beat_rival for r in mine],
            wall_s=float(np.mean(walls)) if walls else None,
            trains_on=list((trains_on or {}).get(c.name, ())),
            signals={f: finite_mean([getattr(r, f) for r in mine]) for f in signal_fields()},
            last_mean=finite_mean([r.last_mean_jct for r in mine]), last_split=mean_split([r.last_split for r in mine]),
            also_means={n: finite_mean([r.validation_also.get(n) for r in mine]) for n in names},
            **over_seeds([r.relative_best for r in mine], [r.relative_diff_vs_recipe for r in mine], prefix="relative_")))
    return out


#: the per-type fields of :func:`end_split`
SPLIT_FIELDS = ("cpu", "gpu", "wait", "run")


def end_split(rows: Sequence[dict]) -> list[dict]:
    """Each task type's mean CPUs and GPUs at start, wait and run (real steps) from the ``rows`` of
    :func:`~.diagnosis.time_split` (the pooled ``all`` row left out)."""
    return [{"type": r["type"], **{k: r[k] for k in SPLIT_FIELDS}} for r in rows if r["type"] != "all"]


def mean_split(splits: Sequence[Sequence[dict]]) -> list[dict]:
    """Per task type (in first-seen order), each :data:`SPLIT_FIELDS` value's mean over the seeds' splits."""
    types = list(dict.fromkeys(r["type"] for split in splits for r in split))
    return [{"type": t, **{k: finite_mean([r[k] for split in splits for r in split if r["type"] == t]) for k in SPLIT_FIELDS}}
            for t in types]

