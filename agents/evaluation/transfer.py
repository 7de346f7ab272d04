"""What carries across scenarios: every shipped checkpoint on the validation workloads of each other
scenario of its family, beside that scenario's own checkpoint and its validation rival
(``docs/results/transfer.{json,md}``, written by ``benchmarks/transfer.py``).

A checkpoint's family is every shipped scenario its policy can act in
(:func:`~.family.family_scenarios`). On each target scenario every checkpoint acts as the target's own
recipe acts outside training (:func:`~agents.training.prepare.acting_rule`), on the target recipe's validation
workloads (:func:`~.curves.recipe_validation`, the workloads its ``best.pt`` was chosen on), and the
validation baselines (:data:`~agents.training.validation_baselines.VALIDATION_BASELINES`) run on the
same workloads: the rival is the better of them, as the training run's curve names it. Validation
workloads only: these numbers choose recipes; held-out ones report on the scenario pages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .columns import Column, Table
from .formatting import MISSING, code_list, fmt, paired

#: the page and its JSON under the results directory
PAGE, PAGE_JSON = "transfer.md", "transfer.json"


def shipped_sources(checkpoints: Path) -> list[str]:
    """The shipped files named after a recipe of ``configs/`` (a scenario or a family recipe), in name order."""
    from envs.config import ConfigError, read_scenario_yaml

    names = []
    for path in sorted(Path(checkpoints).glob("*.pt")):
        try:
            read_scenario_yaml(path.stem)
        except ConfigError:
            continue
        names.append(path.stem)
    return names


def transfer_sections(checkpoints: Path, workers: int = 1, progress: bool = False) -> list[dict[str, Any]]:
    """One section per target scenario that some other shipped checkpoint can act in: each checkpoint
    whose family holds the target (its own first), with its mean JCT over the target's validation
    workloads and its paired difference to the target's validation rival."""
    from agents.training.prepare import acting_rule, prepare_run
    from agents.training.validation_baselines import VALIDATION_BASELINES

    from .curves import recipe_validation
    from .family import family_scenarios
    from .results import validation_rival
    from .runner import checkpoint_spec, resolve_schedulers, run_evaluation
    from .summary import paired_from_means, per_seed_means

    sources = shipped_sources(checkpoints)
    specs_of = {s: prepare_run(s) for s in sources}
    reach = {s: family_scenarios(spec) for s, spec in specs_of.items()}
    targets = sorted({t for s in sources for t in reach[s] if t != s})
    sections = []
    for target in targets:
        spec = prepare_run(target)
        validation = recipe_validation(spec)
        action, conflicts = acting_rule(target)
        acting = sorted((s for s in sources if target in reach[s]), key=lambda s: (s != target, s))
        specs = []
        for source in acting:
            path = Path(checkpoints) / f"{source}.pt"
            specs.append(checkpoint_spec(source, path, validation.scenario, action=action, conflicts=conflicts))
        baselines = resolve_schedulers(VALIDATION_BASELINES, (), validation.scenario)
        if progress:
            print(f"{target}: {', '.join(acting)} and {VALIDATION_BASELINES} on {len(validation.seeds)} "
                  "validation workloads", flush=True)
        results = run_evaluation(validation.scenario, [*specs, *baselines], validation.seeds, workers=workers,
                                 progress=False).results
        means = {name: per_seed_means(rs) for name, rs in results.items()}
        rival = validation_rival({b.name: float(np.nanmean(means[b.name])) for b in baselines})
        rows = []
        for source in acting:
            rows.append({
                "source": source, "own": source == target,
                "trained_on": [s.name for s in specs_of[source].trained_on],
                "mean_jct": float(np.nanmean(means[source])),
                "truncated": int(sum(bool(r.truncated) for r in results[source])),
                "vs_rival": None if rival is None else paired_from_means(means[source], means[rival[0]]),
            })
        sections.append({"target": target, "action": action, "conflicts": conflicts,
                         "validation_seeds": list(validation.seeds), "rival": None if rival is None else rival[0],
                         "rival_mean_jct": None if rival is None else rival[1], "rows": rows})
    return sections


def _vs_own(row: dict[str, Any], own: float | None) -> str:
    return MISSING if own is None or row["own"] else f"{100 * (row['mean_jct'] / own - 1):+.1f}%"


#: one row per checkpoint acting in a target scenario (``{"own": ...}`` is the target's own mean)
TRANSFER_TABLE = Table(
    Column(None, "checkpoint", get=lambda r: f"`{r['source']}.pt`" + (" (its own)" if r["own"] else ""), text=str),
    Column(None, "trained on", get=lambda r: code_list(r["trained_on"]), text=str),
    Column(None, "validation mean JCT",
           get=lambda r: fmt(r["mean_jct"]) + (f" ({r['truncated']} truncated)" if r["truncated"] else ""), text=str),
    Column(None, "vs its own checkpoint", get=lambda r: r["vs_own"], text=str),
    Column(None, "vs the rival: paired Δ [95% interval]",
           get=lambda r: MISSING if r["vs_rival"] is None else paired(r["vs_rival"]), text=str),
)


def render_transfer_page(sections: Sequence[dict[str, Any]], command: str) -> str:
    """The page's markdown: one table per target scenario."""
    lines = [
        "# What carries: shipped checkpoints on other scenarios of their family",
        "",
        "Generated by",
        "",
        f"    {command}",
        "",
        "Each shipped checkpoint acts in every other scenario its policy can act in (the same task types, "
        "pending slots and allocation grid; the same mode unless it observes the mode), as that scenario's own "
        "recipe acts outside training, on that recipe's validation workloads (the ones its `best.pt` was chosen "
        "on). Mean JCT over the workloads, lower is better; paired Δ against the scenario's validation rival, the "
        "better of its validation baselines, per workload (below zero: the checkpoint is faster). Validation "
        "workloads choose recipes; the held-out numbers are on each scenario's page.",
        "",
    ]
    for sec in sections:
        own = next((r["mean_jct"] for r in sec["rows"] if r["own"]), None)
        rows = [{**r, "vs_own": _vs_own(r, own)} for r in sec["rows"]]
        seeds = sec["validation_seeds"]
        rival = MISSING if sec["rival"] is None else f"{sec['rival']} {fmt(sec['rival_mean_jct'])}"
        lines += [f"## {sec['target']}", "",
                  f"Acting as its recipe: `{sec['action']}`, conflicts by `{sec['conflicts']}`; validation workloads "
                  f"{seeds[0]}..{seeds[-1]}; rival {rival}.", "",
                  *TRANSFER_TABLE.markdown(rows), ""]
    return "\n".join(lines)
