"""Hand-computed unit tests of the simulator core and the episode runner.

Most tests inject a hand-written workload (arrival steps, types, eligibility) so that every
expected number can be worked out on paper.
"""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest

from envs.config import ScenarioConfig, load_scenario
from envs.core import DONE, NOT_ARRIVED, RUNNING, WAITING, Simulator
from envs.scheduling import Decision, apply_decision, run_episode
from envs.workload import Workload

CONST4 = {"name": "c4", "prob": 1.0, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 4}}


def config(**changes):
    """A small scenario: one (8, 4) cluster, one 4-step task type with minimum (2, 1)."""
    raw = {
        "name": "unit",
        "mode": "multi",
        "num_clusters": 1,
        "capacities": [[8, 4]],
        "per_task_max": [8, 4],
        "arrival_rate": 1.0,
        "num_tasks": 5,
        "task_types": [CONST4],
        "max_steps": 1000,
    }
    raw.update(changes)
    return ScenarioConfig.from_dict(raw)


def make_sim(cfg, arrival, types=None, eligible=None) -> Simulator:
    """A simulator whose workload is exactly the given one (task id = list index)."""
    arrival = np.asarray(arrival, dtype=np.int64)
    T = arrival.size
    types = np.zeros(T, dtype=np.int64) if types is None else np.asarray(types, dtype=np.int64)
    if eligible is None:
        eligible = np.ones((T, cfg.num_clusters), dtype=bool)
    wl = Workload(arrival=arrival, task_type=types, eligible=np.asarray(eligible, dtype=bool))
    with mock.patch("envs.core.generate_workload", lambda cfg, streams: wl):
        return Simulator(cfg, seed=0)


def pending(sim, i):
    return sim.pending_tasks(i).tolist()


# ------------------------------------------------------------------ pending sets and FIFO
def test_fifo_pending_set_and_refill_only_at_advance():
    sim = make_sim(config(pending_slots=2), arrival=[0, 0, 0, 0, 1, 1])
    assert pending(sim, 0) == [0, 1]
    assert sim.waiting[0] == [0, 1, 2, 3] and sim.queue_length(0) == 2
    assert sim.place(0, 1, 2, 1)
    # the freed slot stays empty until real time advances
    assert pending(sim, 0) == [0] and sim.queue_length(0) == 2
    assert not sim.place(0, 2, 2, 1)  # task 2 is queued, not pending
    assert "pending" in sim.last_error
    sim.advance()
    # refilled from the queue first (tasks 2, 3 arrived before 4, 5): FIFO by arrival
    assert pending(sim, 0) == [0, 2]
    assert sim.waiting[0] == [0, 2, 3, 4, 5] and sim.queue_length(0) == 3
    assert sim.place(0, 0, 2, 1) and sim.place(0, 2, 2, 1)
    assert pending(sim, 0) == []
    sim.advance()
    assert pending(sim, 0) == [3, 4] and sim.queue_length(0) == 1


def test_pending_slots_keep_gaps_in_place():
    sim = make_sim(config(pending_slots=3), arrival=[0, 0, 0, 0])
    assert sim.pending[0].tolist() == [0, 1, 2]
    sim.place(0, 1, 2, 1)
    assert sim.pending[0].tolist() == [0, -1, 2]
    sim.advance()
    assert sim.pending[0].tolist() == [0, 2, 3]


def test_task_eligible_at_several_clusters_disappears_from_all():
    cfg = config(num_clusters=3, capacities=[[8, 4]], pending_slots=2)
    eligible = [[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 1]]
    sim = make_sim(cfg, arrival=[0, 0, 0, 0], eligible=eligible)
    assert [pending(sim, i) for i in range(3)] == [[0, 1], [0, 2], [0, 1]]
    assert sim.waiting == [[0, 1, 3], [0, 2, 3], [0, 1, 2, 3]]
    assert sim.place(1, 0, 2, 1)
    assert [pending(sim, i) for i in range(3)] == [[1], [2], [1]]
    assert sim.waiting == [[1, 3], [2, 3], [1, 2, 3]]
    assert sim.cluster[0] == 1 and sim.status[0] == RUNNING
    # gone from cluster 2's pending set and cluster 0's too: placing it again is refused
    assert not sim.place(0, 0, 2, 1) and not sim.place(2, 0, 2, 1)
    # a queued task (3) placed elsewhere leaves the other clusters' queues as well
    sim.advance()
    assert [pending(sim, i) for i in range(3)] == [[1, 3], [2, 3], [1, 2]]
    assert sim.place(0, 3, 2, 1)
    assert sim.waiting == [[1], [2], [1, 2]]
    assert sim.queue_length(2) == 0 and pending(sim, 2) == [1, 2]


