"""A recipe's tuning page: ``<stem>.md``, ``.csv`` and ``.json`` under ``docs/results/tuning/`` from the
rows and summaries of :mod:`.tuning` (``<stem>``: :func:`~.tuning.page_stem`).

* ``.csv`` -- one row per (candidate, seed), the keyed columns of :data:`ROW_TABLE`;
* ``.json`` -- :func:`document`: the command, the baselines, the rival, every summary and row whole;
* ``.md`` -- :func:`markdown`: one row per candidate (:data:`SUMMARY_TABLE`), a family recipe's every
  validation scenario and relative JCT (:func:`family_table`), then one row per seed, then each
  candidate's training signals (:data:`SIGNAL_TABLE`) and where its runs ended (:func:`end_table`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from .ablations import RECIPE
from .columns import Column, Table
from .formatting import MISSING, code_list, duration, fmt, interval, mean_sd, percent, steps_list
from .tuning import PROBE_KEY, SIGNAL_SHARE, OtherScenario, TuningRow, TuningSummary, page_stem, signal_fields

#: decimals of the validation mean JCTs and their differences on the page
DIGITS = 3


#: one row per (candidate, seed) (:class:`~.tuning.TuningRow`); the validation rival comes from the context
ROW_TABLE = Table(*(Column(key) for key in (
    "scenario", "candidate", "seed", "env_steps", "wall_s", "device", "best_env_step", "logged_best", "validation_best",
    "diff_vs_recipe", "validation_rival", "steps_to_beat_rival", *signal_fields(), "last_mean_jct", "relative_best",
    "relative_diff_vs_recipe")))

#: one row per candidate over its seeds (:class:`~.tuning.TuningSummary`), the recipe first; ``{rival}`` in
#: a header is the page's validation rival
SUMMARY_TABLE = Table(
    Column(None, "candidate", get=lambda s: s.candidate, text=str),
    Column(None, "overrides", get=lambda s: s.overrides, text=code_list),
    Column(None, "seeds", get=lambda s: s.seeds, text=str),
    Column(None, "validation best, mean ± sd", get=lambda s: mean_sd(s.mean, s.sd, DIGITS), text=str),
    Column(None, "Δ vs recipe", text=str,
           get=lambda s: MISSING if s.candidate == RECIPE else interval(s.diff_mean, *s.diff_ci95, digits=DIGITS)),
    Column(None, "seeds better", text=str,
           get=lambda s: MISSING if s.candidate == RECIPE else f"{s.seeds_better}/{s.seeds}"),
    Column(None, "env steps to beat {rival}", get=lambda s: s.steps_to_beat_rival, text=steps_list),
    Column(None, "wall time per seed", get=lambda s: s.wall_s, text=duration),
)


def family_table(scenario: str, others: Sequence[OtherScenario]) -> Table:
    """A family recipe's candidates on every validation scenario: ``best.pt``'s mean JCT on each (mean
    over seeds), then the relative JCT over them as :data:`SUMMARY_TABLE` gives the recipe's own score."""
    return Table(
        Column(None, "candidate", get=lambda s: s.candidate, text=str),
        Column(None, scenario, get=lambda s: s.mean, text=lambda v: fmt(v, DIGITS)),
        *(Column(None, o.name, get=lambda s, n=o.name: s.also_means.get(n), text=lambda v: fmt(v, DIGITS)) for o in others),
        Column(None, "relative JCT, mean ± sd", get=lambda s: mean_sd(s.relative_mean, s.relative_sd, DIGITS), text=str),
        Column(None, "Δ vs recipe", text=str, get=lambda s: MISSING if s.candidate == RECIPE else
               interval(s.relative_diff_mean, *s.relative_diff_ci95, digits=DIGITS)),
        Column(None, "seeds better", text=str,
               get=lambda s: MISSING if s.candidate == RECIPE else f"{s.relative_seeds_better}/{s.seeds}"),
    )


