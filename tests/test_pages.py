"""The page layer: one formatting module and one column table drive every page's markdown and CSV."""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.evaluation import ablations, ablations_page, results_page, tuning, tuning_page
from agents.evaluation.columns import Column, Table, csv_cell, markdown_lines
from agents.evaluation.formatting import (
    MISSING,
    count,
    counted,
    duration,
    fmt,
    interval,
    mean_sd,
    paired,
    percent,
    signed,
    steps_or_never,
    yes_no,
)
from agents.evaluation.results import read_all

ROOT = Path(__file__).resolve().parent.parent
EVALUATION = ROOT / "agents" / "evaluation"


@pytest.mark.parametrize("absent", [None, math.nan, math.inf, -math.inf])
def test_every_formatter_writes_the_one_missing_marker(absent):
    for text in (fmt(absent), fmt(absent, 0), signed(absent), interval(absent, 1.0, 2.0), percent(absent),
                 count(absent), duration(absent), paired({"mean_diff": absent, "ci95": [None, None]}), yes_no(None)):
        assert text == MISSING
    assert paired(None) == MISSING and mean_sd(absent, 0.1) == f"{MISSING} ± 0.10"


def test_the_formatters_write_numbers_one_way():
    assert fmt(4.1351) == "4.14" and fmt(4.1351, 3) == "4.135" and signed(0.37) == "+0.37"
    assert interval(-0.37, -0.5, -0.25) == "-0.37 [-0.50, -0.25]"
    assert interval(0.1, None, None, digits=3) == "+0.100"  # one seed: no interval
    assert percent(0.2514) == "25.1%" and percent(0.5, 0) == "50%" and count(1966080) == "1,966,080"
    assert duration(49 * 60) == "49 min" and duration(5.5 * 3600) == "5.5 h"
    assert steps_or_never(None) == "never" and steps_or_never(1000) == "1,000"
    assert mean_sd(4.136, 0.09) == "4.14 ± 0.09" and mean_sd(4.136, None) == "4.14"
    assert counted(1, "seed") == "1 seed" and counted(3, "seed") == "3 seeds" and counted(0, "seed") == "0 seeds"


@dataclass
class Row:
    name: str
    jct: float | None
    steps: int | None


TABLE = Table(
    Column("name", "scheduler", text=str),
    Column("jct", "mean JCT", text=lambda v: fmt(v, 3)),
    Column("steps"),  # CSV and JSON only
    Column(None, "steps", get=lambda r: r.steps, text=count),  # markdown only
    Column("rival"),  # from the context
)
ROWS = [Row("optimus", 4.12345, 1000), Row("broken", None, None), Row("stuck", math.nan, 5)]


def test_a_column_drives_the_markdown_the_csv_and_the_json_of_a_row(tmp_path):
    lines = TABLE.markdown(ROWS)
    assert lines[:2] == ["| scheduler | mean JCT | steps |", "|---|---|---|"]
    assert lines[2:] == ["| optimus | 4.123 | 1,000 |", f"| broken | {MISSING} | {MISSING} |", f"| stuck | {MISSING} | 5 |"]
    TABLE.write_csv(tmp_path / "t.csv", ROWS, {"rival": "okita"})
    got = list(csv.reader((tmp_path / "t.csv").open()))
    assert got == [["name", "jct", "steps", "rival"], ["optimus", "4.1235", "1000", "okita"],
                   ["broken", "", "", "okita"], ["stuck", "", "5", "okita"]]
    assert TABLE.record(ROWS[0], {"rival": "okita"}) == {"name": "optimus", "jct": 4.12345, "steps": 1000,
                                                          "rival": "okita"}
    # every markdown cell and every CSV cell is the column's value, formatted its own way
    for row in ROWS:
        values = {c.header: c.value(row, {"rival": "okita"}) for c in TABLE.headed()}
        assert TABLE.cells(row) == [c.text(values[c.header]) or MISSING for c in TABLE.headed()]
        record = TABLE.record(row, {"rival": "okita"})
        assert TABLE.csv_rows([row], {"rival": "okita"}) == [[csv_cell(v) for v in record.values()]]


