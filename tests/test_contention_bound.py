"""The contention-aware LP lower bound: exact on a hand-solvable case, never above any real
schedule, never below the plain ``bound``, and its CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agents.baselines import available_schedulers, make_scheduler
from envs.bound import bound_mean_jct
from envs.config import load_scenario
from envs.contention_bound import contention_bound_mean_jct, type_rates
from envs.core import Simulator
from envs.scheduling import run_episode
from tests.test_benchmarks import bench


def _one_cluster_sim(num_tasks: int = 2) -> Simulator:
    cfg = load_scenario("sjf-3", ["num_clusters=1", "capacities=[[3,3]]", "per_task_max=[3,3]",
                                  f"num_tasks={num_tasks}"])
    sim = Simulator(cfg, 0)
    sim.reset(0)
    return sim


def test_two_long_tasks_on_a_cluster_that_fits_one_give_the_exact_optimum():
    """Two 10-step tasks arrive together where only one fits: the best schedule finishes them
    at 10 and 20 (mean 15); the bound says 10, the LP gets the optimum."""
    sim = _one_cluster_sim()
    sim.arrival = np.array([0, 0])
    sim.task_type = np.array([1, 1])  # sjf-3's "long" type: 10 steps at any allocation
    sim.eligible = np.ones((2, 1), dtype=bool)
    caps, alpha = type_rates(sim)
    assert caps.tolist() == pytest.approx([1.0, 0.1]) and alpha[1].tolist() == pytest.approx([30.0, 30.0])
    assert bound_mean_jct(sim) == pytest.approx(10.0)
    assert contention_bound_mean_jct(sim) == pytest.approx(15.0, abs=1e-6)
    # a horizon too short to hold the work only loosens it (the overflow is charged at the horizon)
    assert bound_mean_jct(sim) <= contention_bound_mean_jct(sim, horizon=12) <= 15.0 + 1e-9
    with pytest.raises(ValueError, match="horizon"):
        contention_bound_mean_jct(sim, horizon=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_baseline_beats_it_on_an_overloaded_scenario(seed):
    cfg = load_scenario("sjf-3", ["num_tasks=60"])
    sim = Simulator(cfg, seed)
    sim.reset(seed)
    lower = contention_bound_mean_jct(sim)
    assert lower > bound_mean_jct(sim)  # overloaded: the capacity binds
    for name in available_schedulers():
        jct = run_episode(cfg, make_scheduler(name), seed).jct.mean()
        assert jct >= lower - 1e-6, (name, jct, lower)


def test_it_equals_the_bound_where_nothing_waits():
    cfg = load_scenario("synthetic-3", ["num_tasks=20"]).for_evaluation()
    sim = Simulator(cfg, 3)
    sim.reset(3)
    assert contention_bound_mean_jct(sim) == pytest.approx(bound_mean_jct(sim))


def test_cli_table_json_and_results(tmp_path, capsys):
    cli = bench("contention_bound")
    out = tmp_path / "sjf-3"
    out.mkdir()
    seeds = [100000, 100001]
    (out / "summary.json").write_text(json.dumps({"scenario": "sjf-3", "seeds": seeds,
                                                  "schedulers": {"min": {"mean_jct": 100.0}}}))
    assert cli.main(["--scenarios", "sjf-3", "--seeds", "2", "--results", str(tmp_path), "num_tasks=40"]) == 0
    text = capsys.readouterr().out
    row = json.loads(text.strip().splitlines()[-1])["results"]["sjf-3"]
    assert "| sjf-3 |" in text and row["contention_bound"] >= row["bound"] > 0
    assert row["over_contention_bound"]["min"] == pytest.approx(100.0 / row["contention_bound"])
    assert row["target_excluded"] == (1.3 * row["bound"] < row["contention_bound"])
    # one cluster that runs one task at a time: the capacity excludes 1.3x the bound; a lightly
    # loaded scenario cannot be excluded (its contention bound is the bound)
    one = ["num_clusters=1", "capacities=[[3,3]]", "per_task_max=[3,3]", "num_tasks=20"]
    assert cli.main(["--scenarios", "sjf-3", "--seeds", "2", "--json", *one]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]["sjf-3"]["target_excluded"]
    assert cli.main(["--scenarios", "synthetic-3", "--seeds", "2", "--json", "num_tasks=30"]) == 0
    assert not json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"]["synthetic-3"]["target_excluded"]
    assert cli.main(["--scenarios", "nope"]) == 2
    assert "unknown scenario" in capsys.readouterr().err
    assert cli.main(["--scenarios", "sjf-3", "--seeds", "0"]) == 2
