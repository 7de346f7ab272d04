"""Compact pointer rows: the agents that have a feasible slot, grouped by the slots they need,
each group run at its own slot width."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from networks.gemm import bucket_rows, buckets_rows, rows_prebucketed
from networks.graph import EncoderOutput
from networks.heads import MASK_VALUE

#: compact pointer rows are split into up to this many slot widths (:func:`pointer_row_groups`)
POINTER_WIDTH_GROUPS = 2


@dataclass
class PointerRowGroup:
    """Agents whose needed slots fit one width (:func:`pointer_row_groups`).

    ``rows (R',)``: flat agent ids ``b * N + i`` (padded to a bucket under bfloat16 on CPU by
    repeating the first); ``slots (R', w)``: flat slot ids ``row * P + p``, each agent's needed
    slots first (in slot order); ``count``: the number of real rows (the first ``count``).
    """

    rows: Tensor
    slots: Tensor
    count: int


def pointer_widths(P: int, groups: int = POINTER_WIDTH_GROUPS) -> tuple[int, ...]:
    """The slot widths compact pointer rows run at: ``ceil(P * k / groups)`` for ``k = 1..groups``
    (distinct, ascending, the last ``P``)."""
    return tuple(sorted({-(-P * k // groups) for k in range(1, groups + 1)}))


def pointer_row_groups(occupied: Tensor, feasible: Tensor, pad: bool = False) -> list[PointerRowGroup]:
    """Split the agents with a feasible slot by the slots they need (occupied or feasible).

    ``occupied``, ``feasible``: ``(R, P)`` bool, one row per agent. Each agent joins the group of
    the smallest width of :func:`pointer_widths` that holds its needed slots; agents with no
    feasible slot join none. The pointer is permutation-equivariant over slots and never lets an
    unneeded slot reach a needed one (masked keys, masked logits), so running each group at
    its width gives the needed slots the full rows' logits. ``pad``: pad each group's rows to a
    bucket (:func:`networks.gemm.bucket_rows`). Groups with no agent are left out.
    """
    P = feasible.shape[-1]
    need_mask = occupied | feasible
    need = need_mask.sum(-1).masked_fill_(~feasible.any(-1), 0)
    out, below = [], 0
    for w in pointer_widths(P):
        rows = ((need > below) & (need <= w)).nonzero().squeeze(1)
        below = w
        count = rows.numel()
        if not count:
            continue
        if pad:
            rows = torch.cat([rows, rows[:1].expand(bucket_rows(count) - count)])
        # needed slots first, each agent's slot order kept (stable); the first w hold them all
        order = torch.argsort((~need_mask.index_select(0, rows)).to(torch.uint8), dim=1, stable=True)[:, :w]
        out.append(PointerRowGroup(rows, rows.unsqueeze(1) * P + order, count))
    return out


def compact_pointer_logits(
    pointer: nn.Module, slot_proj: nn.Module, enc: EncoderOutput, occupied: Tensor, feasible: Tensor
) -> Tensor:
    """Masked selection logits ``(B, N, P)`` of ``pointer`` over ``slot_proj``'s slot embeddings,
    computed for the agents that have a feasible slot only (shared actor weights).

    Agents without a feasible slot (a large share of them in training data) get
    :data:`~networks.heads.MASK_VALUE` everywhere, which is exactly what the full computation
    gives them. The computed agents are split by the slots they need (occupied or feasible;
    :func:`pointer_row_groups`): each group runs at its own slot width, so the empty slots past an
    agent's queue, which cannot change its logits (they are masked keys and masked choices), are
    mostly not computed. Under bfloat16 autocast each group's rows are padded to a bucket
    (:mod:`networks.gemm`).
    """
    B, N, P = feasible.shape
    H = enc.task.shape[-1]
    occ, feas = occupied.reshape(B * N, P), feasible.reshape(B * N, P)
    pad = buckets_rows(enc.task)
    groups = pointer_row_groups(occ, feas, pad=pad)
    if not groups:
        return enc.task.new_full((B, N, P), MASK_VALUE)
    # one gather for all groups (one scatter in the backward), then a view per group
    slots = torch.cat([g.slots.reshape(-1) for g in groups])
    sizes = [g.slots.numel() for g in groups]
    task = enc.task.reshape(B * N * P, H).index_select(0, slots).split(sizes)
    cluster = enc.cluster.reshape(B * N, H).index_select(0, torch.cat([g.rows for g in groups]))
    cluster = cluster.split([g.rows.numel() for g in groups])
    occ_g = occ.reshape(-1).index_select(0, slots).split(sizes)
    feas_g = feas.reshape(-1).index_select(0, slots).split(sizes)
    logits = []
    with rows_prebucketed() if pad else nullcontext():  # each group's rows are bucketed already
        for g, t, c, o, f in zip(groups, task, cluster, occ_g, feas_g):
            n, w = g.slots.shape
            sub = pointer(slot_proj(t.view(n, 1, w, H), c.unsqueeze(1)), o.view(n, 1, w), f.view(n, 1, w))
            logits.append(sub[: g.count].reshape(-1))  # the padding rows dropped
    kept = torch.cat([g.slots[: g.count].reshape(-1) for g in groups])
    values = torch.cat(logits)
    return values.new_full((B * N * P,), MASK_VALUE).index_copy(0, kept, values).view(B, N, P)
