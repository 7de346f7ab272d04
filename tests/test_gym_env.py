"""Gymnasium env: API conformance, joint-action rules, rewards, seeding and determinism."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from envs.config import ConfigError, available_scenarios, load_scenario
from envs.core import Simulator
from envs.gym_env import EdgeClustersEnv
from envs.joint_action import ActionShapeError, apply_joint_action, random_valid_action
from envs.registration import ENV_ID, MAX_EPISODE_STEPS, register_envs

# every task reaches every cluster, all arrive at t = 0: pending sets are identical
SHARED = {"arrival_rate": 10000, "num_tasks": 12, "connectivity.threshold": 0.0}


def play(env: EdgeClustersEnv, seed: int, policy_seed: int = 0, limit: int = 100_000):
    """Run one episode with the random valid policy; returns (observations, rewards, last info)."""
    rng = np.random.default_rng(policy_seed)
    obs, _ = env.reset(seed=seed)
    seen, rewards = [obs], []
    for _ in range(limit):
        obs, reward, terminated, truncated, info = env.step(random_valid_action(obs, env.obs_spec.alloc_dims[1], rng))
        seen.append(obs)
        rewards.append(reward)
        if terminated or truncated:
            return seen, rewards, info
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("name", available_scenarios())
def test_check_env_every_scenario(name):
    register_envs()
    env = gymnasium.make(ENV_ID, scenario=name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # gymnasium reports many problems as warnings
        check_env(env.unwrapped)
    assert env.unwrapped.spec is not None  # so check_env compared the seeded observations


@pytest.mark.parametrize(
    "name,evaluation", [(n, False) for n in available_scenarios()] + [("testbed-3", True), ("testbed-6", True)]
)
def test_every_observation_of_an_episode_is_in_the_space(name, evaluation):
    env = EdgeClustersEnv(name, overrides=["num_tasks=60"], evaluation=evaluation)
    seen, _, info = play(env, seed=1)
    space = env.observation_space
    assert all(obs in space for obs in seen)
    assert info["episode_metrics"]["num_finished"] == 60


def test_registration_is_idempotent_and_spaces_have_the_contract_shape():
    register_envs()
    register_envs()
    env = gymnasium.make(ENV_ID, scenario="hetero-6", overrides=["num_tasks=20"])
    u = env.unwrapped
    assert isinstance(u, EdgeClustersEnv) and u.cfg.num_tasks == 20
    assert u.action_space.nvec.tolist() == [[10, 17 * 17, 2]] * 6
    assert u.observation_space["pending_where"].dtype == np.int8
    assert u.observation_space["running_x"].shape == (6, u.obs_spec.M, 2 + 4)


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="unknown scenario"):
        EdgeClustersEnv("nope")
    with pytest.raises(ConfigError, match="num_tasks"):
        EdgeClustersEnv("synthetic-3", overrides=["num_tasks=-1"])
    env = EdgeClustersEnv("synthetic-3")
    with pytest.raises(ConfigError, match="workload_seed"):
        env.reset(options={"workload_seed": "x"})
    with pytest.raises(RuntimeError, match="reset"):
        env.step(np.zeros((3, 3), dtype=np.int64))


def test_reset_seed_selects_the_simulator_workload():
    cfg = load_scenario("synthetic-3")
    env = EdgeClustersEnv(cfg)
    for seed in (0, 7):
        env.reset(seed=seed)
        ref = Simulator(cfg, seed).workload
        np.testing.assert_array_equal(env.sim.workload.arrival, ref.arrival)
        np.testing.assert_array_equal(env.sim.workload.eligible, ref.eligible)
    _, info = env.reset(seed=1, options={"workload_seed": 7})
    assert info["workload_seed"] == 7
    np.testing.assert_array_equal(env.sim.workload.task_type, Simulator(cfg, 7).workload.task_type)
    env.reset(seed=5)
    _, info_b = env.reset()  # drawn from np_random
    assert info_b["workload_seed"] != 5


def test_evaluation_flag_and_overrides():
    over = {"eval_overrides": {"arrival_rate": 1.0, "capacities": [[32, 32]]}}
    env = EdgeClustersEnv("synthetic-3", overrides=over, evaluation=True)
    assert env.cfg.arrival_rate == 1.0 and env.cfg.capacities == ((32, 32),) * 3
    assert EdgeClustersEnv("synthetic-3", overrides=over).cfg.arrival_rate == 2.0
    cfg = load_scenario("synthetic-3")
    assert EdgeClustersEnv(cfg, overrides=["num_tasks=9"]).cfg.num_tasks == 9


# ----------------------------------------------------------------------------- joint actions
def shared_env(mode: str):
    env = EdgeClustersEnv("synthetic-3", overrides={**SHARED, "mode": mode})
    obs, _ = env.reset(seed=0)
    assert (env.sim.pending == env.sim.pending[0]).all()  # the three clusters show the same tasks
    return env, obs


def alloc(env, cpu, gpu):
    return env.obs_spec.encode_allocation(cpu, gpu)


def test_lost_flag_void_and_invalid_requests_place_nothing_and_lose_nothing():
    env, obs = shared_env("multi")
    sim = env.sim
    pending = sim.pending.copy()
    big = env.obs_spec.A
    action = np.array([
        [0, alloc(env, 2, 1), 1],  # lost a conflict -> void, conflict
        [0, 0, 0],  # void
        [0, alloc(env, 1, 1), 0],  # below the minimum (2, 1) -> invalid
    ])
    _, reward, _, _, info = env.step(action)
    assert (info["placed"], info["void"], info["invalid"], info["conflicts"]) == (0, 3, 1, 1)
    assert info["advanced"] and reward == -12.0  # nothing placed: multi mode advances real time
    assert sim.t == 1 and (sim.status[:12] == 1).all()
    # out-of-range values and impossible allocations are invalid, never an exception
    for row in ([10, alloc(env, 2, 1), 0], [-1, 5, 0], [0, big, 0], [0, -3, 0], [0, alloc(env, 2, 1), 2],
                [0, alloc(env, 2, 0), 0]):
        report = apply_joint_action(sim, np.array([row, [0, 0, 0], [0, 0, 0]]))
        assert (report.placed, report.invalid) == (0, 1), row
    assert sim.pending.tolist() == pending.tolist() and sim.invalid == 7 and sim.conflicts == 1
    assert not sim.placed_this_step.any()
    with pytest.raises(ActionShapeError):
        apply_joint_action(sim, np.zeros((2, 3)))
    with pytest.raises(ValueError):
        apply_joint_action(sim, [[0.5, 0, 0]] * 3)


def test_empty_slot_and_allocation_above_free_are_invalid():
    env, obs = shared_env("multi")
    sim = env.sim
    # cluster 0 takes the whole machine with task in slot 0
    _, _, _, _, info = env.step(np.array([[0, alloc(env, 16, 16), 0], [0, 0, 0], [0, 0, 0]]))
    assert info["placed"] == 1 and not info["advanced"]
    assert sim.pending[0, 0] == -1  # the slot stays empty until real time advances
    report = apply_joint_action(sim, np.array([
        [1, alloc(env, 2, 1), 0],  # no free resources on cluster 0 -> invalid
        [0, alloc(env, 2, 1), 0],  # slot 0 is empty now -> invalid
        [1, alloc(env, 2, 1), 0],  # fine
    ]))
    assert (report.placed, report.invalid, report.conflicts) == (1, 2, 0)
    assert report.placed_mask.tolist() == [False, False, True]


def test_duplicate_task_lower_index_wins():
    env, obs = shared_env("multi")
    sim = env.sim
    task = int(sim.pending[0, 2])
    act = np.array([[2, alloc(env, 2, 1), 0], [2, alloc(env, 3, 2), 0], [3, alloc(env, 2, 2), 0]])
    _, reward, _, _, info = env.step(act)
    assert (info["placed"], info["conflicts"], info["invalid"]) == (2, 1, 0)
    assert sim.cluster[task] == 0 and sim.alloc[task].tolist() == [2, 1]
    assert not info["advanced"] and reward == 0.0 and sim.t == 0
    assert info["agent_rewards"].tolist() == [0.0, 0.0, 0.0]
    assert sim.conflicts == 1


def test_time_advance_single_vs_multi():
    env, obs = shared_env("single")
    act = np.array([[0, alloc(env, 2, 1), 0], [1, alloc(env, 2, 1), 0], [2, alloc(env, 2, 1), 0]])
    _, reward, _, _, info = env.step(act)
    assert info["placed"] == 3 and info["advanced"] and env.sim.t == 1 and reward == -12.0
    env, obs = shared_env("multi")
    _, reward, _, _, info = env.step(act)
    assert info["placed"] == 3 and not info["advanced"] and env.sim.t == 0 and reward == 0.0
    _, reward, _, _, info = env.step(np.zeros((3, 3), dtype=np.int64))
    assert info["placed"] == 0 and info["advanced"] and env.sim.t == 1 and reward == -12.0


# ----------------------------------------------------------------------------- episodes
@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6"])
def test_team_return_is_minus_total_completion_time(name):
    env = EdgeClustersEnv(name, overrides=["num_tasks=80"])
    _, rewards, info = play(env, seed=4)
    jct = env.sim.records()["jct"]
    assert (jct > 0).all() and jct.size == 80
    assert sum(rewards) == -float(jct.sum())
    m = info["episode_metrics"]
    assert m["num_finished"] == 80 and m["mean_jct"] == pytest.approx(jct.mean()) == info["mean_jct"]
    assert m["num_unfinished"] == 0 and not m["truncated"]
    assert m["steps"] == env.sim.t and m["conflicts"] == 0 and m["invalid"] == 0
    assert 0 < m["cpu_util"] <= 1 and 0 < m["gpu_util"] <= 1


def test_per_cluster_reward_against_team_reward():
    """Same trajectory under both rewards; a task waiting at k clusters counts k times per cluster."""
    team = EdgeClustersEnv("synthetic-3", overrides=["num_tasks=40"])
    per = EdgeClustersEnv("synthetic-3", overrides=["num_tasks=40", "reward=per_cluster"])
    rng = np.random.default_rng(0)
    obs, _ = team.reset(seed=2)
    per.reset(seed=2)
    strictly_lower = 0
    for _ in range(1000):
        act = random_valid_action(obs, 17, rng)
        obs, r_team, term, trunc, i_team = team.step(act)
        obs_p, r_per, _, _, i_per = per.step(act)
        np.testing.assert_array_equal(obs["pending_x"], obs_p["pending_x"])
        assert (i_team["agent_rewards"] == r_team).all()
        assert r_per == i_per["agent_rewards"].sum() and r_per <= r_team
        assert i_per["agent_rewards"].tolist() == per.sim.last_cluster_rewards.tolist()
        strictly_lower += r_per < r_team
        if term or trunc:
            break
    assert term and strictly_lower > 0


def test_truncation_at_the_step_cap():
    env = EdgeClustersEnv("synthetic-3", overrides=["max_steps=5"])
    env.reset(seed=0)
    for k in range(5):
        _, _, terminated, truncated, info = env.step(np.zeros((3, 3), dtype=np.int64))
        assert not terminated
        assert truncated == (k == 4)
    m = info["episode_metrics"]
    assert m["steps"] == 5 and m["num_finished"] == 0 and m["truncated"]
    # nothing finished: every arrived task counts at its time in system so far (5 - arrival)
    arrival = env.sim.arrival[: env.sim.next_arrival]
    assert m["num_unfinished"] == arrival.size > 0 and m["mean_jct"] == pytest.approx((5 - arrival).mean())
    assert info["mean_jct"] == m["mean_jct"]
    with pytest.raises(RuntimeError):
        env.step(np.zeros((3, 3), dtype=np.int64))


def test_registration_caps_episodes_and_a_time_limit_cut_reports_honest_metrics():
    register_envs()
    assert gymnasium.spec(ENV_ID).max_episode_steps == MAX_EPISODE_STEPS
    env = gymnasium.make(ENV_ID, scenario="synthetic-3")
    assert env.spec.max_episode_steps == MAX_EPISODE_STEPS
    env = gymnasium.make(ENV_ID, scenario="synthetic-3", max_episode_steps=6)
    env.reset(seed=0)
    rng, total = np.random.default_rng(0), 0.0
    obs = env.unwrapped.observe()
    for k in range(6):
        obs, reward, terminated, truncated, info = env.step(random_valid_action(obs, 17, rng))
        total += reward
        assert not terminated and truncated == (k == 5)
    m = info["episode_metrics"]  # added by the EpisodeMetrics wrapper above TimeLimit
    assert m["truncated"] and m["num_unfinished"] > 0 and info["mean_jct"] == m["mean_jct"]
    assert m["mean_jct"] * (m["num_finished"] + m["num_unfinished"]) == pytest.approx(-total)


def test_a_render_mode_is_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="renders nothing"):
        env = EdgeClustersEnv("synthetic-3", render_mode="rgb_array")
    assert env.render_mode is None and env.render() is None
    with pytest.warns(UserWarning) as caught:  # Gymnasium's "not in the possible render_modes" and ours
        made = gymnasium.make(ENV_ID, scenario="synthetic-3", render_mode="rgb_array")
    assert any("renders nothing" in str(w.message) for w in caught)
    assert made.unwrapped.render_mode is None
    with pytest.raises(ConfigError, match="render_mode"):
        EdgeClustersEnv("synthetic-3", render_mode=3)


def test_same_seed_same_actions_same_observations():
    runs = []
    for _ in range(2):
        env = EdgeClustersEnv("hetero-6", overrides=["num_tasks=60", "progress_noise=0.2"])
        runs.append(play(env, seed=11, policy_seed=3))
    (obs_a, rew_a, _), (obs_b, rew_b, _) = runs
    assert len(obs_a) == len(obs_b) and rew_a == rew_b
    for a, b in zip(obs_a, obs_b):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    other = play(EdgeClustersEnv("hetero-6", overrides=["num_tasks=60", "progress_noise=0.2"]), seed=12, policy_seed=3)
    assert other[1] != rew_a
