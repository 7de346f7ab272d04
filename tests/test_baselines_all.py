"""Every registered baseline on every shipped scenario (short workloads): the episode invariants.

For each available scheduler x scenario x seed: every task completes exactly once and within
the rules (eligible cluster, start after arrival, initial allocation within [minimum,
per-task max]), no cluster ever uses more than its capacity, the scheduler never makes an
invalid request, and the same seed gives identical results. Test-bed scenarios are skipped
when their fitted progress table is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.baselines import available_schedulers, make_scheduler
from envs.config import ConfigError, available_scenarios, load_scenario
from envs.core import DONE, Simulator
from envs.progress import build_progress_functions
from envs.scheduling import apply_decision, run_episode

NUM_TASKS = 30
SEEDS = (0, 1, 2)
_SETUPS: dict[str, tuple] = {}


def setup_for(scenario: str):
    """(config, progress functions) of the short scenario, built once per test session."""
    if scenario not in _SETUPS:
        cfg = load_scenario(scenario, {"num_tasks": NUM_TASKS})
        try:
            functions = build_progress_functions(cfg)
        except (ConfigError, OSError, ImportError, ValueError) as exc:
            pytest.skip(f"{scenario}: progress functions unavailable ({exc})")
        _SETUPS[scenario] = (cfg, functions)
    return _SETUPS[scenario]


def check_episode(cfg, functions, result, seed: int) -> None:
    rec = result.records
    assert not result.truncated, "episode hit the step cap"
    assert result.invalid == 0, "a baseline made an invalid request"
    # every task arrived, started once, finished once
    assert rec["task_id"].tolist() == list(range(NUM_TASKS))
    assert np.all(rec["finish"] >= 0) and np.all(rec["jct"] >= 1)
    assert np.all(rec["start"] >= rec["arrival"]) and np.all(rec["finish"] > rec["start"])
    assert result.jct.size == NUM_TASKS
    # placed on a reachable cluster, at an allowed initial allocation
    sim = Simulator(cfg, seed, functions)  # same seed -> same workload
    assert np.array_equal(sim.arrival, rec["arrival"]) and np.array_equal(sim.task_type, rec["type"])
    assert np.all(sim.eligible[np.arange(NUM_TASKS), rec["cluster"]])
    mins = sim.min_req[rec["type"]]
    first = np.stack([rec["cpu"], rec["gpu"]], axis=1)
    assert np.all(first >= mins) and np.all(first <= sim.max_alloc)
    assert np.all(rec["avg_cpu"] <= sim.max_alloc[0]) and np.all(rec["avg_gpu"] <= sim.max_alloc[1])
    # capacities never exceeded, nothing negative
    usage = result.usage
    assert usage.shape == (result.steps, cfg.num_clusters, 2)
    assert np.all(usage >= 0) and np.all(usage <= result.capacity[None])
    assert result.tasks_in_system.shape == (result.steps,) and result.tasks_in_system[-1] >= 1


def scenario_params():
    params = []
    for name in available_scenarios():
        params.append(pytest.param(name, False, id=name))
        if load_scenario(name).eval_overrides:
            params.append(pytest.param(name, True, id=f"{name}-eval"))
    return params


@pytest.mark.parametrize("scheduler", available_schedulers())
@pytest.mark.parametrize("scenario, evaluation", scenario_params())
def test_invariants_and_determinism(scheduler, scenario, evaluation):
    cfg, functions = setup_for(scenario)
    if evaluation:
        cfg = cfg.for_evaluation()
    for seed in SEEDS:
        result = run_episode(cfg, make_scheduler(scheduler), seed, functions)
        check_episode(cfg, functions, result, seed)
        if seed == SEEDS[0]:
            again = run_episode(cfg, make_scheduler(scheduler), seed, functions)
            for key, values in result.records.items():
                assert np.array_equal(values, again.records[key]), f"records[{key!r}] differ for the same seed"
            assert np.array_equal(result.usage, again.usage)
            assert result.conflicts == again.conflicts and result.steps == again.steps


def test_every_task_done_exactly_once_in_the_simulator():
    """Drive one scheduler by hand and check the simulator's own counters at the end."""
    cfg, functions = setup_for("synthetic-3")
    for name in ("optimus", "tiresias"):
        sim = Simulator(cfg, 5, functions)
        sched = make_scheduler(name)
        sched.reset(sim)
        while not sim.done and not sim.truncated:
            apply_decision(sim, sched.decide(sim))
            assert np.all(sim.free >= 0) and np.all(sim.free <= sim.capacity)
            running = sim.run_slots[sim.run_slots >= 0]
            assert len(set(running.tolist())) == running.size  # a task runs on one cluster only
            used = np.zeros_like(sim.capacity)
            np.add.at(used, sim.cluster[running], sim.alloc[running])
            assert np.array_equal(used, sim.capacity - sim.free)
            sim.advance()
        assert sim.done and sim.num_finished == NUM_TASKS and np.all(sim.status == DONE)
