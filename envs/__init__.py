"""Multi-cluster edge environment: simulator core, scenarios, Gymnasium and PettingZoo APIs."""

from .config import ConfigError, ScenarioConfig, available_scenarios, load_scenario
from .core import Simulator
from .scheduling import Decision, EpisodeResult, Scheduler, apply_decision, run_episode

__all__ = [
    "ConfigError", "ScenarioConfig", "available_scenarios", "load_scenario", "Simulator",
    "Decision", "EpisodeResult", "Scheduler", "apply_decision", "run_episode",
]
