"""Registration of the Gymnasium id ``TapFinger/EdgeClusters-v0`` (idempotent)."""

from __future__ import annotations

import gymnasium

ENV_ID = "TapFinger/EdgeClusters-v0"
ENTRY_POINT = "envs.gym_env:EdgeClustersEnv"


def register_envs() -> None:
    """Register the env with Gymnasium once; calling it again does nothing.

    ``gymnasium.make(ENV_ID, scenario="hetero-6", overrides=["num_tasks=50"], evaluation=False)``
    then builds an :class:`envs.gym_env.EdgeClustersEnv`. No ``max_episode_steps``: the env
    truncates itself at the scenario's real-step cap.
    """
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=ENTRY_POINT)
