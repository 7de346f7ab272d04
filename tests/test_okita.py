"""``okita`` (seed 004): hand-computed packing, migration, pause, shrink; brute-force tentative step."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from agents.baselines import make_scheduler
from agents.baselines.okita import OkitaScheduler
from envs.config import ConfigError, ScenarioConfig, load_scenario
from envs.core import RUNNING, Simulator
from envs.progress import ConstantProgress
from envs.scheduling import apply_decision, run_episode
import handmade
from handmade import LinearGpu, drive


def config(clusters: int = 1, caps=((4, 4),), per_task_max=(4, 4), mode: str = "multi"):
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": mode, "num_clusters": clusters, "capacities": [list(c) for c in caps],
        "per_task_max": list(per_task_max), "arrival_rate": 1, "num_tasks": 3, "switch_overhead": 1.0,
        "task_types": [
            {"name": "const4", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 4}},
            {"name": "lin", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 1}},
        ],
    })


FUNCTIONS = [ConstantProgress(4), LinearGpu(8.0)]  # type 1: 1/8 per GPU per step


def fixed_sim(monkeypatch, cfg, arrival, types, eligible=None, functions=FUNCTIONS) -> Simulator:
    return handmade.fixed_sim(monkeypatch, cfg, arrival, types, functions, eligible)


# One (4, 4) cluster. Task 0 (4 steps anywhere) at t=0, task 1 (linear: best (2, 4), 2 steps)
# at t=1, task 2 (4 steps) at t=3. Priorities O = age/max age − remaining.
#   t=0: task 0 -> (2, 1).       t=1, 2: task 1 wants (2, 4), only (2, 3) free: delayed.
#   t=3: O = .75, −1/3, −1: task 1 still blocked, task 2 fits (2, 1) and starts.
#   t=4: task 0 done; O(task 1) = 1 − 1 = 0 > O(task 2) = 1/3 − 3/4: task 1 takes (2, 4), task 2
#        (started, pinned, nowhere to go) is paused.  t=5: same.  t=6: task 2 resumes at (2, 1).
def test_hand_delay_and_pause(monkeypatch):
    sim = fixed_sim(monkeypatch, config(), [0, 1, 3], [0, 1, 0])
    sched = OkitaScheduler()
    log = drive(sim, sched)
    assert log == [
        ([(0, 0, 2, 1)], {}),
        ([], {}),
        ([], {}),
        ([(0, 2, 2, 1)], {}),
        ([(0, 1, 2, 4)], {0: {2: (0, 0)}}),
        ([], {}),
        ([], {0: {2: (2, 1)}}),
        ([], {}),
        ([], {}),
    ]
    assert sim.finish.tolist() == [4, 6, 9]
    assert sched.diagnostics() == {"pauses": 1, "resizes": 0, "migrations": 0, "delays": 3, "shrinks": 0}


# Two (4, 4) clusters. t=0: task 0 (linear) and task 1 (4 steps) both prefer cluster 0 (all ties,
# lowest index); task 0 goes first (equal O, lower id) and takes (2, 4); task 1 migrates to
# cluster 1. t=1: task 2 (linear) prefers cluster 1 (free fraction .625 vs .25) but (2, 4) fits
# nowhere: delayed; at t=2 cluster 0 is free again (Q = 1) and it starts there.
def test_hand_migrate_then_delay(monkeypatch):
    sim = fixed_sim(monkeypatch, config(clusters=2, caps=((4, 4),)), [0, 0, 1], [1, 0, 1])
    sched = OkitaScheduler()
    log = drive(sim, sched)
    assert log[:3] == [
        ([(0, 0, 2, 4), (1, 1, 2, 1)], {}),
        ([], {}),
        ([(0, 2, 2, 4)], {}),
    ]
    assert sim.finish.tolist() == [2, 4, 4]
    assert sched.diagnostics()["migrations"] == 1 and sched.diagnostics()["delays"] == 1


# okita-shrink on the same workload: at t=1 task 2's best fitting option is (2, 3) on cluster 1
# (3 steps); waiting for task 1 (3 steps left) and then running 2 steps costs 5 >= 3: shrink.
# Later steps keep (2, 3) (sticky: it ties the tentative optimum).
def test_hand_shrink(monkeypatch):
    sim = fixed_sim(monkeypatch, config(clusters=2, caps=((4, 4),)), [0, 0, 1], [1, 0, 1])
    sched = OkitaScheduler(shrink=True)
    log = drive(sim, sched)
    assert log[:2] == [([(0, 0, 2, 4), (1, 1, 2, 1)], {}), ([(1, 2, 2, 3)], {})]
    assert all(step == ([], {}) for step in log[2:])
    assert sim.finish.tolist() == [2, 4, 4]
    assert sched.diagnostics()["shrinks"] == 1 and sched.diagnostics()["migrations"] == 1


def test_single_mode_starts_one_task_per_cluster(monkeypatch):
    cfg = config(mode="single")
    sim = fixed_sim(monkeypatch, cfg, [0, 0], [0, 0])
    sched = OkitaScheduler()
    log = drive(sim, sched)
    assert log[0] == ([(0, 0, 2, 1)], {})  # task 1 fits too but must wait a step
    assert log[1] == ([(0, 1, 2, 1)], {})


# ---------------------------------------------------------------------------- brute force
def _steps(fn, c: int, g: int, p: float) -> int:
    n = 0
    while p < 1 - 1e-9:
        d = float(fn.delta(np.array([c]), np.array([g]), np.array([p]))[0])
        if d <= 0:
            return 10**9
        p += d
        n += 1
    return max(n, 1)


def _brute(sim: Simulator, j: int):
    k = int(sim.task_type[j])
    lo = sim.min_req[k]
    started = sim.status[j] == RUNNING
    cands = [int(sim.cluster[j])] if started else np.flatnonzero(sim.eligible[j]).tolist()
    q = (sim.free / sim.capacity).mean(axis=1)
    rows = []
    for c in cands:
        cap = np.minimum(sim.capacity[c], sim.max_alloc)
        for x, y in itertools.product(range(lo[0], cap[0] + 1), range(lo[1], cap[1] + 1)):
            l = _steps(FUNCTIONS[k], x, y, float(sim.progress[j]))
            current = started and (x, y) == tuple(sim.alloc[j]) and c == sim.cluster[j]
            foot = x / sim.capacity[c, 0] + y / sim.capacity[c, 1]
            rows.append(((l, not current, foot, y, -q[c], c), (c, x, y, l)))
    return min(rows)[1]


def test_tentative_matches_brute_force(monkeypatch):
    cfg = config(clusters=3, caps=((4, 4), (6, 3), (8, 8)), per_task_max=(6, 6))
    rng = np.random.default_rng(11)
    T = 24
    eligible = rng.random((T, 3)) < 0.6
    eligible[~eligible.any(axis=1), 2] = True
    sim = fixed_sim(monkeypatch, cfg, np.sort(rng.integers(0, 8, T)), rng.integers(0, 2, T), eligible)
    sched = OkitaScheduler(shrink=True)
    sched.reset(sim)
    checked = started = 0
    while not sim.done and sim.t < 40:
        plan = sched.tentative(sim)
        for j, (c, x, y, l) in plan.items():
            assert (c, x, y, int(l)) == _brute(sim, j), (sim.t, j)
            checked += 1
            started += sim.status[j] == RUNNING
        apply_decision(sim, sched.decide(sim))
        assert sim.invalid == 0
        sim.advance()
    assert sim.done and checked > 50 and started > 20


# ---------------------------------------------------------------------------- options, validity
def test_options_are_validated():
    with pytest.raises(ConfigError):
        make_scheduler("okita", alloc_mode="nodes")
    with pytest.raises(ConfigError):
        make_scheduler("okita", alpha1=-1)
    with pytest.raises(ConfigError):
        make_scheduler("okita", unknown=True)


def test_workers_mode_uses_multiples_of_the_minimum(monkeypatch):
    sim = fixed_sim(monkeypatch, config(), [0], [1])
    log = drive(sim, OkitaScheduler(alloc_mode="workers"))
    assert log[0] == ([(0, 0, 4, 2)], {})  # N = 2 workers of (2, 1): 4 steps; N = 1: 8 steps


@pytest.mark.parametrize("scenario,options", [("synthetic-3", {}), ("hetero-6", {"shrink": True})])
def test_valid_and_deterministic(scenario, options):
    cfg = load_scenario(scenario, {"num_tasks": 60})
    a = run_episode(cfg, make_scheduler("okita", **options), seed=2)
    b = run_episode(cfg, make_scheduler("okita", **options), seed=2)
    assert a.invalid == 0 and a.conflicts == 0 and not a.truncated
    for key in ("start", "finish", "cluster", "cpu", "gpu", "avg_cpu", "avg_gpu"):
        assert np.array_equal(a.records[key], b.records[key]), key
    assert (a.usage <= a.capacity[None]).all()
