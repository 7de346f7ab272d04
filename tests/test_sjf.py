"""``sjf``: hand-computed orders and allocations; oracle classification; sjf-3 against ``min``."""

from __future__ import annotations

import numpy as np

import handmade
from agents.baselines import make_scheduler, uses_oracle
from envs.config import ScenarioConfig, load_scenario
from envs.progress import ConstantProgress
from envs.scheduling import run_episode
from handmade import LinearGpu, drive


def config(mode: str = "multi", clusters: int = 1, caps=((4, 4),)):
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": mode, "num_clusters": clusters, "capacities": [list(c) for c in caps],
        "per_task_max": [4, 4], "arrival_rate": 1, "num_tasks": 3, "switch_overhead": 1.0,
        "task_types": [
            {"name": "long", "prob": 0.4, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 4}},
            {"name": "short", "prob": 0.3, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 1}},
            {"name": "lin", "prob": 0.3, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 1}},
        ],
    })


FUNCTIONS = [ConstantProgress(4), ConstantProgress(1), LinearGpu(8.0)]  # lin: 1/8 per GPU per step


def fixed_sim(monkeypatch, cfg, arrival, types, eligible=None):
    return handmade.fixed_sim(monkeypatch, cfg, arrival, types, FUNCTIONS, eligible)


# One (4, 4) cluster: room for two tasks at (2, 1). Tasks 0, 1 (4 steps) and 2 (1 step) arrive at
# t = 0: the short one and the earlier long one start; task 1 takes the short one's place at t = 1.
def test_shortest_first_then_arrival_order(monkeypatch):
    sim = fixed_sim(monkeypatch, config(), [0, 0, 0], [0, 0, 1])
    log = drive(sim, make_scheduler("sjf"))
    assert log[:2] == [([(0, 0, 2, 1), (0, 2, 2, 1)], {}), ([(0, 1, 2, 1)], {})]
    assert sim.records()["finish"].tolist() == [4, 5, 1]


# A 4-step task (0) and a linear one (1: 2 steps at 4 GPUs, its fastest; any CPU count >= 2) at
# t = 0: the linear task is shorter, starts first at (2, 4) -- fewest steps, fewest resources --
# and leaves no GPU, so task 0 starts only when it finishes at t = 2.
def test_fastest_allocation_with_fewest_resources(monkeypatch):
    sim = fixed_sim(monkeypatch, config(), [0, 0], [0, 2])
    log = drive(sim, make_scheduler("sjf"))
    assert log[0] == ([(0, 1, 2, 4)], {})
    assert log[1] == ([], {})
    assert log[2] == ([(0, 0, 2, 1)], {})
    assert sim.records()["finish"].tolist() == [6, 2]


# Two clusters, single mode: at most one start per cluster per real step. The short task 1
# goes first (1 step anywhere; equal free shares left -> the lower index, cluster 0); the
# linear task 0 is fastest on cluster 1 (2 steps at 4 GPUs; 4 steps at cluster 0's 2); the long
# task 2 waits for the next real step although cluster 0 still has room.
def test_single_mode_and_cluster_choice(monkeypatch):
    cfg = config(mode="single", clusters=2, caps=((4, 2), (4, 4)))
    sim = fixed_sim(monkeypatch, cfg, [0, 0, 0], [2, 1, 0])
    log = drive(sim, make_scheduler("sjf"))
    assert log[0] == ([(0, 1, 2, 1), (1, 0, 2, 4)], {})
    assert log[1] == ([(0, 2, 2, 1)], {})
    assert all(len({p[0] for p in placements}) == len(placements) for placements, _ in log)


def test_sjf_is_an_oracle_baseline():
    assert uses_oracle("sjf")


def test_sjf3_beats_random_order_and_is_deterministic():
    cfg = load_scenario("sjf-3", {"num_tasks": 96})
    sjf = [run_episode(cfg, make_scheduler("sjf"), s).jct.mean() for s in (0, 1, 2)]
    rnd = [run_episode(cfg, make_scheduler("min"), s).jct.mean() for s in (0, 1, 2)]
    assert np.mean(sjf) < np.mean(rnd)
    assert sjf[0] == run_episode(cfg, make_scheduler("sjf"), 0).jct.mean()
