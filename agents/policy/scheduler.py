"""The ``tapfinger`` scheduler: a trained :class:`~agents.policy.network.TapFingerPolicy` behind the
scheduler protocol of :mod:`envs.scheduling`, so it is evaluated exactly like the baselines.

Each :meth:`TapFingerScheduler.decide` builds the observation of the simulator, runs the
policy on it (batch 1) and turns the joint action into placements with the decoder the
Gymnasium env uses, :func:`envs.joint_action.decode_joint_action` (agents in index order; a
lost conflict, the void allocation, an empty slot, an out-of-bounds allocation or a task
already claimed by a lower-index agent make the agent void). In ``multi`` mode the episode runner calls ``decide`` again after
every round that placed something. Random draws (sampling when ``deterministic=False``,
conflict tie-breaks) come from a ``torch.Generator`` seeded from the simulator's
``tiebreak`` stream, so the same seed gives the same decisions.

:meth:`TapFingerScheduler.decide_batch` decides for several episodes with one forward pass
(:func:`envs.scheduling.run_episodes_batched`); each row draws from its own episode's
generator, so every episode gets the decisions it would get alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from agents.baselines.online_floor import OnlineStartFloor, check_start_floor
from envs.config import ConfigError
from envs.core import Simulator
from envs.joint_action import decode_joint_action
from envs.observation import ObservationBuilder, ObservationSpec
from envs.scheduling import Decision

from .checkpoint import check_compatible, checkpoint_eval_action, checkpoint_eval_conflicts, load_policy_checkpoint
from .coordination import CoordinationTally
from .modes import ARGMAX, acting_flags
from .network import TapFingerPolicy
from .noise import episode_generator
from .observations import obs_to_torch


def joint_action_to_decision(sim: Simulator, action: np.ndarray) -> Decision:
    """Placements of a joint action ``(N, 3)``, decoded by :func:`envs.joint_action.decode_joint_action`.

    The one decoder the Gymnasium env uses too: conflicts, invalid requests and deliberate
    voids are added to ``sim.conflicts`` / ``sim.invalid`` / ``sim.void`` exactly as the env
    adds them; the placements are returned, not applied (the episode runner applies them).
    """
    decoded = decode_joint_action(sim, action)
    decoded.add_counters(sim)
    return Decision(placements=list(decoded.placements))


class TapFingerScheduler:
    """Scheduler protocol wrapper around a policy (from a checkpoint path or a policy object).

    ``name`` is the policy variant (``tapfinger``, ``no-han``, ``no-pointer``, ``vanilla``).
    ``deterministic``: take the most likely joint action (True) or sample it (False); None:
    as the checkpoint's run validated it (:func:`~agents.policy.checkpoint.checkpoint_eval_action`),
    True for a policy object. ``argmax_allocation``: when sampling, take each agent's most likely
    allocation for its sampled slot (``sample-slot``); None: as the checkpoint's run validated it.
    ``keep_busy``: an agent whose cluster runs nothing starts its chosen task rather than take the void
    allocation, when it can (``argmax-busy``); None: as the checkpoint's run validated it.
    ``conflicts``: run the policy's agents in this mode (:data:`~agents.policy.modes.CONFLICT_MODES`;
    it sets the policy's ``cfg.conflicts``, the same weights serve either); None: as the
    checkpoint's run validated it (:func:`~agents.policy.checkpoint.checkpoint_eval_conflicts`), as
    the config says for a policy object. ``start_floor``: where the start floor
    (:mod:`envs.durations`) comes from: ``scenario`` (as the env builds it, the scenario's
    ``max_start_slowdown`` on the true durations) or ``online`` (the same factor on durations
    estimated in the episode, :class:`~agents.baselines.online_floor.OnlineStartFloor`).
    ``own_builder``: build observations with a builder of its own instead of the one shared per
    (spec, start floor) (for episodes that run interleaved, :meth:`decide_batch`: a shared builder
    would rebuild its per-workload tables at every switch).
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        policy: TapFingerPolicy | None = None,
        device: str | torch.device = "cpu",
        deterministic: bool | None = None,
        conflicts: str | None = None,
        argmax_allocation: bool | None = None,
        keep_busy: bool | None = None,
        start_floor: str = "scenario",
        own_builder: bool = False,
    ) -> None:
        if (checkpoint is None) == (policy is None):
            raise ConfigError("TapFingerScheduler needs exactly one of checkpoint= or policy=")
        self.device = torch.device(device)
        if checkpoint is not None:
            self.policy, self.meta = load_policy_checkpoint(checkpoint, self.device)
        else:
            self.policy, self.meta = policy.to(self.device), {}
        self.policy.eval()
        if conflicts is None and checkpoint is not None:
            conflicts = checkpoint_eval_conflicts(self.meta, self.policy.cfg.conflicts, checkpoint)
        if conflicts is not None:
            self.policy.cfg = dataclasses.replace(self.policy.cfg, conflicts=conflicts)  # validated: ConfigError
        validated = acting_flags(ARGMAX if checkpoint is None else checkpoint_eval_action(self.meta, checkpoint))
        self.deterministic = bool(validated.deterministic if deterministic is None else deterministic)
        self.argmax_allocation = bool(validated.argmax_allocation if argmax_allocation is None else argmax_allocation)
        self.keep_busy = bool(validated.keep_busy if keep_busy is None else keep_busy)
        self.name = self.policy.cfg.variant
        self.start_floor = check_start_floor(start_floor)
        self.own_builder = bool(own_builder)
        self.spec: ObservationSpec | None = None
        self.builder: ObservationBuilder | None = None  # shared per (spec, start floor), as build_observation's
        self.floor: OnlineStartFloor | None = None
        self.generator: torch.Generator | None = None
        #: this episode's coordination counts (:meth:`episode_stats`)
        self.tally = CoordinationTally()

    def reset(self, sim: Simulator) -> None:
        """Check the policy fits the scenario, seed the generator from ``sim.rng_tiebreak`` and
        (online start floor) forget the previous episode's estimates."""
        self.spec = ObservationSpec.from_config(sim.cfg)
        check_compatible(self.policy, self.spec)
        online = self.start_floor == "online" and sim.cfg.max_start_slowdown > 0
        factor = 0.0 if online else None  # 0: none in the builder (self.floor applies it); None: the scenario's
        self.builder = ObservationBuilder(self.spec, factor) if self.own_builder else self.spec.builder(factor)
        self.floor = OnlineStartFloor(sim.cfg.max_start_slowdown) if online else None
        if self.floor is not None:
            self.floor.reset(sim)
        self.generator = episode_generator(sim.rng_tiebreak, self.device)
        self.tally = CoordinationTally()

    def observe(self, sim: Simulator) -> dict[str, np.ndarray]:
        """The observation the policy acts on (numpy, unbatched): ``feasible`` under the scenario's
        start floor, or under none with the online start floor's hold-back."""
        if self.spec is None:
            self.reset(sim)
        raw = self.builder(sim)
        if self.floor is not None:
            raw["feasible"] = self.floor.mask(sim, raw["feasible"])
        return raw

    def decide(self, sim: Simulator) -> Decision:
        raw = self.observe(sim)
        out = self.policy.act(obs_to_torch(raw, self.device), deterministic=self.deterministic,
                              generator=self.generator, argmax_allocation=self.argmax_allocation,
                              keep_busy=self.keep_busy)
        return self._decision(sim, raw, out.action[0].cpu().numpy())

    def _decision(self, sim: Simulator, raw: dict[str, np.ndarray], action: np.ndarray) -> Decision:
        """The placements of ``action`` (:func:`joint_action_to_decision`), counted in :attr:`tally`."""
        pending = sim.pending.copy()
        decision = joint_action_to_decision(sim, action)
        placed = {cluster for cluster, *_ in decision.placements}
        self.tally.add(pending, raw["feasible"], action[:, 0], placed, sim.single or not decision.placements)
        return decision

    def episode_stats(self) -> dict[str, dict[str, float | int]]:
        """The episode's coordination counts (:class:`~agents.policy.coordination.CoordinationTally`),
        reported in its :class:`~envs.scheduling.EpisodeResult` ``extra``."""
        return {"coordination": self.tally.as_dict()}

    @staticmethod
    def decide_batch(schedulers: Sequence[TapFingerScheduler], sims: Sequence[Simulator]) -> list[Decision]:
        """``decide`` for several (scheduler, simulator) pairs with one forward pass.

        The schedulers must share one policy object and act alike (deterministic or not); each
        row's random draws come from its own scheduler's generator, so the decisions are those
        each ``decide`` would take (the batched forward's float round-off is absorbed by the tie
        tolerance of the deterministic choice and of Bayes' rule,
        :data:`~agents.policy.conflict.TIE_TOLERANCE`).
        """
        if not schedulers:
            return []
        first = schedulers[0]
        if any(s.policy is not first.policy or s.deterministic != first.deterministic
               or s.argmax_allocation != first.argmax_allocation or s.keep_busy != first.keep_busy
               for s in schedulers):
            raise ValueError("decide_batch: the schedulers must share one policy and its action mode")
        raws = [s.observe(sim) for s, sim in zip(schedulers, sims, strict=True)]
        obs = obs_to_torch({k: np.stack([r[k] for r in raws]) for k in raws[0]}, first.device, add_batch=False)
        out = first.policy.act(obs, deterministic=first.deterministic, generator=[s.generator for s in schedulers],
                               argmax_allocation=first.argmax_allocation, keep_busy=first.keep_busy)
        actions = out.action.cpu().numpy()
        return [s._decision(sim, raw, a) for s, sim, raw, a in zip(schedulers, sims, raws, actions)]
