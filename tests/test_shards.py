"""Data-parallel CPU shards of the PPO update (``train.shards``, agents/training/shards.py): the row
ranges, the threads they run on, an update whose sharded gradients equal the whole
minibatch's (float32) and whose loss is PPO's masked-mean loss, and a sharded recompute pass
equal to the whole one."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import pytest
import torch
from test_old_stats import _collected, _preprocessed  # tests/ is on sys.path (pytest rootdir insertion)
from test_training import _spec

from agents.policy.observations import obs_to_torch
from agents.training import prepare
from agents.training.config import BEHAVIOUR, RECOMPUTE
from agents.training.shards import MIN_SHARD_ROWS, run_sharded, shard_ranges
from envs.config import ConfigError

torch.set_num_threads(1)


@pytest.mark.parametrize("rows", [0, 1, 15, 16, 33, 1000, 1023])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_shard_ranges_cover_the_rows_in_near_equal_contiguous_ranges(rows, shards):
    ranges = shard_ranges(rows, shards)
    assert ranges[0][0] == 0 and ranges[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    assert 1 <= len(ranges) <= shards
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1
    if len(ranges) > 1:
        assert min(sizes) >= MIN_SHARD_ROWS
    assert len(ranges) == max(1, min(shards, rows // MIN_SHARD_ROWS))


def test_shard_ranges_refuse_zero_shards():
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_ranges(64, 0)


def test_run_sharded_runs_the_shards_at_once_with_one_intra_op_thread_each():
    torch.set_num_threads(2)
    barrier = threading.Barrier(2, timeout=30)  # both shards must be running at the same time

    def shard(lo: int, hi: int):
        barrier.wait()
        return lo, hi, torch.get_num_threads(), threading.current_thread().name

    try:
        out = run_sharded(shard, 64, 2)
        assert torch.get_num_threads() == 2  # the caller's count is restored
    finally:
        torch.set_num_threads(1)
    assert [o[:3] for o in out] == [(0, 32, 1), (32, 64, 1)]
    assert out[0][3] == threading.current_thread().name != out[1][3]  # the first on the caller


def test_run_sharded_raises_a_shards_error_after_every_shard_finished():
    finished = []

    def shard(lo: int, hi: int):
        if lo:
            raise RuntimeError(f"shard at {lo} failed")
        finished.append(lo)
        return lo

    with pytest.raises(RuntimeError, match="shard at 40 failed"):
        run_sharded(shard, 80, 2)
    assert finished == [0]
    assert run_sharded(lambda lo, hi: hi - lo, 10, 4) == [10]  # too few rows: one shard, in place


def test_shards_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with pytest.raises(ConfigError, match="shards"):
        _spec(tmp_path, "train.shards=0")
    spec = _spec(tmp_path, "train.shards=2")
    assert prepare.check_environment(spec).type == "cpu"
    monkeypatch.setattr(prepare, "resolve_device", lambda name: torch.device("cuda"))
    with pytest.raises(ConfigError, match="train.shards=2 splits network passes over CPU threads"):
        prepare.check_environment(spec)


def test_a_sharded_update_step_equals_the_whole_minibatch_step(tmp_path: Path):
    """Same network, same minibatch: two shards give the loss terms, gradients and updated
    parameters of one (to float32 round-off), and those loss terms are PPO's masked means."""
    algorithm, net, buffer, envs = _collected(tmp_path, steps=80)
    try:
        batch = _preprocessed(algorithm, buffer, BEHAVIOUR)
    finally:
        envs.close()
    assert len(batch.act) >= 2 * MIN_SHARD_ROWS  # two shards really run
    net_state = copy.deepcopy(net.state_dict())
    optim_state = copy.deepcopy(algorithm.optim._optim.state_dict())

    # PPO's loss terms, written out with masked means over the whole minibatch
    with torch.no_grad():
        logp, entropy, _, value = algorithm.evaluate(obs_to_torch(batch.obs), batch.act)
    active = ~batch.skip
    masked_mean = lambda x: (x * active).sum() / active.sum()  # noqa: E731
    adv = batch.adv
    mean = masked_mean(adv)
    adv = (adv - mean) / (masked_mean((adv - mean) ** 2).sqrt() + algorithm._eps)
    ratio = torch.where(active, logp - batch.logp_old, torch.zeros_like(logp)).exp()
    clipped = ratio.clamp(1 - algorithm.eps_clip, 1 + algorithm.eps_clip)
    policy_loss = -masked_mean(torch.min(ratio * adv, clipped * adv))
    value_loss = ((batch.returns - value.float()) ** 2).mean()
    expected = torch.stack([policy_loss, value_loss, masked_mean(entropy)])

    results = {}
    for shards in (1, 2):
        net.load_state_dict(net_state)
        algorithm.optim._optim.load_state_dict(copy.deepcopy(optim_state))
        algorithm.shards = shards
        algorithm._mismatch_pending = False
        stats = algorithm._minibatch_step(batch)
        grads = {k: p.grad.clone() for k, p in net.named_parameters() if p.grad is not None}
        results[shards] = stats, {k: v.detach().clone() for k, v in net.state_dict().items()}, grads
    (stats1, params1, grads1), (stats2, params2, grads2) = results[1], results[2]
    assert grads1.keys() == grads2.keys() and len(grads1) > 10
    for k in grads1:  # the clipped gradients the optimiser applied
        torch.testing.assert_close(grads2[k], grads1[k], rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(stats1[1:4], expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats2, stats1, rtol=1e-5, atol=1e-6)
    moved = [k for k in params1 if not torch.equal(params1[k], net_state[k])]
    assert moved, "the step changed no parameter"
    for k in params1:
        torch.testing.assert_close(params2[k], params1[k], rtol=1e-5, atol=1e-6)


def test_the_sharded_recompute_pass_equals_the_whole_one(tmp_path: Path):
    algorithm, _, buffer, envs = _collected(tmp_path, steps=80)
    try:
        passes = {}
        for shards in (1, 2):
            algorithm.shards = shards
            passes[shards] = _preprocessed(algorithm, buffer, RECOMPUTE)
    finally:
        envs.close()
    one, two = passes[1], passes[2]
    assert len(one.act) >= 2 * MIN_SHARD_ROWS
    assert torch.equal(two.skip, one.skip)
    for key in ("logp_old", "v_s", "returns", "adv"):
        torch.testing.assert_close(getattr(two, key), getattr(one, key), rtol=1e-5, atol=1e-5, msg=key)
