"""The MAPPO loss with TapFinger's masked per-agent terms (paper §IV-C, eqs. 12-14).

Every tensor is ``(B, N)``: one entry per (sample, agent). For agent ``i`` of sample ``t``

* ``log_prob`` is the log-probability of its part of the joint action, eq. 13: the selection
  term ``log pi(slot)`` plus the allocation term ``log pi(alloc | slot)``, where an agent that
  lost its claim in a Bayes conflict (eq. 11) keeps only the selection term (its allocation
  was never applied). ``entropy`` is masked the same way. Both come from the policy
  (:func:`agents.policy.outputs.masked_joint_terms` owns that rule);
* ``active`` is eq. 14's per-agent mask: an agent with no feasible slot took no decision and
  contributes nothing to the surrogate, the entropy or the statistics.

The loss is PPO's (Schulman et al. 2017) per agent, averaged over the active entries::

    r      = exp(log_prob - log_prob_old)                     (0 where inactive)
    L_clip = -mean_active( min(r * A, clip(r, 1 - eps, 1 + eps) * A) )
    L_V    = mean_all( (R - V)^2 )        or, with value_clip, max of that and the clipped form
    L_H    = mean_active( entropy )
    loss   = L_clip + vf_coef * L_V - ent_coef * L_H

``A`` are the (already normalised, :func:`normalise_advantages`) advantages, ``R`` the scaled
returns, ``V`` the centralised critic's per-agent values. The means divide by ``n_active`` and
``n_values``: by default the entries of the tensors given, or, when a minibatch is split into
row shards whose gradients add up (:mod:`agents.training.shards`), the whole minibatch's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

#: the statistics :func:`mappo_loss` returns, in order (all but ``loss`` summed over shards)
STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "abs_log_ratio")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` holds (0 when none does)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def normalise_advantages(adv: Tensor, active: Tensor, eps: float = 1e-8) -> Tensor:
    """Advantages centred by their mean over the active entries and divided by their standard
    deviation there, ``sqrt(var + eps**2)``."""
    mean = masked_mean(adv, active)
    var = masked_mean((adv - mean) ** 2, active)
    return (adv - mean) / (var + eps * eps).sqrt()


@dataclass
class MAPPOLoss:
    """:func:`mappo_loss`'s result: the differentiable loss and its detached statistics."""

    loss: Tensor  # scalar, differentiable
    stats: Tensor  # (6,) detached, :data:`STAT_NAMES`: the three loss terms, then the sums of
    # the approximate KL, the clipped entries and |log ratio| over the active entries


def mappo_loss(
    log_prob: Tensor,
    entropy: Tensor,
    value: Tensor,
    *,
    log_prob_old: Tensor,
    advantages: Tensor,
    returns: Tensor,
    value_old: Tensor,
    active: Tensor,
    eps_clip: float,
    value_clip: bool,
    vf_coef: float,
    ent_coef: float,
    n_active: Tensor | None = None,
    n_values: float | None = None,
) -> MAPPOLoss:
    """The loss of the module docstring on ``(B, N)`` tensors; ``active`` is bool (eq. 14)."""
    weight = active.to(torch.float32)
    if n_active is None:
        n_active = weight.sum().clamp(min=1.0)
    if n_values is None:
        n_values = float(returns.numel())
    # the clipped surrogate on each agent's own ratio
    log_ratio = torch.where(active, log_prob - log_prob_old, torch.zeros_like(log_prob))
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip) * advantages)
    # the value loss over every (sample, agent), optionally clipped around the old values
    value = value.float()
    value_error = (returns - value) ** 2
    if value_clip:
        clipped_value = value_old + (value - value_old).clamp(-eps_clip, eps_clip)
        value_error = torch.max(value_error, (returns - clipped_value) ** 2)
    sums = torch.stack([(surrogate * weight).sum(), value_error.sum(), (entropy * weight).sum()])
    terms = sums / torch.stack([-n_active, sums.new_tensor(n_values), n_active])  # L_clip, L_V, L_H
    loss = terms[0] + vf_coef * terms[1] - ent_coef * terms[2]
    with torch.no_grad():
        approx_kl = (((ratio - 1.0) - log_ratio) * weight).sum()  # Schulman's k3 estimator
        clipped = (((ratio - 1.0).abs() > eps_clip).float() * weight).sum()
        abs_log_ratio = (log_ratio.abs() * weight).sum()
        stats = torch.cat([terms.detach(), torch.stack([approx_kl, clipped, abs_log_ratio])])
    return MAPPOLoss(loss=loss, stats=stats)
