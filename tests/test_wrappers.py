"""The single-policy wrappers of envs/wrappers.py: exact masks, returns, episode metrics, bad input."""

from __future__ import annotations

import warnings

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from envs.config import ConfigError
from envs.gym_env import EdgeClustersEnv
from envs.joint_action import ActionShapeError, decode_joint_action
from envs.registration import MASKED_ENV_ID
from envs.wrappers import EpisodeMetrics, FlatDictObservation, SequentialAgents, make_masked_env
from networks.heads import allocation_mask as policy_allocation_mask

torch.set_num_threads(1)

# small allocation grid (A = 5 * 4) so every choice can be decoded; every task reaches every
# cluster, so agents see the same tasks and claims matter; no start floor: ``feasible`` is the rules'
SMALL = {"capacities": [[6, 4]], "per_task_max": [4, 3], "num_tasks": 30, "arrival_rate": 3,
         "connectivity.threshold": 0.0, "max_start_slowdown": 0}


def masked_choice(env: gymnasium.Env, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(env.get_wrapper_attr("action_masks")())))


@pytest.mark.parametrize("mode", ["single", "multi"])
def test_mask_is_exactly_what_the_joint_action_rules_accept(mode):
    env = SequentialAgents(EdgeClustersEnv("synthetic-3", overrides={**SMALL, "mode": mode}))
    spec, sim_env = env.unwrapped.obs_spec, env.unwrapped
    P, A = spec.P, spec.A
    rng = np.random.default_rng(0)
    env.reset(seed=3)
    claimed_seen = starts = 0
    for _ in range(80):
        i, partial = env.agent, env.joint_action
        mask = env.action_masks().reshape(P, A)
        assert mask.any()
        for slot in range(P):
            assert mask[slot, 0] == mask[slot].any()  # void is offered with every offered slot
            for a in range(1, A):
                act = partial.copy()
                act[i] = (slot, a, 0)
                decoded = decode_joint_action(sim_env.sim, act)
                assert bool(decoded.placed_mask[i]) == mask[slot, a], (i, slot, a)
        # a task an earlier agent started in this joint step is not offered again
        before = sim_env.sim.pending[i]
        taken = {int(partial[j, 0]) for j in range(i) if partial[j, 1]}
        taken_tasks = {int(sim_env.sim.pending[j, partial[j, 0]]) for j in range(i) if partial[j, 1]}
        for slot in range(P):
            if before[slot] in taken_tasks:
                claimed_seen += 1
                assert not mask[slot].any()
        starts += len(taken)
        _, _, terminated, truncated, _ = env.step(masked_choice(env, rng))
        if terminated or truncated:
            env.reset(seed=4)
    assert claimed_seen > 0 and starts > 0  # the claims were exercised


def test_mask_matches_the_learned_policys_masks_under_the_start_floor():
    over = ["num_tasks=40", "connectivity.threshold=0.0", "max_start_slowdown=1.5"]
    env = SequentialAgents(EdgeClustersEnv("synthetic-3", overrides=over))
    spec = env.unwrapped.obs_spec
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=2)
    for _ in range(60):
        i = env.agent
        slots = torch.from_numpy(obs["feasible"][i].astype(bool))
        allowed = policy_allocation_mask(torch.from_numpy(obs["pending_min"][i]),
                                         torch.from_numpy(obs["alloc_high"][i]), spec.alloc_dims)
        expected = (slots[:, None] & allowed).numpy().reshape(-1)
        np.testing.assert_array_equal(env.action_masks(), expected)
        assert obs["agent"].tolist() == [float(j == i) for j in range(spec.N)]
        obs, _, terminated, truncated, _ = env.step(masked_choice(env, rng))
        if terminated or truncated:
            obs, _ = env.reset(seed=5)


