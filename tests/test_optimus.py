"""Optimus baseline: NNLS speed-model fit and hand-computed greedy allocations."""

from __future__ import annotations

import numpy as np
import pytest

from agents.baselines import make_scheduler
from agents.baselines.optimus import OptimusScheduler
from agents.baselines.speed_model import SpeedObservations, fit_speed_model, inverse_speed
from envs.config import ConfigError, ScenarioConfig
from envs.core import Simulator
from envs.scheduling import apply_decision, run_episode

THETA = np.array([2.0, 0.5, 0.3, 0.05, 0.02])
F_EQUALS_G = np.array([1.0, 0.0, 0.0, 0.0, 0.0])  # 1/f = 1/g: speed = GPUs, CPU-blind


def grid(hi_c: int = 8, hi_g: int = 8) -> tuple[np.ndarray, np.ndarray]:
    c, g = np.meshgrid(np.arange(1, hi_c + 1), np.arange(1, hi_g + 1), indexing="ij")
    return c.ravel(), g.ravel()


def scenario(capacities, mode="multi", num_tasks=2, types=None, switch=1.0, per_task_max=None) -> ScenarioConfig:
    """1-2 clusters that every task reaches, all tasks arriving at t = 0."""
    types = types or [{"name": "a", "prob": 1.0, "min_req": [1, 1], "progress": {"kind": "constant", "steps": 10}}]
    return ScenarioConfig.from_dict({
        "name": "tiny", "mode": mode, "num_clusters": len(capacities), "capacities": capacities,
        "per_task_max": per_task_max or [max(c[0] for c in capacities), max(c[1] for c in capacities)],
        "arrival_rate": 200, "num_tasks": num_tasks, "switch_overhead": switch, "task_types": types,
        "connectivity": {"model": "bandwidth", "bandwidth_range": [10, 20], "threshold": 5},
    })


def fresh_sim(cfg: ScenarioConfig, seed: int = 0) -> Simulator:
    sim = Simulator(cfg, seed)
    assert np.all(sim.arrival == 0) and sim.eligible.all()  # the crafted state relies on it
    return sim


class OptimusModelProgress:
    """A progress function that *is* the Optimus speed model (p-independent)."""

    def __init__(self, theta: np.ndarray) -> None:
        self.theta = theta

    def delta(self, cpu, gpu, progress):
        c, g = np.maximum(cpu, 1), np.maximum(gpu, 1)
        return 1.0 / inverse_speed(self.theta, c, g)


# ------------------------------------------------------------------ the fit
def test_fit_recovers_parameters_exactly_without_noise():
    c, g = grid()
    speed = 1.0 / inverse_speed(THETA, c, g)
    np.testing.assert_allclose(fit_speed_model(c, g, speed), THETA, rtol=1e-6, atol=1e-9)


def test_fit_recovers_parameters_from_noisy_samples():
    c, g = grid()
    rng = np.random.default_rng(7)
    c, g = np.tile(c, 4), np.tile(g, 4)  # 4 noisy repetitions of each allocation
    speed = 1.0 / inverse_speed(THETA, c, g) * (1 + 0.02 * rng.standard_normal(c.size))
    theta = fit_speed_model(c, g, speed)
    assert np.all(theta >= 0)
    np.testing.assert_allclose(theta, THETA, rtol=0.25)
    cc, gg = grid()
    np.testing.assert_allclose(inverse_speed(theta, cc, gg), inverse_speed(THETA, cc, gg), rtol=0.02)


def test_fit_rejects_bad_samples():
    with pytest.raises(ValueError):
        fit_speed_model([1, 2], [1, 2], [0.5, 0.0])
    with pytest.raises(ValueError):
        fit_speed_model([0], [1], [0.5])
    with pytest.raises(ValueError):
        fit_speed_model([], [], [])


