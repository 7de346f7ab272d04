"""tianshou's on-policy trainer on this project's evaluation grid, and the trainer state it keeps private.

tianshou 2.0.1 keeps the run's env-step counter and best score in private attributes
(``Trainer._env_step``, ``Trainer._best_score``); :func:`trainer_env_step` reads the first and
:class:`ResumableOnPolicyTrainer` resets the second. :class:`ResumableOnPolicyTrainer` also
overrides the trainer's ``reset``, ``execute_epoch`` and private ``_update_step``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tianshou.algorithm.algorithm_base import TrainingStats
from tianshou.data import EpochStats
from tianshou.data.collector import CollectStatsBase
from tianshou.trainer import OnPolicyTrainer, OnPolicyTrainerParams

from ..checkpoints import learner_state, load_learner_state

if TYPE_CHECKING:
    from .algorithm import MultiAgentPPO


def trainer_env_step(trainer: OnPolicyTrainer) -> int | None:
    """The env steps ``trainer`` has counted so far (None before it counts any)."""
    return int(trainer._env_step) if hasattr(trainer, "_env_step") else None


class ResumableOnPolicyTrainer(OnPolicyTrainer):
    """tianshou's on-policy trainer that keeps a fresh run's evaluation grid across resumes.

    Its first epoch asks for ``first_epoch_steps`` env steps and every later one for
    ``params.epoch_num_steps``, so a run resumed inside an evaluation interval finishes that
    interval first (:meth:`~agents.training.config.TrainConfig.interval_plan`). Such a run also
    skips tianshou's evaluation at start-up, which would evaluate (and could select) weights at
    an env step an uninterrupted run never evaluates; a run starting on the grid keeps it (at
    step 0, or the evaluation of an interval whose end was saved just before it; with no epoch left,
    the final evaluation a stopped run lacks, and nothing else). An update
    interrupted part-way is undone (:meth:`_update_step`).
    """

    def __init__(self, algorithm: MultiAgentPPO, params: OnPolicyTrainerParams, first_epoch_steps: int) -> None:
        super().__init__(algorithm, params)
        self._next_epoch_steps = first_epoch_steps

    def reset(self, reset_collectors: bool = True, reset_collector_buffers: bool = False) -> None:
        if self._next_epoch_steps == self.params.epoch_num_steps:  # starting on the grid
            return super().reset(reset_collectors, reset_collector_buffers)
        test, self.params.test_collector = self.params.test_collector, None  # no start-up evaluation
        try:
            super().reset(reset_collectors, reset_collector_buffers)
        finally:
            self.params.test_collector = test
        if reset_collectors and test is not None:
            test.reset(reset_buffer=reset_collector_buffers)
        # tianshou starts from a score of 0 that the start-up evaluation replaces; scores are
        # -mean JCT < 0, so the first evaluation must count as a new best (the callbacks'
        # save_best_fn keeps the best over the whole run)
        self._best_score = -math.inf

    def execute_epoch(self) -> EpochStats:
        full, self.params.epoch_num_steps = self.params.epoch_num_steps, self._next_epoch_steps
        try:
            return super().execute_epoch()
        finally:
            self.params.epoch_num_steps = self._next_epoch_steps = full

    def _update_step(self, collect_stats: CollectStatsBase | None = None) -> TrainingStats:
        """One update, all or nothing. tianshou counts a training step's env steps only once its
        update is done, so Ctrl-C or SIGTERM part-way through an update puts back the weights,
        optimizer, return scaling and counters the update started from: ``last.pt`` then holds
        weights trained on exactly the env steps its counters say, and the resumed run collects
        that batch again instead of training on top of a partial update."""
        before = learner_state(self.algorithm)
        try:
            return super()._update_step(collect_stats)
        except KeyboardInterrupt:
            load_learner_state(self.algorithm, before)
            raise