def test_arrivals_join_every_eligible_cluster_in_arrival_order():
    cfg = config(num_clusters=2, capacities=[[8, 4]], pending_slots=10)
    sim = make_sim(cfg, arrival=[0, 1, 1, 3], eligible=[[1, 0], [1, 1], [0, 1], [1, 1]])
    assert sim.waiting == [[0], []] and sim.status.tolist() == [WAITING, NOT_ARRIVED, NOT_ARRIVED, NOT_ARRIVED]
    sim.advance()
    assert sim.waiting == [[0, 1], [1, 2]] and sim.num_alive == 3
    sim.advance()
    assert sim.num_alive == 3
    sim.advance()
    assert sim.waiting == [[0, 1, 3], [1, 2, 3]] and sim.all_arrived


# ------------------------------------------------------------------ progress
def test_task_placed_on_arrival_needing_k_steps_has_jct_k():
    sim = make_sim(config(), arrival=[0, 3])
    assert sim.place(0, 0, 2, 1)
    for _ in range(3):
        sim.advance()
        assert sim.status[0] == RUNNING
    assert sim.progress[0] == pytest.approx(0.75)
    assert sim.t == 3 and sim.status[1] == WAITING
    assert sim.place(0, 1, 2, 1)  # task 1 arrived at step 3 and is placed at once
    sim.advance()  # t: 3 -> 4, task 0 completes during step 3
    assert sim.status[0] == DONE and sim.finish[0] == 4
    assert sim.free[0].tolist() == [6, 3]
    for _ in range(3):
        sim.advance()
    rec = sim.records()
    assert rec["jct"].tolist() == [4, 4]
    assert rec["start"].tolist() == [0, 3] and rec["finish"].tolist() == [4, 7]
    assert sim.done and sim.free[0].tolist() == [8, 4]


def test_jct_includes_waiting():
    sim = make_sim(config(), arrival=[0])
    sim.advance()
    sim.advance()
    assert sim.place(0, 0, 2, 1)  # placed at step 2
    for _ in range(4):
        sim.advance()
    rec = sim.records()
    assert rec["start"][0] == 2 and rec["finish"][0] == 6 and rec["jct"][0] == 6


def test_tanh_steps_by_gpu_count():
    """The documented table: 21, 10, 7, 5, 4, 4, 3, 3, 3, 2 steps at 1..10 GPUs."""
    expected = [21, 10, 7, 5, 4, 4, 3, 3, 3, 2]
    for g, k in enumerate(expected, start=1):
        cfg = load_scenario("synthetic-3", [f"per_task_max=[16,{g}]"])
        sim = Simulator(cfg, 0)
        assert sim.fastest[1].tolist() == [k, k, k], g
        assert sim.fastest[0].tolist() == [4, 4, 4]
    # and the simulator reproduces it step by step
    sim = make_sim(config(task_types=[{**CONST4, "progress": {"kind": "tanh"}}]), arrival=[0])
    sim.place(0, 0, 2, 3)
    steps = 0
    while not sim.done:
        sim.advance()
        steps += 1
    assert steps == 7 and sim.records()["jct"][0] == 7


def test_switching_overhead_applies_on_the_next_step_only():
    sim = make_sim(config(switch_overhead=0.5), arrival=[0, 0])
    assert sim.place(0, 0, 2, 1)
    sim.advance()  # a newly started task pays nothing
    assert sim.progress[0] == pytest.approx(0.25)
    assert sim.set_allocations(0, {0: (3, 2)})
    assert sim.place(0, 1, 2, 1)  # started in the same step as the other's switch
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.25 + 0.125)
    assert sim.progress[1] == pytest.approx(0.25)
    sim.advance()  # no further change: full gain again
    assert sim.progress[0] == pytest.approx(0.625)
    # re-setting the same allocation is not a switch
    assert sim.set_allocations(0, {0: (3, 2)})
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.875)


