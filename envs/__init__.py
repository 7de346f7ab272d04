"""Multi-cluster edge environment: simulator core, scenarios, Gymnasium and PettingZoo APIs."""

from .config import ConfigError, ScenarioConfig, available_scenarios, load_scenario
from .core import Simulator
from .registration import ENV_ID, MASKED_ENV_ID, MAX_EPISODE_STEPS, register_envs
from .scheduling import Decision, EpisodeResult, Scheduler, apply_decision, run_episode

register_envs()  # gymnasium.make("TapFinger/EdgeClusters-v0" or "TapFinger/EdgeClustersMasked-v0", scenario=..., ...)


def __getattr__(name: str):
    """Lazy exports: the Gym env and the PettingZoo factory (pettingzoo is imported only when used)."""
    if name == "EdgeClustersEnv":
        from .gym_env import EdgeClustersEnv

        return EdgeClustersEnv
    if name == "parallel_env":
        from .pettingzoo_env import parallel_env

        return parallel_env
    if name in ("BatchedEdgeClusters", "BatchStep"):
        from . import batched

        return getattr(batched, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConfigError", "ScenarioConfig", "available_scenarios", "load_scenario", "Simulator",
    "Decision", "EpisodeResult", "Scheduler", "apply_decision", "run_episode",
    "ENV_ID", "MASKED_ENV_ID", "MAX_EPISODE_STEPS", "register_envs", "EdgeClustersEnv", "parallel_env",
    "BatchedEdgeClusters", "BatchStep",
]
