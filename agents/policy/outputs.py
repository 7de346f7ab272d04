"""What the policy's passes return, and the per-agent log-probability and entropy terms of
a joint action (eqs. 13-14)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


def _entropy(logp: Tensor) -> Tensor:
    """Entropy of normalised log-probabilities over the last axis. The probabilities come from
    a softmax of ``logp`` (equal to ``exp(logp)``, the same gradient with respect to the logits):
    on CPU ``exp`` of the masked entries (~-1e9) takes a slow path, many times the time of the
    softmax's own vectorised exponential."""
    return -(torch.softmax(logp, dim=-1) * logp).sum(-1)


def masked_joint_terms(
    skip: Tensor, lost: Tensor, sel_logp: Tensor, lp_sel: Tensor, al_logp: Tensor, lp_alloc: Tensor
) -> tuple[Tensor, Tensor]:
    """A joint action's per-agent log-probability and entropy, ``(B, N)`` (paper eqs. 13-14): the
    selection term ``lp_sel`` plus the allocation term ``lp_alloc``, except that a conflict loser
    (``lost``) keeps the selection term only (its allocation was never applied) and a skipped
    agent (``skip``: no feasible slot, no decision) contributes 0. ``sel_logp``/``al_logp`` are
    the full log-distributions the entropies are taken of."""
    zero = torch.zeros_like(lp_sel)
    log_prob = torch.where(skip, zero, lp_sel + torch.where(lost, zero, lp_alloc))
    entropy = torch.where(skip, zero, _entropy(sel_logp) + torch.where(lost, zero, _entropy(al_logp)))
    return log_prob, entropy


@dataclass
class ActOutput:
    """Result of :meth:`~agents.policy.network.TapFingerPolicy.act` (all tensors have leading dims ``(B, N)``)."""

    action: Tensor  # (B, N, 3) long: slot, allocation index, lost flag
    log_prob: Tensor  # (B, N)
    entropy: Tensor  # (B, N)
    skip: Tensor  # (B, N) bool
    value: Tensor | None = None  # (B, N) when requested
    extra: dict[str, Tensor] = field(default_factory=dict)


@dataclass
class PolicyDistributions:
    """Result of :meth:`~agents.policy.network.TapFingerPolicy.distributions` (leading dims ``(B, N)``)."""

    selection: Tensor  # (B, N, P) log-probabilities of the pending slots
    allocation: Tensor  # (B, N, P, A) log-probabilities of the allocations, for every slot
    skip: Tensor  # (B, N) bool: the agent has no feasible slot
    value: Tensor  # (B, N) critic values
