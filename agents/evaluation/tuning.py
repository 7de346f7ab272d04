"""Recipe tuning on validation workloads only: a scenario's recipe against candidate changes, over seeds.

A :class:`Candidate` is a named set of ``train.py`` overrides (``NAME:key=value[,key=value...]``,
:func:`parse_candidate`). ``benchmarks/tune.py`` trains K seeds of the recipe (the runs of
``benchmarks/reproduce.py``, shared with it) and of every candidate, scores every seed's ``best.pt``
again on the recipe's validation workloads with the evaluator (the decisions ``evaluate.py`` takes,
whatever code version logged the run's curve), and writes under ``docs/results/tuning/``:

* ``<scenario>.md`` -- per candidate: the validation best of each seed, the mean ± sd, the per-seed
  difference against the recipe's same seed with its t-interval over seeds, how many seeds improve,
  and the env steps each seed needed to beat the validation rival (the best non-oracle baseline on these
  workloads, :func:`~agents.evaluation.results.validation_rival`);
* ``<scenario>.csv`` / ``<scenario>.json`` -- the same rows, the rival, and the command;
* ``<scenario>.png`` -- every candidate's validation curve (mean over seeds, min-max band).

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from envs.config import ConfigError

from .ablations import RECIPE  # the recipe's name, as in the ablations
from .summary import t_interval, write_rows_csv

#: the pages' directory, inside the results directory of ``benchmarks/reproduce.py`` (whose pages link to them)
TUNING_DIR = "tuning"
#: a candidate's name: one plain path component
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: train keys that fix the validation workloads: a candidate may not change them
VALIDATION_KEYS = ("eval_seed", "eval_episodes", "eval_scenario")
#: one CSV row per (candidate, seed), in this order
CSV_FIELDS = ("scenario", "candidate", "seed", "env_steps", "wall_s", "device", "best_env_step", "logged_best",
              "validation_best", "diff_vs_recipe", "validation_rival", "steps_to_beat_rival")


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


def summarise(rows: Sequence[TuningRow], candidates: Sequence[Candidate]) -> list[TuningSummary]:
    """One :class:`TuningSummary` per candidate (the recipe first), from its rows."""
    out = []
    for c in [Candidate(RECIPE), *candidates]:
        mine = [r for r in rows if r.candidate == c.name]
        values = [r.validation_best for r in mine if r.validation_best is not None]
        diffs = [r.diff_vs_recipe for r in mine if r.diff_vs_recipe is not None]
        walls = [r.wall_s for r in mine if math.isfinite(r.wall_s)]
        lo, hi = t_interval(diffs)
        out.append(TuningSummary(
            candidate=c.name, overrides=list(c.overrides), seeds=len(mine),
            mean=float(np.mean(values)) if values else None,
            sd=float(np.std(values, ddof=1)) if len(values) > 1 else None,
            diff_mean=float(np.mean(diffs)) if diffs else None, diff_ci95=[lo, hi],
            seeds_better=sum(d < 0 for d in diffs),
            steps_to_beat_rival=[r.steps_to_beat_rival for r in mine],
            wall_s=float(np.mean(walls)) if walls else None))
    return out


def _fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def probe_text(probe: int, recipe_steps: int | None) -> str:
    """The page's sentence on a probe's budget of ``probe`` env steps."""
    recipe = "" if recipe_steps is None else f" instead of the recipe's {recipe_steps:,}"
    return (f"**Probe:** every run, the recipe's included, trains {probe:,} env steps (`{PROBE_KEY}={probe}`){recipe}, "
            "and the learning-rate schedule (`train.lr_schedule`) runs over the probe's steps. A probe screens changes; one that "
            "pays across seeds earns full-budget runs before it is adopted.")


def markdown(command: str, scenario: str, validation_seeds: Sequence[int], eval_scenario: str,
             baselines: Mapping[str, float | None], rival: str | None, summaries: Sequence[TuningSummary],
             rows: Sequence[TuningRow], probe: int | None = None, recipe_steps: int | None = None) -> str:
    """``<scenario>.md``: one row per candidate over seeds, then one per seed, and the curves. ``rival``:
    the baseline of ``baselines`` the env steps to beat count to (the validation rival); ``probe``: the
    probe's env steps (``recipe_steps``: the recipe's own budget), None for full-budget runs."""
    seeds = sorted({r.seed for r in rows})
    stem = page_stem(scenario, probe)
    budget = "" if probe is None else f", a probe of {probe:,} env steps"
    lines = [
        f"# Recipe tuning on {scenario}: validation workloads only{budget}",
        "",
        "Generated by",
        "",
        f"    {command}",
        "",
        f"Every seed's `best.pt` (chosen on these workloads) is scored again with the evaluator on the recipe's "
        f"validation workloads {validation_seeds[0]}..{validation_seeds[-1]} (`{eval_scenario}` variant): mean JCT, "
        "lower is better. Δ: the candidate's seed minus the recipe's same seed; its interval is the 95% t-interval "
        "over seeds. The held-out workloads are not run here.",
        "",
        *([probe_text(probe, recipe_steps), ""] if probe is not None else []),
        "Baselines on the same workloads: " + ", ".join(f"{k} {_fmt(v)}" for k, v in baselines.items())
        + (". Rival: none (no baseline has a finite mean)." if rival is None else
           f". Rival: **{rival}**, the best of them; env steps to beat it: a seed's first validation point below it."),
        "",
        "| candidate | overrides | seeds | validation best, mean ± sd | Δ vs recipe | seeds better "
        f"| env steps to beat {rival or 'rival'} | wall time per seed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        over = " ".join(f"`{o}`" for o in s.overrides) or "–"
        sd = "" if s.sd is None else f" ± {s.sd:.3f}"
        if s.candidate == RECIPE:
            diff, better = "–", "–"
        else:
            lo, hi = s.diff_ci95
            diff = "n/a" if s.diff_mean is None else (
                f"{s.diff_mean:+.3f}" + ("" if lo is None else f" [{lo:+.3f}, {hi:+.3f}]"))
            better = f"{s.seeds_better}/{s.seeds}"
        beat = ", ".join("never" if x is None else f"{x:,}" for x in s.steps_to_beat_rival)
        wall = "n/a" if s.wall_s is None else f"{s.wall_s / 60:.0f} min"
        lines.append(f"| {s.candidate} | {over} | {s.seeds} | {_fmt(s.mean)}{sd} | {diff} | {better} | {beat} | {wall} |")
    names = [s.candidate for s in summaries]
    by = {(r.candidate, r.seed): r for r in rows}
    lines += ["", "Per seed (validation best of `best.pt`, scored now; in brackets, the run's own logged best):", "",
              "| seed | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for seed in seeds:
        cells = []
        for n in names:
            r = by.get((n, seed))
            cells.append("–" if r is None else f"{_fmt(r.validation_best)} ({_fmt(r.logged_best)})")
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    lines += ["", f"![{scenario} validation curves]({stem}.png)", ""]
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[TuningRow], rival: str | None) -> Path:
    """One row per (candidate, seed), :data:`CSV_FIELDS`: the row and the validation ``rival``."""
    return write_rows_csv(path, [{**asdict(r), "validation_rival": rival} for r in rows], CSV_FIELDS)


def document(command: str, scenario: str, validation_seeds: Sequence[int], eval_scenario: str,
             baselines: Mapping[str, float | None], rival: str | None, summaries: Sequence[TuningSummary],
             rows: Sequence[TuningRow], probe: int | None = None) -> dict[str, Any]:
    """The JSON form of the page (``probe``: the probe's env steps, null for full-budget runs)."""
    return {"command": command, "scenario": scenario, "probe": probe, "validation_seeds": list(validation_seeds),
            "eval_scenario": eval_scenario, "baselines": dict(baselines), "validation_rival": rival,
            "summaries": [asdict(s) for s in summaries], "rows": [asdict(r) for r in rows]}
