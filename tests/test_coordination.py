"""Coordination counts of a learned policy's agents (:mod:`agents.policy.coordination`), by hand and
as the evaluation reports them."""

from __future__ import annotations

import numpy as np
import pytest

from agents.policy.coordination import CoordinationTally


def test_a_hand_worked_decision():
    # slots hold task ids; agent 0 is offered tasks 10 and 11, agent 1 only 10, agent 2 10 and 12
    pending = np.array([[10, 11, -1], [10, 13, -1], [12, 10, -1]])
    feasible = np.array([[True, True, False], [True, False, False], [True, True, False]])
    tally = CoordinationTally()
    tally.add(pending, feasible, slots=np.array([0, 0, 1]), placed={1}, ends_step=True)  # all claim task 10
    assert tally.contested == 1 and tally.distinct == 1
    # uniform: task 10 is certain (agent 1 has nothing else), 11 and 12 half each
    assert tally.uniform == pytest.approx(2.0)
    assert tally.matching == 3  # 0 -> 11, 1 -> 10, 2 -> 12
    assert tally.real_steps == 1 and tally.idle_ends == 1  # agents 0 and 2 had work and placed nothing
    # one able agent: nothing is contested; a round that does not end the real step is not counted as one
    tally.add(pending, feasible & np.array([[False], [True], [False]]), np.array([0, 0, 0]), placed=set(), ends_step=False)
    assert tally.contested == 1 and tally.real_steps == 1
    # everyone placed: the step ends busy
    tally.add(pending, feasible, np.array([1, 0, 0]), placed={0, 1, 2}, ends_step=True)
    assert tally.distinct == 1 + 3 and tally.real_steps == 2 and tally.idle_ends == 1
    assert tally.as_dict()["matching"] == 6


def test_an_agent_that_chose_no_offered_slot_claimed_nothing():
    # every agent is offered only task 10; in turn-taking modes agent 1 takes it and agents 0
    # and 2, blocked, send [0, 0, 0]: slot 0 holds task 11 (not offered to agent 0) and an
    # empty slot (agent 2); neither is a claim
    pending = np.array([[11, 10], [-1, 10], [-1, 10]])
    feasible = np.array([[False, True], [False, True], [False, True]])
    tally = CoordinationTally()
    tally.add(pending, feasible, slots=np.array([0, 1, 0]), placed={1}, ends_step=True)
    assert tally.contested == 1 and tally.distinct == 1 and tally.matching == 1
    assert tally.real_steps == 1 and tally.idle_ends == 0  # their one task started elsewhere: none waits


def test_a_real_step_ends_idle_only_while_an_offered_task_waits():
    pending = np.array([[10, 11], [10, -1]])
    feasible = np.array([[True, True], [True, False]])
    tally = CoordinationTally()
    # both claim task 10 and agent 1 wins: agent 0 placed nothing while task 11 waits
    tally.add(pending, feasible, slots=np.array([0, 0]), placed={1}, ends_step=True)
    assert tally.idle_ends == 1
    # agent 0 wins: agent 1's only task started on cluster 0, so nothing waits for it
    tally.add(pending, feasible, slots=np.array([0, 0]), placed={0}, ends_step=True)
    assert tally.real_steps == 2 and tally.idle_ends == 1
    # multi mode: a real step that ends with nothing placed while tasks are offered is idle
    tally.add(pending, feasible, slots=np.array([0, 0]), placed=set(), ends_step=True)
    assert tally.real_steps == 3 and tally.idle_ends == 2


@pytest.mark.parametrize("conflicts", ["bayes", "room", "sequential"])
def test_the_evaluation_reports_the_policys_coordination(conflicts):
    from envs.config import load_scenario
    from envs.scheduling import run_episode
    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from agents.policy.scheduler import TapFingerScheduler
    from envs.observation import ObservationSpec

    cfg = load_scenario("synthetic-6", ["num_tasks=40"])
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, conflicts=conflicts))
    result = run_episode(cfg, TapFingerScheduler(policy=policy, deterministic=False), 10_001)
    c = result.extra["coordination"]
    assert c["real_steps"] == result.steps and 0 <= c["idle_ends"] <= c["real_steps"]
    assert c["contested"] > 0 and c["distinct"] <= c["matching"] and c["uniform"] <= c["matching"] + 1e-9


def _result(extra: dict, conflicts: int):
    from envs.scheduling import EpisodeResult

    return EpisodeResult(scheduler="p", scenario="s", seed=0, records={"jct": np.array([3]), "start": np.array([1]),
                         "arrival": np.array([0])}, tasks_in_system=np.ones(4, dtype=np.int64),
                         usage=np.zeros((4, 2, 2)), capacity=np.ones((2, 2)), decision_ms=0.0, conflicts=conflicts,
                         invalid=0, truncated=False, steps=4, extra=extra)


def test_the_summary_pools_the_episodes_and_the_page_says_it():
    from agents.evaluation.results_page import coordination_sentence
    from agents.evaluation.summary import coordination_stats, coordination_text

    a = {"contested": 10, "distinct": 30.0, "uniform": 25.0, "matching": 40.0, "real_steps": 20, "idle_ends": 5}
    b = {"contested": 30, "distinct": 90.0, "uniform": 95.0, "matching": 120.0, "real_steps": 20, "idle_ends": 15}
    c = coordination_stats([_result({"coordination": a}, 4), _result({"coordination": b}, 8)])
    assert c["distinct"] == 3.0 and c["uniform"] == 3.0 and c["matching"] == 4.0  # 120/40, 120/40, 160/40
    assert c["halfway"] == 0.0 and c["idle_share"] == 0.5 and c["lost_claims"] == 6.0 and c["contested_per_episode"] == 20
    assert coordination_stats([_result({}, 0)]) is None  # a baseline reports none
    assert "3.00 distinct tasks claimed" in coordination_text("tapfinger", c) and "0% of the way" in coordination_text("tapfinger", c)
    sentence = coordination_sentence("tapfinger", {**c, "halfway": 0.5})
    assert "3.00 distinct tasks claimed, against 3.00" in sentence and "4.00 for the maximum matching" in sentence
    assert "(50% of the way" in sentence and "50.0%" in sentence


def test_a_page_states_the_critic_at_the_end_of_each_run():
    from agents.evaluation.results import SeedRow
    from agents.evaluation.results_page import critic_text

    base = dict(env_steps=1, wall_s=1.0, device="cpu", env_steps_per_s=None, best_env_step=None, validation_best=None,
                steps_to_beat_rival=None, heldout_mean_jct=None, heldout_ci95=None, best_non_oracle=None,
                non_oracle_mean_jct=None, diff_non_oracle=None, diff_non_oracle_lo=None, diff_non_oracle_hi=None,
                best_oracle=None, oracle_mean_jct=None, diff_oracle=None, diff_oracle_lo=None, diff_oracle_hi=None,
                bound_ratio=None)
    assert critic_text([SeedRow(seed=0, **base)]) is None  # pages made before the critic was recorded
    text = critic_text([SeedRow(seed=0, **base, critic_explained_variance=0.72, critic_return_scale=1150.0,
                                critic_return_std=1080.0), SeedRow(seed=1, **base)])
    assert "s0 0.72 (scale 1150, sd 1080)" in text and "s1" not in text