@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6"])
def test_masked_episode_is_valid_and_its_return_is_minus_total_jct(name):
    env = make_masked_env(name, overrides=["num_tasks=40"])
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=7)
    assert info["workload_seed"] == 7 and obs in env.observation_space
    total, played = 0.0, 0
    while True:
        obs, reward, terminated, truncated, info = env.step(masked_choice(env, rng))
        assert obs in env.observation_space
        total += reward
        played += info["joint_steps"]
        if terminated or truncated:
            break
    sim = env.unwrapped.sim
    assert terminated and sim.invalid == 0 and sim.conflicts == 0 and info["invalid"] == 0
    assert total == -float(sim.records()["jct"].sum())
    m = info["episode_metrics"]
    assert m["num_finished"] == 40 and m["num_unfinished"] == 0 and not m["truncated"]
    assert info["mean_jct"] == m["mean_jct"] == pytest.approx(sim.records()["jct"].mean())
    assert played == env.unwrapped.logical_steps and env.get_wrapper_attr("agent") == -1


def test_cut_off_episode_reports_unfinished_tasks():
    env = make_masked_env("synthetic-3", max_joint_steps=12)
    rng = np.random.default_rng(0)
    env.reset(seed=1)
    total = 0.0
    while True:
        _, reward, terminated, truncated, info = env.step(masked_choice(env, rng))
        total += reward
        if terminated or truncated:
            break
    m = info["episode_metrics"]
    assert truncated and not terminated and m["truncated"] and m["num_unfinished"] > 0
    assert env.unwrapped.logical_steps == 12 and m["steps"] == 12
    # every arrived task counted at its time in system so far: that total is minus the return
    assert info["mean_jct"] * (m["num_finished"] + m["num_unfinished"]) == pytest.approx(-total)
    rec = env.unwrapped.sim.records()  # the tasks that arrived
    in_system = np.where(rec["finish"] >= 0, rec["finish"], 12) - rec["arrival"]
    assert m["num_finished"] + m["num_unfinished"] == rec["arrival"].size
    assert m["mean_jct"] == pytest.approx(in_system.mean()) and m["mean_jct"] != rec["jct"][rec["jct"] >= 0].mean()


def test_registered_masked_view_passes_gymnasiums_checker_and_obs_is_flat_and_scaled():
    env = gymnasium.make(MASKED_ENV_ID, scenario="testbed-6", overrides=["num_tasks=30"])
    check_env(env.unwrapped, skip_render_check=True)  # the joint env under it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(make_masked_env("testbed-6", overrides=["num_tasks=30"]), skip_render_check=True)
    assert all("different from the unwrapped version" in str(w.message) for w in caught)  # only "it is wrapped"
    obs, _ = env.reset(seed=0)
    for key, value in obs.items():
        box = env.observation_space[key]
        assert value.ndim == 1 and value.dtype == np.float32 and box.dtype == np.float32
        assert np.all(box.low >= -1) and np.all(box.high <= 1) and value in box
    assert env.action_space.n == env.unwrapped.obs_spec.P * env.unwrapped.obs_spec.A


def test_bad_input_is_refused_clearly():
    with pytest.raises(ConfigError, match="max_joint_steps"):
        make_masked_env("synthetic-3", max_joint_steps=0)
    with pytest.raises(ConfigError, match="unknown scenario"):
        make_masked_env("nope")
    with pytest.raises(ConfigError, match="EdgeClustersEnv"):
        SequentialAgents(gymnasium.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="EdgeClustersEnv"):
        EpisodeMetrics(gymnasium.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="Dict of Box"):
        FlatDictObservation(gymnasium.make("CartPole-v1"))
    env = make_masked_env("synthetic-3", overrides=["num_tasks=10"], flatten=False)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    with pytest.raises(ActionShapeError):
        env.step([1, 2])
    with pytest.raises(ActionShapeError):
        env.step(0.5)
    # a choice outside the action space or outside the mask is voided and counted, never raised
    infos = []
    for action in (env.action_space.n + 5, -1):
        while True:
            _, _, terminated, truncated, info = env.step(action)
            infos.append(info)
            if info["joint_steps"] or terminated or truncated:
                break
    assert sum(i["invalid"] for i in infos) >= 2 and env.unwrapped.sim.invalid >= 2