def test_task_resized_before_its_first_step_pays_nothing():
    sim = make_sim(config(switch_overhead=0.5), arrival=[0])
    assert sim.place(0, 0, 2, 1)
    assert sim.set_allocations(0, {0: (4, 2)})  # same real step, before it ever ran
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.25)


def test_switch_back_within_a_step_is_not_a_switch():
    sim = make_sim(config(switch_overhead=0.5), arrival=[0])
    sim.place(0, 0, 2, 1)
    sim.advance()
    assert sim.set_allocations(0, {0: (4, 3)}) and sim.set_allocations(0, {0: (2, 1)})
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.5)


def test_no_overhead_when_factor_is_one():
    sim = make_sim(config(switch_overhead=1.0), arrival=[0])
    sim.place(0, 0, 2, 1)
    sim.advance()
    sim.set_allocations(0, {0: (5, 4)})
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.5)


def test_switch_overhead_with_tanh_progress():
    tanh = {**CONST4, "progress": {"kind": "tanh"}}
    sim = make_sim(config(switch_overhead=0.5, task_types=[tanh]), arrival=[0])
    sim.place(0, 0, 2, 2)
    sim.advance()
    p1 = np.tanh(2 / 16) * np.sqrt(1.2)
    assert sim.progress[0] == pytest.approx(p1)
    sim.set_allocations(0, {0: (2, 4)})
    sim.advance()
    assert sim.progress[0] == pytest.approx(p1 + 0.5 * np.tanh(4 / 16) * np.sqrt(1.2 - p1))


def test_below_minimum_allocation_makes_no_progress():
    sim = make_sim(config(switch_overhead=0.5), arrival=[0])
    sim.place(0, 0, 2, 1)
    sim.advance()
    assert sim.set_allocations(0, {0: (0, 0)})  # pause
    assert sim.free[0].tolist() == [8, 4]
    sim.advance()
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.25) and sim.status[0] == RUNNING
    assert sim.set_allocations(0, {0: (1, 4)})  # CPU below the minimum of 2
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.25)
    assert sim.free[0].tolist() == [7, 0]
    assert sim.set_allocations(0, {0: (2, 1)})  # resumed: pays the overhead once
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.375)
    sim.advance()
    assert sim.progress[0] == pytest.approx(0.625)


def test_progress_noise_is_seeded_and_only_changes_progress():
    cfg = load_scenario("synthetic-3", ["num_tasks=40", "progress_noise=0.4"])
    quiet = load_scenario("synthetic-3", ["num_tasks=40"])
    from agents.baselines import make_scheduler

    a = run_episode(cfg, make_scheduler("min"), seed=3)
    b = run_episode(cfg, make_scheduler("min"), seed=3)
    c = run_episode(quiet, make_scheduler("min"), seed=3)
    assert all(np.array_equal(a.records[k], b.records[k]) for k in a.records)
    assert np.array_equal(a.records["arrival"], c.records["arrival"])
    assert np.array_equal(a.records["type"], c.records["type"])
    assert not np.array_equal(a.records["jct"], c.records["jct"])


# ------------------------------------------------------------------ capacity and validity
def test_invalid_requests_are_refused_and_change_nothing():
    sim = make_sim(config(num_clusters=2, capacities=[[8, 4], [4, 2]]), arrival=[0, 0, 0],
                   eligible=[[1, 0], [1, 1], [0, 1]])
    before = (sim.free.copy(), sim.status.copy(), [list(w) for w in sim.waiting], sim.pending.copy())
    bad = [
        (2, 0, 2, 1),  # cluster out of range
        (-1, 0, 2, 1),
        (1, 0, 2, 1),  # task 0 is not eligible at cluster 1
        (0, 2, 2, 1),  # nor task 2 at cluster 0
        (0, 7, 2, 1),  # no such task
        (0, 0, 1, 1),  # below the minimum
        (0, 0, 2, 0),
        (0, 0, 9, 1),  # above capacity
        (1, 1, 2, 3),  # above cluster 1's GPUs
    ]
    for req in bad:
        assert sim.can_place(*req) != ""
        assert not sim.place(*req), req
    assert sim.invalid == len(bad)
    assert np.array_equal(sim.free, before[0]) and np.array_equal(sim.status, before[1])
    assert sim.waiting == before[2] and np.array_equal(sim.pending, before[3])
    # set_allocations: not running, over capacity, above per-task max, negative: all refused
    assert sim.place(0, 0, 4, 2)
    for cluster, req in [(0, {1: (2, 1)}), (0, {0: (9, 2)}), (1, {0: (2, 1)}), (0, {0: (-1, 1)}),
                         (0, {0: (2, 5)}), (0, {99: (2, 1)})]:
        assert not sim.set_allocations(cluster, req)
    assert sim.alloc[0].tolist() == [4, 2] and sim.free[0].tolist() == [4, 2]
    assert sim.set_allocations(0, {}) is True


