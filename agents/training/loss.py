"""The MAPPO loss with TapFinger's masked per-agent terms (paper §IV-C, eqs. 12-14), and the
settings of the update that uses it (:class:`LossSettings`).

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
    loss   = L_clip + vf_coef * L_V - ent_coef * L_H             (:func:`total_loss`)

``A`` are the (already normalised, :func:`normalise_advantages`) advantages, ``R`` the scaled
returns, ``V`` the centralised critic's per-agent values. The means divide by ``n_active`` and
``n_values``: by default the entries of the tensors given, or, when a minibatch is split into
row shards whose gradients add up (:mod:`agents.training.shards`), the whole minibatch's counts.
So every statistic the loss returns (:attr:`MAPPOLoss.stats`, by name) adds up over the shards
to the whole minibatch's; the update sums them and logs each under ``update/<name>`` when
:data:`agents.training.logger.TAG_DESCRIPTIONS` describes it. A new statistic is one entry of
that dict here (and its description there); a new coefficient is one field of
:class:`LossSettings` with a ``train.`` key of the same name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .config import OLD_STATS, RECOMPUTE
from .precision import FLOAT32, check_precision

if TYPE_CHECKING:
    from .config import TrainConfig


@dataclass(frozen=True)
class LossSettings:
    """Everything the PPO update reads from the run's ``train:`` section, one field per
    ``train.<key>`` of the same name (:meth:`from_train`); ``gamma`` is the resolved discount."""

    eps_clip: float = 0.2
    value_clip: bool = False
    advantage_normalization: bool = True
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float | None = None
    gae_lambda: float = 0.95
    max_batchsize: int = 1024
    gamma: float = 0.99
    return_scaling: bool = False
    return_scaling_window: int | None = None
    precision: str = FLOAT32
    old_stats: str = RECOMPUTE
    shards: int = 1
    lost_claim_penalty: float = 0.0

    def __post_init__(self) -> None:
        if self.old_stats not in OLD_STATS:
            raise ValueError(f"old_stats must be one of {list(OLD_STATS)}, got {self.old_stats!r}")
        check_precision(self.precision)
        if self.shards < 1:
            raise ValueError(f"shards must be >= 1, got {self.shards}")
        if not (math.isfinite(self.lost_claim_penalty) and self.lost_claim_penalty >= 0):
            raise ValueError(f"lost_claim_penalty must be a finite number >= 0, got {self.lost_claim_penalty}")

    @classmethod
    def from_train(cls, train: TrainConfig, mode: str) -> LossSettings:
        """The settings of ``train`` (a :class:`~agents.training.config.TrainConfig`) for a
        scenario of decision ``mode`` (which resolves ``train.gamma``)."""
        values = {f.name: getattr(train, f.name) for f in fields(cls) if f.name != "gamma"}
        return cls(**values, gamma=train.resolved_gamma(mode))


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


def total_loss(policy_loss: Tensor, value_loss: Tensor, entropy: Tensor, settings: LossSettings) -> Tensor:
    """``L_clip + vf_coef * L_V - ent_coef * L_H`` (the one place the terms are combined)."""
    return policy_loss + settings.vf_coef * value_loss - settings.ent_coef * entropy


@dataclass
class MAPPOLoss:
    """:func:`mappo_loss`'s result: the differentiable loss and its detached statistics."""

    loss: Tensor  # scalar, differentiable
    #: detached scalars by name, each additive over row shards: the total loss and its three terms,
    #: then the approximate KL, the clip fraction and the mean |log ratio| over the active entries
    stats: dict[str, Tensor]


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
    settings: LossSettings,
    n_active: Tensor | None = None,
    n_values: float | None = None,
) -> MAPPOLoss:
    """The loss of the module docstring on ``(B, N)`` tensors; ``active`` is bool (eq. 14)."""
    eps_clip = settings.eps_clip
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
    if settings.value_clip:
        clipped_value = value_old + (value - value_old).clamp(-eps_clip, eps_clip)
        value_error = torch.max(value_error, (returns - clipped_value) ** 2)
    sums = torch.stack([(surrogate * weight).sum(), value_error.sum(), (entropy * weight).sum()])
    terms = sums / torch.stack([-n_active, sums.new_tensor(n_values), n_active])  # L_clip, L_V, L_H
    loss = total_loss(terms[0], terms[1], terms[2], settings)
    with torch.no_grad():
        approx_kl = (((ratio - 1.0) - log_ratio) * weight).sum()  # Schulman's k3 estimator
        clipped = (((ratio - 1.0).abs() > eps_clip).float() * weight).sum()
        abs_log_ratio = (log_ratio.abs() * weight).sum()
        policy_loss, value_loss, mean_entropy = terms.detach()
        stats = {
            "loss": loss.detach(),
            "policy_loss": policy_loss,
            "value_loss": value_loss,
            "entropy": mean_entropy,
            "approx_kl": approx_kl / n_active,
            "clip_fraction": clipped / n_active,
            "abs_log_ratio": abs_log_ratio / n_active,
        }
    return MAPPOLoss(loss=loss, stats=stats)
