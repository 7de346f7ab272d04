"""``TapFingerPolicy.compile_passes`` (``train.compile``): torch.compile changes speed, not results.

The compiled policy must sample the same actions from the same generator, give the same
log-probabilities, values and gradients as the eager policy on the same parameters (to float
round-off), and keep its state-dict names, so checkpoints stay interchangeable.
"""

from __future__ import annotations

import pytest
import torch

from agents.policy.config import PolicyConfig
from agents.policy.conflict import resolve_conflicts
from agents.policy.modes import COMPILE_MODES, CONFLICT_MODES, SEQUENTIAL_MODES
from agents.policy.network import TapFingerPolicy
from agents.training.config import TrainConfig
from envs import load_scenario
from envs.config import ConfigError

from test_policy import batch_of, drive

TINY = dict(hidden=16, han_layers=1, heads=2, pointer_dim=8, pointer_ffn=16)


@pytest.fixture(scope="module")
def pair():
    cfg = load_scenario("synthetic-3")
    spec, obs = drive(cfg, seed=5, steps=30)
    torch.manual_seed(0)
    eager = TapFingerPolicy(spec, PolicyConfig(**TINY)).eval()
    torch.manual_seed(0)
    compiled = TapFingerPolicy(spec, PolicyConfig(**TINY)).eval()
    compiled.load_state_dict(eager.state_dict())
    return eager, compiled.compile_passes("default"), obs


def test_compiled_policy_acts_like_the_eager_one(pair):
    eager, compiled, obs = pair
    for batch in (batch_of(obs[-1:]), batch_of(obs[-6:])):
        for deterministic in (False, True):
            ga, gb = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
            a = eager.act(batch, deterministic=deterministic, generator=ga, with_value=True)
            b = compiled.act(batch, deterministic=deterministic, generator=gb, with_value=True)
            assert torch.equal(a.action, b.action)
            torch.testing.assert_close(b.log_prob, a.log_prob, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(b.value, a.value, atol=1e-5, rtol=1e-5)
    assert "act" in compiled._compiled and not eager._compiled


def test_compiled_policy_trains_like_the_eager_one(pair):
    eager, compiled, obs = pair
    batch = batch_of(obs[-6:])
    action = eager.act(batch, generator=torch.Generator().manual_seed(1)).action
    grads = []
    for pol in (eager, compiled):
        pol.zero_grad()
        logp, ent, skip, value = pol.evaluate(batch, action)
        (logp.sum() + 0.01 * ent.sum() + value.sum()).backward()
        grads.append({n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None})
        pol.zero_grad()
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], atol=1e-4, rtol=1e-4, msg=name)
    assert list(compiled.state_dict()) == list(eager.state_dict())


def test_bad_compile_modes_are_refused(pair):
    with pytest.raises(ValueError, match="compile mode must be one of"):
        pair[1].compile_passes("fastest")
    cfg = TrainConfig()
    cfg.apply({"compile": "fastest"})
    with pytest.raises(ConfigError, match=r"train\.compile must be null or one of .*'fastest'"):
        cfg.validate()
    for mode in COMPILE_MODES:
        TrainConfig().apply({"compile": mode}).validate()


@pytest.mark.parametrize("conflicts", CONFLICT_MODES)
def test_acting_traces_as_one_graph(pair, conflicts):
    """Acting whole (encoder, pointer, sampling, conflicts, allocation) has no graph break in
    the static layout: no generator, no data-dependent shape, no host read inside, which is
    what CUDA-graph replay (``reduce-overhead``) needs. Batches of 1 and of 9 (on the CPU a
    batch of 8+ takes the compact layout eagerly; under tracing the static one)."""
    eager, _, obs = pair
    torch.manual_seed(0)
    pol = TapFingerPolicy(eager.spec, PolicyConfig(**TINY, conflicts=conflicts)).eval()
    for rows in (obs[-1:], obs[-9:]):
        batch = pol.as_tensors(batch_of(rows))
        for deterministic in (False, True):
            noise = pol.draw_noise(batch, deterministic, torch.Generator().manual_seed(3))
            with torch.inference_mode():
                explained = torch._dynamo.explain(pol._act)(batch, noise, deterministic, True)
            assert explained.graph_break_count == 0, explained.break_reasons
            assert explained.graph_count == 1


@pytest.mark.parametrize("conflicts", CONFLICT_MODES)
def test_acting_draws_its_noise_up_front(pair, conflicts):
    """``act()`` with a generator equals the pass on noise drawn from the same seed, and the
    noise has each draw's shape (the tie-breaks only where agents resolve conflicts by Bayes)."""
    eager, _, obs = pair
    torch.manual_seed(0)
    pol = TapFingerPolicy(eager.spec, PolicyConfig(**TINY, conflicts=conflicts)).eval()
    batch = pol.as_tensors(batch_of(obs[-5:]))
    B, N, P = batch["pending_mask"].shape
    for deterministic in (False, True):
        a = pol.act(batch, deterministic=deterministic, generator=torch.Generator().manual_seed(11))
        noise = pol.draw_noise(batch, deterministic, torch.Generator().manual_seed(11))
        assert (noise.selection is None) == deterministic == (noise.allocation is None)
        assert (noise.tie is None) == (conflicts in SEQUENTIAL_MODES)
        if not deterministic:
            assert noise.selection.shape == (B, N, P) and noise.allocation.shape[:2] == (B, N)
        with torch.inference_mode():
            b = pol._act(batch, noise, deterministic, False)
        assert torch.equal(a.action, b.action) and torch.equal(a.log_prob, b.log_prob)


def test_sampling_without_noise_is_refused(pair):
    eager, _, obs = pair
    batch = eager.as_tensors(batch_of(obs[-2:]))
    with torch.inference_mode(), pytest.raises(ValueError, match="selection noise"):
        eager._joint_pass(batch, eager.encode(batch))
    key = torch.tensor([[0, 0]])
    free = torch.ones(1, 2, 2)
    with pytest.raises(ValueError, match="tie-break draws must have shape"):
        resolve_conflicts(key, torch.ones(1, 2), free, free, torch.ones(1, 2, dtype=torch.bool), tie=torch.rand(2))