def test_capacity_is_enforced_between_placements():
    sim = make_sim(config(), arrival=[0, 0, 0, 0])
    assert sim.place(0, 0, 4, 2)
    assert sim.place(0, 1, 3, 1)
    assert sim.alloc_upper(0).tolist() == [1, 1]
    assert not sim.place(0, 2, 2, 1)  # only 1 CPU left
    assert sim.free[0].tolist() == [1, 1]
    assert sim.set_allocations(0, {0: (2, 1), 1: (5, 2)})  # a swap that fits as a whole
    assert sim.free[0].tolist() == [1, 1]
    assert sim.set_allocations(0, {0: (3, 2), 1: (5, 2)})  # exactly the capacity
    assert sim.free[0].tolist() == [0, 0]
    assert not sim.set_allocations(0, {0: (3, 3), 1: (5, 2)})  # one GPU too many: refused
    assert sim.alloc[0].tolist() == [3, 2] and sim.alloc[1].tolist() == [5, 2]
    for _ in range(4):
        sim.advance()
    assert sim.free[0].tolist() == [8, 4]  # all resources returned at completion


def test_single_mode_refuses_a_second_placement_per_cluster_per_step():
    cfg = config(mode="single", num_clusters=2, capacities=[[8, 4]])
    sim = make_sim(cfg, arrival=[0, 0, 0, 0])
    assert sim.place(0, 0, 2, 1)
    assert not sim.place(0, 1, 2, 1)
    assert "single mode" in sim.last_error
    assert sim.place(1, 1, 2, 1)  # another cluster may still place
    assert not sim.place(1, 2, 2, 1)
    sim.advance()
    assert sim.place(0, 2, 2, 1) and sim.place(1, 3, 2, 1)


def test_multi_mode_accepts_several_placements_per_cluster():
    sim = make_sim(config(), arrival=[0, 0, 0, 0])
    for task in range(4):
        assert sim.place(0, task, 2, 1)
    assert sim.free[0].tolist() == [0, 0] and sim.running_tasks(0).tolist() == [0, 1, 2, 3]


def test_apply_decision_duplicates_and_order():
    cfg = config(num_clusters=2, capacities=[[8, 4]])
    sim = make_sim(cfg, arrival=[0, 0, 0])
    d = Decision(placements=[(0, 0, 2, 1), (1, 0, 2, 1), (1, 1, 2, 1), (0, 2, 99, 1)])
    assert apply_decision(sim, d) == 2
    assert sim.conflicts == 1 and sim.invalid == 1
    assert sim.cluster[:2].tolist() == [0, 1]
    # allocations are applied before placements (freeing room for them)
    sim2 = make_sim(config(), arrival=[0, 0])
    sim2.place(0, 0, 8, 4)
    d = Decision(placements=[(0, 1, 4, 2)], allocations={0: {0: (4, 2)}})
    assert apply_decision(sim2, d) == 1 and sim2.free[0].tolist() == [0, 0]