def family_text(scenario: str, rival: str | None, rival_mean: float | None, others: Sequence[OtherScenario]) -> str:
    """The sentence before :func:`family_table`."""
    def named(name: str | None, mean: float | None) -> str:
        return "no rival" if name is None else f"{name} {fmt(mean, DIGITS)}"

    rules = "; ".join(f"{o.name}: acting by {o.action}, conflicts by {o.conflicts}, rival {named(o.rival, o.rival_mean)}"
                      for o in others)
    return (f"**Every validation scenario.** This recipe chooses `best.pt` on the relative JCT "
            f"(`train.also_validate_on`): the mean over {scenario} and the other scenarios of its validation mean JCT "
            f"divided by that scenario's rival (below 1: better than the rivals on average). Each seed's `best.pt` is "
            f"scored on each one's validation workloads (the same seeds, its validation variant), acting as that "
            f"scenario's own recipe acts ({scenario}: rival {named(rival, rival_mean)}; {rules}). Δ: the candidate's "
            "seed minus the recipe's same seed, with its 95% t-interval over seeds. This is the score a change to a "
            "family recipe is chosen on.")


def first_last(summary: TuningSummary, stem: str, text=fmt) -> str:
    """A training signal's mean over seeds in the first and the last quarter: ``first → last``."""
    first, last = (summary.signals.get(f"{stem}_{end}") for end in ("first", "last"))
    return MISSING if first is None and last is None else f"{text(first)} → {text(last)}"


#: each candidate's training side (:func:`~.tuning.training_signals`), mean over seeds
SIGNAL_TABLE = Table(
    Column(None, "candidate", get=lambda s: s.candidate, text=str),
    Column(None, "trains on", get=lambda s: s.trains_on, text=lambda v: ", ".join(v) or MISSING),
    Column(None, "mean JCT of its training episodes", get=lambda s: first_last(s, "training_jct"), text=str),
    Column(None, "GPU use in training", get=lambda s: first_last(s, "training_gpu_util", percent), text=str),
    Column(None, "lost claims in training", get=lambda s: first_last(s, "training_lost_claims", percent), text=str),
)


def signal_text(share: float = SIGNAL_SHARE) -> str:
    """The sentence before :data:`SIGNAL_TABLE`."""
    return (f"Training signals: each run's own training episodes (sampled actions, on the scenarios it trains on; its "
            f"TensorBoard `training/*` scalars, one point per collection), the mean over the first {share:.0%} of its "
            f"collections → over the last {share:.0%}, then over seeds. Lost claims: the share of the agents' decisions that lost a conflict. A "
            "training JCT that rises while validation stalls: the run learns a worse policy on the scenarios it trains "
            "on. One that falls while validation stalls: what it learns does not carry to the validation scenario.")


def end_table(type_names: Sequence[str]) -> Table:
    """Each candidate's ``last.pt`` on validation (mean over seeds): its mean JCT, then per task type of
    ``type_names`` the CPUs and GPUs its tasks started with and their wait and run."""
    def split(s: TuningSummary, name: str) -> dict:
        return next((r for r in s.last_split if r["type"] == name), {})

    def pair(a: float | None, b: float | None) -> str:
        return MISSING if a is None and b is None else f"{fmt(a)}, {fmt(b)}"

    return Table(
        Column(None, "candidate", get=lambda s: s.candidate, text=str),
        Column(None, "`last.pt` validation mean JCT", get=lambda s: s.last_mean, text=lambda v: fmt(v, DIGITS)),
        *(c for name in type_names for c in (
            Column(None, f"{name}: CPUs, GPUs", text=str,
                   get=lambda s, n=name: pair(split(s, n).get("cpu"), split(s, n).get("gpu"))),
            Column(None, f"{name}: wait, run", text=str,
                   get=lambda s, n=name: pair(split(s, n).get("wait"), split(s, n).get("run"))))))


END_TEXT = ("Where the runs ended: each run's `last.pt` (its final weights, not chosen on validation) on the same "
            "validation workloads, acting as the recipe validates, then per task type the CPUs and GPUs its tasks "
            "started with and their mean wait and run (real steps); mean over seeds. A `last.pt` far above `best.pt` "
            "means training moved away from its best point; the allocations say where it went.")


def seed_table(names: Sequence[str], rows: Sequence[TuningRow]) -> Table:
    """One row per seed, one column per candidate of ``names``: the seed's validation best of ``best.pt``
    scored now, and in brackets its run's own logged best."""
    by = {(r.candidate, r.seed): r for r in rows}

    def cell(r: TuningRow | None) -> str:
        return MISSING if r is None else f"{fmt(r.validation_best, DIGITS)} ({fmt(r.logged_best, DIGITS)})"

    return Table(Column(None, "seed", get=lambda seed: seed, text=str),
                 *(Column(None, n, get=lambda seed, n=n: by.get((n, seed)), text=cell) for n in names))


