"""``TapFingerPolicy.compile_passes`` (``train.compile``): torch.compile changes speed, not results.

The compiled policy must sample the same actions from the same generator, give the same
log-probabilities, values and gradients as the eager policy on the same parameters (to float
round-off), and keep its state-dict names, so checkpoints stay interchangeable.
"""

from __future__ import annotations

import pytest
import torch

from agents.policy import PolicyConfig, TapFingerPolicy
from agents.train_config import COMPILE_MODES, TrainConfig
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
    assert compiled._compiled and not eager._compiled


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