def test_observations_average_repeated_allocations():
    obs = SpeedObservations(num_types=1, max_cpu=8, max_gpu=8)
    c, g = grid(4, 4)
    speed = 1.0 / inverse_speed(THETA, c, g)
    # every allocation seen twice, with gains 10% above and below the model: means are exact
    obs.add(np.zeros(2 * c.size, dtype=int), np.tile(c, 2), np.tile(g, 2), np.concatenate([speed * 1.1, speed * 0.9]))
    assert obs.num_points(0) == c.size
    assert obs.count[0, 2, 3] == 2
    np.testing.assert_allclose(obs.fit(0), THETA, rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------------ hand-computed decisions
def test_gain_is_not_divided_by_the_current_allocation():
    """Capacity (2 CPU, 4 GPU), f = g. Task 1 ran 7 steps (progress 0.7, remaining 0.3), task 0
    is new (remaining 1). Both start at (1, 1), leaving 2 GPUs. Gains of one more GPU:
    task 0: 1 x (1/1 - 1/2) = 0.5, task 1: 0.3 x 0.5 = 0.15 -> task 0 (g = 2). Then task 0:
    1 x (1/2 - 1/3) = 0.167 > 0.15 -> task 0 again (g = 3). (Dividing by the current allocation,
    as the reference code does, would give 0.083 < 0.15 and hand the second GPU to task 1.)"""
    sim = fresh_sim(scenario([[2, 4]]))
    assert sim.place(0, 1, 1, 1)
    for _ in range(7):
        sim.advance()
    assert sim.progress[1] == pytest.approx(0.7)
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    opt.set_model(0, F_EQUALS_G)
    decision = opt.decide(sim)
    assert decision.placements == [(0, 0, 1, 3)]
    assert decision.allocations == {}  # task 1 keeps (1, 1)


def test_cpu_and_gpu_units_follow_the_largest_gain():
    """Capacity (4, 3), model 1/f = 1/g + g/c (more GPUs need more CPUs). Tasks 0 (new,
    remaining 1) and 1 (remaining 0.5, running at (3, 2)) restart from (1, 1): 1/f(1, 1) = 2,
    free (2, 1). A GPU never helps at c = 1 or 2 (1/f(1, 2) = 2.5, 1/f(2, 2) = 1.5 = 1/f(2, 1)).
    CPU gains: task 0 1 x (2 - 1.5) = 0.5 -> (2, 1); then task 0 1.5 - 1.333 = 0.167 vs task 1
    0.5 x 0.5 = 0.25 -> task 1 (2, 1). No CPU left, the GPU is worth nothing: stop."""
    sim = fresh_sim(scenario([[4, 3]]))
    assert sim.place(0, 1, 3, 2)
    for _ in range(5):
        sim.advance()
    assert sim.progress[1] == pytest.approx(0.5)
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    opt.set_model(0, np.array([1.0, 0.0, 1.0, 0.0, 0.0]))
    decision = opt.decide(sim)
    assert decision.placements == [(0, 0, 2, 1)]
    assert decision.allocations == {0: {1: (2, 1)}}
    apply_decision(sim, decision)
    assert sim.alloc[0].tolist() == [2, 1] and sim.alloc[1].tolist() == [2, 1]
    assert sim.free[0].tolist() == [0, 1] and sim.invalid == 0


def test_ties_go_to_the_earliest_arrived_task():
    """Two new identical tasks, capacity (2, 3), f = g: both start at (1, 1); the one spare GPU
    has gain 0.5 for either, and goes to the earlier task (id 0)."""
    sim = fresh_sim(scenario([[2, 3]]))
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    opt.set_model(0, F_EQUALS_G)
    assert opt.decide(sim).placements == [(0, 0, 1, 2), (0, 1, 1, 1)]


def test_admission_earliest_first_on_the_least_loaded_cluster_single_mode():
    """Single mode, clusters (4, 4) and (8, 8), three new resource-insensitive tasks reaching
    both. Task 0 goes where the larger dominant share stays free: (8-1)/8 > (4-1)/4 -> cluster 1.
    Cluster 1 has placed this step, so task 1 goes to cluster 0; task 2 must wait. A flat model
    (the oracle fit of a constant progress function) gives no gain to extra units: minima only."""
    cfg = scenario([[4, 4], [8, 8]], mode="single", num_tasks=3)
    sim = fresh_sim(cfg)
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    np.testing.assert_allclose(opt.theta[0], [0, 10, 0, 0, 0], atol=1e-9)
    decision = opt.decide(sim)
    assert sorted(decision.placements) == [(0, 1, 1, 1), (1, 0, 1, 1)]
    assert apply_decision(sim, decision) == 2
    assert opt.decide(sim).placements == []  # both clusters placed this real step


def test_admission_uses_each_type_own_minimum():
    """Cluster (4, 4); a big task (min (3, 3)) runs. The pending big task (earlier) no longer
    fits its own minimum next to it; the small one (min (1, 1)) does and is started."""
    types = [
        {"name": "big", "prob": 0.5, "min_req": [3, 3], "progress": {"kind": "constant", "steps": 10}},
        {"name": "small", "prob": 0.5, "min_req": [1, 1], "progress": {"kind": "constant", "steps": 10}},
    ]
    cfg = scenario([[4, 4]], num_tasks=12, types=types)
    sim = fresh_sim(cfg, seed=3)
    big = np.flatnonzero(sim.task_type == 0)
    small = np.flatnonzero(sim.task_type == 1)
    first_big, next_big = big[0], big[1]
    later_small = small[small > next_big]
    assert later_small.size, "seed must give a small task after the second big one"
    assert sim.place(0, int(first_big), 3, 3)
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    placed = [p[1] for p in opt.decide(sim).placements]
    assert int(next_big) not in placed
    assert placed == [int(small.min())]  # the earliest small task; one (1, 1) fits beside (3, 3)


def test_non_preemptive_leaves_running_tasks_alone():
    """Running task at (1, 1) in a (2, 4) cluster, f = g: the preemptive variant would move
    GPUs; the non-preemptive one gives the new task every spare GPU (1 + 2 free) and keeps the
    running task as it is."""
    sim = fresh_sim(scenario([[2, 4]]))
    assert sim.place(0, 1, 1, 1)
    sim.advance()
    opt = OptimusScheduler(oracle=True, preemptive=False)
    opt.reset(sim)
    opt.set_model(0, F_EQUALS_G)
    decision = opt.decide(sim)
    assert decision.allocations == {}
    assert decision.placements == [(0, 0, 1, 3)]


def test_observed_gains_skip_switching_steps_and_learn_the_model():
    """Progress = the Optimus model itself, switching overhead 0.5, preemptive re-sizing: the
    recorded gains are exactly the model's speeds (penalised steps are never recorded), and
    the fit from observations alone gets close to the true speeds where it has seen data."""
    cfg = scenario([[8, 8]], num_tasks=40, switch=0.5)
    cfg = ScenarioConfig.from_dict({**cfg.to_dict(), "arrival_rate": 1.0})
    fn = OptimusModelProgress(THETA)
    opt = OptimusScheduler()
    result = run_episode(cfg, opt, seed=0, functions=[fn])
    assert result.invalid == 0 and result.jct.size == 40
    seen = opt.obs.count[0] > 0
    assert seen.sum() >= 3
    c, g = np.nonzero(seen)
    means = opt.obs.sum[0][seen] / opt.obs.count[0][seen]
    np.testing.assert_allclose(means, 1.0 / inverse_speed(THETA, c, g), rtol=1e-9)
    fitted = 1.0 / opt.inv[0][c, g]
    np.testing.assert_allclose(fitted, means, rtol=0.15)
    # some steps were penalised (allocations changed), so skipping them mattered
    assert (result.records["avg_gpu"] != result.records["gpu"]).any()


def test_oracle_fit_samples_the_true_function():
    cfg = scenario([[8, 8]])
    sim = Simulator(cfg, 0, [OptimusModelProgress(THETA)])
    opt = OptimusScheduler(oracle=True)
    opt.reset(sim)
    np.testing.assert_allclose(opt.theta[0], THETA, rtol=1e-6, atol=1e-9)


def test_cold_start_prior_spreads_spare_units():
    """No observation yet: the prior (diminishing returns in both resources) hands spare CPUs
    and GPUs out, so new tasks do not all sit at their minimum."""
    sim = fresh_sim(scenario([[6, 6]], num_tasks=2))
    opt = make_scheduler("optimus")
    opt.reset(sim)
    placements = opt.decide(sim).placements
    assert [p[1] for p in placements] == [0, 1]
    assert sum(p[2] for p in placements) == 6 and sum(p[3] for p in placements) == 6


def test_bad_options_raise_config_error():
    with pytest.raises(ConfigError):
        make_scheduler("optimus", prior_weight=-1)
    with pytest.raises(ConfigError):
        make_scheduler("optimus", min_gain="x")
    with pytest.raises(ConfigError):
        make_scheduler("optimus", nonsense=1)
