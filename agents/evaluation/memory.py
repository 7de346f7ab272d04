"""The memory an evaluation plans to use, checked before any episode runs.

Every worker process runs one job at a time: a baseline one episode, a policy a group of episodes in
lockstep (:func:`~agents.evaluation.runner.seed_groups`). A job holds each of its episodes' simulator
(per-task state and the tables over the allocation grid, as a training env:
:func:`agents.training.budget.sim_bytes`) and, for a policy, the allocation logits of one acting pass
over the group (one per cluster, pending slot and grid cell). :func:`check_evaluation_memory`
refuses a plan whose largest jobs, one per worker, exceed
:data:`~agents.training.budget.MEMORY_FRACTION` of the memory the machine has available.
"""

from __future__ import annotations

from typing import Sequence

from agents.training.budget import ACT_BYTES_PER_LOGIT, MEMORY_FRACTION, available_memory, gib, observation_bytes, sim_bytes
from envs.config import ConfigError, ScenarioConfig
from envs.observation import ObservationSpec


def job_bytes(cfg: ScenarioConfig, episodes: int, policy: bool) -> int:
    """Memory of one job of ``episodes`` episodes in lockstep (a policy's acting pass included)."""
    ospec = ObservationSpec.from_config(cfg)
    envs = episodes * sim_bytes(cfg, observation_bytes(ospec))
    logits = ospec.N * ospec.P * cfg.num_allocations * episodes * ACT_BYTES_PER_LOGIT if policy else 0
    return int(envs + logits)


def evaluation_bytes(cfg: ScenarioConfig, group_sizes: Sequence[int], has_policy: bool, workers: int) -> int:
    """The plan's peak: ``workers`` of its largest jobs at once (baseline jobs are one episode)."""
    jobs = sorted([job_bytes(cfg, 1, False)] + ([job_bytes(cfg, max(group_sizes), True)] if has_policy else []))
    return int(jobs[-1] * workers)


def check_evaluation_memory(cfg: ScenarioConfig, group_sizes: Sequence[int], has_policy: bool, workers: int,
                            available: int | None = None) -> None:
    """ConfigError where :func:`evaluation_bytes` exceeds the limit (module docstring)."""
    need = evaluation_bytes(cfg, group_sizes, has_policy, workers)
    have = available_memory() if available is None else available
    if have is not None and need > MEMORY_FRACTION * have:
        c1, g1 = cfg.alloc_dims
        raise ConfigError(
            f"the evaluation would need about {gib(need)} of memory ({workers} worker(s), up to {max(group_sizes)} "
            f"episode(s) per job, {cfg.num_tasks:,} tasks per episode, an allocation grid of {c1:,} x {g1:,}), above "
            f"the limit of {gib(MEMORY_FRACTION * have)} ({MEMORY_FRACTION:.0%} of the {gib(have)} available); "
            "lower --workers or --policy-batch, or the scenario's per_task_max (the allocation grid) or num_tasks")
