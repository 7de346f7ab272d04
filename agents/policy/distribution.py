"""The masked distributions of a joint action.

:class:`MaskedCategorical` is one agent factor (a pending slot or an allocation): logits and an
optional mask in, log-probabilities over the last axis, a sample or the deterministic choice,
and the log-probability of a choice out. :class:`JointDistribution` puts an agent's two factors
together with the masks of eqs. 13-14 (skipped agents, conflict losers) and gives a joint
action's per-agent log-probability and entropy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from networks.heads import MASK_VALUE

from .noise import first_argmax, gumbel_noise
from .outputs import masked_joint_terms


@dataclass
class MaskedCategorical:
    """A categorical distribution over the last axis, held as normalised ``log_probs``; masked
    entries carry :data:`~networks.heads.MASK_VALUE` logits and so (numerically) no mass."""

    log_probs: Tensor

    @classmethod
    def from_logits(cls, logits: Tensor, mask: Tensor | None = None) -> "MaskedCategorical":
        """The distribution of ``softmax(logits)`` with the entries outside ``mask`` (bool, same
        shape) excluded; ``mask=None``: ``logits`` are masked already."""
        if mask is not None:
            logits = logits.masked_fill(~mask, MASK_VALUE)
        return cls(F.log_softmax(logits, dim=-1))

    def mode(self) -> Tensor:
        """The deterministic choice (:func:`~agents.policy.noise.first_argmax`)."""
        return first_argmax(self.log_probs)

    def mode_starting(self, idle: Tensor) -> Tensor:
        """An allocation distribution's deterministic choice, except where ``idle`` (its leading
        shape): there the most likely start (index 0, the void allocation, left out) whenever a start
        is valid, so an idle cluster's agent never declines a task it can start."""
        best = self.mode()
        starts = self.log_probs[..., 1:]
        can_start = starts.max(-1).values > MASK_VALUE / 2
        return torch.where(idle & can_start & (best == 0), first_argmax(starts) + 1, best)

    def sample(self, u: Tensor) -> Tensor:
        """A sample by the Gumbel-max trick on uniforms ``u`` (the shape of :attr:`log_probs`)."""
        return self.sample_gumbel(gumbel_noise(u))

    def sample_gumbel(self, gumbel: Tensor) -> Tensor:
        """A sample by the Gumbel-max trick on Gumbel noise already made from the uniforms."""
        return (self.log_probs + gumbel).argmax(-1)

    def log_prob(self, index: Tensor) -> Tensor:
        """The log-probability of ``index`` (one entry per distribution)."""
        return self.log_probs.gather(-1, index.unsqueeze(-1)).squeeze(-1)


@dataclass
class JointDistribution:
    """Every agent's joint-action distribution, leading dims ``(B, N)``: its slot ``selection``
    (over ``P``), its ``allocation`` at the chosen slot (over ``A``), and the masks of eqs. 13-14:
    ``skip`` (no decision: the agent contributes nothing) and ``lost`` (a conflict loser: its
    allocation term drops out)."""

    selection: MaskedCategorical
    allocation: MaskedCategorical
    skip: Tensor
    lost: Tensor

    def log_prob_and_entropy(self, slot: Tensor, allocation: Tensor) -> tuple[Tensor, Tensor]:
        """Per-agent log-probability of the joint action ``(slot, allocation)`` and entropy, ``(B, N)``
        (:func:`~agents.policy.outputs.masked_joint_terms`)."""
        return masked_joint_terms(self.skip, self.lost, self.selection.log_probs, self.selection.log_prob(slot),
                                  self.allocation.log_probs, self.allocation.log_prob(allocation))
