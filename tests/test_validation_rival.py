"""The sample-efficiency figure: the env steps until a seed's validation curve first beats the
validation rival, the best non-oracle validation baseline (not a fixed one), on every page that shows
it; result files written when the rival was optimus still read."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, replace

import pytest

from agents.evaluation import ablations, ablations_page, results, results_page, tuning, tuning_page
from agents.evaluation.results import (
    UNNAMED_FILE_RIVAL,
    RecipeResults,
    SeedRow,
    read_all,
    read_results,
    steps_to_beat,
    validation_rival,
)
from agents.evaluation.results_page import scenario_markdown, verdicts, write_scenario_results

#: testbed-3's validation baselines, rounded: optimus (preemptive) is the weak one there
TESTBED = {"optimus": 9.4, "optimus:preemptive=false": 7.4}
#: a validation curve below 9.4 from the start, below 7.4 only at step 200
CURVE = [(0, 9.0), (100, 8.0), (200, 7.0), (300, 7.2)]


def test_the_rival_is_the_best_validation_baseline():
    assert validation_rival(TESTBED) == ("optimus:preemptive=false", 7.4)
    assert validation_rival({"optimus": 7.0, "optimus:preemptive=false": 7.4}) == ("optimus", 7.0)
    # steps to beat it, not optimus: the curve beats optimus at once, the rival only later
    assert steps_to_beat(CURVE, validation_rival(TESTBED)[1]) == 200
    assert steps_to_beat(CURVE, TESTBED["optimus"]) == 0


def test_the_rival_ties_to_the_first_listed_and_ignores_non_finite_means():
    assert validation_rival({"optimus:preemptive=false": 7.4, "optimus": 7.4}) == ("optimus", 7.4)
    assert validation_rival({"optimus": math.nan, "optimus:preemptive=false": 7.4}) == ("optimus:preemptive=false", 7.4)
    assert validation_rival({"optimus": 9.4, "optimus:preemptive=false": -math.inf}) == ("optimus", 9.4)
    assert validation_rival({"optimus": None, "optimus:preemptive=false": math.inf}) is None
    assert validation_rival({}) is None
    assert validation_rival({"optimus": 9.4, "sjf": 1.0}) == ("optimus", 9.4)  # only the validation baselines


def test_an_oracle_baseline_is_never_the_rival(monkeypatch):
    monkeypatch.setattr(results, "VALIDATION_BASELINES", "optimus,optimus:oracle=true,sjf")
    assert validation_rival({"optimus": 9.4, "optimus:oracle=true": 5.0, "sjf": 4.0}) == ("optimus", 9.4)


def _row(seed: int, beat: int | None) -> SeedRow:
    return SeedRow(seed=seed, env_steps=1000, wall_s=600.0, device="cpu", env_steps_per_s=2.0, best_env_step=800,
                   validation_best=7.0, steps_to_beat_rival=beat, heldout_mean_jct=7.5, heldout_ci95=0.3,
                   best_non_oracle="optimus:preemptive=false", non_oracle_mean_jct=8.0, diff_non_oracle=-0.5,
                   diff_non_oracle_lo=-0.8, diff_non_oracle_hi=-0.2, best_oracle="sjf", oracle_mean_jct=6.0,
                   diff_oracle=1.5, diff_oracle_lo=1.2, diff_oracle_hi=1.8, bound_ratio=1.4)


def _results(rival: str | None, beats: list[int | None]) -> RecipeResults:
    return RecipeResults(
        scenario="tiny-3", command="python benchmarks/reproduce.py --config tiny-3 --seeds 2",
        heldout_seeds=[500_000, 500_001], validation_seeds=[10_000, 10_001],
        rows=[_row(s, b) for s, b in enumerate(beats)],
        baselines={"optimus:preemptive=false": {"mean_jct": 8.0, "ci95": [7.5, 8.5], "oracle": False}},
        bound=5.0, validation_baselines=dict(TESTBED), validation_rival=rival,
        over_seeds={"seeds": list(range(len(beats))), "mean_jct": 7.5, "sd": 0.1, "sd_over_mean": 0.013,
                    "best_non_oracle": "optimus:preemptive=false", "vs_non_oracle": None,
                    "best_oracle": "sjf", "vs_oracle": None, "bound_ratio": 1.4})


def _beat_verdict(r: RecipeResults) -> tuple[str, bool | None, str]:
    [v] = [v for v in verdicts(r) if v[0].startswith("every seed beats ")]
    return v


def test_the_page_names_the_rival_it_counted_to(tmp_path):
    r = _results("optimus:preemptive=false", [200, None])
    assert _beat_verdict(r) == ("every seed beats optimus:preemptive=false on validation", False,
                                "s0: 200 steps, s1: never")
    assert _beat_verdict(replace(r, rows=[_row(0, 200), _row(1, 300)]))[1] is True
    md = scenario_markdown(r)
    assert "Validation rival: **optimus:preemptive=false** (mean JCT 7.400 on the validation workloads, the best " \
           "non-oracle baseline there)" in md
    assert "| beat rival (validation) |" in md and "beat optimus" not in md
    assert "| every seed beats optimus:preemptive=false on validation | no | s0: 200 steps, s1: never |" in md
    # a rival that is not the best validation baseline (an old file's optimus) is not called the best
    assert "the best non-oracle" not in scenario_markdown(replace(r, validation_rival="optimus"))
    write_scenario_results(tmp_path, r)
    rows = list(csv.DictReader((tmp_path / "tiny-3.csv").open()))
    assert [(x["validation_rival"], x["steps_to_beat_rival"]) for x in rows] == [
        ("optimus:preemptive=false", "200"), ("optimus:preemptive=false", "")]
    doc = json.loads((tmp_path / "tiny-3.json").read_text())
    assert doc["validation_rival"] == "optimus:preemptive=false"
    assert [x["steps_to_beat_rival"] for x in doc["rows"]] == [200, None]
    assert read_results(tmp_path / "tiny-3.json") == r  # the new format reads back whole


def test_without_a_rival_the_verdict_is_not_applicable():
    what, met, _ = _beat_verdict(_results(None, [None, None]))
    assert what == "every seed beats the best validation baseline on validation" and met is None


def test_a_results_file_written_when_the_rival_was_optimus_still_reads(tmp_path):
    """The JSON of before: rows with ``steps_to_beat_optimus`` and no ``validation_rival``."""
    doc = asdict(_results(None, [0, 1_000]))
    del doc["validation_rival"]
    for row in doc["rows"]:
        row["steps_to_beat_optimus"] = row.pop("steps_to_beat_rival")
    (tmp_path / "tiny-3.json").write_text(json.dumps(doc))
    old = read_results(tmp_path / "tiny-3.json")
    assert UNNAMED_FILE_RIVAL == "optimus" and old.validation_rival == "optimus"
    assert [row.steps_to_beat_rival for row in old.rows] == [0, 1_000]
    assert _beat_verdict(old) == ("every seed beats optimus on validation", True, "s0: 0 steps, s1: 1,000 steps")
    assert "Validation rival: **optimus** (mean JCT 9.400 on the validation workloads);" in scenario_markdown(old)


def test_the_tuning_page_counts_to_the_rival_it_names(tmp_path):
    rows = [tuning.TuningRow("tiny-3", tuning.RECIPE, s, 1000, 60.0, "cpu", 800, 7.0, 7.0, None, b)
            for s, b in ((0, 200), (1, None))]
    summaries = tuning.summarise(rows, [])
    assert summaries[0].steps_to_beat_rival == [200, None]
    page = tuning_page.markdown("the command", "tiny-3", [10_000, 10_001], "tiny-3", TESTBED, "optimus:preemptive=false",
                           summaries, rows)
    assert "Rival: **optimus:preemptive=false**, the best of them" in page
    assert "| env steps to beat optimus:preemptive=false |" in page and "| 200, never |" in page
    tuning_page.write_csv(tmp_path / "t.csv", rows, "optimus:preemptive=false")
    got = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(x["validation_rival"], x["steps_to_beat_rival"]) for x in got] == [
        ("optimus:preemptive=false", "200"), ("optimus:preemptive=false", "")]
    doc = tuning_page.document("the command", "tiny-3", [10_000], "tiny-3", TESTBED, "optimus:preemptive=false",
                          summaries, rows)
    assert doc["validation_rival"] == "optimus:preemptive=false"
    assert doc["summaries"][0]["steps_to_beat_rival"] == [200, None]


def test_the_ablations_page_names_each_scenarios_rival():
    s = ablations.VariantSummary("tiny-3", ablations.RECIPE, 2, 7.5, 0.1, None, steps_to_beat_rival=[200, None])
    page = ablations_page.markdown("the command", [500_000, 500_001], [s], {"tiny-3": {"optimus": 9.0}},
                              {"tiny-3": "optimus:preemptive=false"})
    assert "validation rival: optimus:preemptive=false (the best non-oracle baseline on the validation workloads)" in page
    assert "| env steps to beat optimus:preemptive=false (validation) |" in page and "| 200, never |" in page


@pytest.mark.parametrize("table", [results_page.SEED_TABLE, tuning_page.ROW_TABLE, ablations_page.ROW_TABLE])
def test_no_csv_column_is_the_old_name(table):
    assert "steps_to_beat_optimus" not in table.keys
    assert {"validation_rival", "steps_to_beat_rival"} <= set(table.keys)


def test_every_committed_page_counts_to_its_best_validation_baseline():
    from pathlib import Path

    pages = read_all(Path(__file__).resolve().parent.parent / "docs" / "results")
    assert pages
    for r in pages:
        rival = validation_rival(r.validation_baselines)
        assert r.validation_rival == (rival[0] if rival else None), r.scenario
        assert _beat_verdict(r)[0] == f"every seed beats {r.validation_rival} on validation", r.scenario
