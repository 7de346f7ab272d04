"""Wrappers that turn the joint env into a single-policy env for outside trainers (Stable-Baselines3,
sb3-contrib's ``MaskablePPO``, anything that takes one ``Discrete`` action per step).

Each is usable on its own (``docs/sb3.md``); :func:`make_masked_env`, registered as
``TapFinger/EdgeClustersMasked-v0``, stacks them:

``EdgeClustersEnv -> TimeLimit(max_joint_steps) -> EpisodeMetrics -> SequentialAgents -> FlatDictObservation``

* :class:`EpisodeMetrics`: the last ``info`` of an episode always holds ``episode_metrics`` and a
  top-level ``mean_jct`` (:mod:`envs.metrics`), also when a ``TimeLimit`` cut it off;
* :class:`SequentialAgents`: one agent's decision per step, a ``Discrete(P * A)`` action
  ``slot * A + allocation`` and an exact ``action_masks()``;
* :class:`FlatDictObservation`: every observation key as a 1-D float32 vector scaled into
  ``[-1, 1]`` (what Stable-Baselines3's ``MultiInputPolicy`` takes without warnings).

Mask design (why one agent per step): a ``MultiDiscrete([P, A])`` mask cannot tie the allocation
bounds to the slot the learner picks (each task has its own minimum), and a joint mask cannot stop
two agents from picking the same task. Agents therefore decide one after another in index order
within a joint step, exactly like the learned policy's ``conflicts="sequential"`` mode: each
decision is one ``(slot, allocation)`` pair from a flattened ``Discrete``, so its mask is exact, and
a task started by an earlier agent is masked for the later ones. The learner never sets the joint
action's *lost* flag (it is always 0). Agents with no feasible slot are skipped, and joint steps in
which no agent has one are played (all void) without asking the learner, their rewards added to
the next decision's; so the sum of the rewards is still the joint env's return.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit

from .config import ConfigError, ScenarioConfig
from .gym_env import EdgeClustersEnv
from .joint_action import ActionShapeError, choice_mask, claim_task, integer_array
from .metrics import episode_info
from .registration import MAX_EPISODE_STEPS

#: the joint env's per-step counts that :class:`SequentialAgents` adds up over the joint steps it plays
COUNTS = ("placed", "void", "invalid", "conflicts")


def _simulator_env(env: gymnasium.Env, wrapper: str) -> EdgeClustersEnv:
    base = env.unwrapped
    if not isinstance(base, EdgeClustersEnv):
        raise ConfigError(f"{wrapper} wraps a TapFinger EdgeClustersEnv, got {type(base).__name__}")
    return base


class EpisodeMetrics(gymnasium.Wrapper, gymnasium.utils.RecordConstructorArgs):
    """Adds :func:`envs.metrics.episode_info` (``episode_metrics``, ``mean_jct``) to an episode's last
    ``info`` when the wrapped env did not (a ``TimeLimit`` below this wrapper truncated it)."""

    def __init__(self, env: gymnasium.Env) -> None:
        gymnasium.utils.RecordConstructorArgs.__init__(self)
        gymnasium.Wrapper.__init__(self, env)
        self._base = _simulator_env(env, "EpisodeMetrics")

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if (terminated or truncated) and "episode_metrics" not in info:
            info = {**info, **episode_info(self._base.sim)}
        return obs, reward, terminated, truncated, info


class SequentialAgents(gymnasium.Wrapper):
    """One agent's ``(slot, allocation)`` decision per step, with an exact mask (module docstring).

    Action: ``Discrete(P * A)``, ``k = slot * A + allocation`` (allocation index ``cpu * G1 + gpu``,
    0 = void). :meth:`action_masks` (sb3-contrib's format, bool ``(P * A,)``) allows exactly what the
    learned policy allows (:func:`envs.joint_action.choice_mask`: a feasible slot not taken by an
    earlier agent of this joint step, an allocation in ``[pending_min, alloc_high]`` or void). A masked
    choice is still sent to the joint env, which voids it and counts it (``invalid`` / ``conflicts``).

    Observation: the joint dict, its ``feasible`` with the tasks earlier agents started masked,
    plus ``agent``: a float32 one-hot ``(N,)`` of the agent deciding (all zeros once the episode ended).

    Reward: the joint env's rewards of the joint steps this step played (0 for decisions that only
    fill in the joint action). ``info``: ``agent``, ``joint_steps`` played, the sums of their
    ``placed``/``void``/``invalid``/``conflicts``, and at the end the joint env's ``episode_metrics``
    and ``mean_jct``.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        spec = _simulator_env(env, "SequentialAgents").obs_spec
        if "agent" in env.observation_space.spaces:
            raise ConfigError("SequentialAgents: the wrapped observation already has an 'agent' key")
        self._n, self._p, self._a, self._dims = spec.N, spec.P, spec.A, spec.alloc_dims
        self.action_space = spaces.Discrete(spec.P * spec.A)
        agent = spaces.Box(0.0, 1.0, shape=(spec.N,), dtype=np.float32)
        self.observation_space = spaces.Dict({**env.observation_space.spaces, "agent": agent})
        self._obs: dict[str, np.ndarray] = {}
        self._feasible = np.zeros((spec.N, spec.P), dtype=bool)
        self._joint = np.zeros((spec.N, 3), dtype=np.int64)
        self._agent = -1  # -1: the episode is over (or not started)
        self._mask: np.ndarray | None = None

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._start_round(obs)
        if not self._next_agent():
            _, terminated, truncated, _ = self._play()
            if terminated or truncated:
                raise RuntimeError("the episode ended before any agent had a decision; raise the step cap")
        return self._observation(), {**info, "agent": self._agent}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict[str, Any]]:
        if self._agent < 0:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        k = self._read(action)
        i = self._agent
        if 0 <= k < self._p * self._a:
            slot, alloc = divmod(k, self._a)
            if alloc and self.action_masks()[k]:
                claim_task(self._feasible, self._obs["pending_where"], i, slot)
            self._joint[i] = (slot, alloc, 0)
        else:
            self._joint[i] = (-1, -1, 0)  # out of range: the joint env voids it and counts it invalid
        self._mask = None
        if self._next_agent():
            info = {"agent": self._agent, "joint_steps": 0, **dict.fromkeys(COUNTS, 0)}
            return self._observation(), 0.0, False, False, info
        reward, terminated, truncated, info = self._play()
        return self._observation(), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        """Bool ``(P * A,)``: the choices offered to the agent deciding now (only void once over)."""
        if self._mask is None:
            if self._agent < 0:
                mask = np.zeros(self._p * self._a, dtype=bool)
                mask[0] = True
            else:
                mask = choice_mask(self._obs, self._agent, self._dims, self._feasible).reshape(-1)
            self._mask = mask
        return self._mask

    @property
    def agent(self) -> int:
        """The agent deciding now (-1 once the episode ended)."""
        return self._agent

    @property
    def joint_action(self) -> np.ndarray:
        """A copy of the joint action ``(N, 3)`` being assembled: the rows of the agents that decided
        in this joint step so far, zeros (void) for the others."""
        return self._joint.copy()

    # ------------------------------------------------------------------ internals
    def _read(self, action: Any) -> int:
        try:
            arr = integer_array(action)
            if arr.size != 1:
                raise ValueError(f"shape {arr.shape}")
        except (TypeError, ValueError) as exc:
            raise ActionShapeError(f"action must be one integer in [0, {self._p * self._a}): {exc}") from None
        return int(arr.reshape(()))

    def _start_round(self, obs: dict[str, np.ndarray]) -> None:
        self._obs = obs
        self._feasible = obs["feasible"].astype(bool)
        self._joint[:] = 0
        self._agent = -1
        self._mask = None

    def _next_agent(self) -> bool:
        """Move to the next agent (index order) that has a feasible slot left; False if none."""
        rest = np.flatnonzero(self._feasible[self._agent + 1:].any(axis=1))
        self._agent = self._agent + 1 + int(rest[0]) if rest.size else -1
        self._mask = None
        return rest.size > 0

    def _play(self) -> tuple[float, bool, bool, dict[str, Any]]:
        """Send the joint action, then play all-void joint steps until an agent has a decision or
        the episode ends; returns the summed reward, the end flags and the step's info."""
        reward, counts, played = 0.0, dict.fromkeys(COUNTS, 0), 0
        while True:
            obs, r, terminated, truncated, info = self.env.step(self._joint.copy())
            reward += float(r)
            played += 1
            for key in COUNTS:
                counts[key] += int(info.get(key, 0))
            self._start_round(obs)
            if terminated or truncated or self._next_agent():
                break
        out = {"agent": self._agent, "joint_steps": played, **counts}
        if terminated or truncated:
            self._agent = -1
            out.update({k: info[k] for k in ("episode_metrics", "mean_jct") if k in info})
        return reward, bool(terminated), bool(truncated), out

    def _observation(self) -> dict[str, np.ndarray]:
        """Fresh arrays (callers may keep or change them, as the joint env's)."""
        obs = {k: v.copy() for k, v in self._obs.items()}
        obs["feasible"] = self._feasible.astype(np.int8)
        onehot = np.zeros(self._n, dtype=np.float32)
        if self._agent >= 0:
            onehot[self._agent] = 1.0
        obs["agent"] = onehot
        return obs


