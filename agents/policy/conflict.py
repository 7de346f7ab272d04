"""Bayes conflict resolution between agents that picked the same task (paper eq. 11).

When several agents select the same pending task, agent ``k``'s claim is scored by the
posterior ``P(k | task) ∝ P(task | k) P(k)``: ``P(task | k)`` is the agent's selection
probability of the task, and the prior ``P(k)`` is

* ``prior="paper"`` (default): the number of tasks cluster ``k`` can still hold at the
  task's minimum requirement, ``min_r floor(free_k[r] / minreq[r])`` over the required
  resources (``minreq[r] > 0``), normalised over the competitors;
* ``prior="code"``: the authors' published code's softmax over the competitors of the real ratio
  ``min_r free_k[r] / minreq[r]`` (nearly one-hot on the richest cluster).

The competitor with the largest posterior wins; ties (posteriors within :data:`TIE_TOLERANCE`
of the best, in log space, so that claims equal in exact arithmetic -- identical clusters
wanting the same task -- tie whatever float round-off the forward pass left on them, e.g. at
another batch size) are broken uniformly at random with a seeded ``torch.Generator``; every
other competitor *loses* (its action becomes void and its allocation term drops out of the
loss). Only *active* agents compete: those that
selected a task that is feasible for them (conflicts are resolved after the feasibility
check). Everything is vectorised over the batch and the agents. The rule that calls it in the
policy's pass is :class:`~agents.policy.conflict_rules.BayesRule`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Union

import torch
from torch import Tensor

from .modes import PRIORS

_BIG = 1e18
#: scores within this of the best, in log space, count as tied: the deterministic choice of a
#: slot or an allocation (``agents.policy.noise``) and the winner of a contested task
TIE_TOLERANCE = 1e-4
#: where a batch's random draws come from: one generator for the whole batch, one per sample
#: (row ``b`` of every draw comes from ``generators[b]``, exactly as a batch of one would draw
#: it, so episodes batched together keep their own random streams), or ``None`` (torch's global one)
Generators = Union[torch.Generator, Sequence[torch.Generator], None]


def uniform(shape: tuple[int, ...], generator: Generators, device: torch.device, dtype: torch.dtype) -> Tensor:
    """``torch.rand(shape)`` from ``generator`` (:data:`Generators`; per-sample generators draw
    row by row along the leading batch axis)."""
    if generator is None or isinstance(generator, torch.Generator):
        return torch.rand(shape, generator=generator, device=device, dtype=dtype)
    if len(generator) != shape[0]:
        raise ValueError(f"{len(generator)} generators for a batch of {shape[0]}")
    row = (1, *shape[1:])
    return torch.cat([torch.rand(row, generator=g, device=device, dtype=dtype) for g in generator])


@dataclass
class ConflictResult:
    """``lost (B, N)`` bool; ``posterior (B, N)`` float64 (normalised within each contested task,
    1 for uncontested active agents, 0 for inactive agents)."""

    lost: Tensor
    posterior: Tensor


def prior_weight(free: Tensor, minreq: Tensor, prior: str = "paper") -> Tensor:
    """Per-agent unnormalised prior input, ``(B, N)`` float64.

    ``paper``: ``min_r floor(free[r] / minreq[r])`` over resources with ``minreq[r] > 0``.
    ``code``: ``min_r free[r] / minreq[r]`` (the softmax is applied within each competition).
    """
    if prior not in PRIORS:
        raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
    free = free.to(torch.float64)
    req = minreq.to(torch.float64)
    needed = req > 0
    ratio = free / req.clamp(min=1.0)
    if prior == "paper":
        ratio = torch.floor(ratio)
    ratio = torch.where(needed, ratio, torch.full_like(ratio, _BIG))
    return ratio.min(dim=-1).values


def resolve_conflicts(
    task_key: Tensor,
    score: Tensor,
    free: Tensor,
    minreq: Tensor,
    active: Tensor,
    prior: str = "paper",
    generator: Generators = None,
    tie: Tensor | None = None,
) -> ConflictResult:
    """Resolve conflicts for a batch.

    Args:
        task_key: ``(B, N)`` integer id of each agent's selected task (equal ids = same task).
        score: ``(B, N)`` selection probability of that task by the agent (``P(task | agent)``).
        free: ``(B, N, 2)`` free (CPU, GPU) of each agent's cluster.
        minreq: ``(B, N, 2)`` minimum requirement of the selected task.
        active: ``(B, N)`` bool, the agent selected a task feasible for it (it competes).
        prior: ``"paper"`` or ``"code"``.
        generator: seeded generator(s) for the tie-break (:data:`Generators`; a uniform draw of
            shape ``(B, N)`` is made on every call, so the stream advances identically whatever
            the outcome).
        tie: ``(B, N)`` uniforms for the tie-break, drawn by the caller (then ``generator`` is
            not used): :func:`agents.policy.noise.draw_act_noise` draws them up front.
    """
    active = active.bool()
    B, N = task_key.shape
    if tie is None:
        tie = uniform((B, N), generator, task_key.device, torch.float64)
    elif tie.shape != (B, N):
        raise ValueError(f"tie-break draws must have shape {(B, N)}, got {tuple(tie.shape)}")
    same = (task_key.unsqueeze(2) == task_key.unsqueeze(1)) & active.unsqueeze(2) & active.unsqueeze(1)
    w = prior_weight(free, minreq, prior)  # (B, N)
    s = score.to(torch.float64)
    if prior == "code":
        # softmax over each agent's competition group: exp(w_k - max_group w)
        wk = w.unsqueeze(1).expand(B, N, N)
        gmax = torch.where(same, wk, torch.full_like(wk, -_BIG)).max(dim=2).values  # (B, N)
        # every member of a group shares gmax; use the agent's own group max
        w = torch.exp(torch.where(active, w - gmax, torch.zeros_like(w)))
    joint = torch.where(active, s * w, torch.zeros_like(s))  # unnormalised posterior
    jk = joint.unsqueeze(1).expand(B, N, N)
    group_sum = torch.where(same, jk, torch.zeros_like(jk)).sum(2)
    group_max = torch.where(same, jk, torch.full_like(jk, -1.0)).max(dim=2).values
    posterior = torch.where(active, joint / group_sum.clamp(min=1e-300), torch.zeros_like(joint))
    cand = active & (joint >= group_max * math.exp(-TIE_TOLERANCE))
    both = same & cand.unsqueeze(1)  # (b, i, k): k is a best candidate of i's group
    tk = tie.unsqueeze(1).expand(B, N, N)
    best_tie = torch.where(both, tk, torch.full_like(tk, -1.0)).max(dim=2).values
    winner = cand & (tie == best_tie)
    return ConflictResult(lost=active & ~winner, posterior=posterior)
