"""``docs/results/generalist.md``: each family recipe's policy on every scenario of its family, beside
the scenario's own recipe and its best non-oracle baseline (rows from :func:`.family.family_row`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from .columns import Column, Table
from .formatting import MISSING, code_list, count, counted, duration, fmt, mean_sd, paired, yes_no


#: the page and its JSON under the results directory: one section per family recipe
PAGE, PAGE_JSON = "generalist.md", "generalist.json"


def read_sections(out: Path) -> dict[str, dict[str, Any]]:
    """The family page's sections under ``out`` (recipe name -> its JSON entry); empty without a page."""
    path = Path(out) / PAGE_JSON
    return json.loads(path.read_text()) if path.is_file() else {}


def _own(row: Mapping[str, Any]) -> str:
    if row["own_mean_jct"] is None:
        return MISSING
    return f"{mean_sd(row['own_mean_jct'], row['own_sd'])} ({counted(row['own_seeds'], 'seed')})"


def _rival(row: Mapping[str, Any]) -> str:
    return MISSING if row["rival"] is None else f"{row['rival']} {fmt(row['rival_mean_jct'])}"


def _gap(row: Mapping[str, Any]) -> str:
    own = row["own_mean_jct"]
    return MISSING if own is None else f"{100 * (row['mean_jct'] / own - 1):+.1f}%"


#: one row per scenario of the family
FAMILY_TABLE = Table(
    Column("scenario", "scenario", text=str),
    Column("acts", "acts as its recipe (action, conflicts)", text=str),
    Column(None, "family policy: mean JCT ± sd over seeds",
           get=lambda r: mean_sd(r["mean_jct"], r["sd"]) + (f" ({r['truncated']} truncated)" if r["truncated"] else ""),
           text=str),
    Column(None, "its own recipe", get=_own, text=str),
    Column(None, "vs own recipe", get=_gap, text=str),
    Column(None, "best non-oracle baseline", get=_rival, text=str),
    Column(None, "each seed vs that baseline: paired Δ [95% interval]",
           get=lambda r: "; ".join(paired(p) for p in r["paired"]) or MISSING, text=str),
    Column(None, "beats it (every seed's interval below 0)", get=lambda r: r["targets"]["beats_rival"],
           text=lambda v: yes_no(v, bold=True)),
    Column(None, "within 2% of its own recipe", get=lambda r: r["targets"]["within_2pct_of_own"],
           text=lambda v: yes_no(v, bold=True)),
)

INTRO = """# One policy per task family

Each family recipe trains one shared policy on several scenarios and validates it on one or more; here each
of its seeds' `best.pt` runs on every scenario of its family, on that scenario's held-out workloads,
acting as that scenario's own recipe acts outside training. Beside it: the scenario's own recipe
(its results page, trained for that scenario alone) and its best non-oracle baseline, run again on the
same workloads for each seed's paired difference. Lower mean JCT is better.
"""


def validated_also(names: Sequence[str]) -> str:
    """The words for a recipe's other validation scenarios (``train.also_validate_on``); empty for none."""
    if not names:
        return ""
    return (f" and {code_list(names)}, `best.pt` chosen on the mean over them of the validation JCT relative to "
            "each one's best validation baseline")


def seeds_line(training: Sequence[Mapping[str, Any]]) -> str:
    """Where each seed's ``best.pt`` was chosen (the env step of its best validation point, of its budget)
    and each seed's wall time."""
    chosen = "; ".join(f"s{t['seed']} at {count(t['best_env_step'])} of {count(t['env_steps'])} env steps"
                       for t in training)
    walls = ", ".join(duration(t["wall_s"]) for t in training)
    return f"Each seed's `best.pt`, chosen on validation: {chosen}. Wall time per seed: {walls}."


def render_family_page(sections: Mapping[str, Mapping[str, Any]]) -> str:
    """The page's markdown: one section per family recipe (``sections``: recipe name -> its JSON entry)."""
    lines = [INTRO]
    for recipe, sec in sections.items():
        lines += [f"## {recipe}", "",
                  f"Trained on {code_list(sec['trained_on'])}, validated on `{sec['validated_on']}`"
                  f"{validated_also(sec.get('also_validated_on') or [])}; "
                  f"{counted(len(sec['rows'][0]['seeds']) if sec['rows'] else 0, 'seed')}, "
                  f"held-out workloads {sec['heldout_seeds'][0]}..{sec['heldout_seeds'][-1]}. "
                  f"Regenerate: `{sec['command']}`.", "",
                  *([seeds_line(sec["training"]), ""] if sec.get("training") else []),
                  *FAMILY_TABLE.markdown(sec["rows"]), ""]
    return "\n".join(lines)
