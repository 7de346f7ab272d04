"""Tiresias baseline: hand-computed 2-level LAS queues, GPU order and CPU split."""

from __future__ import annotations

import numpy as np
import pytest

from agents.baselines import make_scheduler
from agents.baselines.tiresias import TiresiasScheduler
from envs.config import ConfigError, ScenarioConfig
from envs.core import Simulator
from envs.scheduling import apply_decision, run_episode
from handmade import drive, fixed_sim


def scenario(capacities, mode="multi", num_tasks=4, steps=100) -> ScenarioConfig:
    """1-2 clusters every task reaches, one long resource-insensitive type, arrivals at t = 0."""
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": mode, "num_clusters": len(capacities), "capacities": capacities,
        "per_task_max": [max(c[0] for c in capacities), max(c[1] for c in capacities)],
        "arrival_rate": 200, "num_tasks": num_tasks, "switch_overhead": 1.0,
        "task_types": [{"name": "a", "prob": 1.0, "min_req": [1, 1], "progress": {"kind": "constant", "steps": steps}}],
        "connectivity": {"model": "bandwidth", "bandwidth_range": [10, 20], "threshold": 5},
    })


def fresh_sim(cfg: ScenarioConfig, seed: int = 0) -> Simulator:
    sim = Simulator(cfg, seed)
    assert np.all(sim.arrival == 0) and sim.eligible.all()
    return sim


def las_state() -> Simulator:
    """Cluster (7 CPU, 3 GPU) at t = 3: task 0 paused with 4 GPU-steps (started t = 0), task 1
    paused with 1 (started t = 0), task 2 running at (1, 1) with 2 (started t = 1), task 3 pending."""
    sim = fresh_sim(scenario([[7, 3]]))
    assert sim.place(0, 0, 1, 2) and sim.place(0, 1, 1, 1)
    sim.advance()
    assert sim.set_allocations(0, {1: (0, 0)}) and sim.place(0, 2, 1, 1)
    sim.advance()
    assert sim.set_allocations(0, {0: (0, 0)})
    sim.advance()
    assert sim.attained_gpu[:4].tolist() == [4, 1, 2, 0]
    assert sim.start[:3].tolist() == [0, 0, 1]
    return sim


def test_two_level_queue_split_and_gpu_order():
    """Service [4, 1, 2, 0] -> median 1.5: high queue {1, 3}, low {0, 2}; FIFO by start time in a
    queue (task 3 starts "now" = 3): order 1, 3, 0, 2. Each gets its minimum (1, 1) while GPUs
    last: 1, 3, 0; task 2 is paused. Spare CPUs 7 - 3 = 4: one each, the last one to task 1."""
    sim = las_state()
    tir = TiresiasScheduler()
    tir.reset(sim)
    decision = tir.decide(sim)
    assert decision.placements == [(0, 3, 2, 1)]
    assert decision.allocations == {0: {0: (2, 1), 1: (3, 1), 2: (0, 0)}}
    apply_decision(sim, decision)
    assert sim.invalid == 0 and sim.free[0].tolist() == [0, 0]


def test_elastic_variant_hands_gpus_to_the_head_job():
    """Same state, elastic: (1) las [4, 1, 2, 0], median 1.5, head = task 1 -> admitted (1, 1).
    (2) las [4, 2, 2, 0], median 2, high {1, 2, 3} by start -> task 1 gets a 2nd GPU.
    (3) las [4, 3, 2, 0], median 2.5, high {2, 3} -> task 2 admitted (1, 1). No GPU left.
    Holders in queue order (1, then 2) split the 5 spare CPUs: 3 and 2, the remainder to task 1."""
    sim = las_state()
    tir = TiresiasScheduler(elastic=True)
    tir.reset(sim)
    decision = tir.decide(sim)
    assert decision.placements == []
    assert decision.allocations == {0: {1: (4, 2), 2: (3, 1)}}  # task 0 stays paused at (0, 0)


