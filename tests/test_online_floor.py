"""The online start floor: hand-computed estimates and masks; the learned scheduler's ``feasible``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import handmade
from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.baselines.online_floor import OnlineStartFloor
from agents.policy.scheduler import TapFingerScheduler
from envs.config import ConfigError, ScenarioConfig, load_scenario
from envs.progress import ConstantProgress
from envs.observation import ObservationBuilder, ObservationSpec
from envs.scheduling import run_episode
from handmade import LinearGpu


def config():
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": "multi", "num_clusters": 1, "capacities": [[8, 8]],
        "per_task_max": [4, 4], "arrival_rate": 1, "num_tasks": 3, "switch_overhead": 1.0,
        "task_types": [
            {"name": "lin", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 1}},
            {"name": "const", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 3}},
        ],
    })


FUNCTIONS = [LinearGpu(8.0), ConstantProgress(3)]  # lin: g/8 per step; type 1 is never run here


# One (8, 8) cluster, allocations up to (4, 4). Lin tasks 0 and 1 start at t = 0 at (2, 1) and
# (2, 4): after one step the model has seen gains 1/8 and 1/2 (two allocations). Its fit (true
# 8/g steps, pulled toward Optimus's prior: 2.34 at (4, 3), 1.83 at (4, 4), the fastest) makes
# task 2 (lin, arrived at t = 1 with (4, 3) free) 1.28x slower than its fastest: held back at a
# factor of 1.2, offered at 1.5, and offered whatever the factor while the model has fewer
# observed allocations than min_points.
@pytest.mark.parametrize(("factor", "min_points", "held"), [(1.2, 2, True), (1.5, 2, False), (1.2, 3, False)])
def test_hand_computed_hold_back(monkeypatch, factor, min_points, held):
    sim = handmade.fixed_sim(monkeypatch, config(), [0, 0, 1], [0, 0, 0], FUNCTIONS)
    floor = OnlineStartFloor(factor, min_points)
    floor.reset(sim)
    feasible = (sim.pending >= 0).astype(np.int8)
    assert feasible.sum() == 2 and np.array_equal(floor.mask(sim, feasible), feasible)  # t = 0: nothing observed
    sim.place(0, 0, 2, 1)
    sim.place(0, 1, 2, 4)
    sim.advance()
    assert sim.t == 1 and sim.pending_tasks(0).tolist() == [2]
    unfloored = ObservationBuilder(ObservationSpec.from_config(sim.cfg), start_floor=0.0)(sim)["feasible"]
    assert unfloored.astype(bool)[0, 0]
    out = floor.mask(sim, unfloored)
    assert out.dtype == unfloored.dtype
    assert bool(out[0, 0]) is (not held)
    assert bool(floor.slow_types(sim)[0, 0]) is held
    steps = floor.model.inv[0]
    if min_points == 2:  # the model was fitted: more GPUs are faster, and the rule reads its numbers
        assert np.all(np.diff(steps[2:5, 1:5], axis=1) < 0)
        ratio = steps[4, 3] / steps[2:5, 1:5].min()
        assert 1.2 < ratio < 1.5 and held is bool(ratio > factor)
        np.testing.assert_allclose([steps[4, 3], steps[2:5, 1:5].min()], [2.34, 1.83], atol=0.01)


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError, match="factor must be > 0"):
        OnlineStartFloor(0)
    with pytest.raises(ConfigError, match="min_points"):
        OnlineStartFloor(2, 0)
    with pytest.raises(ConfigError, match="start floor must be one of"):
        TapFingerScheduler(policy=_policy(load_scenario("synthetic-3")), start_floor="oracle")


def _policy(cfg):
    torch.manual_seed(0)
    return TapFingerPolicy(ObservationSpec.from_config(cfg),
                           PolicyConfig(hidden=16, han_layers=1, heads=2, pointer_heads=2, pointer_ffn=32))


def test_learned_scheduler_offers_a_subset_of_the_papers_feasible_and_holds_some_back():
    cfg = load_scenario("synthetic-3", ["num_tasks=120", "max_start_slowdown=1.2"])
    policy = _policy(cfg)
    sched = TapFingerScheduler(policy=policy, start_floor="online")
    paper = ObservationBuilder(ObservationSpec.from_config(cfg), start_floor=0.0)
    seen = []
    act = policy.act

    def checking_act(obs, *args, **kwargs):
        seen.append(obs["feasible"].clone())
        return act(obs, *args, **kwargs)

    policy.act = checking_act
    builder_calls = []
    original = TapFingerScheduler.decide

    def decide(self, sim):
        builder_calls.append(paper(sim)["feasible"].astype(bool))
        return original(self, sim)

    sched.decide = decide.__get__(sched)
    first = run_episode(cfg, sched, 3)
    assert sched.floor is not None and sched.floor.held > 0
    assert len(seen) == len(builder_calls)
    for got, unfloored in zip(seen, builder_calls):
        assert not np.any(got[0].numpy().astype(bool) & ~unfloored)  # never offers more than the paper
    assert any(np.any(unfloored & ~got[0].numpy().astype(bool)) for got, unfloored in zip(seen, builder_calls))
    policy.act = act
    again = run_episode(cfg, TapFingerScheduler(policy=policy, start_floor="online"), 3)
    assert np.array_equal(first.records["start"], again.records["start"])


def test_online_floor_without_a_factor_is_no_start_floor():
    cfg = load_scenario("synthetic-3", ["num_tasks=40", "max_start_slowdown=0"])
    policy = _policy(cfg)
    a = run_episode(cfg, TapFingerScheduler(policy=policy, start_floor="online"), 5)
    b = run_episode(cfg, TapFingerScheduler(policy=policy), 5)
    assert np.array_equal(a.records["start"], b.records["start"])
    assert np.array_equal(a.records["cpu"], b.records["cpu"]) and np.array_equal(a.records["gpu"], b.records["gpu"])
