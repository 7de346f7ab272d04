"""The ``tapfinger`` scheduler: a trained :class:`~agents.policy.TapFingerPolicy` behind the
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

from agents.training.config import ARGMAX
from envs.config import ConfigError
from envs.core import Simulator
from envs.joint_action import decode_joint_action
from envs.observation import ObservationBuilder, ObservationSpec
from envs.scheduling import Decision

from .checkpoint import check_compatible, checkpoint_eval_action, load_policy_checkpoint
from .network import TapFingerPolicy
from .noise import episode_generator
from .observations import obs_to_torch
from .online_floor import OnlineStartFloor, check_start_floor


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
    True for a policy object. ``conflicts``: run the policy's agents in this mode
    (:data:`~agents.policy.conflict.CONFLICT_MODES`; it sets the policy's ``cfg.conflicts``, the same
    weights serve either); None: as the policy's config says. ``start_floor``: ``scenario`` (the
    offer as the env builds it: with the scenario's ``max_start_slowdown``, from the true
    durations) or ``online`` (the paper's offer, then the same factor applied to durations
    estimated in the episode, :class:`~agents.policy.online_floor.OnlineStartFloor`). ``own_builder``:
    build observations with a builder of its own instead of the one shared per (spec, offer)
    (for episodes that run interleaved, :meth:`decide_batch`: a shared builder would rebuild its
    per-workload tables at every switch).
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        policy: TapFingerPolicy | None = None,
        device: str | torch.device = "cpu",
        deterministic: bool | None = None,
        conflicts: str | None = None,
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
        if conflicts is not None:
            self.policy.cfg = dataclasses.replace(self.policy.cfg, conflicts=conflicts)  # validated: ConfigError
        if deterministic is None:
            deterministic = checkpoint is None or checkpoint_eval_action(self.meta, checkpoint) == ARGMAX
        self.deterministic = bool(deterministic)
        self.name = self.policy.cfg.variant
        self.start_floor = check_start_floor(start_floor)
        self.own_builder = bool(own_builder)
        self.spec: ObservationSpec | None = None
        self.builder: ObservationBuilder | None = None  # shared per (spec, offer), as build_observation's
        self.floor: OnlineStartFloor | None = None
        self.generator: torch.Generator | None = None

    def reset(self, sim: Simulator) -> None:
        """Check the policy fits the scenario, seed the generator from ``sim.rng_tiebreak`` and
        (online start floor) forget the previous episode's estimates."""
        self.spec = ObservationSpec.from_config(sim.cfg)
        check_compatible(self.policy, self.spec)
        online = self.start_floor == "online" and sim.cfg.max_start_slowdown > 0
        offer = 0.0 if online else None  # the paper's offer, or the scenario's
        self.builder = ObservationBuilder(self.spec, offer) if self.own_builder else self.spec.builder(offer)
        self.floor = OnlineStartFloor(sim.cfg.max_start_slowdown) if online else None
        if self.floor is not None:
            self.floor.reset(sim)
        self.generator = episode_generator(sim.rng_tiebreak, self.device)

    def observe(self, sim: Simulator) -> dict[str, np.ndarray]:
        """The observation the policy acts on (numpy, unbatched): the scenario's offer, or the
        paper's with the online start floor's hold-back."""
        if self.spec is None:
            self.reset(sim)
        raw = self.builder(sim)
        if self.floor is not None:
            raw["feasible"] = self.floor.mask(sim, raw["feasible"])
        return raw

    def decide(self, sim: Simulator) -> Decision:
        obs = obs_to_torch(self.observe(sim), self.device)
        out = self.policy.act(obs, deterministic=self.deterministic, generator=self.generator)
        return joint_action_to_decision(sim, out.action[0].cpu().numpy())

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
        if any(s.policy is not first.policy or s.deterministic != first.deterministic for s in schedulers):
            raise ValueError("decide_batch: the schedulers must share one policy and its action mode")
        raws = [s.observe(sim) for s, sim in zip(schedulers, sims, strict=True)]
        obs = obs_to_torch({k: np.stack([r[k] for r in raws]) for k in raws[0]}, first.device, add_batch=False)
        out = first.policy.act(obs, deterministic=first.deterministic, generator=[s.generator for s in schedulers])
        actions = out.action.cpu().numpy()
        return [joint_action_to_decision(sim, a) for sim, a in zip(sims, actions)]
