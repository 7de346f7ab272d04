"""A recipe's results page: ``<scenario>.csv``, ``.json`` and ``.md`` from its
:class:`~.results.RecipeResults`.

* ``<scenario>.csv`` -- one row per training seed, the keyed columns of :data:`SEED_TABLE`;
* ``<scenario>.json`` -- the :class:`~.results.RecipeResults` whole (every field of every row), read back by
  :func:`~.results.read_results`;
* ``<scenario>.md`` -- the table (the headed columns of :data:`SEED_TABLE`), the mean over seeds, the paper's
  figure, the verdicts, the baselines and where the time goes.

The PNG is drawn by the caller (:func:`~.curves.plot_curves`); the index pages are :mod:`.results_index`'s.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from agents.json_files import json_safe, write_json
from agents.policy.modes import CONFLICT_WORDS, PAPER_CONFLICTS
from agents.training.config import options_beyond_the_paper

from .columns import Column, Table
from .formatting import (
    MISSING,
    count,
    duration,
    fixed,
    fmt,
    interval,
    missing,
    paired,
    percent,
    plus_minus,
    signed,
    steps_or_never,
    yes_no,
)
from .reference import CLAIMS, SCENARIO_TO_EXPERIMENT
from .results import (
    CPU_WALL_TARGET_S,
    LATE_BEST_FRACTION,
    SEED_SPREAD_TARGET,
    RecipeResults,
    SeedRow,
    late_bests,
    paper_comparison,
    validation_rival,
)
from .summary import BOUND_RATIO_TARGET
from .switching import read_switching, switching_command, switching_sentence
from .tuning import TUNING_DIR


def _versus(name: str | None, diff: float | None, lo: float | None, hi: float | None) -> str:
    """A comparison's cell: the baseline's name and the paired difference with its interval."""
    return MISSING if name is None else f"{name} {interval(diff, lo, hi)}"


#: one row per training seed (:class:`~.results.SeedRow`); the page's validation rival comes from the context
SEED_TABLE = Table(
    Column("seed", "seed", text=str),
    Column("env_steps", "env steps", text=count),
    Column("wall_s", "wall time", text=duration),
    Column("device", "device", text=str),
    Column("env_steps_per_s", "env steps/s", text=fixed(0)),
    Column("best_env_step", "best at", text=count),
    Column("validation_best", "validation best", text=fixed(3)),
    Column("validation_rival"),
    Column("steps_to_beat_rival", "beat rival (validation)", text=steps_or_never),
    Column("heldout_mean_jct"),
    Column("heldout_ci95"),
    Column(None, "held-out mean JCT", get=lambda r: plus_minus(r.heldout_mean_jct, r.heldout_ci95), text=str),
    Column("best_non_oracle"),
    Column("non_oracle_mean_jct"),
    Column("diff_non_oracle"),
    Column("diff_non_oracle_lo"),
    Column("diff_non_oracle_hi"),
    Column(None, "vs best non-oracle", text=str,
           get=lambda r: _versus(r.best_non_oracle, r.diff_non_oracle, r.diff_non_oracle_lo, r.diff_non_oracle_hi)),
    Column("best_oracle"),
    Column("oracle_mean_jct"),
    Column("diff_oracle"),
    Column("diff_oracle_lo"),
    Column("diff_oracle_hi"),
    Column(None, "vs best oracle", text=str,
           get=lambda r: _versus(r.best_oracle, r.diff_oracle, r.diff_oracle_lo, r.diff_oracle_hi)),
    Column("bound_ratio", "× bound", text=fixed(3)),
)

#: the verdicts of :func:`verdicts`, ``(what, met, evidence)``
VERDICT_TABLE = Table(
    Column(None, "target", get=lambda v: v[0], text=str),
    Column(None, "met", get=lambda v: v[1], text=lambda met: yes_no(met, bold=True)),
    Column(None, "evidence", get=lambda v: v[2], text=str),
)

#: the baselines on the held-out workloads, ``(name, entry)`` of :attr:`~.results.RecipeResults.baselines`
BASELINE_TABLE = Table(
    Column(None, "scheduler", get=lambda nb: nb[0] + (" (oracle)" if nb[1]["oracle"] else ""), text=str),
    Column(None, "mean JCT ± 95% CI", text=str,
           get=lambda nb: plus_minus(nb[1]["mean_jct"], None if nb[1]["ci95"][0] is None
                                     else (nb[1]["ci95"][1] - nb[1]["ci95"][0]) / 2)),
)

#: the paper's figure beside ours (:func:`~.results.paper_comparison`)
PAPER_TABLE = Table(
    Column("name", "scheduler", text=str),
    Column("paper", "mean JCT, paper"),
    Column("ours", "mean JCT, ours"),
    Column("paper_reduction", "TapFinger's reduction, paper", text=percent),
    Column("reduction", "TapFinger's reduction, ours", text=percent),
)


def _pair(key: str, header: str, text: Any = fmt) -> Column:
    """A diagnosis cell: the policy's value / the baseline's, from a ``(ours, theirs)`` pair of rows."""
    return Column(None, f"{header}: {{label}} / {{base}}", get=lambda ab: (ab[0].get(key), ab[1].get(key)),
                  text=lambda v: f"{text(v[0])} / {text(v[1])}")


def _share(v: float | None) -> str:
    return percent(v, 0)


#: per task type, the policy's time split against the baseline's (:func:`~.diagnosis.diagnose`); the headers'
#: ``{label}`` and ``{base}`` are the policy's and the baseline's names
DIAGNOSIS_TABLE = Table(
    Column(None, "task type", get=lambda ab: ab[0]["type"], text=str),
    Column(None, "share of tasks", get=lambda ab: ab[0]["share"], text=_share),
    _pair("wait", "wait"),
    _pair("run", "run"),
    _pair("cpu", "CPUs", fixed(1)),
    _pair("gpu", "GPUs", fixed(1)),
)
#: per cluster size and task type, where the type's tasks started (:func:`~.diagnosis.capacity_split`)
CAPACITY_TABLE = Table(
    Column(None, "cluster (CPUs, GPUs)", get=lambda ab: tuple(ab[0]["capacity"]), text=lambda c: f"({c[0]}, {c[1]})"),
    Column(None, "task type", get=lambda ab: ab[0]["type"], text=str),
    _pair("share", "share of the type", _share),
    _pair("wait", "wait"),
    _pair("run", "run"),
    _pair("gpu", "GPUs", fixed(1)),
)


# ---------------------------------------------------------------------------------------
# Sentences and verdicts
# ---------------------------------------------------------------------------------------
def verdicts(results: RecipeResults) -> list[tuple[str, bool | None, str]]:
    """The targets every recipe is held to on its page: ``(what, met, evidence)``; ``met`` None when
    the evidence cannot decide (no interval, no rival)."""
    o = results.over_seeds
    rows = results.rows
    out: list[tuple[str, bool | None, str]] = []
    vs = o.get("vs_non_oracle")
    if vs is not None:
        hi = vs["ci95"][1]
        out.append((f"mean over seeds beats the best non-oracle baseline ({o['best_non_oracle']})",
                    None if hi is None else bool(hi < 0), f"paired Δ {paired(vs)}"))
    wins = sum(r.beats_non_oracle for r in rows)
    out.append(("every seed's paired 95% interval against it lies below zero", wins == len(rows),
                f"{wins} of {len(rows)} seeds"))
    if o.get("sd_over_mean") is not None:
        out.append((f"seeds agree: sd over seeds ≤ {SEED_SPREAD_TARGET:.0%} of the mean",
                    bool(o["sd_over_mean"] <= SEED_SPREAD_TARGET),
                    f"sd {fmt(o['sd'], 3)} = {percent(o['sd_over_mean'])}"))
    ratio = o.get("bound_ratio")
    if ratio is not None:
        out.append((f"within {BOUND_RATIO_TARGET}× the bound", bool(ratio <= BOUND_RATIO_TARGET), f"{fmt(ratio, 3)}×"))
    beat = [r.steps_to_beat_rival for r in rows]
    rival = results.validation_rival
    out.append((f"every seed beats {rival or 'the best validation baseline'} on validation",
                None if rival is None else all(b is not None for b in beat),
                ", ".join(f"s{r.seed}: " + ("never" if b is None else f"{b:,} steps") for r, b in zip(rows, beat))))
    cpu = [r for r in rows if r.device == "cpu" and not missing(r.wall_s)]
    if cpu:
        longest = max(cpu, key=lambda r: r.wall_s)
        out.append((f"wall time per seed on the CPU within about {duration(CPU_WALL_TARGET_S)}",
                    bool(longest.wall_s <= CPU_WALL_TARGET_S), f"longest s{longest.seed}: {duration(longest.wall_s)}"))
    return out


def critic_text(rows: Sequence[SeedRow]) -> str | None:
    """The sentence on the critic's health at the end of each seed's run, None when no row has it."""
    known = [r for r in rows if r.critic_explained_variance is not None]
    if not known:
        return None
    parts = [f"s{r.seed} {fmt(r.critic_explained_variance)} (scale {fmt(r.critic_return_scale, 0)}, "
             f"sd {fmt(r.critic_return_std, 0)})" for r in known]
    return ("Critic at the end of each run (means over its last updates): explained variance of the returns by "
            "the values, with the return scale the value targets are divided by against the returns' sd: "
            + "; ".join(parts) + ".")


def late_best_text(rows: Sequence[SeedRow]) -> str:
    """The page's sentence on :func:`~.results.late_bests`."""
    late = late_bests(rows)
    last = f"the last {1 - LATE_BEST_FRACTION:.0%}"
    if not late:
        return f"Budget: no seed set its best validation point in {last} of its run."
    which = ", ".join(f"s{r.seed} at {r.best_env_step:,} of {r.env_steps:,} env steps" for r in late)
    return (f"Budget: {len(late)} of {len(rows)} seeds set their best validation point in {last} of their runs "
            f"({which}): they were still improving that late in the budget.")


