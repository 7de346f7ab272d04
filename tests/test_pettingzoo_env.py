"""PettingZoo ParallelEnv adapter: API test and agreement with the joint Gymnasium env."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from envs.config import ConfigError
from envs.gym_env import EdgeClustersEnv
from envs.joint_action import random_valid_action
from envs.pettingzoo_env import parallel_env

SMALL = ["num_tasks=20", "max_steps=60"]


@pytest.mark.parametrize("name", ["synthetic-3", "hetero-6"])
def test_parallel_api(name):
    env = parallel_env(name, overrides=SMALL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(env, num_cycles=300)


def test_agents_spaces_and_observations():
    env = parallel_env("hetero-6", overrides=SMALL)
    assert env.possible_agents == [f"cluster_{i}" for i in range(6)]
    obs, infos = env.reset(seed=3)
    assert env.agents == env.possible_agents and set(infos) == set(env.agents)
    for i, agent in enumerate(env.agents):
        assert env.observation_space(agent) is env.observation_space(agent)
        assert env.action_space(agent) is env.action_space(agent)
        assert env.action_space(agent).nvec.tolist() == [10, 17 * 17, 2]
        assert obs[agent] in env.observation_space(agent)
        assert obs[agent]["agent_index"] == i
    np.testing.assert_array_equal(obs["cluster_0"]["pending_x"], obs["cluster_5"]["pending_x"])


def test_same_trajectory_as_the_joint_env():
    """Per-agent actions give the same observations and rewards as the joint env."""
    par = parallel_env("multi-3", overrides=["num_tasks=30", "reward=per_cluster"])
    joint = EdgeClustersEnv("multi-3", overrides=["num_tasks=30", "reward=per_cluster"])
    obs, _ = par.reset(seed=5)
    jobs, _ = joint.reset(seed=5)
    rng = np.random.default_rng(1)
    for _ in range(500):
        act = random_valid_action(jobs, joint.obs_spec.alloc_dims[1], rng)
        actions = {a: act[i] for i, a in enumerate(par.agents) if act[i, 1] > 0}  # void agents may be left out
        obs, rew, term, trunc, infos = par.step(actions)
        jobs, jrew, jterm, jtrunc, jinfo = joint.step(act)
        for key in jobs:
            np.testing.assert_array_equal(obs["cluster_1"][key], jobs[key])
        assert [rew[a] for a in rew] == jinfo["agent_rewards"].tolist()
        assert all(t == jterm for t in term.values()) and all(t == jtrunc for t in trunc.values())
        if jterm or jtrunc:
            break
    assert jterm and par.agents == []
    assert "episode_metrics" in infos["cluster_0"]
    with pytest.raises(RuntimeError):
        par.step({})


def test_bad_actions_dicts():
    env = parallel_env("synthetic-3", overrides=SMALL)
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="unknown agent"):
        env.step({"cluster_9": [0, 0, 0]})
    with pytest.raises(ConfigError, match="slot, allocation, lost"):
        env.step({"cluster_0": [0, 0]})
    with pytest.raises(ConfigError, match="slot, allocation, lost"):
        env.step({"cluster_0": [0.5, 0, 0]})
    # out-of-range values are the env's business: counted invalid, never raised
    _, _, _, _, infos = env.step({"cluster_0": [99, 5, 0]})
    assert infos["cluster_0"]["invalid"] == 1