def test_a_new_column_is_one_entry():
    wider = Table(*TABLE.columns, Column("share", "share", get=lambda r: 0.25, text=percent))
    assert wider.markdown(ROWS[:1]) == ["| scheduler | mean JCT | steps | share |", "|---|---|---|---|",
                                        "| optimus | 4.123 | 1,000 | 25.0% |"]
    assert wider.keys == ["name", "jct", "steps", "rival", "share"]
    assert Table(Column(None, "{what} best")).headers({"what": "validation"}) == ["validation best"]
    assert markdown_lines(["a"], [["1"], ["2"]]) == ["| a |", "|---|", "| 1 |", "| 2 |"]


def test_every_page_row_has_every_column_and_writes_missing_values_alike(tmp_path):
    """The stored results: each table row of a page has as many cells as its header, and no page
    writes a missing value any other way than :data:`MISSING`."""
    entries = read_all(ROOT / "docs" / "results")
    if not entries:
        pytest.skip("no stored results")
    for r in entries:
        md = results_page.scenario_markdown(r)
        table = [line for line in md.splitlines() if line.startswith("|")]
        assert all(line.count("|") >= 3 for line in table)
        assert not re.search(r"\| (–|-|None|nan) \|", md)
        cut = [row for row in r.rows]
        cut[0] = type(cut[0])(**{**cut[0].__dict__, "heldout_ci95": None, "env_steps_per_s": None})
        page = results_page.SEED_TABLE.cells(cut[0])
        assert page[4] == MISSING and page[8].endswith(f"± {MISSING}")


def test_the_tuning_and_ablation_pages_write_missing_values_alike():
    rows = [tuning.TuningRow("tiny-3", tuning.RECIPE, 0, 100, math.nan, "cpu", None, None, None, None, None),
            tuning.TuningRow("tiny-3", "lr", 0, 100, 60.0, "cpu", 50, 7.0, None, None, 50)]
    summaries = tuning.summarise(rows, [tuning.Candidate("lr", ("train.lr=1e-3",))])
    page = tuning_page.markdown("cmd", "tiny-3", [10_000, 10_001], "tiny-3", {"optimus": None}, None, summaries, rows)
    assert f"| recipe | {MISSING} | 1 | {MISSING} | {MISSING} | {MISSING} | never | {MISSING} |" in page
    assert f"| 0 | {MISSING} ({MISSING}) | {MISSING} (7.000) |" in page and "optimus n/a" in page
    assert "–" not in page
    s = ablations.VariantSummary("tiny-3", ablations.RECIPE, 1, None, None, None, [], None, "cpu")
    page = ablations_page.markdown("cmd", [500_000, 500_001], [s], {"tiny-3": {"optimus": None}}, {"tiny-3": None})
    assert f"| recipe | 1 | {MISSING} | {MISSING} | {MISSING} | {MISSING} | cpu |" in page
    assert f"| recipe | the recipe" in page and "–" not in page


def test_no_page_module_keeps_its_own_number_formatting():
    for name in ("results_page.py", "results_index.py", "tuning_page.py", "ablations_page.py", "report.py",
                 "results.py", "tuning.py", "ablations.py"):
        text = (EVALUATION / name).read_text()
        assert "def _fmt" not in text and '"n/a"' not in text and '"–"' not in text, name
    text = (ROOT / "benchmarks" / "baselines.py").read_text()
    assert "def _fmt" not in text and '"n/a"' not in text


def test_a_scenario_page_links_every_tuning_page_of_its_scenario(tmp_path):
    """``tuning/<scenario>.md`` first, then each probe's page; another scenario's pages are not linked."""
    entries = read_all(ROOT / "docs" / "results")
    if not entries:
        pytest.skip("no stored results")
    r = entries[0]
    (tmp_path / "tuning").mkdir()
    assert "Changes to this recipe" not in results_page.write_scenario_page(tmp_path, r).read_text()
    for name in (f"{r.scenario}-probe-524288.md", f"{r.scenario}.md", "other-6-probe-65536.md"):
        (tmp_path / "tuning" / name).write_text("# tuning\n")
    page = results_page.write_scenario_page(tmp_path, r).read_text()
    line = next(x for x in page.splitlines() if x.startswith("Changes to this recipe"))
    assert line.endswith(f"[tuning/{r.scenario}.md](tuning/{r.scenario}.md), "
                         f"[tuning/{r.scenario}-probe-524288.md](tuning/{r.scenario}-probe-524288.md).")
