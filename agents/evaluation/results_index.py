"""The index pages over every recipe's results: ``docs/results/README.md`` (one row per scenario), the
same table in the top-level ``README.md`` (between :data:`README_BEGIN` and :data:`README_END`) and
``checkpoints/README.md`` (one row per shipped checkpoint). Written by ``benchmarks/reproduce.py``
from the ``<scenario>.json`` files (:func:`~.results.read_all`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .columns import Column, Table, markdown_lines
from .family_page import PAGE as FAMILY_PAGE
from .family_page import read_sections
from .formatting import MISSING, count, counted, duration, fmt, mean_sd, missing, paired
from .results import RecipeResults, file_sha256, read_all
from .results_page import verdicts


def _named_mean(r: RecipeResults, which: str) -> str:
    """A best baseline's cell: its name and held-out mean JCT."""
    name = r.over_seeds.get(which)
    return MISSING if name is None else f"{name} {fmt(r.baselines.get(name, {}).get('mean_jct'))}"


def _mean_wall(r: RecipeResults) -> float | None:
    walls = [row.wall_s for row in r.rows if not missing(row.wall_s)]
    return float(np.mean(walls)) if walls else None


def _targets_met(r: RecipeResults) -> str:
    checks = verdicts(r)
    return f"{sum(met is True for _, met, _ in checks)} of {len(checks)}"


#: one row per scenario with results (:class:`~.results.RecipeResults`)
INDEX_TABLE = Table(
    Column(None, "scenario", get=lambda r: f"[{r.scenario}]({r.scenario}.md)", text=str),
    Column(None, "seeds", get=lambda r: len(r.rows), text=str),
    Column(None, "tapfinger mean ± sd", get=lambda r: mean_sd(r.over_seeds.get("mean_jct"), r.over_seeds.get("sd")),
           text=str),
    Column(None, "best non-oracle", get=lambda r: _named_mean(r, "best_non_oracle"), text=str),
    Column(None, "paired Δ", get=lambda r: r.over_seeds.get("vs_non_oracle"), text=paired),
    Column(None, "seeds below zero", get=lambda r: f"{sum(row.beats_non_oracle for row in r.rows)}/{len(r.rows)}",
           text=str),
    Column(None, "best oracle", get=lambda r: _named_mean(r, "best_oracle"), text=str),
    Column(None, "paired Δ", get=lambda r: r.over_seeds.get("vs_oracle"), text=paired),
    Column(None, "× bound", get=lambda r: r.over_seeds.get("bound_ratio"), text=lambda v: fmt(v, 3)),
    Column(None, "wall time per seed", get=_mean_wall, text=duration),
    Column(None, "device", get=lambda r: ", ".join(sorted({row.device for row in r.rows})), text=str),
    Column(None, "targets met", get=_targets_met, text=str),
)


#: the command that rewrites the index pages from the results already there
INDEX_COMMAND = "python benchmarks/reproduce.py --index-only --ship checkpoints"
#: the scenarios of the index page, in the order of the paper's figures
SCENARIO_ORDER = ("synthetic-3", "synthetic-6", "multi-3", "hetero-6", "testbed-3", "testbed-6", "sjf-3")
#: the project's own results directory, whose index the top-level README.md repeats
PROJECT_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"

#: the results directory's other pages, linked below the index table when present: (path, what it shows)
OTHER_PAGES = (
    (FAMILY_PAGE, "one policy per task family, on every scenario of its family (`benchmarks/generalist.py`)"),
    ("transfer.md", "every shipped checkpoint on the other scenarios of its family, validation workloads "
                    "(`benchmarks/transfer.py`)"),
    ("tuning/", "recipe changes screened on validation workloads (`benchmarks/tune.py`)"),
)


def index_markdown(entries: Sequence[RecipeResults], command: str, not_run: Sequence[str] = (),
                   others: Sequence[tuple[str, str]] = ()) -> str:
    """``README.md`` of the results directory: one row per scenario with results, then one per
    scenario of ``not_run`` (no results yet) with the command that makes them, then a link to
    each page of ``others`` ((path, what it shows))."""
    headers = INDEX_TABLE.headers()
    waiting = [[name, "0", f"not run yet: `python benchmarks/reproduce.py --config {name} --seeds 1`",
                *[MISSING] * (len(headers) - 3)] for name in not_run]
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
        *markdown_lines(headers, [*(INDEX_TABLE.cells(r) for r in entries), *waiting]),
        "",
        *(f"- [{path}]({path}): {what}" for path, what in others),
        *([""] if others else []),
    ]
    return "\n".join(lines)


def write_index(out: Path, command: str, order: Sequence[str] = ()) -> Path:
    """``README.md`` over every ``<scenario>.json`` in ``out`` (scenarios in ``order`` first); a
    scenario of ``order`` without results gets a row that says so."""
    path = out / "README.md"
    entries = read_all(out, order)
    done = {r.scenario for r in entries}
    others = [(page, what) for page, what in OTHER_PAGES if (out / page).exists()]
    path.write_text(index_markdown(entries, command, [n for n in order if n not in done], others))
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


