"""How often schedulers re-size running tasks, and the results page's sentence on tiresias."""

from __future__ import annotations

import numpy as np
import pytest

from agents.evaluation.summary import switching_stats, switching_text
from agents.evaluation.switching import (
    SWITCHING_DIR,
    measure_switching,
    read_switching,
    switching_command,
    switching_sentence,
    write_switching,
)
from agents.evaluation.results import report_seeds
from envs.config import load_scenario
from envs.scheduling import EpisodeResult


def _episode(start, finish, switches, steps):
    records = {"start": np.array(start), "finish": np.array(finish), "switches": np.array(switches)}
    return EpisodeResult(scheduler="x", scenario="s", seed=0, records=records, tasks_in_system=np.zeros(1),
                         usage=np.zeros((1, 1, 2)), capacity=np.ones((1, 2)), decision_ms=0.0, conflicts=0,
                         invalid=0, truncated=False, steps=steps)


def test_switching_stats_count_started_tasks_and_their_steps_after_starting():
    # task 0: started 1, done 5 (4 steps, 2 switches); task 1 never started; task 2 started 6,
    # unfinished when the episode stopped at 10 (4 steps, 1 switch); second episode: 1 task, 3 steps, 0
    a = _episode([1, -1, 6], [5, -1, -1], [2, 0, 1], steps=10)
    b = _episode([0], [3], [0], steps=3)
    stats = switching_stats([a, b])
    assert stats["switches"] == pytest.approx(3 / 3)
    assert stats["switch_share"] == pytest.approx(3 / 11)
    assert switching_stats([_episode([-1], [-1], [0], steps=4)]) == {"switches": None, "switch_share": None}
    line = switching_text("tiresias", stats, 0.5)
    assert "1.0 real steps at a new allocation" in line and "27%" in line and "0.5x" in line


DOC = {
    "scenario": "synthetic-3", "seeds": [7, 8, 9], "switch_overhead": 0.5,
    "variants": {
        "tiresias": {"mean_jct": 26.1, "switches": 4.2, "switch_share": 0.18, "mean_allocation": [1.9, 0.8]},
        "tiresias_no_overhead": {"mean_jct": 18.3, "switches": 4.0, "switch_share": 0.2, "mean_allocation": [1.9, 0.8]},
        "tiresias_non_preemptive": {"mean_jct": 16.9, "switches": 0.0, "switch_share": 0.0, "mean_allocation": [2, 1]},
        "min": {"mean_jct": 17.1, "switches": 0.0, "switch_share": 0.0, "mean_allocation": [2, 1]},
    },
}


def test_the_sentence_says_every_measured_number():
    text = switching_sentence(DOC, switching_command("synthetic-3"))
    for part in ("7..9", "python benchmarks/switching.py --config synthetic-3", "1.9 CPUs and 0.8 GPUs",
                 "min's 2.0 CPUs and 1.0 GPUs", "4.2 real steps", "18%", "0.5x", "26.10 as configured",
                 "18.30 without the switching overhead", "16.90 non-preemptive", "min's 17.10"):
        assert part in text, part
    no_overhead = {**DOC, "switch_overhead": 1.0,
                   "variants": {k: v for k, v in DOC["variants"].items() if k != "tiresias_no_overhead"}}
    text = switching_sentence(no_overhead, "cmd")
    assert "no switching overhead" in text and "without the switching overhead" not in text


def test_the_file_round_trips(tmp_path):
    assert read_switching(tmp_path, "synthetic-3") is None
    path = write_switching(tmp_path, DOC)
    assert path == tmp_path / SWITCHING_DIR / "synthetic-3.json"
    assert read_switching(tmp_path, "synthetic-3") == DOC


@pytest.mark.parametrize("overhead", [0.5, 1.0])
def test_measure_switching_runs_the_variants(overhead):
    cfg = load_scenario("synthetic-3", ["num_tasks=30", f"switch_overhead={overhead}"])
    doc = measure_switching(cfg, [3, 4])
    variants = doc["variants"]
    assert doc["switch_overhead"] == overhead and doc["seeds"] == [3, 4]
    assert set(variants) == ({"tiresias", "tiresias_non_preemptive", "min"}
                             | ({"tiresias_no_overhead"} if overhead < 1 else set()))
    # only the preemptive scheduler re-sizes running tasks; min holds the minimum requirement (2, 1)
    assert variants["tiresias"]["switches"] > 0
    assert variants["tiresias_non_preemptive"]["switches"] == 0 and variants["min"]["switches"] == 0
    assert variants["min"]["mean_allocation"] == pytest.approx([2.0, 1.0])
    if overhead < 1:
        free = variants["tiresias_no_overhead"]
        assert free["switch_overhead"] == 1.0 and free["mean_jct"] < variants["tiresias"]["mean_jct"]


def test_the_scenario_page_says_the_sentence_once_measured(tmp_path):
    from pathlib import Path

    from agents.evaluation.results import read_results
    from agents.evaluation.results_page import write_scenario_page

    results = read_results(Path(__file__).resolve().parents[1] / "docs" / "results" / "synthetic-3.json")
    page = write_scenario_page(tmp_path, results).read_text()
    assert "Why tiresias is slow" not in page
    write_switching(tmp_path, DOC)
    page = write_scenario_page(tmp_path, results).read_text()
    assert switching_sentence(DOC, switching_command("synthetic-3")) in page
    assert page.index("Why tiresias is slow") > page.index("| tiresias |")


def test_the_command_writes_each_scenario_and_refuses_bad_input(tmp_path, capsys):
    from tests.test_benchmarks import bench

    main = bench("switching").main
    assert main(["--config", "sjf-3", "--heldout", "2", "--workers", "1", "--out", str(tmp_path)]) == 0
    doc = read_switching(tmp_path, "sjf-3")
    assert doc["seeds"] == report_seeds(2) and "tiresias_no_overhead" not in doc["variants"]
    assert "Why tiresias is slow here" in capsys.readouterr().out
    assert main(["--config", "no-such-scenario", "--out", str(tmp_path)]) == 2
    assert main(["--out", str(tmp_path / "empty")]) == 2  # nothing named and no results to take the names from
    assert main(["--config", "sjf-3", "--heldout", "31", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no-such-scenario" in err and "no results under" in err and "30 seeds" in err
