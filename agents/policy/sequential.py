"""Agents that choose one after another (``conflicts="sequential"`` or ``"room"``): each agent
chooses among the tasks no earlier agent started, so no conflict can arise."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .distribution import MaskedCategorical
from .noise import ActNoise, gumbel_noise, required_noise


def sequential_choice(
    logits: Tensor,
    key: Tensor,
    feasible: Tensor,
    skip: Tensor,
    alloc_logp: Callable[[int | Tensor, Tensor], Tensor] | None = None,
    chosen: Tensor | None = None,
    deterministic: bool = False,
    noise: ActNoise | None = None,
    order: Tensor | None = None,
    idle: Tensor | None = None,
) -> tuple[Tensor, Tensor | None, Tensor, Tensor | None, Tensor]:
    """Choices with ``conflicts="sequential"`` or ``"room"``: agents choose one after another,
    and a task started by an earlier agent (``key (B, N, P)``: the task id of each slot) is
    masked for the later ones, so no two agents ever claim the same task. The order is the
    agents' index order, or per sample ``order (B, N)`` (position -> agent; :func:`room_order`
    for ``"room"``). An agent whose feasible tasks are all
    taken is *blocked*: it has no choice this step and, like a skipped agent, adds nothing to
    the loss. Only a start claims its task (a slot chosen with the void allocation does not),
    so later agents may still take a task an earlier one declined.

    Choosing: ``alloc_logp(i, slot)`` gives agent ``i``'s allocation log-probabilities ``(B, A)``
    at ``slot (B,)``, drawn right after the slot; sampling takes its ``(B, N, P)`` and
    ``(B, N, A)`` uniforms, indexed by agent, from ``noise`` (:func:`~agents.policy.noise.draw_act_noise`; required
    unless ``deterministic``). Re-evaluation: ``chosen (B, N, 2)`` are
    stored ``(slot, allocation)`` pairs, whose masks are rebuilt from them. Returns ``(slot
    (B, N), allocation (B, N), masked selection log-probabilities (B, N, P), allocation
    log-probabilities at the slot (B, N, A), blocked (B, N))``; the two allocation entries are
    ``None`` when re-evaluating. ``idle (B, N)``: a most likely allocation of an agent whose cluster is
    idle starts its task when it can (``argmax-busy``, :meth:`MaskedCategorical.mode_starting`).
    """
    B, N, P = logits.shape
    sampling = chosen is None and not deterministic
    # ordered: every per-agent input is put in choosing order once, the outputs back at the end
    to_pos = (lambda t: t) if order is None else (lambda t: _along_agents(t, order))
    logits, key, feasible, skip = to_pos(logits), to_pos(key), to_pos(feasible), to_pos(skip)
    noise_sel = gumbel_noise(to_pos(required_noise(noise, "selection"))) if sampling else None
    sample_alloc = sampling and noise is not None and noise.allocation is not None  # else: argmax allocations
    noise_alloc = gumbel_noise(to_pos(noise.allocation)) if sample_alloc else None  # (B, N, A), by agent
    stored = None if chosen is None else to_pos(chosen)
    idle = None if idle is None else to_pos(idle)
    claimed = torch.zeros(B, N * P, dtype=torch.bool, device=logits.device)
    slots, allocs, logps, alloc_logps, blocked = [], [], [], [], []
    for j in range(N):
        free = feasible[:, j] & ~claimed.gather(1, key[:, j])  # (B, P)
        block = ~skip[:, j] & ~free.any(-1)
        choice = MaskedCategorical.from_logits(logits[:, j], free)
        if stored is not None:
            slot, alloc = stored[:, j, 0], stored[:, j, 1]
        else:
            slot = choice.mode() if noise_sel is None else choice.sample_gumbel(noise_sel[:, j])
            al = MaskedCategorical(alloc_logp(j if order is None else order[:, j], slot))
            if noise_alloc is not None:
                alloc = al.sample_gumbel(noise_alloc[:, j])
            else:
                alloc = al.mode() if idle is None else al.mode_starting(idle[:, j])
            allocs.append(alloc)
            alloc_logps.append(al.log_probs)
        task = key[:, j].gather(1, slot.unsqueeze(1))  # (B, 1)
        starts = (~skip[:, j] & ~block & (alloc > 0)).unsqueeze(1)
        claimed = claimed.scatter(1, task, claimed.gather(1, task) | starts)
        slots.append(slot)
        logps.append(choice.log_probs)
        blocked.append(block)
    out = [torch.stack(x, 1) if x else None for x in (slots, allocs, logps, alloc_logps, blocked)]
    if order is not None:  # position -> agent
        out = [None if x is None else _to_agents(x, order) for x in out]
    return out[0], out[1], out[2], out[3], out[4]


def agent_entries(t: Tensor, i: int | Tensor) -> Tensor:
    """Agent ``i``'s entries of ``t (B, N, ...)``: one agent for all samples, or ``i (B,)`` per sample."""
    if isinstance(i, int):
        return t[:, i]
    return t[torch.arange(t.shape[0], device=t.device), i]


def _order_index(order: Tensor, like: Tensor) -> Tensor:
    return order.view(*order.shape, *([1] * (like.dim() - 2))).expand_as(like)


def _along_agents(t: Tensor, order: Tensor) -> Tensor:
    """``t (B, N, ...)`` in choosing order: position ``j`` holds agent ``order[:, j]``'s entries."""
    return t.gather(1, _order_index(order, t))


def _to_agents(by_position: Tensor, order: Tensor) -> Tensor:
    """Put ``by_position (B, N, ...)``, indexed by choosing position, back in agent order."""
    return torch.empty_like(by_position).scatter(1, _order_index(order, by_position), by_position)


def room_order(free_fraction: Tensor) -> Tensor:
    """``conflicts="room"``: the agents' choosing order, ``(B, N)`` position -> agent, by
    decreasing free room (``free_fraction (B, N, K)``: each cluster's free resources over the
    scenario's largest capacity, summed over the resources); equal room keeps index order."""
    return torch.argsort(-free_fraction.sum(-1), dim=1, stable=True)
