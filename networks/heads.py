"""Per-agent building blocks, the allocation head and the centralised critic.

Actor parameters are either shared by all agents (``n_agents=1``: one set of weights for
any number of clusters; the cluster embedding tells agents apart) or held per agent
(``n_agents=N``, the paper's unshared actors), with the same vectorised code path: an
:class:`AgentLinear` applies agent ``i``'s weights to dimension 1 (the agent axis) of its
input, so no Python loop over agents is needed.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from envs.joint_action import allocation_in_bounds

from .gemm import apply_linear, linear

MASK_VALUE = -1e9  # logit of a masked choice: exp() underflows to exactly 0, no inf/NaN
#: smallest CPU batch on which layers compute only the rows that matter (``nonzero`` on a mask)
COMPACT_MIN_BATCH = 8
#: row-layout modes of the layers that can compute only the rows a mask selects
COMPACT_MODES = ("auto", "never", "always")


def compact_pays(mask: Tensor) -> bool:
    """Whether to compute only the rows a mask selects: a CPU batch (leading dimension) of at
    least :data:`COMPACT_MIN_BATCH` samples, outside ``torch.compile``. Reading the mask on the
    host is free on the CPU; on accelerators and under compilation the static layout is kept."""
    return mask.device.type == "cpu" and mask.shape[0] >= COMPACT_MIN_BATCH and not torch.compiler.is_compiling()


def use_compact(mode: str, mask: Tensor, name: str = "compact") -> bool:
    """Resolve a row-layout ``mode`` (:data:`COMPACT_MODES`): ``"always"``/``"never"`` force it,
    ``"auto"`` asks :func:`compact_pays`. ``name`` labels the setting in the error for a bad mode."""
    if mode not in COMPACT_MODES:
        raise ValueError(f"{name} must be one of {COMPACT_MODES}, got {mode!r}")
    return compact_pays(mask) if mode == "auto" else mode == "always"


class AgentLinear(nn.Module):
    """Linear layer with one weight set per agent (or one shared set when ``n_agents == 1``).

    Input ``(B, N, ..., in)``; agent ``i``'s weights act on ``x[:, i]``.
    """

    def __init__(self, n_agents: int, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.n_agents = int(n_agents)
        self.weight = nn.Parameter(torch.empty(self.n_agents, out_features, in_features))
        self.bias = nn.Parameter(torch.empty(self.n_agents, out_features)) if bias else None
        bound = 1.0 / math.sqrt(in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        if self.n_agents == 1:
            return linear(x, self.weight[0], None if self.bias is None else self.bias[0])
        if x.shape[1] != self.n_agents:
            raise ValueError(f"input has {x.shape[1]} agents but the layer holds {self.n_agents} (unshared actors)")
        mid = x.shape[2:-1]
        xf = x.reshape(x.shape[0], self.n_agents, -1, x.shape[-1])  # (B, N, S, in)
        y = torch.einsum("bnsi,noi->bnso", xf, self.weight)
        if self.bias is not None:
            y = y + self.bias.view(1, self.n_agents, 1, -1).to(y.dtype)  # stays bfloat16 under autocast
        return y.reshape(x.shape[0], self.n_agents, *mid, -1)


class AgentLayerNorm(nn.Module):
    """LayerNorm over the last dimension with per-agent (or shared) affine parameters."""

    def __init__(self, n_agents: int, dim: int) -> None:
        super().__init__()
        self.n_agents = int(n_agents)
        self.weight = nn.Parameter(torch.ones(self.n_agents, dim))
        self.bias = nn.Parameter(torch.zeros(self.n_agents, dim))

    def forward(self, x: Tensor) -> Tensor:
        d = x.shape[-1]
        if self.n_agents == 1:
            return F.layer_norm(x, (d,), self.weight[0], self.bias[0])
        shape = (1, self.n_agents) + (1,) * (x.dim() - 3) + (d,)
        y = F.layer_norm(x, (d,))  # the affine part in y's dtype, as the shared branch's kernel keeps it
        return y * self.weight.view(shape).to(y.dtype) + self.bias.view(shape).to(y.dtype)


class SlotProjector(nn.Module):
    """Agent-specific slot embedding ``ReLU(W_t task + W_c own cluster)`` of width ``out_dim``.

    Equal to a linear layer on ``[task, cluster]`` but the cluster term is computed once per
    agent and broadcast over the slots.
    """

    def __init__(self, n_agents: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.task = AgentLinear(n_agents, hidden, out_dim)
        self.cluster = AgentLinear(n_agents, hidden, out_dim, bias=False)

    def forward(self, task: Tensor, cluster: Tensor) -> Tensor:
        """``task (B, N, P, H)``, ``cluster (B, N, H)`` -> ``(B, N, P, out_dim)``."""
        return F.relu(self.task(task) + self.cluster(cluster).unsqueeze(2))


def allocation_mask(low: Tensor, high: Tensor, alloc_dims: tuple[int, int]) -> Tensor:
    """Valid allocation indices: void (0) or ``low <= (c, g) <= high`` componentwise (the
    joint-action rule :func:`envs.joint_action.allocation_in_bounds`, on tensors).

    ``low``, ``high``: ``(..., 2)`` integer tensors. Returns a bool tensor ``(..., A)``.
    """
    C1, G1 = alloc_dims
    a = torch.arange(C1 * G1, device=low.device)
    ok = allocation_in_bounds(a // G1, a % G1, low.unsqueeze(-2), high.unsqueeze(-2))  # bounds (..., 1, 2)
    return ok | (a == 0)


class AllocationHead(nn.Module):
    """2-layer MLP from a slot's agent-specific embedding ``[task, own cluster]`` to masked
    joint CPU x GPU logits.

    ``form="joint"`` (the paper's head): one output per joint allocation index.
    ``form="factorised"``: ``logit[c, g] = u[c] + v[g]`` plus a separate void logit; still one
    categorical over the same masked joint index (so sampling, masks and log-probs are
    unchanged), but what is learnt about a CPU or GPU count transfers across the other axis.
    """

    FORMS = ("factorised", "joint")

    def __init__(self, n_agents: int, hidden: int, alloc_dims: tuple[int, int], form: str = "factorised") -> None:
        super().__init__()
        if form not in self.FORMS:
            raise ValueError(f"allocation head form must be one of {self.FORMS}, got {form!r}")
        self.form = form
        self.alloc_dims = (int(alloc_dims[0]), int(alloc_dims[1]))
        c1, g1 = self.alloc_dims
        self.task = AgentLinear(n_agents, hidden, hidden)
        self.cluster = AgentLinear(n_agents, hidden, hidden, bias=False)
        self.out = AgentLinear(n_agents, hidden, c1 * g1 if form == "joint" else c1 + g1 + 1)

    def forward(self, task: Tensor, cluster: Tensor, low: Tensor, high: Tensor) -> Tensor:
        """``task (B, N, [S,] H)``, ``cluster (B, N, H)``, bounds ``(B, N, [S,] 2)`` -> ``(B, N, [S,] A)``."""
        return self.logits(self.features(task, cluster), low, high)

    def features(self, task: Tensor, cluster: Tensor) -> Tensor:
        """The MLP's raw outputs ``(B, N, [S,] F)`` (``F = A`` joint, ``C1 + G1 + 1`` factorised)."""
        c = self.cluster(cluster)
        if task.dim() == 4:
            c = c.unsqueeze(2)
        return self.out(F.relu(self.task(task) + c))

    def logits(self, out: Tensor, low: Tensor, high: Tensor) -> Tensor:
        """Raw outputs ``(..., F)`` of :meth:`features` and bounds ``(..., 2)`` -> masked logits ``(..., A)``."""
        if self.form == "joint":
            logits = out
        else:
            c1, g1 = self.alloc_dims
            u, v, void = out[..., :c1], out[..., c1:c1 + g1], out[..., c1 + g1:]
            logits = (u.unsqueeze(-1) + v.unsqueeze(-2)).flatten(-2)
            logits = torch.cat([void, logits[..., 1:]], dim=-1)  # index 0 = (0, 0) = void
        return logits.masked_fill(~allocation_mask(low, high, self.alloc_dims), MASK_VALUE)


class CentralCritic(nn.Module):
    """Centralised critic: every agent's value from its cluster embedding and global summaries.

    Input per agent ``[own cluster, mean over clusters, attention pool over clusters, global]``,
    so it works for any number of clusters; the output layer is linear (no final ReLU: values are negative).
    """

    def __init__(self, n_agents: int, hidden: int) -> None:
        super().__init__()
        self.pool_score = nn.Linear(hidden, 1)
        self.l1 = AgentLinear(n_agents, 4 * hidden, hidden)
        self.l2 = AgentLinear(n_agents, hidden, 1)

    def forward(self, cluster: Tensor, glob: Tensor) -> Tensor:
        """``cluster (B, N, H)``, ``glob (B, H)`` -> values ``(B, N)``."""
        N = cluster.shape[1]
        w = torch.softmax(apply_linear(self.pool_score, cluster), dim=1)  # (B, N, 1)
        att = (w * cluster).sum(1)
        mean = cluster.mean(1)
        ctx = torch.cat([mean, att, glob], dim=-1).unsqueeze(1).expand(-1, N, -1)
        h = F.relu(self.l1(torch.cat([cluster, ctx], dim=-1)))
        return self.l2(h).squeeze(-1)