def test_fifo_by_start_time_not_by_arrival():
    """Cluster (4, 1). Task 1 started at t = 0, task 0 (arrived as early) only at t = 1, after
    task 1 was paused; both then have 1 GPU-step, so they share a queue and the earlier start
    (task 1) gets the only GPU and all CPUs."""
    sim = fresh_sim(scenario([[4, 1]], num_tasks=2))
    assert sim.place(0, 1, 1, 1)
    sim.advance()
    assert sim.set_allocations(0, {1: (0, 0)}) and sim.place(0, 0, 1, 1)
    sim.advance()
    assert sim.attained_gpu[:2].tolist() == [1, 1]
    tir = TiresiasScheduler()
    tir.reset(sim)
    assert tir.decide(sim).allocations == {0: {0: (0, 0), 1: (4, 1)}}


def test_single_mode_starts_one_task_per_cluster():
    """Three new tasks, cluster (4, 4), single mode: only the first starts, with every CPU
    (the even split among one GPU holder); the next round in the same real step places nothing."""
    sim = fresh_sim(scenario([[4, 4]], mode="single", num_tasks=3))
    tir = TiresiasScheduler()
    tir.reset(sim)
    decision = tir.decide(sim)
    assert decision.placements == [(0, 0, 4, 1)]
    apply_decision(sim, decision)
    assert tir.decide(sim).placements == []
    sim.advance()
    decision = tir.decide(sim)  # task 0 has 1 GPU-step, task 1 none: both fit, CPUs split 2/2
    assert decision.placements == [(0, 1, 2, 1)]
    assert decision.allocations == {0: {0: (2, 1)}}


def test_task_placed_on_one_cluster_most_free_first():
    """Two (4, 4) clusters, single mode. Task 0 was started on cluster 0 at (2, 2). Cluster 1 has
    the larger free GPU share, so it decides first and takes the earliest pending task (1), with
    all 4 CPUs. Cluster 0: task 2 (service 0) is ahead of task 0 (service 2); both get (1, 1)
    and the 2 spare CPUs split evenly. No task is placed twice."""
    sim = fresh_sim(scenario([[4, 4], [4, 4]], mode="single", num_tasks=4))
    assert sim.place(0, 0, 2, 2)
    sim.advance()
    tir = TiresiasScheduler()
    tir.reset(sim)
    decision = tir.decide(sim)
    assert decision.placements == [(1, 1, 4, 1), (0, 2, 2, 1)]
    assert decision.allocations == {0: {0: (2, 1)}}


def test_non_preemptive_keeps_running_tasks_and_gives_cpus_by_gpu_ratio():
    """Cluster (8, 4) (2 CPUs per GPU), task 0 running at (1, 1): it is never touched; the two
    pending tasks get their minimum GPU and 2 CPUs per GPU."""
    sim = fresh_sim(scenario([[8, 4]], num_tasks=3))
    assert sim.place(0, 0, 1, 1)
    sim.advance()
    tir = TiresiasScheduler(preemptive=False)
    tir.reset(sim)
    decision = tir.decide(sim)
    assert decision.allocations == {}
    assert decision.placements == [(0, 1, 2, 1), (0, 2, 2, 1)]


@pytest.mark.parametrize("promote_after, resumed", [(None, 1), (2, 0)])
def test_starvation_promotion(promote_after, resumed):
    """Cluster (2, 1). Task 0 runs alone 3 steps (service 3); then Tiresias decides: task 1
    (pending, service 0) is ahead of it and takes the GPU; task 0 is paused. At t = 5 task 1 has service 2,
    task 0 has 3 and has been paused 2 steps: without promotion task 1 keeps the GPU; with
    ``promote_after=2`` task 0's service restarts at 0 and it gets the GPU back."""
    sim = fresh_sim(scenario([[2, 1]], num_tasks=2))
    assert sim.place(0, 0, 1, 1)
    tir = TiresiasScheduler(promote_after=promote_after)
    tir.reset(sim)
    for _ in range(3):
        sim.advance()
    for t in (3, 4):
        assert sim.t == t
        apply_decision(sim, tir.decide(sim))
        assert sim.alloc[1].tolist() == [2, 1] and sim.alloc[0].tolist() == [0, 0]
        sim.advance()
    apply_decision(sim, tir.decide(sim))
    assert sim.alloc[resumed, 1] == 1 and sim.alloc[1 - resumed, 1] == 0
    expected = 0 if promote_after else 3
    assert tir.service(sim, np.array([0]))[0] == expected


