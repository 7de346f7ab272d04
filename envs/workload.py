"""Workload generation: arrivals, task types and cluster eligibility from one seed.

One seed is split into named, independent RNG streams. The whole workload is drawn from
the ``arrivals`` and ``connectivity`` streams up front, so every scheduler sees exactly the
same tasks for the same seed, whatever it decides and however much noise it consumes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .config import ScenarioConfig

STREAMS = ("arrivals", "connectivity", "noise", "tiebreak")


def rng_streams(seed: int) -> dict[str, np.random.Generator]:
    """Independent generators named by :data:`STREAMS`, all derived from ``seed``."""
    children = np.random.SeedSequence(int(seed)).spawn(len(STREAMS))
    return {name: np.random.default_rng(ss) for name, ss in zip(STREAMS, children)}


@dataclass(frozen=True)
class Workload:
    """Tasks of one episode in arrival order (task id = index)."""

    arrival: np.ndarray  # (T,) int64, non-decreasing real step of arrival
    task_type: np.ndarray  # (T,) int64 index into cfg.task_types
    eligible: np.ndarray  # (T, N) bool: clusters the task can be placed on

    @property
    def num_tasks(self) -> int:
        return int(self.arrival.shape[0])


def hostable(cfg: ScenarioConfig) -> np.ndarray:
    """``[type, cluster]`` bool: the type's minimum requirement fits the cluster and per-task max."""
    out = np.zeros((cfg.num_types, cfg.num_clusters), dtype=bool)
    for k, t in enumerate(cfg.task_types):
        for i, cap in enumerate(cfg.capacities):
            out[k, i] = all(t.min_req[r] <= min(cap[r], cfg.per_task_max[r]) for r in range(2))
    return out


def generate_workload(cfg: ScenarioConfig, streams: dict[str, np.random.Generator]) -> Workload:
    """Draw the episode's tasks: Poisson(λ) arrivals per real step, types, eligibility."""
    rng = streams["arrivals"]
    total = cfg.num_tasks
    counts: list[np.ndarray] = []
    drawn = 0
    chunk = max(16, int(total / max(cfg.arrival_rate, 1e-6)) + 16)
    while drawn < total:
        c = rng.poisson(cfg.arrival_rate, size=chunk)
        counts.append(c)
        drawn += int(c.sum())
    per_step = np.concatenate(counts)
    arrival = np.repeat(np.arange(per_step.size, dtype=np.int64), per_step)[:total]
    probs = np.array([t.prob for t in cfg.task_types], dtype=float)
    task_type = rng.choice(cfg.num_types, size=total, p=probs / probs.sum()).astype(np.int64)
    eligible = _eligibility(cfg, task_type, streams["connectivity"])
    return Workload(arrival=arrival, task_type=task_type, eligible=eligible)


def _eligibility(cfg: ScenarioConfig, task_type: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    can_host = hostable(cfg)[task_type]  # (T, N)
    total, n = can_host.shape
    conn = cfg.connectivity
    if conn.model == "bandwidth":
        lo, hi = conn.bandwidth_range
        bw = rng.uniform(lo, hi, size=(total, n))
        bw = np.where(can_host, bw, -np.inf)
        eligible = bw >= conn.threshold
        best = np.argmax(bw, axis=1)  # a hostable cluster always exists (config validation)
        none = ~eligible.any(axis=1)
        eligible[none, best[none]] = True
        return eligible
    # reference rule: k ~ U{1..n_hostable}, then a uniform random subset of that size
    keys = np.where(can_host, rng.random((total, n)), np.inf)
    order = np.argsort(keys, axis=1)
    n_host = can_host.sum(axis=1)
    k = rng.integers(1, n_host + 1)
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(n)[None, :].repeat(total, 0), axis=1)
    return (ranks < k[:, None]) & can_host
