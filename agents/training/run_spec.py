"""The resolved run: :class:`RunSpec`, what :func:`~agents.training.prepare.prepare_run` builds
and every stage of a training run reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envs.config import ScenarioConfig

from .config import TrainConfig

if TYPE_CHECKING:
    from agents.policy.config import PolicyConfig


@dataclass
class RunSpec:
    """Everything :func:`~agents.training.loop.run_training` needs (see
    :func:`~agents.training.prepare.prepare_run`)."""

    scenario: ScenarioConfig
    policy: PolicyConfig
    train: TrainConfig
    run_dir: Path
    resume: dict[str, Any] | None = None  # the loaded checkpoint when resuming
    #: seconds between plain "step X/Y" status lines on stdout (None: none; used when the
    #: progress bars are off because stdout/stderr is not a terminal)
    status_every_s: float | None = None
    #: print the one-line summary of every evaluation ("step X: eval mean JCT ..."; train.py sets it)
    eval_lines: bool = False
    #: the run's id (:data:`~agents.training.rundir.RUN_ID`): in every checkpoint and ``config.yaml``
    run_id: str | None = None
    #: the run directory is new (created exclusively when the run starts) rather than the resumed run's own
    fresh_dir: bool = True
    #: the directory name was drawn by :func:`~agents.training.rundir.default_run_name` (drawn again if taken)
    default_name: bool = True
    #: the scenarios the run trains on (``train.scenarios``; empty: ``scenario`` alone), each collection
    #: from one of them (:class:`~agents.training.scenario_mix.ScenarioSchedule`); validation runs on ``scenario``
    #: (and :attr:`validation_others`)
    training_scenarios: tuple[ScenarioConfig, ...] = ()
    #: the other scenarios the run validates on (``train.also_validate_on``; :mod:`~agents.training.validation_set`)
    validation_others: tuple[ScenarioConfig, ...] = ()

    @property
    def trained_on(self) -> tuple[ScenarioConfig, ...]:
        """The training scenarios, ``(scenario,)`` when none are named."""
        return self.training_scenarios or (self.scenario,)

    @property
    def learned_reward(self) -> str:
        """The reward the agents learn from: the training scenarios' ``reward``, their distinct values
        joined in order (``"team"``, ``"per_cluster"`` or ``"team, per_cluster"``)."""
        return ", ".join(dict.fromkeys(s.reward for s in self.trained_on))

    @property
    def resumed_counters(self) -> dict[str, Any]:
        """The step counters of the checkpoint this run resumes (empty for a fresh run)."""
        return (self.resume or {}).get("counters", {})

    @property
    def done_env_steps(self) -> int:
        """Env steps the run had done when this process started (0 for a fresh run)."""
        return int(self.resumed_counters.get("env_step", 0))

    @property
    def restarts(self) -> int:
        """Earlier starts of this run (0 for a fresh run); part of the training workload seed key."""
        return int(self.resumed_counters.get("restarts", -1)) + 1