def _family_cells(path: Path, section: Mapping[str, Any]) -> list[str]:
    """A shipped family checkpoint's row: seed 0 of a family recipe (its section of the family page), its
    held-out mean JCT on each scenario of the family and the recipe's mean over seeds there."""
    s0, rows = section["seed0"], section["rows"]
    seeds = len(rows[0]["seeds"]) if rows else 0
    return [f"`{path.name}`", f"`{section['command']}`",
            MISSING if s0["env_steps"] is None else f"{count(s0['env_steps'])} env steps",
            MISSING if s0["wall_s"] is None else f"{duration(s0['wall_s'])}, {s0['device']}",
            "; ".join(f"{name} {fmt(v)}" for name, v in s0["mean_jct"].items()),
            "; ".join(f"{r['scenario']} {mean_sd(r['mean_jct'], r['sd'])}" for r in rows)
            + f" ({counted(seeds, 'seed')})"]


def _checkpoint_cells(path: Path, r: RecipeResults | None) -> list[str]:
    """A shipped checkpoint's row: from the results of the recipe whose seed 0 it is (``r``), or a note."""
    if r is None:
        note = (f"not a seed of the current recipe: trained before the recipes existed (a chain of hand-run rounds); "
                f"`reproduce.py --config {path.stem} --ship checkpoints` replaces it")
        return [f"`{path.name}`", note, *[MISSING] * 4]
    row = next(x for x in r.rows if x.seed == 0)
    o = r.over_seeds
    seeds = counted(len(r.rows), 'seed')
    return [f"`{path.name}`", f"`{r.command}`", f"{count(row.env_steps)} env steps",
            f"{duration(row.wall_s)}, {row.device}", fmt(row.heldout_mean_jct),
            f"{mean_sd(o.get('mean_jct'), o.get('sd'))} ({seeds})"]


def _row(path: Path, by_sha: Mapping[str, RecipeResults], families: Mapping[str, Mapping[str, Any]]) -> list[str]:
    sha = file_sha256(path)
    if sha not in by_sha and sha in families:
        return _family_cells(path, families[sha])
    return _checkpoint_cells(path, by_sha.get(sha))


def checkpoint_index(checkpoints: Path, out: Path, order: Sequence[str] = ()) -> str:
    """``checkpoints/README.md``: one row per shipped file, from the results of the recipe whose
    seed 0 it is (matched by content); a file that is no such seed says so."""
    by_sha = {r.seed0_sha256: r for r in read_all(out, order) if r.seed0_sha256}
    families = {sec["seed0"]["sha256"]: sec for sec in read_sections(out).values() if sec.get("seed0")}
    names = [n for n in order if (checkpoints / f"{n}.pt").is_file()]
    names += sorted(p.stem for p in checkpoints.glob("*.pt") if p.stem not in names)
    paths = [checkpoints / f"{name}.pt" for name in names]
    lines = [
        "# Shipped checkpoints",
        "",
        "Each file is seed 0 of its scenario's recipe, copied by `benchmarks/reproduce.py --ship checkpoints` "
        "(this table is written by the same command), or seed 0 of a family recipe, copied by "
        "`benchmarks/generalist.py --ship checkpoints` (one policy for every scenario of its family). Retrain "
        "one with the command shown; `python train.py --config <scenario or recipe> --seed 0` is its training "
        "run. Held out: workloads 500000..500029, mean JCT of this file and the mean over the recipe's "
        "training seeds (a family file: on each scenario of its family).",
        "",
        *markdown_lines(["file", "command", "budget", "wall time, device (this seed)", "held out: this file",
                         "mean over seeds"], [_row(p, by_sha, families) for p in paths]),
        "",
    ]
    return "\n".join(lines)


def write_indexes(out: Path, ship: Path | None) -> list[Path]:
    """Every ``<out>/<scenario>.md`` again from its JSON, ``<out>/README.md``; the top-level README's
    results table when ``out`` is this project's ``docs/results``; ``<ship>/README.md`` when checkpoints
    are shipped."""
    from .results_page import write_scenario_page

    written = [write_scenario_page(out, r) for r in read_all(out, SCENARIO_ORDER)]
    index = write_index(out, INDEX_COMMAND, SCENARIO_ORDER)
    written.append(index)
    readme = PROJECT_RESULTS.parent.parent / "README.md"
    if out.resolve() == PROJECT_RESULTS and update_readme(readme, index.read_text()):
        written.append(readme)
    if ship is not None:
        path = ship / "README.md"
        path.write_text(checkpoint_index(ship, out, SCENARIO_ORDER))
        written.append(path)
    return written
