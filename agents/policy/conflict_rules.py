"""The conflict rules: how the agents' choices become one joint action, one class per mode of
:data:`~agents.policy.modes.CONFLICT_MODES`.

A rule chooses every agent's slot and allocation from the policy's distributions
(:meth:`ConflictRule.choose`), or scores a stored joint action by the same rule
(:meth:`ConflictRule.score`); both return a :class:`RuleChoice`. The rules:

* :class:`BayesRule` (``bayes``, paper eq. 11): every agent chooses its slot independently;
  among the agents that claim the same task Bayes' rule keeps one
  (:func:`~agents.policy.conflict.resolve_conflicts`) and the others lose the step; then each
  agent draws its allocation;
* :class:`SequentialRule` (``sequential``): agents choose in index order and a task started by an
  earlier agent is masked for the later ones (:func:`~agents.policy.sequential.sequential_choice`);
* :class:`RoomRule` (``room``): the same, agents ordered by decreasing free room of their clusters.

A new rule is a :class:`ConflictRule` subclass here, one entry in :data:`CONFLICT_RULES` and its
name in :data:`~agents.policy.modes.CONFLICT_MODES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from envs.observation import FeatureColumns

from .conflict import resolve_conflicts
from .distribution import JointDistribution, MaskedCategorical
from .modes import CONFLICT_MODES
from .noise import ActNoise, required_noise
from .observations import free_fraction
from .sequential import room_order, sequential_choice


@dataclass
class PassInputs:
    """What a rule reads in one pass of the policy over a batch (leading dims ``(B, N)``).

    ``obs``: the observation tensors; ``logits (B, N, P)``: the masked selection logits (float32);
    ``feasible (B, N, P)``; ``skip (B, N)``: the agent has no feasible slot. The rest is computed
    only when a rule asks: ``task_ids()`` each slot's task id ``(B, N, P)`` (equal ids: the same
    task); ``alloc_logits(slot)`` the masked allocation logits ``(B, N, A)`` at each agent's
    ``slot (B, N)``; ``agent_alloc_logp()`` a function ``f(i, slot (B,)) -> (B, A)``, agent ``i``'s
    allocation log-probabilities; ``free()`` each cluster's free (CPU, GPU) ``(B, N, 2)``.
    ``keep_busy``: a most likely allocation is taken by
    :meth:`~agents.policy.distribution.MaskedCategorical.mode_starting` on :meth:`idle` (``argmax-busy``).
    """

    obs: Mapping[str, Tensor]
    logits: Tensor
    feasible: Tensor
    skip: Tensor
    task_ids: Callable[[], Tensor]
    alloc_logits: Callable[[Tensor], Tensor]
    agent_alloc_logp: Callable[[], Callable[[Any, Tensor], Tensor]]
    free: Callable[[], Tensor]
    keep_busy: bool = False

    def idle(self) -> Tensor | None:
        """``(B, N)``: the agent's cluster runs no task, when :attr:`keep_busy`; else None."""
        return self.obs["cluster_x"][..., FeatureColumns.running_tasks] == 0 if self.keep_busy else None

    def allocation(self, slot: Tensor) -> MaskedCategorical:
        """Each agent's allocation distribution at its ``slot (B, N)``."""
        return MaskedCategorical.from_logits(self.alloc_logits(slot))

    def draw_allocation(self, slot: Tensor, deterministic: bool,
                        noise: ActNoise | None) -> tuple[MaskedCategorical, Tensor]:
        """The allocation distribution at ``slot`` and the allocation drawn from it: the most
        likely one when acting deterministically or without allocation noise (``sample-slot``),
        else a sample by the noise's allocation draws."""
        dist = self.allocation(slot)
        if not (deterministic or (noise is not None and noise.allocation is None)):
            return dist, dist.sample(required_noise(noise, "allocation"))
        idle = self.idle()
        return dist, dist.mode() if idle is None else dist.mode_starting(idle)


@dataclass
class RuleChoice:
    """A rule's joint action, ``slot (B, N)`` and ``allocation (B, N)``, with the distribution it
    is scored by (whose ``skip`` and ``lost`` are the rule's) and, when a Bayes rule chose it, the
    conflict ``posterior (B, N)``."""

    slot: Tensor
    allocation: Tensor
    dist: JointDistribution
    posterior: Tensor | None = None


