"""Collect statistics: tianshou's plus scheduling metrics, and the evaluation score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from tianshou.data import CollectStats

from envs.batched import EPISODE_INFO, STEP_INFO

if TYPE_CHECKING:
    from tianshou.data.collector import CollectStepBatchProtocol


@dataclass(kw_only=True)
class SchedulingCollectStats(CollectStats):
    """tianshou collect stats plus scheduling metrics (logged as ``training/*`` and ``test/*``).

    Rates are fractions of agent decisions (steps x agents): ``conflict_rate`` (lost a
    conflict), ``void_rate`` (placed nothing, skipped agents included) and ``invalid_rate``
    (an action the env refused). Episode metrics average the episodes that ended in this
    collection; ``episode_length`` counts logical steps (tianshou's ``lens_stat`` is wrong for
    episodes that span collections) and ``real_steps`` real time steps.
    """

    mean_jct: float | None = None
    episode_length: float | None = None
    real_steps: float | None = None
    cpu_util: float | None = None
    gpu_util: float | None = None
    conflict_rate: float | None = None
    void_rate: float | None = None
    invalid_rate: float | None = None
    placed_per_step: float | None = None
    truncated_episodes: int = 0
    episode_metrics: list = field(default_factory=list)  # per-episode dicts (lists are not logged)
    decision_counts: list = field(default_factory=lambda: [0, 0, 0, 0, 0])  # decisions + STEP_INFO sums

    def update_at_step_batch(
        self, step_batch: CollectStepBatchProtocol, refresh_sequence_stats: bool = False
    ) -> None:
        super().update_at_step_batch(step_batch, refresh_sequence_stats)
        info = step_batch.info
        if "placed" not in info:
            return
        rewards = np.asarray(info.agent_rewards)
        agents = rewards.shape[1] if rewards.ndim == 2 else 1
        c = self.decision_counts
        c[0] += len(step_batch) * agents
        for k, key in enumerate(STEP_INFO, start=1):
            c[k] += int(np.sum(info[key]))
        # episode metrics come with the last step of each episode (read here, not from the
        # buffer, which may no longer hold the whole episode)
        ended = np.flatnonzero(np.asarray(info.episode_end, dtype=bool))
        truncated = np.asarray(step_batch.truncated, dtype=bool)
        for row in ended:
            metrics = {key: float(np.asarray(info[f"ep_{key}"])[row]) for key in EPISODE_INFO}
            metrics["truncated"] = bool(truncated[row])
            self.episode_metrics.append(metrics)

    def refresh_all_sequence_stats(self) -> None:
        super().refresh_all_sequence_stats()
        decisions, placed, void, invalid, conflicts = self.decision_counts
        if decisions:
            self.conflict_rate = conflicts / decisions
            self.void_rate = void / decisions
            self.invalid_rate = invalid / decisions
        if self.n_collected_steps:
            self.placed_per_step = placed / self.n_collected_steps
        eps = self.episode_metrics
        if eps:
            self.mean_jct = float(np.mean([e["mean_jct"] for e in eps]))
            self.episode_length = float(np.mean([e["length"] for e in eps]))
            self.real_steps = float(np.mean([e["steps"] for e in eps]))
            self.cpu_util = float(np.mean([e["cpu_util"] for e in eps]))
            self.gpu_util = float(np.mean([e["gpu_util"] for e in eps]))
            self.truncated_episodes = int(sum(e["truncated"] for e in eps))


#: subtracted from the score of an evaluation with a truncated episode: it ranks below every finished one
TRUNCATED_PENALTY = 1e9


def evaluation_score(stats: SchedulingCollectStats) -> float:
    """Score maximised by best-model selection: ``-mean JCT``; truncated episodes rank last."""
    if stats.mean_jct is None:
        return -float("inf")
    penalty = TRUNCATED_PENALTY if stats.truncated_episodes else 0.0
    return -float(stats.mean_jct) - penalty
