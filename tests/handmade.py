"""Shared scaffolding for hand-computed scheduler tests: fixed workloads and a step driver."""

from __future__ import annotations

import numpy as np

import envs.core
from envs.core import Simulator
from envs.scheduling import apply_decision
from envs.workload import Workload


class LinearGpu:
    """Test progress function: ``gpu / scale`` per step, whatever the progress."""

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def delta(self, cpu: np.ndarray, gpu: np.ndarray, progress: np.ndarray) -> np.ndarray:
        return np.asarray(gpu, dtype=np.float64) / self.scale


def fixed_sim(monkeypatch, cfg, arrival, types, functions, eligible=None) -> Simulator:
    """A simulator whose workload is given by hand instead of drawn from the seed."""
    arrival = np.asarray(arrival, dtype=np.int64)
    if eligible is None:
        eligible = np.ones((arrival.size, cfg.num_clusters), dtype=bool)
    wl = Workload(arrival=arrival, task_type=np.asarray(types, dtype=np.int64), eligible=np.asarray(eligible))
    monkeypatch.setattr(envs.core, "generate_workload", lambda cfg, streams: wl)
    return Simulator(cfg, 0, functions)


def drive(sim: Simulator, sched) -> list:
    """Run to completion (at most 50 steps); return every real step's decision as plain data."""
    sched.reset(sim)
    log = []
    while not sim.done and sim.t < 50:
        d = sched.decide(sim)
        log.append((sorted(d.placements), {c: dict(a) for c, a in d.allocations.items()}))
        apply_decision(sim, d)
        assert sim.invalid == 0, sim.last_error
        sim.advance()
    return log
