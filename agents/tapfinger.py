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
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from agents.checkpoint import checkpoint_eval_action
from agents.online_floor import OnlineStartFloor, check_start_floor
from agents.policy import TapFingerPolicy, check_compatible, load_policy_checkpoint, obs_to_torch
from agents.train_config import ARGMAX
from envs.config import ConfigError
from envs.core import Simulator
from envs.joint_action import decode_joint_action
from envs.observation import ObservationBuilder, ObservationSpec
from envs.scheduling import Decision


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
    as the checkpoint's run validated it (:func:`~agents.checkpoint.checkpoint_eval_action`),
    True for a policy object. ``conflicts``: run the policy's agents in this mode
    (:data:`~agents.conflict.CONFLICT_MODES`; it sets the policy's ``cfg.conflicts``, the same
    weights serve either); None: as the policy's config says. ``start_floor``: ``scenario`` (the
    offer as the env builds it: with the scenario's ``max_start_slowdown``, from the true
    durations) or ``online`` (the paper's offer, then the same factor applied to durations
    estimated in the episode, :class:`~agents.online_floor.OnlineStartFloor`).
    """

    def __init__(
        self,
        checkpoint: str | Path | None = None,
        policy: TapFingerPolicy | None = None,
        device: str | torch.device = "cpu",
        deterministic: bool | None = None,
        conflicts: str | None = None,
        start_floor: str = "scenario",
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
        self.builder = self.spec.builder(0.0 if online else None)  # the paper's offer, or the scenario's
        self.floor = OnlineStartFloor(sim.cfg.max_start_slowdown) if online else None
        if self.floor is not None:
            self.floor.reset(sim)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(int(sim.rng_tiebreak.integers(0, 2**63 - 1)))

    def decide(self, sim: Simulator) -> Decision:
        if self.spec is None:
            self.reset(sim)
        raw = self.builder(sim)
        if self.floor is not None:
            raw["feasible"] = self.floor.mask(sim, raw["feasible"])
        obs = obs_to_torch(raw, self.device)
        out = self.policy.act(obs, deterministic=self.deterministic, generator=self.generator)
        return joint_action_to_decision(sim, out.action[0].cpu().numpy())
