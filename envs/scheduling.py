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
from typing import Any, Callable, Generator, Protocol, Sequence

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
        return self.records["jct"][self.finished]

    @property
    def finished(self) -> np.ndarray:
        """Which arrived tasks finished (the tasks of :attr:`jct` and :attr:`wait`)."""
        return self.records["jct"] >= 0

    @property
    def wait(self) -> np.ndarray:
        """Steps each finished task waited from its arrival to its first start, in :attr:`jct`'s order."""
        return (self.records["start"] - self.records["arrival"])[self.finished]

    @property
    def mean_jct(self) -> float:
        return float(self.jct.mean()) if self.jct.size else float("nan")

    def utilisation(self) -> tuple[float, float]:
        """Mean fraction of all clusters' CPUs and GPUs in use over the episode."""
        if self.usage.shape[0] == 0:
            return 0.0, 0.0
        frac = self.usage.sum(axis=1) / self.capacity.sum(axis=0)
        return float(frac[:, 0].mean()), float(frac[:, 1].mean())


def episode_loop(sim: Simulator) -> Generator[None, Decision, None]:
    """The decision rounds of one episode as a coroutine: it stops (yields) whenever ``sim``
    needs a decision and takes it by ``send``; it returns once every task completed (or the cap).

    The one owner of the round rule: in ``single`` mode one round per real step, in ``multi``
    mode rounds until one places nothing (at most ``N * pending_slots + 1``), then the real step
    advances. :func:`run_episode` drives it with one scheduler; :func:`run_episodes_batched`
    drives several episodes in lockstep.
    """
    max_rounds = sim.cfg.num_clusters * sim.cfg.pending_slots + 1
    while not sim.done and not sim.truncated:
        for _ in range(max_rounds):
            placed = apply_decision(sim, (yield))
            if sim.single or placed == 0:
                break
        sim.advance()


def episode_result(sim: Simulator, name: str, seed: int, decision_seconds: float,
                   extra: dict[str, Any] | None = None) -> EpisodeResult:
    """The :class:`EpisodeResult` of a finished episode (``decision_seconds``: time spent deciding;
    ``extra``: what the scheduler reports of its episode, :func:`scheduler_extra`)."""
    steps = max(sim.t, 1)
    return EpisodeResult(
        scheduler=name,
        scenario=sim.cfg.name,
        seed=int(seed),
        records=sim.records(),
        tasks_in_system=np.asarray(sim.tasks_in_system, dtype=np.int64),
        usage=sim.usage_series(),
        capacity=sim.capacity.copy(),
        decision_ms=1000.0 * decision_seconds / steps,
        conflicts=sim.conflicts,
        invalid=sim.invalid,
        truncated=sim.truncated,
        steps=sim.t,
        extra=dict(extra or {}),
    )


def scheduler_extra(scheduler: Any) -> dict[str, Any]:
    """What a scheduler reports of the episode it just ran: its ``episode_stats()`` where it has
    one (the learned policy's coordination counts), else nothing."""
    stats = getattr(scheduler, "episode_stats", None)
    return dict(stats()) if callable(stats) else {}


def scheduler_name(scheduler: Any) -> str:
    return getattr(scheduler, "name", type(scheduler).__name__)


def run_episode(
    cfg: ScenarioConfig,
    scheduler: Scheduler,
    seed: int,
    functions: list[ProgressFunction] | None = None,
) -> EpisodeResult:
    """Run one scheduler on the workload of ``seed`` until every task completes (or the cap)."""
    sim = Simulator(cfg, seed, functions)
    scheduler.reset(sim)
    loop = episode_loop(sim)
    spent = 0.0
    try:
        next(loop)
        while True:
            t0 = time.perf_counter()
            decision = scheduler.decide(sim)
            spent += time.perf_counter() - t0
            loop.send(decision)
    except StopIteration:
        pass
    return episode_result(sim, scheduler_name(scheduler), seed, spent, scheduler_extra(scheduler))


#: ``decide_batch(schedulers, sims) -> decisions``: one decision per (scheduler, simulator) pair
BatchDecide = Callable[[Sequence[Any], Sequence[Simulator]], Sequence[Decision]]


def run_episodes_batched(
    cfg: ScenarioConfig,
    schedulers: Sequence[Scheduler],
    seeds: Sequence[int],
    decide_batch: BatchDecide,
    functions: list[ProgressFunction] | None = None,
) -> list[EpisodeResult]:
    """Run ``schedulers[k]`` on the workload of ``seeds[k]``, every episode in lockstep: each
    pass asks ``decide_batch`` once for the decisions of every episode that is still running.

    Each episode follows :func:`episode_loop` on its own simulator, so its result is what
    :func:`run_episode` gives whenever ``decide_batch`` returns what each scheduler's ``decide``
    would (a batched policy: one forward pass for all episodes). Episodes may be at different
    real steps or rounds (``multi`` mode); finished ones leave the batch. ``decision_ms``: each
    pass's time split evenly over the episodes it served.
    """
    if len(schedulers) != len(seeds):
        raise ValueError(f"{len(schedulers)} schedulers for {len(seeds)} seeds")
    sims = [Simulator(cfg, seed, functions) for seed in seeds]
    loops, spent = [], [0.0] * len(sims)
    for scheduler, sim in zip(schedulers, sims):
        scheduler.reset(sim)
        loop = episode_loop(sim)
        next(loop, None)
        loops.append(loop)
    live = [k for k, sim in enumerate(sims) if not (sim.done or sim.truncated)]
    while live:
        t0 = time.perf_counter()
        decisions = decide_batch([schedulers[k] for k in live], [sims[k] for k in live])
        share = (time.perf_counter() - t0) / len(live)
        running = []
        for k, decision in zip(live, decisions, strict=True):
            spent[k] += share
            try:
                loops[k].send(decision)
                running.append(k)
            except StopIteration:
                pass
        live = running
    return [episode_result(sim, scheduler_name(s), seed, t, scheduler_extra(s))
            for s, sim, seed, t in zip(schedulers, sims, seeds, spent)]
