"""Where the time goes: the wait/run split of finished tasks, and the conflict counterfactual's guard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.evaluation import diagnosis
from agents.evaluation.diagnosis import time_split
from agents.evaluation.results import RecipeResults, read_results
from agents.evaluation.results_page import scenario_markdown, write_scenario_results
from envs.scheduling import EpisodeResult


def _episode(seed: int, tasks: list[tuple[int, int, int, int, int, int, float, float]], conflicts: int) -> EpisodeResult:
    """tasks: (type, arrival, start, finish, cpu, gpu, avg_cpu, avg_gpu); finish -1: unfinished."""
    a = np.array(tasks, dtype=np.float64)
    finish = a[:, 3].astype(np.int64)
    arrival = a[:, 1].astype(np.int64)
    records = {
        "task_id": np.arange(len(tasks)), "type": a[:, 0].astype(np.int64), "arrival": arrival,
        "start": a[:, 2].astype(np.int64), "finish": finish, "jct": np.where(finish >= 0, finish - arrival, -1),
        "cluster": np.zeros(len(tasks), dtype=np.int64), "cpu": a[:, 4].astype(np.int64),
        "gpu": a[:, 5].astype(np.int64), "avg_cpu": a[:, 6], "avg_gpu": a[:, 7],
    }
    return EpisodeResult(scheduler="x", scenario="s", seed=seed, records=records, tasks_in_system=np.zeros(1),
                         usage=np.zeros((1, 1, 2)), capacity=np.ones((1, 2)), decision_ms=0.0, conflicts=conflicts,
                         invalid=0, truncated=False, steps=1)


EPISODES = [
    _episode(0, [(0, 0, 1, 5, 2, 1, 2.0, 1.0),     # img: wait 1, run 4
                 (1, 0, 0, 2, 4, 3, 3.0, 2.0),     # lm: wait 0, run 2
                 (1, 1, 4, -1, 2, 1, 2.0, 1.0)],   # lm, started, never finished
             conflicts=3),
    _episode(1, [(0, 2, 5, 9, 6, 1, 4.0, 1.0),     # img: wait 3, run 4
                 (1, 0, 2, 8, 8, 5, 6.0, 4.0)],    # lm: wait 2, run 6
             conflicts=0),
]


def test_the_split_is_per_type_over_finished_tasks_only():
    split = time_split(EPISODES, ["img", "lm"], preemptive=False)
    img, lm, every = split["rows"]
    assert (img["type"], img["tasks"], img["wait"], img["run"], img["jct"]) == ("img", 2, 2.0, 4.0, 6.0)
    assert (lm["tasks"], lm["wait"], lm["run"], lm["jct"]) == (2, 1.0, 4.0, 5.0)
    assert (img["cpu"], img["gpu"], lm["cpu"], lm["gpu"]) == (4.0, 1.0, 6.0, 4.0)  # allocations at start
    assert every["type"] == "all" and every["tasks"] == 4 and every["jct"] == pytest.approx(5.5)
    assert img["share"] == lm["share"] == 0.5
    # the unfinished task counts as such and enters no mean; lost claims are per episode
    assert split["unfinished"] == 1 and split["lost_claims"] == 1.5
    # the all row's JCT is the plain mean JCT of the finished tasks
    assert every["jct"] == pytest.approx(np.concatenate([e.jct for e in EPISODES]).mean())


def test_a_preemptive_schedulers_resources_are_averaged_over_its_running_steps():
    img, lm, _ = time_split(EPISODES, ["img", "lm"], preemptive=True)["rows"]
    assert (img["cpu"], img["gpu"], lm["cpu"], lm["gpu"]) == (3.0, 1.0, 4.5, 3.0)


def test_a_type_with_no_finished_task_has_no_means():
    rows = time_split(EPISODES, ["img", "lm", "video"], preemptive=False)["rows"]
    assert rows[2] == {"type": "video", "tasks": 0, "share": 0.0, "wait": None, "run": None, "jct": None,
                       "cpu": None, "gpu": None}


def test_the_counterfactual_runs_the_other_conflict_mode(monkeypatch):
    """Bayes' rule is measured against no lost claims, agents choosing in turn against Bayes' rule;
    a mode with no counterpart (none of today's: ``other`` stands for one) runs nothing."""
    from types import SimpleNamespace

    from agents.evaluation.runner import SchedulerSpec

    assert [diagnosis.counterfactual_conflicts(m) for m in ("bayes", "room", "sequential", "other")] == \
        ["room", "bayes", "bayes", None]
    run = SimpleNamespace(specs=[SchedulerSpec(name="tapfinger-s0", checkpoint="x.pt", conflicts="other")])
    called = []
    monkeypatch.setattr(diagnosis, "run_evaluation", lambda *a, **k: called.append(a))
    assert diagnosis.conflict_counterfactual(run, "tapfinger-s0", "optimus") is None
    assert not called


def _on_clusters(episodes: list[EpisodeResult], clusters: list[list[int]]) -> list[EpisodeResult]:
    """The episodes with their tasks started on ``clusters`` (one list per episode)."""
    from dataclasses import replace

    return [replace(e, records={**e.records, "cluster": np.array(c, dtype=np.int64)}) for e, c in zip(episodes, clusters)]


def test_clusters_of_several_sizes_split_each_type_by_the_size_it_started_on():
    # sizes: cluster 0 (4, 4); clusters 1 and 2 (8, 8). Finished: img on 0 (wait 1) and 2 (wait 3),
    # lm on 1 (wait 0) and 1 (wait 2); the unfinished lm task on 0 enters nothing
    episodes = _on_clusters(EPISODES, [[0, 1, 0], [2, 1]])
    split = time_split(episodes, ["img", "lm"], preemptive=False, capacities=[(4, 4), (8, 8), (8, 8)])
    rows = {(tuple(r["capacity"]), r["type"]): r for r in split["by_capacity"]}
    assert list(rows) == [((4, 4), "img"), ((4, 4), "lm"), ((8, 8), "img"), ((8, 8), "lm")]
    assert (rows[(4, 4), "img"]["tasks"], rows[(4, 4), "img"]["share"], rows[(4, 4), "img"]["wait"]) == (1, 0.5, 1.0)
    assert (rows[(8, 8), "img"]["wait"], rows[(8, 8), "img"]["run"]) == (3.0, 4.0)
    assert (rows[(4, 4), "lm"]["tasks"], rows[(4, 4), "lm"]["share"], rows[(4, 4), "lm"]["wait"]) == (0, 0.0, None)
    assert (rows[(8, 8), "lm"]["tasks"], rows[(8, 8), "lm"]["share"], rows[(8, 8), "lm"]["wait"]) == (2, 1.0, 1.0)
    # one size for every cluster (or none given): no split
    assert time_split(episodes, ["img", "lm"], preemptive=False, capacities=[(8, 8)] * 3)["by_capacity"] is None
    assert time_split(episodes, ["img", "lm"], preemptive=False)["by_capacity"] is None


def test_the_page_shows_the_split_by_cluster_size_when_sizes_differ():
    caps = [(4, 4), (8, 8), (8, 8)]
    ours = time_split(_on_clusters(EPISODES, [[0, 1, 0], [2, 1]]), ["img", "lm"], preemptive=False, capacities=caps)
    theirs = time_split(_on_clusters(EPISODES, [[1, 1, 1], [2, 0]]), ["img", "lm"], preemptive=False, capacities=caps)
    diag = {"policy": "tapfinger", "baseline": "optimus", "splits": {"tapfinger": ours, "optimus": theirs}}
    md = scenario_markdown(_results(diag, None))
    assert "| cluster (CPUs, GPUs) | task type | share of the type: tapfinger / optimus |" in md
    assert "| (4, 4) | img | 50% / 0% | 1.00 / n/a | 4.00 / n/a | 1.0 / n/a |" in md
    assert "| (4, 4) | lm | 0% / 50% | n/a / 2.00 | n/a / 6.00 | n/a / 5.0 |" in md
    assert "| (8, 8) | lm | 100% / 50% | 1.00 / 0.00 |" in md
    even = time_split(EPISODES, ["img", "lm"], preemptive=False, capacities=[(8, 8)] * 3)
    md = scenario_markdown(_results({"policy": "tapfinger", "baseline": "optimus",
                                     "splits": {"tapfinger": even, "optimus": even}}, None))
    assert "By cluster size" not in md


def _results(diag: dict, counterfactual: dict | None) -> RecipeResults:
    return RecipeResults(scenario="tiny-3", command="python benchmarks/reproduce.py --config tiny-3 --seeds 1",
                         heldout_seeds=[500000, 500001], validation_seeds=[10000], rows=[], baselines={}, bound=1.0,
                         validation_baselines={"optimus": 4.0}, validation_rival="optimus",
                         over_seeds={"mean_jct": 5.0}, diagnosis=diag, conflict_counterfactual=counterfactual)


def test_the_page_shows_the_split_and_the_cost_of_lost_claims(tmp_path):
    split = time_split(EPISODES, ["img", "lm"], preemptive=False)
    base = time_split(EPISODES[1:], ["img", "lm"], preemptive=True)
    diag = {"policy": "tapfinger", "baseline": "optimus", "splits": {"tapfinger": split, "optimus": base}}
    counter = {"policy": "tapfinger-s0", "conflicts": "room", "mean_jct": 4.25, "lost_claims": 0.0,
               "vs_trained": {"mean_diff": -1.25, "ci95": [-2.0, -0.5]}, "baseline": "optimus",
               "vs_baseline": {"mean_diff": 0.5, "ci95": [0.1, 0.9]}}
    md = scenario_markdown(_results(diag, counter))
    assert "## Where the time goes (held out)" in md
    assert "| img | 50% | 2.00 / 3.00 | 4.00 / 4.00 | 4.0 / 4.0 | 1.0 / 1.0 |" in md
    assert "| all | 100% | 1.50 / 2.50 | 4.00 / 5.00 |" in md
    assert "Mean JCT tapfinger − optimus: -2.00 = wait -1.00 + run -1.00 (over every finished task)." in md
    assert "Unfinished tasks: tapfinger 1, optimus 0." in md and "nothing that round): 1.5." in md
    assert "score mean JCT 4.25 with 0.0 lost claims per episode" in md
    assert "Bayes rule -1.25 [-2.00, -0.50] (below zero" in md and "against optimus +0.50 [+0.10, +0.90]." in md
    # the JSON keeps both, and a page written before they existed reads and renders without the section
    write_scenario_results(tmp_path, _results(diag, counter))
    back = read_results(tmp_path / "tiny-3.json")
    assert back.diagnosis == diag and back.conflict_counterfactual == counter
    assert "Where the time goes" not in scenario_markdown(_results({}, None))


def test_the_page_says_what_choosing_in_turn_buys_for_a_recipe_that_does():
    split = time_split(EPISODES, ["img", "lm"], preemptive=False)
    diag = {"policy": "tapfinger", "baseline": "optimus", "splits": {"tapfinger": split, "optimus": split}}
    counter = {"policy": "tapfinger-s0", "acted": "room", "conflicts": "bayes", "mean_jct": 6.5, "lost_claims": 812.0,
               "vs_trained": {"mean_diff": 0.75, "ci95": [0.5, 1.0]}, "baseline": "optimus",
               "vs_baseline": {"mean_diff": 0.25, "ci95": [-0.1, 0.6]}}
    md = scenario_markdown(_results(diag, counter))
    assert "Under the paper's conflict rule: tapfinger-s0's weights" in md and "Without lost claims" not in md
    assert "instead of in turn (`room`), score mean JCT 6.50 with 812.0 lost claims per episode" in md
    assert "acting by `room` +0.75 [+0.50, +1.00] (above zero: what choosing in turn buys)" in md
    assert "against optimus +0.25 [-0.10, +0.60]." in md


def test_every_committed_page_is_what_its_json_renders_to_and_says_where_the_time_goes(tmp_path):
    """A page left in an older format (or edited by hand) fails; ``reproduce.py --index-only`` rewrites them."""
    import shutil

    from agents.evaluation.results import read_all
    from agents.evaluation.results_page import write_scenario_page

    results = Path(__file__).resolve().parent.parent / "docs" / "results"
    shutil.copytree(results, tmp_path / "results")
    entries = read_all(tmp_path / "results")
    assert entries
    for r in entries:
        page = write_scenario_page(tmp_path / "results", r).read_text()
        assert page == (results / f"{r.scenario}.md").read_text(), r.scenario
        assert r.diagnosis and "## Where the time goes (held out)" in page, r.scenario
        # the split's all row is the pooled mean JCT of the baseline it names, from the same episodes
        base = r.diagnosis["baseline"]
        assert r.diagnosis["splits"][base]["rows"][-1]["jct"] == pytest.approx(r.baselines[base]["mean_jct"]), r.scenario
