"""Staggered starts (``train.stagger_start``): every vector env kind fast-forwards env ``i``'s first
episode identically, to a real time drawn from its seed key, with valid random decisions."""

from __future__ import annotations

import numpy as np
import pytest

from agents.training.config import TrainConfig
from agents.training.envs import training_envs
from agents.training.stagger import random_feasible_actions, stagger_rng, stagger_target
from envs.batched import BatchedEdgeClusters
from envs.config import load_scenario

SCENARIO = load_scenario("synthetic-3", ["num_tasks=60"])
ENVS = 6


def _first_obs(kind: str, stagger: bool) -> tuple[dict[str, np.ndarray], np.ndarray]:
    train = TrainConfig(envs=ENVS, vector=kind, seed=3, stagger_start=stagger)
    venv = training_envs(SCENARIO, train, restart=0)
    try:
        obs, info = venv.reset()
    finally:
        venv.close()
    keys = ("pending_x", "pending_mask", "running_mask", "cluster_x")
    if isinstance(obs, np.ndarray) and obs.dtype == object:  # tianshou's own vector envs: one dict per env
        return {k: np.stack([o[k] for o in obs]) for k in keys}, np.array([i["workload_seed"] for i in info])
    return {k: np.asarray(obs[k]) for k in keys}, np.asarray(info["workload_seed"])


def test_the_targets_spread_over_the_arrival_horizon_and_follow_the_seed_key():
    horizon = SCENARIO.num_tasks / SCENARIO.arrival_rate
    targets = [stagger_target(stagger_rng((0, 0, i)), SCENARIO) for i in range(200)]
    assert min(targets) >= 0 and max(targets) < horizon
    assert np.std(targets) > horizon / 5  # uniform: sd = horizon / sqrt(12)
    assert targets == [stagger_target(stagger_rng((0, 0, i)), SCENARIO) for i in range(200)]
    assert targets != [stagger_target(stagger_rng((0, 1, i)), SCENARIO) for i in range(200)]  # a restart differs


def test_random_feasible_actions_are_always_valid():
    env = BatchedEdgeClusters(SCENARIO, 4)
    obs = env.reset(np.arange(4), [11, 12, 13, 14])
    rngs = [np.random.default_rng(i) for i in range(4)]
    placed = 0
    for _ in range(40):
        out = env.step(random_feasible_actions(obs, rngs, SCENARIO))
        assert not out.info["invalid"].any()
        placed += int(out.info["placed"].sum())
        if (out.terminated | out.truncated).any():
            break
        obs = out.obs
    assert placed > 0


@pytest.mark.parametrize("kind", ["dummy", "batch"])
def test_staggered_envs_start_at_different_points(kind):
    plain, _ = _first_obs(kind, stagger=False)
    staggered, _ = _first_obs(kind, stagger=True)
    assert not plain["running_mask"].any()  # a fresh episode runs nothing yet
    assert staggered["running_mask"].reshape(ENVS, -1).any(axis=1).sum() >= ENVS // 2  # most are mid-episode
    assert len({staggered["pending_mask"][i].tobytes() for i in range(ENVS)}) == ENVS


def test_every_vector_kind_staggers_identically():
    a, seeds_a = _first_obs("dummy", stagger=True)
    b, seeds_b = _first_obs("batch", stagger=True)
    np.testing.assert_array_equal(seeds_a, seeds_b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
