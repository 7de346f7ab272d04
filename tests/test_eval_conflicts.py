"""``train.eval_conflicts``: the agents resolve conflicts one way while training and another at
validation and evaluation (the same weights serve every mode)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tianshou.data import Batch

from agents.policy.checkpoint import CheckpointError, checkpoint_eval_conflicts
from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.noise import episode_generator
from agents.training.config import TrainConfig, options_beyond_the_paper
from agents.training.tianshou_glue.algorithm import TianshouJointPolicy
from envs.config import ConfigError, load_scenario
from envs.gym_env import EdgeClustersEnv
from envs.observation import ObservationSpec
from envs.workload import rng_streams

SEEDS = [7, 8, 9, 10]


def _busy(conflicts: str = "bayes") -> tuple[TianshouJointPolicy, Batch, EdgeClustersEnv]:
    cfg = load_scenario("testbed-6", [])
    env = EdgeClustersEnv(cfg)
    obs, _ = env.reset(seed=5)
    for _ in range(30):  # nothing placed: the queues fill, and agents contend for the same tasks
        obs, *_ = env.step(np.zeros((cfg.num_clusters, 3), dtype=np.int64))
    torch.manual_seed(0)
    net = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, conflicts=conflicts))
    policy = TianshouJointPolicy(net, action_space=env.action_space, deterministic_eval=False,
                                 eval_conflicts="room")
    stacked = {k: np.repeat(np.asarray(v)[None], len(SEEDS), axis=0) for k, v in obs.items()}
    return policy, Batch(obs=Batch(stacked), info=Batch(workload_seed=np.array(SEEDS))), env


def test_validation_acts_by_eval_conflicts_and_training_by_the_policys_own():
    policy, batch, _ = _busy()
    net = policy.net
    policy.is_within_training_step = False
    validated = policy(batch).act
    assert net.cfg.conflicts == "bayes"  # restored after the pass
    assert not validated[..., 2].any()  # room: no claim is lost
    # the same as a net whose own mode is room, with the generators the evaluation runner seeds
    net.cfg = PolicyConfig(hidden=16, conflicts="room")
    generators = [episode_generator(rng_streams(s)["tiebreak"], torch.device("cpu")) for s in SEEDS]
    obs = {k: torch.as_tensor(v) for k, v in batch.obs.items()}
    assert np.array_equal(validated, net.act(obs, generator=generators).action.numpy())
    net.cfg = PolicyConfig(hidden=16, conflicts="bayes")
    policy.is_within_training_step = True
    torch.manual_seed(1)
    trained = policy(batch).act
    assert trained[..., 2].any()  # Bayes' rule while training: contested claims are lost


def test_a_checkpoint_evaluates_in_its_runs_eval_conflicts():
    assert checkpoint_eval_conflicts({"train_config": {"eval_conflicts": "room"}}, "bayes") == "room"
    assert checkpoint_eval_conflicts({"train_config": {"eval_conflicts": None}}, "sequential") == "sequential"
    assert checkpoint_eval_conflicts({}, "bayes") == "bayes"  # a checkpoint written before the key
    with pytest.raises(CheckpointError, match="train_config.eval_conflicts must be one of"):
        checkpoint_eval_conflicts({"train_config": {"eval_conflicts": "vote"}}, "bayes", "x.pt")


def test_the_key_is_checked_and_named_on_a_page():
    from agents.training.prepare import prepare_run

    assert TrainConfig().eval_conflicts is None  # as the policy trained
    with pytest.raises(ConfigError, match="train.eval_conflicts must be one of"):
        prepare_run("testbed-6", ["train.eval_conflicts=vote"])
    named = options_beyond_the_paper({"train": {"eval_conflicts": "room"}, "policy": {"shared_actors": False},
                                      "scenario": {"reward": "per_cluster"}})
    assert len(named) == 1 and named[0].startswith("agents that act outside training (validation, evaluation) "
                                                   "with conflicts resolved by `room` (agents choose in turn")


def test_a_checkpoint_acts_in_its_runs_eval_conflicts_unless_told_otherwise(tmp_path):
    from agents.evaluation.runner import check_checkpoint
    from agents.policy.checkpoint import save_policy_checkpoint
    from agents.policy.scheduler import TapFingerScheduler

    policy, _, env = _busy()
    path = save_policy_checkpoint(tmp_path / "ev.pt", policy.net, env.cfg,
                                  {"train_config": {"eval_action": "sample", "eval_conflicts": "room"}})
    assert TapFingerScheduler(checkpoint=path).policy.cfg.conflicts == "room"
    assert TapFingerScheduler(checkpoint=path, conflicts="bayes").policy.cfg.conflicts == "bayes"
    assert check_checkpoint(path, env.cfg)["conflicts"] == "room"  # evaluate.py labels it tapfinger-room
