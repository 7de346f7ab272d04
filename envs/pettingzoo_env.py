"""PettingZoo ``ParallelEnv`` adapter over :class:`~envs.gym_env.EdgeClustersEnv`.

Agents are ``"cluster_0" .. "cluster_{N-1}"``. Every agent observes the whole joint
observation dict (the same arrays for all agents, not copies: treat them as read-only) plus
``"agent_index"`` (``Discrete(N)``, its own cluster index), so a shared-parameter policy knows
which rows are its own. Each agent's action is ``MultiDiscrete([P, A, 2])``
(``[slot, allocation, lost flag]``, rules in :mod:`envs.joint_action`); an agent missing from
the actions dict is void. Rewards come from ``info["agent_rewards"]`` of the joint env (team:
the team reward for every agent). All agents terminate or truncate together.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from .config import ConfigError, ScenarioConfig
from .gym_env import EdgeClustersEnv


class EdgeClustersParallelEnv(ParallelEnv):
    """Parallel multi-agent view of the edge-cluster scheduler (see the module docstring)."""

    metadata = {"name": "tapfinger_edge_clusters_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self,
        scenario: str | ScenarioConfig = "synthetic-3",
        overrides: Sequence[str] | Mapping[str, Any] = (),
        evaluation: bool = False,
        render_mode: str | None = None,
    ) -> None:
        self.env = EdgeClustersEnv(scenario, overrides, evaluation, render_mode)
        self.render_mode = None
        n = self.env.cfg.num_clusters
        self.possible_agents = [f"cluster_{i}" for i in range(n)]
        self.agents: list[str] = []
        self._index = {a: i for i, a in enumerate(self.possible_agents)}
        joint = self.env.observation_space
        p, a_dim = self.env.obs_spec.P, self.env.obs_spec.A
        self.observation_spaces = {
            a: spaces.Dict({**{k: joint[k] for k in joint}, "agent_index": spaces.Discrete(n)})
            for a in self.possible_agents
        }
        self.action_spaces = {
            a: spaces.MultiDiscrete(np.array([p, a_dim, 2], dtype=np.int64)) for a in self.possible_agents
        }

    def observation_space(self, agent: str) -> spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self.action_spaces[agent]

    @property
    def cfg(self) -> ScenarioConfig:
        return self.env.cfg

    def _split(self, obs: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
        return {a: {**obs, "agent_index": np.int64(i)} for i, a in enumerate(self.possible_agents)}

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return self._split(obs), {a: dict(info) for a in self.agents}

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        joint = np.zeros((len(self.possible_agents), 3), dtype=np.int64)
        for agent, act in actions.items():
            if agent not in self._index:
                raise ConfigError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
            row = np.asarray(act).reshape(-1)
            if row.size != 3 or row.dtype.kind not in "iub" and not (
                row.dtype.kind == "f" and np.all(row == np.round(row))
            ):
                raise ConfigError(f"action of {agent!r} must be 3 integers [slot, allocation, lost], got {act!r}")
            joint[self._index[agent]] = row
        obs, _, terminated, truncated, info = self.env.step(joint)
        agents = self.agents
        rewards = {a: float(info["agent_rewards"][self._index[a]]) for a in agents}
        terms = {a: bool(terminated) for a in agents}
        truncs = {a: bool(truncated) for a in agents}
        infos = {a: dict(info) for a in agents}
        out = self._split(obs)
        if terminated or truncated:
            self.agents = []
        return out, rewards, terms, truncs, infos

    def render(self) -> None:
        return None

    def close(self) -> None:
        self.env.close()


def parallel_env(scenario: str | ScenarioConfig = "synthetic-3", **kwargs: Any) -> EdgeClustersParallelEnv:
    """PettingZoo factory: ``parallel_env("hetero-6", overrides=["num_tasks=50"])``."""
    return EdgeClustersParallelEnv(scenario, **kwargs)
