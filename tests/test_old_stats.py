"""Where the PPO update takes the old log-probs, skip flags and values (``train.old_stats``):
``behaviour`` reuses the collection step's, without the extra pass over the batch, and gives
the same advantages, returns and ratios as ``recompute`` (float32, same network)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_precision import _Probe  # tests/ is on sys.path (pytest rootdir insertion)
from test_training import _scalars, _spec
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Batch
from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

from agents.training.config import BEHAVIOUR, OLD_STATS, RECOMPUTE, TrainConfig
from agents.training.envs import training_envs
from agents.training.loop import build_algorithm, make_collectors, run_training
from agents.training.tianshou_glue.algorithm import MultiAgentPPO
from envs.config import ConfigError

torch.set_num_threads(1)


def test_old_stats_names_are_checked(tmp_path: Path):
    assert OLD_STATS == (RECOMPUTE, BEHAVIOUR) and TrainConfig().old_stats == RECOMPUTE
    with pytest.raises(ConfigError, match="old_stats"):
        _spec(tmp_path, "train.old_stats=stored")
    spec = _spec(tmp_path, "train.old_stats=behaviour")
    envs = training_envs(spec.scenario, spec.train, 0)
    try:
        algorithm, _ = build_algorithm(spec, envs, torch.device("cpu"))
        assert algorithm.old_stats == BEHAVIOUR and algorithm.policy.store_behaviour
        with pytest.raises(ValueError, match="old_stats must be one of"):
            MultiAgentPPO(policy=algorithm.policy, optim=AdamOptimizerFactory(lr=1e-3), old_stats="stored")
    finally:
        envs.close()


def _collected(tmp_path: Path, *extra: str, steps: int = 60):
    """An algorithm (``old_stats=behaviour``, no return scaling) and a buffer it collected in a training step."""
    spec = _spec(tmp_path, "train.old_stats=behaviour", "train.return_scaling=false", *extra)
    envs = training_envs(spec.scenario, spec.train, 0)
    algorithm, net = build_algorithm(spec, envs, torch.device("cpu"))
    return algorithm, net, _collect(spec, algorithm, envs, steps), envs


def _collect(spec, algorithm: MultiAgentPPO, envs, steps: int):
    """A fresh buffer of ``steps`` env steps collected by ``algorithm``'s policy in a training step."""
    collector, _ = make_collectors(spec, algorithm, envs, None)
    collector.reset()
    with policy_within_training_step(algorithm.policy), torch_train_mode(algorithm.policy, False):
        collector.collect(n_step=steps)
    return collector.buffer


def _preprocessed(algorithm: MultiAgentPPO, buffer, mode: str) -> Batch:
    algorithm.old_stats = mode
    batch, indices = buffer.sample(0)
    return algorithm._preprocess_batch(batch, buffer, indices)


@pytest.mark.parametrize("conflicts", ["bayes", "sequential"])
def test_behaviour_stats_equal_the_recomputed_ones(tmp_path: Path, conflicts: str):
    algorithm, _, buffer, envs = _collected(tmp_path, f"policy.conflicts={conflicts}")
    try:
        stored = buffer.sample(0)[0].policy
        assert {"logp", "skip", "value"} <= set(stored.keys())
        assert np.asarray(stored.skip).dtype == np.bool_ and np.asarray(stored.value).shape == np.asarray(stored.logp).shape
        mine = _preprocessed(algorithm, buffer, BEHAVIOUR)
        ref = _preprocessed(algorithm, buffer, RECOMPUTE)
    finally:
        envs.close()
    assert torch.equal(mine.skip, ref.skip)
    assert mine.skip.any() and (~mine.skip).any()  # both kinds of agents occur
    for key in ("logp_old", "v_s", "returns", "adv"):
        assert torch.allclose(getattr(mine, key), getattr(ref, key), atol=1e-4), key
    assert not torch.equal(mine.adv, torch.zeros_like(mine.adv))