# ------------------------------------------------------------------ rewards
def test_reward_is_minus_alive_tasks_and_sums_to_minus_total_jct():
    sim = make_sim(config(mode="single", pending_slots=1), arrival=[0, 0, 1, 5])
    rewards = []
    while not sim.done:
        for task in sim.pending_tasks(0):
            sim.place(0, int(task), 2, 1)
        alive = sim.num_alive
        rewards.append(sim.advance())
        assert rewards[-1] == -alive
    # single mode, P=1: starts at 0, 1, 2, 5 -> finish 4, 5, 6, 9
    rec = sim.records()
    assert rec["finish"].tolist() == [4, 5, 6, 9]
    assert rec["jct"].tolist() == [4, 5, 5, 4]
    assert rewards == [-2, -3, -3, -3, -2, -2, -1, -1, -1]
    assert sum(rewards) == -rec["jct"].sum() == -18
    assert sim.tasks_in_system == [-r for r in rewards]


def test_per_cluster_rewards_count_waiting_and_running():
    cfg = config(num_clusters=2, capacities=[[8, 4]])
    sim = make_sim(cfg, arrival=[0, 0, 0], eligible=[[1, 1], [1, 0], [0, 1]])
    sim.place(0, 0, 2, 1)
    sim.advance()
    # cluster 0: running 0, waiting 1; cluster 1: waiting 2 (task 0 left it)
    assert sim.last_cluster_rewards.tolist() == [-2.0, -1.0]


# ------------------------------------------------------------------ run_episode
class ScriptedScheduler:
    """Places at most one fitting pending task per round (minimum allocation); logs rounds."""

    name = "scripted"

    def __init__(self):
        self.calls: list[int] = []

    def reset(self, sim):
        self.calls = []

    def decide(self, sim):
        self.calls.append(sim.t)
        for i in range(sim.num_clusters):
            for task in sim.pending_tasks(i):
                lo = sim.min_req[sim.task_type[task]]
                if sim.can_place(i, int(task), int(lo[0]), int(lo[1])) == "":
                    return Decision(placements=[(i, int(task), int(lo[0]), int(lo[1]))])
        return Decision()


def test_run_episode_multi_advances_only_after_a_round_without_placement():
    cfg = load_scenario("multi-3", ["num_tasks=30"])
    sched = ScriptedScheduler()
    res = run_episode(cfg, sched, seed=1)
    calls = np.bincount(sched.calls, minlength=res.steps)
    starts = np.bincount(res.records["start"], minlength=res.steps)
    # one placing round per started task, then exactly one empty round per real step
    assert np.array_equal(calls[: res.steps], starts[: res.steps] + 1)
    assert calls.size == res.steps and starts.max() >= 2  # several placements in one step happen
    assert not res.truncated and res.jct.size == 30


def test_run_episode_single_one_round_per_step():
    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    sched = ScriptedScheduler()
    res = run_episode(cfg, sched, seed=1)
    assert sched.calls == list(range(res.steps))
    starts = np.bincount(res.records["start"])
    assert starts.max() == 1  # the scripted scheduler places one task per round


def test_step_cap_truncates():
    class Idle:
        name = "idle"

        def reset(self, sim):
            pass

        def decide(self, sim):
            return Decision()

    cfg = load_scenario("synthetic-3", ["num_tasks=10", "max_steps=7"])
    res = run_episode(cfg, Idle(), seed=0)
    assert res.truncated and res.steps == 7
    assert res.jct.size == 0 and np.all(res.records["jct"] == -1)
    assert res.tasks_in_system.size == 7 and np.isnan(res.mean_jct)


def test_episode_result_fields():
    from agents.baselines import make_scheduler

    cfg = load_scenario("hetero-6", ["num_tasks=40"])
    res = run_episode(cfg, make_scheduler("min"), seed=2)
    assert res.scheduler == "min" and res.scenario == "hetero-6" and res.seed == 2
    assert res.usage.shape == (res.steps, 6, 2)
    assert np.all(res.usage <= res.capacity[None]) and np.all(res.usage >= 0)
    assert res.tasks_in_system.sum() == res.jct.sum()
    cpu, gpu = res.utilisation()
    assert 0 < cpu <= 1 and 0 < gpu <= 1
    assert res.records["cpu"].tolist() == [2] * 40 and res.records["gpu"].tolist() == [1] * 40


def test_non_integer_allocation_is_refused_or_kept_consistent():
    sim = make_sim(config(), arrival=[0])
    accepted = sim.place(0, 0, 2.5, 1.5)
    assert np.array_equal(sim.free[0] + sim.alloc[0], sim.capacity[0])
    assert not accepted
