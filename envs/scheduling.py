"""The scheduler protocol and the episode runner every scheduler goes through.

A scheduler sees the :class:`~envs.core.Simulator` and returns a :class:`Decision` once per
decision round. In ``single`` mode there is one round per real step; in ``multi`` mode the
runner asks again after every round that placed something, and real time advances once a
round places nothing (every agent void), exactly like the Gymnasium env.

Observation discipline is by contract: a scheduler may read the simulator's public state
(pending sets, queues, running tasks, allocations, observed progress and free resources).
Only schedulers documented as *oracle* may call the progress functions (``sim.functions``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .config import ScenarioConfig
from .core import Simulator
from .progress import ProgressFunction


@dataclass
class Decision:
    """What a scheduler wants this round.

    ``placements``: ``(cluster, task_id, cpu, gpu)`` starts, applied in order.
    ``allocations``: per cluster, new ``(cpu, gpu)`` for running tasks (preemptive schedulers);
    applied before the placements. (0, 0) pauses a task.
    """

    placements: list[tuple[int, int, int, int]] = field(default_factory=list)
    allocations: dict[int, dict[int, tuple[int, int]]] = field(default_factory=dict)


class Scheduler(Protocol):
    """Anything with a name, ``reset(sim)`` and ``decide(sim) -> Decision``."""

    name: str

    def reset(self, sim: Simulator) -> None: ...

    def decide(self, sim: Simulator) -> Decision: ...


def apply_decision(sim: Simulator, decision: Decision) -> int:
    """Apply a decision; returns the number of tasks placed.

    A task placed by one request of the round makes any later request for it a conflict. Refused requests count as invalid (``sim.invalid``).
    """
    for cluster, allocs in decision.allocations.items():
        sim.set_allocations(cluster, allocs)
    placed = 0
    seen: set[int] = set()
    for cluster, task, cpu, gpu in decision.placements:
        if task in seen:
            sim.conflicts += 1
            continue
        if sim.place(int(cluster), int(task), int(cpu), int(gpu)):
            seen.add(task)
            placed += 1
    return placed


@dataclass
class EpisodeResult:
    """Everything one scheduler produced on one seeded workload."""

    scheduler: str
    scenario: str
    seed: int
    records: dict[str, np.ndarray]
    tasks_in_system: np.ndarray  # (steps,)
    usage: np.ndarray  # (steps, N, 2)
    capacity: np.ndarray  # (N, 2)
    decision_ms: float  # mean wall-clock milliseconds of decisions per real step
    conflicts: int
    invalid: int
    truncated: bool
    steps: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def jct(self) -> np.ndarray:
        j = self.records["jct"]
        return j[j >= 0]

    @property
    def mean_jct(self) -> float:
        return float(self.jct.mean()) if self.jct.size else float("nan")

    def utilisation(self) -> tuple[float, float]:
        """Mean fraction of all clusters' CPUs and GPUs in use over the episode."""
        if self.usage.shape[0] == 0:
            return 0.0, 0.0
        frac = self.usage.sum(axis=1) / self.capacity.sum(axis=0)
        return float(frac[:, 0].mean()), float(frac[:, 1].mean())


def run_episode(
    cfg: ScenarioConfig,
    scheduler: Scheduler,
    seed: int,
    functions: list[ProgressFunction] | None = None,
) -> EpisodeResult:
    """Run one scheduler on the workload of ``seed`` until every task completes (or the cap)."""
    sim = Simulator(cfg, seed, functions)
    scheduler.reset(sim)
    max_rounds = cfg.num_clusters * cfg.pending_slots + 1
    spent = 0.0
    while not sim.done and not sim.truncated:
        t0 = time.perf_counter()
        for _ in range(max_rounds):
            placed = apply_decision(sim, scheduler.decide(sim))
            if sim.single or placed == 0:
                break
        spent += time.perf_counter() - t0
        sim.advance()
    steps = max(sim.t, 1)
    return EpisodeResult(
        scheduler=getattr(scheduler, "name", type(scheduler).__name__),
        scenario=cfg.name,
        seed=int(seed),
        records=sim.records(),
        tasks_in_system=np.asarray(sim.tasks_in_system, dtype=np.int64),
        usage=sim.usage_series(),
        capacity=sim.capacity.copy(),
        decision_ms=1000.0 * spent / steps,
        conflicts=sim.conflicts,
        invalid=sim.invalid,
        truncated=sim.truncated,
        steps=sim.t,
    )