def test_never_reads_progress():
    """The decisions depend on attained service only: scrambling observed progress changes nothing."""
    sim = las_state()
    tir = TiresiasScheduler()
    tir.reset(sim)
    before = tir.decide(sim)
    sim.progress[:] = np.random.default_rng(0).random(sim.progress.shape) * 0.9
    after = tir.decide(sim)
    assert before.placements == after.placements and before.allocations == after.allocations


@pytest.mark.parametrize("options", [{}, {"elastic": True}, {"preemptive": False}, {"promote_after": 3}])
def test_full_episode_completes_every_task(options):
    cfg = scenario([[6, 4], [4, 6]], num_tasks=25, steps=3)
    result = run_episode(cfg, make_scheduler("tiresias", **options), seed=1)
    assert result.invalid == 0 and not result.truncated and result.jct.size == 25


def test_bad_options_raise_config_error():
    with pytest.raises(ConfigError):
        make_scheduler("tiresias", promote_after=0)
    with pytest.raises(ConfigError):
        make_scheduler("tiresias", bogus=True)


def ping_pong_sim(monkeypatch, switch_overhead: float):
    """One (2 CPU, 1 GPU) cluster, single mode, two tasks of 4 steps at any allocation of at least
    (1, 1): task 0 arrives at t = 0, task 1 at t = 2."""
    cfg = ScenarioConfig.from_dict({
        "name": "ping-pong", "mode": "single", "num_clusters": 1, "capacities": [[2, 1]], "per_task_max": [2, 1],
        "arrival_rate": 1, "num_tasks": 2, "switch_overhead": switch_overhead,
        "task_types": [{"name": "a", "prob": 1.0, "min_req": [1, 1], "progress": {"kind": "constant", "steps": 4}}],
    })
    return fixed_sim(monkeypatch, cfg, arrival=[0, 2], types=[0, 0], functions=None)


def test_two_equal_tasks_ping_pong_on_one_gpu_and_every_resume_pays_the_switch(monkeypatch):
    """Hand-worked 2D-LAS with preemption and a 0.5 switching overhead (progress 1/4 a step, 1/8 on the
    step after a change). t = 0, 1: task 0 runs alone at (2, 1) (all CPUs to the one holder): progress 1/2,
    service 2. t = 2: task 1 arrives with service 0 <= median 1, the high queue; task 0 (2 > 1) is low and
    is paused; task 1 starts (a start pays nothing). t = 3: services [2, 1], median 1.5: task 1 keeps the
    GPU, nothing changes. From t = 4 the services tie every other step: both are in the high queue and the
    earlier start (task 0) wins, then the one behind on service wins; the GPU changes hands every step and
    every resume gains 1/8: task 0 at t = 4, 6, 8, 10 (1/2 -> 1, done at 11, JCT 11), task 1 at 5, 7, 9 and,
    alone, 11 (1/2 -> 1, done at 12, JCT 10)."""
    sim = ping_pong_sim(monkeypatch, 0.5)
    log = drive(sim, TiresiasScheduler())
    turn = {0: {0: (2, 1), 1: (0, 0)}}, {0: {0: (0, 0), 1: (2, 1)}}
    assert log == [([(0, 0, 2, 1)], {}), ([], {}), ([(0, 1, 2, 1)], {0: {0: (0, 0)}}), ([], {}),
                   *[([], turn[k % 2]) for k in range(7)], ([], {0: {1: (2, 1)}})]
    assert sim.finish.tolist() == [11, 12] and sim.attained_gpu.tolist() == [6, 6]
    # the resumes are the switches (a start is none): task 0 at 4, 6, 8, 10; task 1 at 5, 7, 9, 11
    assert sim.records()["switches"].tolist() == [4, 4]
    # without the overhead the same ping-pong finishes at 7 and 8; without preemption task 0 runs to
    # completion first (4) and task 1 then runs its 4 steps (8): the pauses alone cost task 0 three steps
    free = ping_pong_sim(monkeypatch, 1.0)
    drive(free, TiresiasScheduler())
    assert free.finish.tolist() == [7, 8]
    fifo = ping_pong_sim(monkeypatch, 0.5)
    drive(fifo, TiresiasScheduler(preemptive=False))
    assert fifo.finish.tolist() == [4, 8] and fifo.records()["switches"].tolist() == [0, 0]
