"""Registration of the Gymnasium ids (idempotent).

* ``TapFinger/EdgeClusters-v0``: the joint view of all cluster agents
  (:class:`envs.gym_env.EdgeClustersEnv`);
* ``TapFinger/EdgeClustersMasked-v0``: the single-policy view for outside trainers such as
  Stable-Baselines3 and sb3-contrib's ``MaskablePPO`` (:func:`envs.wrappers.make_masked_env`).
"""

from __future__ import annotations

import gymnasium
from gymnasium.envs.registration import WrapperSpec

ENV_ID = "TapFinger/EdgeClusters-v0"
ENTRY_POINT = "envs.gym_env:EdgeClustersEnv"
MASKED_ENV_ID = "TapFinger/EdgeClustersMasked-v0"
MASKED_ENTRY_POINT = "envs.wrappers:make_masked_env"

#: ``max_episode_steps`` of ``TapFinger/EdgeClusters-v0``: joint (logical) steps before Gymnasium's
#: ``TimeLimit`` truncates. Every shipped scenario's episodes take 110-850 joint steps under the
#: random valid policy and up to ~1,200 (testbed-6) when half of its starts are voided, so the cap
#: binds only on a policy that stalls (e.g. one that keeps voiding), ending its episode after ~4x
#: the longest of those instead of the scenario's 20,000 real steps. ``gymnasium.make(...,
#: max_episode_steps=k)`` sets another cap, ``max_episode_steps=-1`` none (the scenario's
#: ``max_steps`` then ends the episode).
MAX_EPISODE_STEPS = 5_000

#: outermost wrapper of the joint env made by ``gymnasium.make``: it puts the episode metrics into
#: the last ``info`` also when ``TimeLimit`` (not the env) truncated the episode
METRICS_WRAPPER = WrapperSpec(name="EpisodeMetrics", entry_point="envs.wrappers:EpisodeMetrics", kwargs={})


def register_envs() -> None:
    """Register both ids with Gymnasium once; calling it again does nothing.

    ``gymnasium.make(ENV_ID, scenario="hetero-6", overrides=["num_tasks=50"], evaluation=False)``
    builds an :class:`envs.gym_env.EdgeClustersEnv` under ``TimeLimit(MAX_EPISODE_STEPS)`` and
    :class:`envs.wrappers.EpisodeMetrics`; ``gymnasium.make(MASKED_ENV_ID, scenario=...)`` the
    masked single-policy view (its episodes end with the joint env's, so it has no
    ``max_episode_steps`` of its own: ``max_joint_steps`` sets the joint cap).
    """
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(
            id=ENV_ID, entry_point=ENTRY_POINT, max_episode_steps=MAX_EPISODE_STEPS,
            additional_wrappers=(METRICS_WRAPPER,),
        )
    if MASKED_ENV_ID not in gymnasium.registry:
        gymnasium.register(id=MASKED_ENV_ID, entry_point=MASKED_ENTRY_POINT)