def _count(seen: list[tuple[str, bool]], kind: str) -> int:
    return sum(k == kind for k, _ in seen)


def test_behaviour_stats_skip_the_extra_pass(tmp_path: Path):
    """``recompute`` evaluates the whole batch once before the first gradient step; ``behaviour``
    evaluates only the minibatches (and the bootstrap values of the ring's last steps)."""
    algorithm, net, buffer, envs = _collected(tmp_path)
    try:
        probe = _Probe(net)
        algorithm.policy.actor.net = probe
        n = len(buffer)
        minibatches = max(1, n // 16)  # merge_last: the remainder joins the last minibatch
        with policy_within_training_step(algorithm.policy), torch_train_mode(algorithm.policy, False):
            algorithm.old_stats = BEHAVIOUR
            stats = algorithm.update(buffer=buffer, batch_size=16, repeat=1)
            assert _count(probe.seen, "evaluate") == minibatches
            assert 0.0 <= stats.logp_mismatch < 1e-4  # the first minibatch, before its gradient step
            assert math.isfinite(stats.loss)
            probe.seen.clear()
            algorithm.old_stats = RECOMPUTE
            algorithm.update(buffer=buffer, batch_size=16, repeat=1)
            assert _count(probe.seen, "evaluate") == minibatches + math.ceil(n / algorithm.max_batchsize)
    finally:
        envs.close()


def test_behaviour_mode_falls_back_without_stored_values(tmp_path: Path):
    """A buffer collected without the stored values (e.g. by an older run's policy) is recomputed."""
    algorithm, _, _, envs = _collected(tmp_path)
    try:
        algorithm.policy.store_behaviour = False
        plain = _collect(_spec(tmp_path, "train.old_stats=behaviour"), algorithm, envs, 60)
        assert "value" not in plain.sample(0)[0].policy.keys()
        fallback = _preprocessed(algorithm, plain, BEHAVIOUR)
        recomputed = _preprocessed(algorithm, plain, RECOMPUTE)
    finally:
        envs.close()
    assert torch.equal(fallback.logp_old, recomputed.logp_old) and torch.equal(fallback.adv, recomputed.adv)


def test_training_run_with_behaviour_stats(tmp_path: Path):
    """End to end through ``run_training``: finite losses, the mismatch diagnostic near zero."""
    spec = _spec(tmp_path, "train.old_stats=behaviour", "train.run_name=behaviour", steps=80)
    result = run_training(spec)
    assert result.env_steps == 80 and result.update_steps == 2
    sc = _scalars(spec.run_dir)
    for tag in ("update/policy_loss", "update/value_loss", "update/loss"):
        assert all(math.isfinite(v) for _, v in sc[tag]), tag
    assert all(0.0 <= v < 1e-4 for _, v in sc["update/logp_mismatch"])


def test_lost_claim_penalty_reaches_the_update(tmp_path: Path):
    """``train.lost_claim_penalty`` is wired into the update: on the same collected batch the value
    targets (no return scaling, so ``returns = adv + v_s``) drop by at least the penalty wherever
    the stored action lost a Bayes conflict, and never rise."""
    algorithm, _, buffer, envs = _collected(tmp_path, "train.lost_claim_penalty=2.0", steps=120)
    try:
        assert algorithm.lost_claim_penalty == 2.0
        shaped = _preprocessed(algorithm, buffer, RECOMPUTE)
        algorithm.lost_claim_penalty = 0.0
        plain = _preprocessed(algorithm, buffer, RECOMPUTE)
    finally:
        envs.close()
    lost = shaped.act[..., 2] == 1
    assert lost.any() and (~lost).any()
    drop = plain.returns - shaped.returns
    assert (drop >= -1e-5).all()
    assert (drop[lost] >= 2.0 - 1e-4).all()
    assert torch.allclose(shaped.v_s, plain.v_s)