class ConflictRule(ABC):
    """How the agents that may want the same task are reconciled."""

    @classmethod
    def from_config(cls, cfg: Any) -> "ConflictRule":
        """The rule with its settings from a :class:`~agents.policy.config.PolicyConfig`."""
        return cls()

    @abstractmethod
    def choose(self, inputs: PassInputs, deterministic: bool, noise: ActNoise | None) -> RuleChoice:
        """Sample (or, ``deterministic``, take the most likely) joint action; the random draws
        are ``noise`` (:func:`~agents.policy.noise.draw_act_noise`)."""

    @abstractmethod
    def score(self, inputs: PassInputs, action: Tensor) -> RuleChoice:
        """The stored joint action ``action (B, N, 3)`` = (slot, allocation, lost) under this rule."""


class BayesRule(ConflictRule):
    """Paper eq. 11: independent slot choices, one claim per task kept by Bayes' rule with the
    conflict ``prior`` (:data:`~agents.policy.modes.PRIORS`), then the allocations."""

    def __init__(self, prior: str = "paper") -> None:
        self.prior = prior

    @classmethod
    def from_config(cls, cfg: Any) -> "ConflictRule":
        return cls(cfg.prior)

    def choose(self, inputs: PassInputs, deterministic: bool, noise: ActNoise | None) -> RuleChoice:
        selection = MaskedCategorical.from_logits(inputs.logits)
        slot = selection.mode() if deterministic else selection.sample(required_noise(noise, "selection"))
        at = slot.unsqueeze(-1)
        low = inputs.obs["pending_min"].long().gather(2, slot.view(*slot.shape, 1, 1).expand(-1, -1, 1, 2)).squeeze(2)
        key = inputs.task_ids().gather(-1, at).squeeze(-1)
        active = ~inputs.skip & inputs.feasible.gather(-1, at).squeeze(-1)
        conflict = resolve_conflicts(key, selection.log_prob(slot).exp(), inputs.free(), low, active, self.prior,
                                     tie=required_noise(noise, "tie"))
        allocation, alloc = inputs.draw_allocation(slot, deterministic, noise)
        return RuleChoice(slot, alloc, JointDistribution(selection, allocation, inputs.skip, conflict.lost),
                          conflict.posterior)

    def score(self, inputs: PassInputs, action: Tensor) -> RuleChoice:
        slot = action[..., 0]
        dist = JointDistribution(MaskedCategorical.from_logits(inputs.logits), inputs.allocation(slot), inputs.skip,
                                 action[..., 2].bool())
        return RuleChoice(slot, action[..., 1], dist)


class SequentialRule(ConflictRule):
    """Agents choose in turn, each among the tasks no earlier agent started, so no conflict
    arises; an agent whose feasible tasks are all taken is blocked and joins the skipped ones."""

    def order(self, inputs: PassInputs) -> Tensor | None:
        """The choosing order ``(B, N)``, position -> agent; ``None``: index order."""
        return None

    def choose(self, inputs: PassInputs, deterministic: bool, noise: ActNoise | None) -> RuleChoice:
        slot, alloc, sel_logp, al_logp, blocked = sequential_choice(
            inputs.logits, inputs.task_ids(), inputs.feasible, inputs.skip, inputs.agent_alloc_logp(), None,
            deterministic, noise, self.order(inputs), idle=inputs.idle())
        skip = inputs.skip | blocked
        dist = JointDistribution(MaskedCategorical(sel_logp), MaskedCategorical(al_logp), skip, torch.zeros_like(skip))
        return RuleChoice(slot, alloc, dist)

    def score(self, inputs: PassInputs, action: Tensor) -> RuleChoice:
        slot, _, sel_logp, _, blocked = sequential_choice(
            inputs.logits, inputs.task_ids(), inputs.feasible, inputs.skip, None, action[..., :2],
            order=self.order(inputs))
        skip = inputs.skip | blocked
        dist = JointDistribution(MaskedCategorical(sel_logp), inputs.allocation(slot), skip, torch.zeros_like(skip))
        return RuleChoice(slot, action[..., 1], dist)


class RoomRule(SequentialRule):
    """Agents choose in turn by decreasing free room of their clusters (equal room: index order)."""

    def order(self, inputs: PassInputs) -> Tensor | None:
        return room_order(free_fraction(inputs.obs))


#: each conflict mode's rule
CONFLICT_RULES: dict[str, type[ConflictRule]] = {
    "bayes": BayesRule,
    "sequential": SequentialRule,
    "room": RoomRule,
}
if set(CONFLICT_RULES) != set(CONFLICT_MODES):  # pragma: no cover - a bad registry edit
    raise ValueError("every conflict mode needs exactly one rule")


def conflict_rule(cfg: Any) -> ConflictRule:
    """The rule of a :class:`~agents.policy.config.PolicyConfig`'s ``conflicts`` mode."""
    return CONFLICT_RULES[cfg.conflicts].from_config(cfg)