class FlatDictObservation(gymnasium.ObservationWrapper):
    """Every ``Box`` key of a ``Dict`` observation as a 1-D float32 vector, divided elementwise by
    ``max(|low|, |high|, 1)`` of its bounds so that it lies in ``[-1, 1]`` (the keys and their order
    are kept; the value of entry ``j`` of key ``k`` is ``obs[k].ravel()[j] / scale``)."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or not all(isinstance(s, spaces.Box) for s in space.spaces.values()):
            raise ConfigError(f"FlatDictObservation needs a Dict of Box spaces, got {space}")
        self._scale: dict[str, np.ndarray] = {}
        boxes = {}
        for key, box in space.spaces.items():
            low, high = box.low.astype(np.float32).ravel(), box.high.astype(np.float32).ravel()
            scale = np.maximum(np.maximum(np.abs(low), np.abs(high)), np.float32(1.0))
            self._scale[key] = scale
            boxes[key] = spaces.Box(low / scale, high / scale, dtype=np.float32)
        self.observation_space = spaces.Dict(boxes)

    def observation(self, observation: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {k: np.asarray(observation[k]).astype(np.float32).ravel() / s for k, s in self._scale.items()}


def make_masked_env(
    scenario: str | ScenarioConfig = "synthetic-3",
    overrides: Sequence[str] | Mapping[str, Any] = (),
    evaluation: bool = False,
    render_mode: str | None = None,
    max_joint_steps: int | None = MAX_EPISODE_STEPS,
    flatten: bool = True,
) -> gymnasium.Env:
    """The single-policy view ``TapFinger/EdgeClustersMasked-v0`` (module docstring).

    ``scenario``, ``overrides``, ``evaluation``, ``render_mode``: as for
    :class:`~envs.gym_env.EdgeClustersEnv`. ``max_joint_steps``: the joint steps after which the
    episode is truncated (None: only the scenario's ``max_steps``). ``flatten``: add
    :class:`FlatDictObservation` (False: the :class:`SequentialAgents` dict as it is).
    """
    if max_joint_steps is not None and (
        isinstance(max_joint_steps, bool) or not isinstance(max_joint_steps, (int, np.integer)) or max_joint_steps < 1
    ):
        raise ConfigError(f"max_joint_steps must be None or an integer >= 1, got {max_joint_steps!r}")
    env: gymnasium.Env = EdgeClustersEnv(scenario, overrides, evaluation, render_mode)
    if max_joint_steps is not None:
        env = TimeLimit(env, int(max_joint_steps))
    env = SequentialAgents(EpisodeMetrics(env))
    return FlatDictObservation(env) if flatten else env


__all__ = ["COUNTS", "EpisodeMetrics", "FlatDictObservation", "SequentialAgents", "make_masked_env"]
