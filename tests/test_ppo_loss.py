"""The PPO loss of :class:`agents.training.tianshou_glue.algorithm.MultiAgentPPO` against a hand computation, with ratios pushed
well outside ``1 ± eps_clip``: the clip's four cases (which branch of the min carries the gradient),
the entropy bonus's sign, the masked (skipped) entries and the logged ``loss`` = policy +
vf · value − ent · entropy.

A toy network holds one log-probability, entropy and value parameter per (sample, agent), so
every gradient of the loss can be written out by hand."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Batch
from torch import nn

from agents.training.tianshou_glue.algorithm import MultiAgentPPO, TianshouJointPolicy
from envs.observation import KEYS

EPS = 0.2
VF, ENT = 0.5, 0.01


class ToyNet(nn.Module):
    """``evaluate`` returns its parameters: log-probs, entropies and values of a (B, N) batch."""

    def __init__(self, logp: np.ndarray, entropy: np.ndarray, value: np.ndarray) -> None:
        super().__init__()
        self.logp = nn.Parameter(torch.tensor(logp, dtype=torch.float32))
        self.entropy = nn.Parameter(torch.tensor(entropy, dtype=torch.float32))
        self.val = nn.Parameter(torch.tensor(value, dtype=torch.float32))

    def evaluate(self, obs, act):  # noqa: ANN001 - the MultiAgentPPO network interface
        b = act.shape[0]
        skip = torch.zeros(b, self.logp.shape[1], dtype=torch.bool)
        return self.logp[:b], self.entropy[:b], skip, self.val[:b]

    def value(self, obs):  # noqa: ANN001
        return self.val


def _algorithm(net: ToyNet, normalise: bool) -> MultiAgentPPO:
    policy = TianshouJointPolicy(net, action_space=gym.spaces.MultiDiscrete(np.full((2, 3), 4)))
    return MultiAgentPPO(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), eps_clip=EPS, vf_coef=VF, ent_coef=ENT,
                         advantage_normalization=normalise, max_grad_norm=None)


# (ratio, advantage) per (sample, agent): outside the band, four clipped entries and two unclipped
# ones (rows 0 and 3; row 1), two inside it, one entry skipped
RATIO = np.array([[1.6, 0.5], [1.6, 0.5], [1.1, 0.95], [0.3, 2.5]])
ADV = np.array([[2.0, -1.5], [-1.0, 0.7], [0.4, -0.8], [-1.2, 0.6]])
SKIP = np.array([[False, False], [False, False], [False, True], [False, False]])


def _minibatch(normalise: bool):
    rng = np.random.default_rng(0)
    logp_old = rng.uniform(-3.0, -0.5, RATIO.shape)
    logp = logp_old + np.log(RATIO)
    entropy = rng.uniform(0.2, 2.0, RATIO.shape)
    value = rng.normal(0.0, 1.0, RATIO.shape)
    returns = rng.normal(0.0, 1.0, RATIO.shape)
    net = ToyNet(logp, entropy, value)
    b = RATIO.shape[0]
    obs = Batch({k: np.zeros((b, 1, 1), dtype=np.float32) for k in KEYS})
    mb = Batch(obs=obs, act=torch.zeros((b, 2, 3), dtype=torch.long), skip=torch.tensor(SKIP),
               adv=torch.tensor(ADV, dtype=torch.float32), logp_old=torch.tensor(logp_old, dtype=torch.float32),
               returns=torch.tensor(returns, dtype=torch.float32), v_s=torch.tensor(value, dtype=torch.float32))
    return net, _algorithm(net, normalise), mb, entropy, value, returns


def _hand(entropy: np.ndarray, value: np.ndarray, returns: np.ndarray, normalise: bool):
    """The loss terms and the gradients, written out (float64)."""
    active = ~SKIP
    n = active.sum()
    adv = ADV.astype(np.float64)
    if normalise:
        mean = adv[active].mean()
        var = ((adv[active] - mean) ** 2).mean()
        adv = (adv - mean) / np.sqrt(var + 1e-16)
    clipped = np.clip(RATIO, 1 - EPS, 1 + EPS)
    unclipped_is_min = RATIO * adv <= clipped * adv
    surr = np.minimum(RATIO * adv, clipped * adv)
    policy_loss = -(surr * active).sum() / n
    value_loss = ((returns - value) ** 2).mean()
    ent = (entropy * active).sum() / n
    # d(-surr)/d logp = -ratio * adv where the unclipped branch is the min, else 0 (clip is constant there)
    g_logp = np.where(active & unclipped_is_min, -RATIO * adv / n, 0.0)
    g_entropy = np.where(active, -ENT / n, 0.0)
    g_value = VF * 2.0 * (value - returns) / value.size
    return (policy_loss, value_loss, ent), (g_logp, g_entropy, g_value), unclipped_is_min


@pytest.mark.parametrize("normalise", [False, True])
def test_ppo_loss_and_gradients_equal_the_hand_computation_outside_the_clip(normalise):
    net, algorithm, mb, entropy, value, returns = _minibatch(normalise)
    (policy_loss, value_loss, ent), grads, unclipped = _hand(entropy, value, returns, normalise)
    # the data exercise every case: clipped entries with zero gradient, unclipped ones outside the band
    outside = (RATIO < 1 - EPS) | (RATIO > 1 + EPS)
    assert (outside & ~unclipped & ~SKIP).sum() == 4 and (outside & unclipped & ~SKIP).sum() == 2

    row = algorithm._minibatch_step(mb).double().numpy()
    stats = dict(zip(algorithm.step_stat_names, row))  # the row's entries, by name
    loss, pl, vl, en, clip_fraction = (stats[k] for k in ("loss", "policy_loss", "value_loss", "entropy",
                                                           "clip_fraction"))
    np.testing.assert_allclose([pl, vl, en], [policy_loss, value_loss, ent], rtol=1e-5)
    np.testing.assert_allclose(loss, pl + VF * vl - ENT * en, rtol=1e-6)
    np.testing.assert_allclose(loss, policy_loss + VF * value_loss - ENT * ent, rtol=1e-5)
    # the clip fraction counts the active entries outside the band
    np.testing.assert_allclose(clip_fraction, (outside & ~SKIP).sum() / (~SKIP).sum(), rtol=1e-6)
    for param, expected in zip((net.logp, net.entropy, net.val), grads):
        np.testing.assert_allclose(param.grad.double().numpy(), expected, rtol=1e-4, atol=1e-7)


def test_a_clipped_entry_carries_no_policy_gradient_and_the_entropy_bonus_lowers_the_loss():
    """Spelled out: the two deliberate bugs a ratio of 1 cannot catch."""
    net, algorithm, mb, *_ = _minibatch(False)
    algorithm._minibatch_step(mb)
    g = net.logp.grad.numpy()
    assert g[0, 0] == 0.0  # ratio 1.6, advantage +2: clipped, constant in logp
    assert g[0, 1] == 0.0  # ratio 0.5, advantage -1.5: clipped
    assert g[1, 0] > 0.0  # ratio 1.6, advantage -1: the unclipped branch (more pessimistic) carries it
    assert g[1, 1] < 0.0  # ratio 0.5, advantage +0.7: unclipped, raising the probability lowers the loss
    assert g[2, 1] == 0.0  # skipped
    assert (net.entropy.grad.numpy()[~SKIP] < 0).all()  # more entropy, lower loss


@pytest.mark.parametrize("value_clip", [False, True])
def test_the_loss_function_equals_the_hand_computation(value_clip):
    """:func:`agents.training.loss.mappo_loss` alone, on the same entries: the three terms, the
    total, the clip fraction and the gradients, with the value clip written out too."""
    from agents.training.loss import LossSettings, mappo_loss

    net, _, mb, entropy, value, returns = _minibatch(False)
    (policy_loss, value_loss, ent), (g_logp, g_entropy, g_value), _ = _hand(entropy, value, returns, False)
    value_old = value + np.array([[0.5, -0.5], [0.05, 0.0], [-0.3, 0.3], [0.0, 0.1]])  # two beyond the clip
    if value_clip:
        clipped = value_old + np.clip(value - value_old, -EPS, EPS)
        err, err_clipped = (returns - value) ** 2, (returns - clipped) ** 2
        value_loss = np.maximum(err, err_clipped).mean()
        # where the clipped error is the larger one, the value gets no gradient
        g_value = np.where(err >= err_clipped, VF * 2.0 * (value - returns) / value.size, 0.0)
        assert (err < err_clipped).any() and (err > err_clipped).any()
    out = mappo_loss(
        net.logp, net.entropy, net.val, log_prob_old=mb.logp_old, advantages=mb.adv, returns=mb.returns,
        value_old=torch.tensor(value_old, dtype=torch.float32), active=~mb.skip,
        settings=LossSettings(eps_clip=EPS, value_clip=value_clip, vf_coef=VF, ent_coef=ENT),
    )
    out.loss.backward()
    stats = {name: float(v) for name, v in out.stats.items()}
    np.testing.assert_allclose([stats["policy_loss"], stats["value_loss"], stats["entropy"]],
                               [policy_loss, value_loss, ent], rtol=1e-5)
    np.testing.assert_allclose(float(out.loss.detach()), policy_loss + VF * value_loss - ENT * ent, rtol=1e-5)
    assert stats["loss"] == float(out.loss.detach())  # the total, written once (loss.total_loss)
    outside = (RATIO < 1 - EPS) | (RATIO > 1 + EPS)
    np.testing.assert_allclose(stats["clip_fraction"], (outside & ~SKIP).sum() / (~SKIP).sum(), rtol=1e-6)
    for param, expected in zip((net.logp, net.entropy, net.val), (g_logp, g_entropy, g_value)):
        np.testing.assert_allclose(param.grad.double().numpy(), expected, rtol=1e-4, atol=1e-7)