def recipe_text(recipe: Mapping[str, Mapping[str, Any]]) -> str:
    """The page's sentence on what its recipe does beyond the paper's method (labelled options)."""
    beyond = options_beyond_the_paper(recipe)
    if not beyond:
        return "The recipe is the paper's method, with no option beyond it."
    return "The recipe is the paper's method with these options beyond it: " + "; ".join(beyond) + "."


def rival_text(r: RecipeResults) -> str:
    """The sentence above a page's table that names the validation rival (what "beat rival" counts to)."""
    if r.validation_rival is None:
        return "Beat rival: no validation baseline had a finite mean JCT, so there was no rival to beat."
    mean = r.validation_baselines.get(r.validation_rival)
    best = validation_rival(r.validation_baselines)
    what = ", the best non-oracle baseline there" if best is not None and best[0] == r.validation_rival else ""
    return (f"Validation rival: **{r.validation_rival}** (mean JCT {fmt(mean, 3)} on the validation workloads{what}); "
            "beat rival: the env step of a seed's first validation point below it.")


def diagnosis_markdown(diagnosis: Mapping[str, Any], counterfactual: Mapping[str, Any] | None) -> list[str]:
    """The page's section on where the time goes: the time split of :func:`~.diagnosis.diagnose`,
    the lost claims and, when there is one, the conflict counterfactual."""
    label, base = diagnosis["policy"], diagnosis["baseline"]
    ours, theirs = diagnosis["splits"][label], diagnosis["splits"][base]
    names = {"label": label, "base": base}
    lines = [
        "## Where the time goes (held out)",
        "",
        f"Finished tasks of every training seed ({label}) and of {base}, the best non-oracle baseline, on the same "
        "held-out episodes: mean wait (arrival to first start) and run (first start to finish) in real steps, and "
        "the CPUs and GPUs a task held (for a preemptive scheduler, averaged over the steps it ran).",
        "",
        *DIAGNOSIS_TABLE.markdown(zip(ours["rows"], theirs["rows"]), names),
    ]
    mine, theirs_all = ours["rows"][-1], theirs["rows"][-1]  # the "all" rows
    if None not in (mine["jct"], theirs_all["jct"]):
        gap = {k: signed(mine[k] - theirs_all[k]) for k in ("jct", "wait", "run")}
        lines += ["", f"Mean JCT {label} − {base}: {gap['jct']} = wait {gap['wait']} + run {gap['run']} "
                      "(over every finished task)."]
    if ours.get("by_capacity") and theirs.get("by_capacity"):
        lines += ["", *capacity_markdown(label, base, ours["by_capacity"], theirs["by_capacity"])]
    lines += ["", f"Unfinished tasks: {label} {ours['unfinished']}, {base} {theirs['unfinished']}. Lost claims per "
                  f"episode ({label}: claims that lost a Bayes conflict, the cluster placing nothing that round): "
                  f"{fmt(ours['lost_claims'], 1)}."]
    if ours.get("coordination"):
        lines += ["", coordination_sentence(label, ours["coordination"])]
    if counterfactual is not None:
        lines += ["", counterfactual_sentence(counterfactual)]
    return lines


