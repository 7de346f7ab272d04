"""Observation builder: exact values on a hand-made situation, and agreement with the simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.config import load_scenario
from envs.core import Simulator
from envs.joint_action import random_valid_action
from envs.observation import KEYS, ObservationSpec, build_observation, running_slots

LOG100 = math.log1p(100.0)

# Two clusters: cluster 0 (2 CPU, 2 GPU) can host only type "a" (min 2,1); cluster 1 (8, 4)
# hosts both. Every task arrives at t = 0 (huge rate) and reaches every cluster that can
# host it (threshold 0), so the pending sets are fully determined by the task types.
TINY = {
    "num_clusters": 2,
    "capacities": [[2, 2], [8, 4]],
    "per_task_max": [8, 4],
    "arrival_rate": 10000,
    "num_tasks": 6,
    "pending_slots": 4,
    "connectivity.threshold": 0.0,
    "task_types": [
        {"name": "a", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 4}},
        {"name": "b", "prob": 0.5, "min_req": [3, 2], "progress": {"kind": "constant", "steps": 2}},
    ],
}


def tiny(mode: str = "multi", **extra):
    cfg = load_scenario("synthetic-3", {**TINY, "mode": mode, **extra})
    # a seed whose first four tasks mix both types, so the two pending sets differ
    for seed in range(100):
        sim = Simulator(cfg, seed)
        types = sim.task_type.tolist()
        if 0 < sum(types[:4]) < 4 and types.count(0) >= 2:
            return cfg, sim
    raise AssertionError("no seed with mixed task types in 100 tries")


def onehot(k: int, K: int = 2) -> list[float]:
    return [1.0 if j == k else 0.0 for j in range(K)]


def test_spec_sizes_match_the_simulator():
    for name in ("synthetic-3", "synthetic-6", "multi-3", "hetero-6", "sjf-3"):
        cfg = load_scenario(name)
        spec = ObservationSpec.from_config(cfg)
        sim = Simulator(cfg, 0)
        assert spec.M == running_slots(cfg) == sim.running_slots_hint()
        assert (spec.N, spec.P, spec.K) == (cfg.num_clusters, cfg.pending_slots, cfg.num_types)
        assert spec.alloc_dims == (cfg.per_task_max[0] + 1, cfg.per_task_max[1] + 1)
        assert spec.A == cfg.num_allocations
        obs = build_observation(sim, spec)
        assert tuple(obs) == KEYS
        for key, (shape, dtype) in spec.shapes().items():
            assert obs[key].shape == shape and obs[key].dtype == dtype, key
        assert spec.encode_allocation(*spec.decode_allocation(123)) == 123


def test_exact_values_at_start_and_after_a_placement():
    cfg, sim = tiny()
    spec = ObservationSpec.from_config(cfg)
    assert (spec.M, spec.scale, spec.Fp, spec.Fr) == (4, (8, 4), 7, 6)
    types = sim.task_type.tolist()
    a_tasks = [k for k in range(6) if types[k] == 0]
    obs = build_observation(sim, spec)

    # pending sets: cluster 1 shows tasks 0..3, cluster 0 the first type-a tasks
    expect0 = (a_tasks[:4] + [-1] * 4)[:4]
    assert sim.pending.tolist() == [expect0, [0, 1, 2, 3]]
    assert obs["pending_mask"].tolist() == [[int(x >= 0) for x in expect0], [1, 1, 1, 1]]
    for p in range(4):
        k = types[p]
        mins = [[2, 1], [3, 2]][k]
        reach = 1.0 if k == 0 else 0.5
        np.testing.assert_allclose(obs["pending_x"][1, p], [mins[0] / 8, mins[1] / 4, *onehot(k), 0.0, reach, 0.0])
        assert obs["pending_min"][1, p].tolist() == mins
        # where is task p pending in cluster 0?
        want = expect0.index(p) if p in expect0 else -1
        assert obs["pending_where"][1, p].tolist() == [want, p]
    for p, task in enumerate(expect0):
        if task < 0:
            np.testing.assert_array_equal(obs["pending_x"][0, p], [0, 0, 0, 0, 0, 0, 1])
            assert obs["pending_where"][0, p].tolist() == [-1, -1]
            assert obs["pending_min"][0, p].tolist() == [0, 0]
        else:
            assert obs["pending_where"][0, p].tolist() == [p, task if task < 4 else -1]
    assert obs["alloc_high"].tolist() == [[2, 2], [8, 4]]
    # cluster 0 fits type a (2, 1) only; cluster 1 fits both
    assert obs["feasible"].tolist() == [[int(x >= 0) for x in expect0], [1, 1, 1, 1]]
    queue0 = len(a_tasks) - sum(x >= 0 for x in expect0)
    np.testing.assert_allclose(
        obs["cluster_x"],
        [[2 / 8, 2 / 4, 2 / 8, 2 / 4, math.log1p(queue0) / LOG100, 0], [1, 1, 1, 1, math.log1p(2) / LOG100, 0]],
        rtol=1e-6,
    )
    assert not obs["running_mask"].any() and not obs["running_x"].any()

    # place task 0 on cluster 1 at (3, 2): it leaves both pending sets (no refill before advance)
    assert sim.place(1, 0, 3, 2)
    obs = build_observation(sim, spec)
    assert obs["pending_mask"][1].tolist() == [0, 1, 1, 1]
    np.testing.assert_array_equal(obs["pending_x"][1, 0], [0, 0, 0, 0, 0, 0, 1])
    assert obs["pending_where"][1, 0].tolist() == [-1, -1]
    assert obs["feasible"][1].tolist() == [0, 1, 1, 1]
    assert obs["alloc_high"][1].tolist() == [5, 2]
    assert obs["running_mask"].tolist() == [[0, 0, 0, 0], [1, 0, 0, 0]]
    np.testing.assert_allclose(obs["running_x"][1, 0], [3 / 8, 2 / 4, *onehot(types[0]), 0.0, 0.0])
    np.testing.assert_allclose(obs["cluster_x"][1], [5 / 8, 2 / 4, 1, 1, math.log1p(2) / LOG100, 1 / 4], rtol=1e-6)

    # one real step: progress 1/steps, elapsed 1, pending refilled, everyone waited 1 step
    sim.advance()
    obs = build_observation(sim, spec)
    steps = [4, 2][types[0]]
    np.testing.assert_allclose(
        obs["running_x"][1, 0], [3 / 8, 2 / 4, *onehot(types[0]), math.log1p(1) / LOG100, 1 / steps], rtol=1e-6
    )
    assert sim.pending[1].tolist() == [1, 2, 3, 4]
    np.testing.assert_allclose(obs["pending_x"][1, :, 4], math.log1p(1) / LOG100, rtol=1e-6)
    np.testing.assert_allclose(obs["cluster_x"][1, 4], math.log1p(1) / LOG100, rtol=1e-6)


def test_single_mode_blocks_a_cluster_after_its_placement():
    cfg, sim = tiny("single")
    spec = ObservationSpec.from_config(cfg)
    before = build_observation(sim, spec)["feasible"]
    assert sim.place(1, 0, 3, 2)
    after = build_observation(sim, spec)["feasible"]
    assert not after[1].any()
    # cluster 0 is not blocked; it only loses task 0 if task 0 was pending there too
    expected0 = before[0].copy()
    expected0[sim.pending[0] < 0] = 0
    assert after[0].tolist() == expected0.tolist() and after[0].any()


def test_running_slots_beyond_m_show_the_first_m_occupied():
    cfg, sim = tiny("multi", num_tasks=12)
    spec = ObservationSpec.from_config(cfg)
    paused: set[int] = set()
    for _ in range(20):  # fill cluster 1 at minimum allocations, pausing one task per step
        for task in sim.pending_tasks(1).tolist():
            lo = sim.min_req[sim.task_type[task]]
            if sim.can_place(1, task, int(lo[0]), int(lo[1])) == "":
                assert sim.place(1, task, int(lo[0]), int(lo[1]))
        if (sim.run_slots[1] >= 0).sum() > spec.M:
            break
        active = [x for x in sim.running_tasks(1).tolist() if x not in paused]
        assert sim.set_allocations(1, {active[0]: (0, 0)})  # the preemptive-scheduler path
        paused.add(active[0])
        sim.advance()
    else:
        pytest.fail("could not make cluster 1 run more than M tasks")
    assert sim.run_slots.shape[1] > spec.M
    obs = build_observation(sim, spec)
    row = sim.run_slots[1]
    first = row[row >= 0][: spec.M]
    assert obs["running_mask"][1].tolist() == [1] * spec.M
    np.testing.assert_allclose(obs["running_x"][1, :, 0], sim.alloc[first, 0] / 8)
    np.testing.assert_allclose(obs["running_x"][1, :, spec.K + 3], sim.progress[first], rtol=1e-6)
    assert obs["cluster_x"][1, 5] == 1.0


@pytest.mark.parametrize("name", ["synthetic-3", "hetero-6", "sjf-3"])
def test_observation_agrees_with_the_simulator_over_an_episode(name):
    cfg = load_scenario(name, ["num_tasks=60", "max_start_slowdown=0"])  # the floor: test below
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, 3)
    rng = np.random.default_rng(0)
    from envs.gym_env import observation_space
    from envs.joint_action import apply_joint_action, needs_advance

    space = observation_space(spec)
    checked = 0
    while not sim.done and sim.t < 500:
        obs = build_observation(sim, spec)
        assert obs in space
        for i in range(spec.N):
            assert obs["alloc_high"][i].tolist() == sim.alloc_upper(i).tolist()
            q = math.log1p(sim.queue_length(i)) / LOG100
            assert obs["cluster_x"][i, 4] == pytest.approx(q, rel=1e-6)
            for p in range(spec.P):
                task = int(sim.pending[i, p])
                assert obs["pending_mask"][i, p] == (task >= 0)
                if task < 0:
                    assert obs["feasible"][i, p] == 0 and (obs["pending_where"][i, p] == -1).all()
                    continue
                lo = sim.min_req[sim.task_type[task]]
                ok = sim.can_place(i, task, int(lo[0]), int(lo[1])) == ""
                assert bool(obs["feasible"][i, p]) == ok
                for j in range(spec.N):
                    hits = np.flatnonzero(sim.pending[j] == task)
                    assert obs["pending_where"][i, p, j] == (hits[0] if hits.size else -1)
                wait = math.log1p(sim.t - sim.arrival[task]) / LOG100
                assert obs["pending_x"][i, p, spec.K + 2] == pytest.approx(wait, rel=1e-6)
                reach = sim.eligible[task].mean()
                assert obs["pending_x"][i, p, spec.K + 3] == pytest.approx(reach, rel=1e-6)
                checked += 1
        report = apply_joint_action(sim, random_valid_action(obs, spec.alloc_dims[1], rng))
        assert report.invalid == 0 and report.conflicts == 0
        if needs_advance(sim, report):
            sim.advance()
    assert sim.done and checked > 100


def test_builder_returns_fresh_arrays_and_handles_a_new_episode():
    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, 0)
    a = build_observation(sim, spec)
    b = build_observation(sim, spec)
    for key in KEYS:
        np.testing.assert_array_equal(a[key], b[key])
        assert not np.shares_memory(a[key], b[key])
    sim2 = Simulator(cfg, 1)  # a different workload: tables are rebuilt
    c = build_observation(sim2, spec)
    assert c["pending_mask"].sum() == (sim2.pending >= 0).sum()
    other = ObservationSpec.from_config(load_scenario("synthetic-6"))
    with pytest.raises(ValueError, match="pending shape"):
        build_observation(sim, other)


@pytest.mark.parametrize("name,factor", [("synthetic-3", 3.0), ("hetero-6", 2.0), ("testbed-3", 2.0)])
def test_start_floor_offers_only_starts_within_the_slowdown(name, factor):
    """``max_start_slowdown``: a slot is offered iff its minimum fits ``alloc_high`` and, started at
    ``alloc_high``, it would finish within ``factor`` x its fastest duration on that cluster
    (durations recomputed here from the progress functions, cluster by cluster)."""
    from envs.durations import steps_to_finish
    from envs.joint_action import apply_joint_action, needs_advance

    cfg = load_scenario(name, [f"max_start_slowdown={factor}", "num_tasks=80"]).for_evaluation()
    spec = ObservationSpec.from_config(cfg)
    sim = Simulator(cfg, 5)
    fastest = sim.fastest  # (K, N)
    rng = np.random.default_rng(1)
    held = offered = 0
    while not sim.done and sim.t < 400:
        obs = build_observation(sim, spec)
        for i in range(spec.N):
            hi = obs["alloc_high"][i]
            for p in range(spec.P):
                task = int(sim.pending[i, p])
                if task < 0:
                    continue
                k = int(sim.task_type[task])
                lo = sim.min_req[k]
                fits = sim.can_place(i, task, int(lo[0]), int(lo[1])) == ""
                quick = steps_to_finish(sim.functions[k], int(hi[0]), int(hi[1])) <= factor * fastest[k, i]
                assert bool(obs["feasible"][i, p]) == (fits and bool(quick)), (sim.t, i, p, k)
                held += int(fits and not quick)
                offered += int(obs["feasible"][i, p])
        report = apply_joint_action(sim, random_valid_action(obs, spec.alloc_dims[1], rng))
        assert report.invalid == 0
        if needs_advance(sim, report):
            sim.advance()
    assert held > 0 and offered > 0


def test_start_floor_off_is_the_minimum_rule_and_bad_values_are_refused():
    from envs.config import ConfigError
    from envs.durations import start_gate
    from envs.progress import build_progress_functions

    cfg = load_scenario("hetero-6", ["max_start_slowdown=0"])
    gate = start_gate(cfg, build_progress_functions(cfg))
    c1, g1 = cfg.alloc_dims
    assert gate.shape == (cfg.num_clusters, c1, g1, cfg.num_types + 1) and not gate[..., -1].any()
    for k, t in enumerate(cfg.task_types):
        expect = (np.arange(c1)[:, None] >= t.min_req[0]) & (np.arange(g1)[None, :] >= t.min_req[1])
        assert all(np.array_equal(gate[i, ..., k], expect) for i in range(cfg.num_clusters))
    floored = start_gate(load_scenario("hetero-6", ["max_start_slowdown=1"]), build_progress_functions(cfg))
    assert load_scenario("hetero-6").max_start_slowdown == 0  # the shipped scenarios are the paper's: no floor
    assert not (floored & ~gate).any() and (gate & ~floored).any()  # a start floor only removes feasible entries
    for bad in ("0.5", "-2"):
        with pytest.raises(ConfigError, match="max_start_slowdown must be 0"):
            load_scenario("synthetic-3", [f"max_start_slowdown={bad}"])
