"""Pointer network for task selection (paper §IV-B, eq. 10).

Per agent: a small transformer encoder (default 2 layers, 4 heads, post-norm, ReLU, no
positional encoding, so the scores are permutation-equivariant over slots) over the agent's
``P`` slot embeddings, with empty slots excluded through a key padding mask, then additive
attention ``u_p = v^T tanh(W_q q + W_r e_p)`` with ``q`` the mean over occupied slots.
Logits of empty and infeasible slots are masked. There is no dropout, so the behaviour
policy and the policy whose log-probs are trained are the same function.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .heads import MASK_VALUE, AgentLayerNorm, AgentLinear


class AgentTransformerLayer(nn.Module):
    """Post-norm transformer encoder layer with per-agent (or shared) weights, no dropout."""

    def __init__(self, n_agents: int, dim: int, heads: int, ffn: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"pointer dim ({dim}) must be divisible by heads ({heads})")
        self.heads = heads
        self.scale = (dim // heads) ** -0.5
        self.qkv = AgentLinear(n_agents, dim, 3 * dim)
        self.out = AgentLinear(n_agents, dim, dim)
        self.ff1 = AgentLinear(n_agents, dim, ffn)
        self.ff2 = AgentLinear(n_agents, ffn, dim)
        self.norm1 = AgentLayerNorm(n_agents, dim)
        self.norm2 = AgentLayerNorm(n_agents, dim)

    def forward(self, x: Tensor, attend: Tensor) -> Tensor:
        """``x (B, N, P, D)``; ``attend (B, N, P)`` bool, True = a key that may be attended to."""
        B, N, P, D = x.shape
        h = self.heads
        # q, k, v of every head as (BN, P, d) views of the projection, multiplied per head (q and
        # k copied row by row for the product): a (BN, h, P, d) layout cost permuting copies of
        # all three and, in the backward, a stack plus a scattered copy of their gradients
        parts = self.qkv(x).reshape(B * N, P, 3 * h, D // h).unbind(2)
        # explicit attention: for P ~ 10 it is several times cheaper than the fused CPU kernel.
        # The softmax runs over the keys laid out as (BN, key, h, query): on CPU a softmax over
        # a short innermost axis (P ~ 10), or over an axis with only P values inside it (the
        # (BN, h, key, query) layout), is several times slower than over one with h * P
        scores = torch.stack(
            [torch.bmm(parts[h + i].contiguous(), parts[i].contiguous().transpose(1, 2)) for i in range(h)], 2
        )  # (BN, P keys, h, P queries)
        scores = (scores * self.scale).masked_fill(~attend.view(B * N, P, 1, 1), MASK_VALUE)
        weights = torch.softmax(scores, dim=1).unbind(2)  # per head (BN, P keys, P queries)
        o = torch.cat([torch.bmm(weights[i].transpose(1, 2), parts[2 * h + i]) for i in range(h)], -1)
        x = self.norm1(x + self.out(o.view(B, N, P, D)))
        return self.norm2(x + self.ff2(F.relu(self.ff1(x))))


class PointerNet(nn.Module):
    """Transformer encoder + additive attention: slot embeddings -> masked selection logits."""

    def __init__(self, n_agents: int, dim: int, layers: int = 2, heads: int = 4, ffn: int = 256) -> None:
        super().__init__()
        self.layers = nn.ModuleList(AgentTransformerLayer(n_agents, dim, heads, ffn) for _ in range(layers))
        self.w_q = AgentLinear(n_agents, dim, dim, bias=False)
        self.w_r = AgentLinear(n_agents, dim, dim, bias=False)
        self.v = nn.Parameter(torch.empty(n_agents, dim).uniform_(-0.5, 0.5) / dim**0.5)

    def forward(self, slots: Tensor, occupied: Tensor, feasible: Tensor) -> Tensor:
        """``slots (B, N, P, D)``, masks ``(B, N, P)`` bool -> logits ``(B, N, P)``.

        Agents with no occupied slot attend over all (padded) slots so no NaN arises; their
        logits are meaningless and must be ignored (such agents are skipped).
        """
        attend = occupied | ~occupied.any(-1, keepdim=True)
        e = slots
        for layer in self.layers:
            e = layer(e, attend)
        w = attend.unsqueeze(-1).to(e.dtype)
        q = (e * w).sum(2) / w.sum(2)  # (B, N, D)
        u = torch.tanh(self.w_q(q).unsqueeze(2) + self.w_r(e))
        v = self.v[0] if self.v.shape[0] == 1 else self.v.unsqueeze(0).unsqueeze(2)
        logits = (u * v.to(u.dtype)).sum(-1)  # one dtype: a mixed product is slow on CPU
        return logits.masked_fill(~feasible, MASK_VALUE)