def capacity_markdown(label: str, base: str, ours: Sequence[Mapping[str, Any]],
                      theirs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The page's table of :func:`~.diagnosis.capacity_split`: per cluster size and task type, where the
    type's tasks started and how long they waited and ran there (clusters of more than one size only)."""
    theirs_at = {(tuple(b["capacity"]), b["type"]): b for b in theirs}
    pairs = [(a, theirs_at.get((tuple(a["capacity"]), a["type"]), {})) for a in ours]
    return ["By cluster size: the share of each type's finished tasks that started on clusters of that size, and "
            "their mean wait, run and GPUs there.", "",
            *CAPACITY_TABLE.markdown(pairs, {"label": label, "base": base})]


def counterfactual_sentence(c: Mapping[str, Any]) -> str:
    """The page's sentence on :func:`~.diagnosis.conflict_counterfactual`: seed 0's weights under the
    other conflict mode (``acted``: the mode the seed was trained and evaluated with; the Bayes rule
    when the file does not say)."""
    vs_t, vs_b = c["vs_trained"], c["vs_baseline"]
    against = f"against {c['baseline']} {paired(vs_b)}."
    acted = c.get("acted", PAPER_CONFLICTS)
    if acted == PAPER_CONFLICTS:
        return (f"Without lost claims: {c['policy']}'s weights, acting with conflicts resolved so that no claim is "
                f"lost (`{c['conflicts']}`: {CONFLICT_WORDS[c['conflicts']]}; an option beyond the paper, used here "
                "only to measure), "
                f"score mean JCT {fmt(c['mean_jct'])} with {fmt(c['lost_claims'], 1)} lost claims per episode. "
                f"Paired Δ against the same weights under the Bayes rule {paired(vs_t)} (below zero: what the lost "
                "claims cost, net of who now gets a contested task), " + against)
    return (f"Under the paper's conflict rule: {c['policy']}'s weights, its agents choosing at once with conflicts "
            f"resolved by `{c['conflicts']}` (a claim that loses places nothing that round) instead of in turn "
            f"(`{acted}`), score mean JCT {fmt(c['mean_jct'])} with {fmt(c['lost_claims'], 1)} lost claims per "
            f"episode. Paired Δ against the same weights acting by `{acted}` {paired(vs_t)} (above zero: what "
            "choosing in turn buys), " + against)


def coordination_sentence(label: str, c: Mapping[str, Any]) -> str:
    """The page's line on the agents' coordination (:func:`~.summary.coordination_stats`)."""
    return (f"Coordination ({label}, per decision where at least two agents could start a task): "
            f"{fmt(c['distinct'])} distinct tasks claimed, against {fmt(c['uniform'])} if each agent chose uniformly "
            f"among its feasible tasks and {fmt(c['matching'])} for the maximum matching of agents to tasks "
            f"({percent(c['halfway'], 0)} of the way from uniform to the matching). Real steps that end while a "
            f"cluster that placed nothing was offered a task no cluster started: {percent(c['idle_share'])}.")


def paper_markdown(results: RecipeResults) -> list[str]:
    """The paper's figure for the scenario beside ours (:func:`~.results.paper_comparison`) and the paper's
    claim; nothing for a scenario the paper has no figure of."""
    rows = paper_comparison(results)
    if not rows:
        return []
    exp, figure = SCENARIO_TO_EXPERIMENT[results.scenario]
    lines = [f"**The paper's {figure}** (its stored run `{exp}`) beside ours. Paper: the authors' stored result of "
             "that figure (one episode of their code, seed 42; `agents/evaluation/reference.py`). Ours: the held-out "
             f"workloads, TapFinger the mean over the {len(results.rows)} seed(s). The two simulators' JCTs differ in "
             "scale; TapFinger's reduction, 1 − JCT(TapFinger) / JCT(baseline), is the figure to compare.", "",
             *PAPER_TABLE.markdown(rows)]
    if CLAIMS.get(exp):
        lines += ["", f"The paper's claim: {CLAIMS[exp]}."]
    return lines


# ---------------------------------------------------------------------------------------
# The page and its files
# ---------------------------------------------------------------------------------------
def scenario_markdown(results: RecipeResults, tuning_pages: Sequence[str] = (), switching: str | None = None) -> str:
    """``<scenario>.md``: the command, the per-seed table, the mean over seeds, the baselines (and
    ``switching``, the sentence on why tiresias is slow, :mod:`.switching`, when measured), the
    verdicts, and links to ``tuning_pages`` (the recipe's changes measured on validation)."""
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
        rival_text(r),
        "",
        *SEED_TABLE.markdown(r.rows),
    ]
    o = r.over_seeds
    lines += ["", f"**Over seeds:** mean {fmt(o.get('mean_jct'), 3)}, sd {fmt(o.get('sd'), 3)}."]
    for key, name_key in (("vs_non_oracle", "best_non_oracle"), ("vs_oracle", "best_oracle")):
        vs = o.get(key)
        if vs is not None:
            lines.append(f"Per-workload mean over seeds against {o[name_key]}: paired Δ {paired(vs)}.")
    paper = paper_markdown(r)
    critic = critic_text(r.rows)
    lines += ["", *paper, *([""] if paper else []), late_best_text(r.rows), *(["", critic] if critic else [])]
    lines += ["", *VERDICT_TABLE.markdown(verdicts(r))]
    lines += ["", f"Baselines on the same held-out workloads (bound {fmt(r.bound, 3)}):", "",
              *BASELINE_TABLE.markdown(r.baselines.items())]
    if switching:
        lines += ["", switching]
    if r.diagnosis:
        lines += ["", *diagnosis_markdown(r.diagnosis, r.conflict_counterfactual)]
    vb = ", ".join(f"{k} {fmt(v, 3)}" for k, v in r.validation_baselines.items())
    lines += ["", f"Validation curves: [{r.scenario}.png]({r.scenario}.png) (baselines on the validation workloads: {vb})."]
    if tuning_pages:
        links = ", ".join(f"[{page}]({page})" for page in tuning_pages)
        lines += ["", f"Changes to this recipe, measured on the validation workloads across seeds: {links}."]
    lines.append("")
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[SeedRow], rival: str | None) -> Path:
    """One row per seed, the keyed columns of :data:`SEED_TABLE`: the row and the validation ``rival`` its
    steps count to."""
    return SEED_TABLE.write_csv(path, rows, {"validation_rival": rival})


def write_scenario_results(out: Path, results: RecipeResults) -> list[Path]:
    """``<scenario>.csv``, ``.json`` and ``.md`` under ``out`` (the PNG is drawn by the caller)."""
    out.mkdir(parents=True, exist_ok=True)
    base = out / results.scenario
    return [write_csv(base.with_suffix(".csv"), results.rows, results.validation_rival),
            write_json(base.with_suffix(".json"), json_safe(asdict(results))),
            write_scenario_page(out, results)]


def write_scenario_page(out: Path, results: RecipeResults) -> Path:
    """``<scenario>.md`` under ``out``, linking the scenario's tuning pages (full budget, then each probe's)
    and saying the switching measurements (:mod:`.switching`) when there are some."""
    md = out / f"{results.scenario}.md"
    tuning = [out / TUNING_DIR / f"{results.scenario}.md",
              *sorted((out / TUNING_DIR).glob(f"{results.scenario}-probe-*.md"))]
    switching = read_switching(out, results.scenario)
    md.write_text(scenario_markdown(results, [f"{TUNING_DIR}/{p.name}" for p in tuning if p.is_file()],
                                    switching_sentence(switching, switching_command(results.scenario))
                                    if switching else None))
    return md