def probe_text(probe: int, recipe_steps: int | None) -> str:
    """The page's sentence on a probe's budget of ``probe`` env steps."""
    recipe = "" if recipe_steps is None else f" instead of the recipe's {recipe_steps:,}"
    return (f"**Probe:** every run, the recipe's included, trains {probe:,} env steps (`{PROBE_KEY}={probe}`){recipe}, "
            "and the learning-rate schedule (`train.lr_schedule`) runs over the probe's steps. A probe screens changes; one that "
            "pays across seeds earns full-budget runs before it is adopted.")


def markdown(command: str, scenario: str, validation_seeds: Sequence[int], eval_scenario: str,
             baselines: Mapping[str, float | None], rival: str | None, summaries: Sequence[TuningSummary],
             rows: Sequence[TuningRow], probe: int | None = None, recipe_steps: int | None = None,
             others: Sequence[OtherScenario] = (), validated_on: str | None = None) -> str:
    """``<stem>.md``: one row per candidate over seeds, then one per seed, and the curves. ``rival``:
    the baseline of ``baselines`` the env steps to beat count to (the validation rival); ``probe``: the
    probe's env steps (``recipe_steps``: the recipe's own budget), None for full-budget runs; ``others``:
    a family recipe's other validation scenarios (``validated_on``: the scenario its own validation workloads are of)."""
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
        f"Every seed's `best.pt` (chosen on these workloads{' and those of the scenarios below' if others else ''}) is scored again with the evaluator on the recipe's "
        f"validation workloads {validation_seeds[0]}..{validation_seeds[-1]} (`{eval_scenario}` variant): mean JCT, "
        "lower is better. Δ: the candidate's seed minus the recipe's same seed; its interval is the 95% t-interval "
        "over seeds. The held-out workloads are not run here.",
        "",
        *([probe_text(probe, recipe_steps), ""] if probe is not None else []),
        "Baselines on the same workloads: " + ", ".join(f"{k} {fmt(v, DIGITS)}" for k, v in baselines.items())
        + (". Rival: none (no baseline has a finite mean)." if rival is None else
           f". Rival: **{rival}**, the best of them; env steps to beat it: a seed's first validation point below it."),
        "",
        *SUMMARY_TABLE.markdown(summaries, {"rival": rival or "rival"}),
    ]
    if others:
        own = validated_on or scenario
        lines += ["", family_text(own, rival, baselines.get(rival) if rival else None, others), "",
                  *family_table(own, others).markdown(summaries)]
    lines += ["", "Per seed (validation best of `best.pt`, scored now; in brackets, the run's own logged best):", "",
              *seed_table([s.candidate for s in summaries], rows).markdown(seeds)]
    lines += ["", signal_text(), "", *SIGNAL_TABLE.markdown(summaries)]
    type_names = list(dict.fromkeys(r["type"] for s in summaries for r in s.last_split))
    if type_names:
        lines += ["", END_TEXT, "", *end_table(type_names).markdown(summaries)]
    lines += ["", f"![{scenario} validation curves]({stem}.png)", ""]
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[TuningRow], rival: str | None) -> Path:
    """One row per (candidate, seed), the keyed columns of :data:`ROW_TABLE`: the row and the validation ``rival``."""
    return ROW_TABLE.write_csv(path, rows, {"validation_rival": rival})


def document(command: str, scenario: str, validation_seeds: Sequence[int], eval_scenario: str,
             baselines: Mapping[str, float | None], rival: str | None, summaries: Sequence[TuningSummary],
             rows: Sequence[TuningRow], probe: int | None = None, others: Sequence[OtherScenario] = ()) -> dict[str, Any]:
    """The JSON form of the page (``probe``: the probe's env steps, null for full-budget runs; ``others``: a
    family recipe's other validation scenarios, with their acting rules and rivals)."""
    return {"command": command, "scenario": scenario, "probe": probe, "validation_seeds": list(validation_seeds),
            "eval_scenario": eval_scenario, "baselines": dict(baselines), "validation_rival": rival,
            "also_validated_on": [asdict(o) for o in others],
            "summaries": [asdict(s) for s in summaries], "rows": [asdict(r) for r in rows]}
