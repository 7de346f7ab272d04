"""The task selectors of the policy variants (:mod:`agents.policy.variants`): how each agent's
masked selection logits over its ``P`` pending slots are formed.

* :class:`PointerSelector` (``pointer``): slot projection + pointer network over the feasible slots;
* :class:`UniformSelector` (``uniform``): a uniform choice among the feasible slots;
* :class:`FifoSelector` (``fifo``): the earliest feasible slot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from networks.graph import EncoderOutput
from networks.heads import MASK_VALUE, SlotProjector, use_compact
from networks.pointer import PointerNet

from .pointer_rows import compact_pointer_logits



class TaskSelector(ABC):
    """One task-selection rule of a variant."""

    def modules(self, n_actor_sets: int, cfg: Any) -> tuple[nn.Module | None, nn.Module | None]:
        """The slot projector and the pointer network the rule learns (the policy holds them as
        ``slot_proj`` and ``pointer``), for ``n_actor_sets`` actor weight sets and a
        :class:`~agents.policy.config.PolicyConfig`; ``(None, None)``: nothing to learn."""
        return None, None

    @abstractmethod
    def logits(self, policy: nn.Module, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        """Masked selection logits ``(B, N, P)`` (infeasible slots: :data:`~networks.heads.MASK_VALUE`)."""


class PointerSelector(TaskSelector):
    """The pointer network over each agent's feasible slots."""

    def modules(self, n_actor_sets: int, cfg: Any) -> tuple[nn.Module | None, nn.Module | None]:
        return (SlotProjector(n_actor_sets, cfg.hidden, cfg.pointer_dim),
                PointerNet(n_actor_sets, cfg.pointer_dim, cfg.pointer_layers, cfg.pointer_heads, cfg.pointer_ffn))

    def logits(self, policy: nn.Module, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        """Slot projection + pointer network. On CPU batches (:func:`~networks.heads.compact_pays`)
        with shared actor weights only the agents that have a feasible slot are computed, grouped
        by the slots they need (:func:`~agents.policy.pointer_rows.compact_pointer_logits`);
        ``policy.pointer_compact`` (``"auto"``, ``"never"``, ``"always"``) overrides the choice.
        Both layouts compute the same function (to float round-off)."""
        occupied, feasible = obs["pending_mask"].bool(), obs["feasible"].bool()
        compact = use_compact(policy.pointer_compact, feasible, "pointer_compact")
        if not compact or policy.n_actor_sets > 1:  # per-agent weights need the agent axis: full rows
            return policy.pointer(policy.slot_proj(enc.task, enc.cluster), occupied, feasible)
        return compact_pointer_logits(policy.pointer, policy.slot_proj, enc, occupied, feasible)


class UniformSelector(TaskSelector):
    """Every feasible slot alike."""

    def logits(self, policy: nn.Module, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        feasible = obs["feasible"].bool()
        zeros = torch.zeros(feasible.shape, device=enc.task.device, dtype=enc.task.dtype)
        return zeros.masked_fill(~feasible, MASK_VALUE)


class FifoSelector(TaskSelector):
    """The earliest feasible slot (FIFO)."""

    def logits(self, policy: nn.Module, obs: Mapping[str, Tensor], enc: EncoderOutput) -> Tensor:
        feasible = obs["feasible"].bool()
        zeros = torch.zeros(feasible.shape, device=enc.task.device, dtype=enc.task.dtype)
        first = feasible.to(torch.uint8).argmax(-1, keepdim=True)
        pick = torch.zeros_like(feasible).scatter_(-1, first, True)
        return zeros.masked_fill(~pick, MASK_VALUE)
