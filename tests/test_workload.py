"""Workload generation: seeded streams, arrivals, types and connectivity (eligibility)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.config import load_scenario
from envs.core import Simulator
from envs.workload import STREAMS, generate_workload, hostable, rng_streams


def workload(name: str, seed: int = 0, overrides=()):
    cfg = load_scenario(name, list(overrides))
    return cfg, generate_workload(cfg, rng_streams(seed))


def same(a, b) -> bool:
    return (
        np.array_equal(a.arrival, b.arrival)
        and np.array_equal(a.task_type, b.task_type)
        and np.array_equal(a.eligible, b.eligible)
    )


# ------------------------------------------------------------------ streams
def test_streams_are_named_seeded_and_independent():
    a, b, c = rng_streams(7), rng_streams(7), rng_streams(8)
    assert set(a) == set(STREAMS) == {"arrivals", "connectivity", "noise", "tiebreak"}
    draws_a = {k: a[k].random(5) for k in STREAMS}
    draws_b = {k: b[k].random(5) for k in STREAMS}
    draws_c = {k: c[k].random(5) for k in STREAMS}
    for k in STREAMS:
        assert np.array_equal(draws_a[k], draws_b[k])
        assert not np.array_equal(draws_a[k], draws_c[k])
    values = [tuple(v) for v in draws_a.values()]
    assert len(set(values)) == len(STREAMS)


# ------------------------------------------------------------------ arrivals and types
@pytest.mark.parametrize("name", ["synthetic-3", "synthetic-6", "multi-3", "hetero-6", "sjf-3"])
def test_workload_shape_and_order(name):
    cfg, wl = workload(name, seed=3)
    T, N = cfg.num_tasks, cfg.num_clusters
    assert wl.num_tasks == T
    assert wl.arrival.shape == (T,) and wl.task_type.shape == (T,) and wl.eligible.shape == (T, N)
    assert wl.arrival.dtype == np.int64 and wl.eligible.dtype == bool
    assert wl.arrival.min() >= 0 and np.all(np.diff(wl.arrival) >= 0)
    assert set(np.unique(wl.task_type)) <= set(range(cfg.num_types))
    assert wl.eligible.any(axis=1).all()
    assert not (wl.eligible & ~hostable(cfg)[wl.task_type]).any()


def test_same_seed_same_workload_and_different_seed_differs():
    _, a = workload("synthetic-3", seed=11)
    _, b = workload("synthetic-3", seed=11)
    _, c = workload("synthetic-3", seed=12)
    assert same(a, b)
    assert not np.array_equal(a.arrival, c.arrival)
    assert not np.array_equal(a.task_type, c.task_type)
    assert not np.array_equal(a.eligible, c.eligible)


def test_arrival_rate_is_poisson_lambda():
    # 20000 tasks at lambda 2.5: about 8000 steps; the mean count per step is lambda
    cfg, wl = workload("synthetic-3", seed=1, overrides=["num_tasks=20000", "arrival_rate=2.5"])
    counts = np.bincount(wl.arrival)[:-1]  # the last step may be cut by num_tasks
    assert counts.mean() == pytest.approx(2.5, abs=0.08)
    assert counts.var() == pytest.approx(2.5, rel=0.1)  # Poisson: variance = mean
    # low rates leave empty steps
    _, slow = workload("synthetic-3", seed=1, overrides=["num_tasks=2000", "arrival_rate=0.25"])
    per_step = np.bincount(slow.arrival, minlength=slow.arrival.max() + 1)
    assert per_step.size / 2000 == pytest.approx(4.0, rel=0.15)
    assert (per_step == 0).mean() == pytest.approx(np.exp(-0.25), abs=0.05)


def test_type_frequencies_follow_probabilities():
    cfg, wl = workload(
        "synthetic-3", seed=2, overrides=["num_tasks=20000", "task_types.0.prob=0.2", "task_types.1.prob=0.8"]
    )
    assert (wl.task_type == 0).mean() == pytest.approx(0.2, abs=0.015)
    _, wl0 = workload("synthetic-3", seed=2, overrides=["num_tasks=2000", "task_types.0.prob=0", "task_types.1.prob=1"])
    assert np.all(wl0.task_type == 1)


def test_workload_depends_only_on_workload_fields():
    """Mode, pending slots, switching overhead, noise, reward, step cap: same tasks."""
    _, base = workload("synthetic-3", seed=5)
    for ov in (
        ["mode=multi"],
        ["pending_slots=3"],
        ["switch_overhead=1.0"],
        ["progress_noise=0.5"],
        ["reward=per_cluster"],
        ["max_steps=10"],
        ["task_types.1.progress.scale=4"],
    ):
        assert same(base, workload("synthetic-3", seed=5, overrides=ov)[1]), ov


def test_noise_does_not_change_the_simulators_workload():
    a = Simulator(load_scenario("synthetic-6"), seed=9)
    b = Simulator(load_scenario("synthetic-6", ["progress_noise=0.4"]), seed=9)
    assert same(a.workload, b.workload)


# ------------------------------------------------------------------ hostability
def test_hostable_heterogeneous():
    cfg = load_scenario("hetero-6", ["task_types.0.min_req=[5,5]", "task_types.1.min_req=[13,2]"])
    h = hostable(cfg)
    assert h[0].tolist() == [False, True, True, True, True, True]
    assert h[1].tolist() == [False, False, False, True, True, True]
    # per-task max limits hosting even on a big cluster
    cfg = load_scenario("hetero-6", ["per_task_max=[12,12]", "task_types.1.min_req=[13,2]", "task_types.1.prob=0",
                                     "task_types.0.prob=1"])
    assert not hostable(cfg)[1].any()


@pytest.mark.parametrize("model", ["bandwidth", "random_subset"])
def test_only_hostable_clusters_are_eligible(model):
    cfg, wl = workload(
        "hetero-6", seed=4,
        overrides=[f"connectivity.model={model}", "task_types.1.min_req=[10,10]", "num_tasks=3000"],
    )
    lm = wl.task_type == 1
    assert not wl.eligible[lm][:, :2].any()  # (4,4) and (8,8) cannot host (10,10)
    assert wl.eligible[lm][:, 2:].any(axis=1).all()
    assert wl.eligible.any(axis=1).all()


# ------------------------------------------------------------------ connectivity
def test_bandwidth_threshold_is_respected():
    cfg, wl = workload("synthetic-3", seed=6, overrides=["num_tasks=5000"])
    lo, hi = cfg.connectivity.bandwidth_range
    thr = cfg.connectivity.threshold
    assert (lo, hi, thr) == (1.0, 13.0, 5.0)
    # reproduce the draws of the connectivity stream: usable = bandwidth >= threshold,
    # a task with no usable link keeps its best one
    bw = rng_streams(6)["connectivity"].uniform(lo, hi, size=(5000, 3))
    expected = bw >= thr
    none = ~expected.any(axis=1)
    expected[none, bw[none].argmax(axis=1)] = True
    assert np.array_equal(wl.eligible, expected)
    # statistically: a link is usable with probability (hi - thr) / (hi - lo) = 2/3
    frac = (bw >= thr).mean()
    assert frac == pytest.approx(2 / 3, abs=0.02)
    assert wl.eligible.sum(axis=1).mean() == pytest.approx(3 * 2 / 3 + (1 / 3) ** 3, abs=0.05)


def test_bandwidth_extreme_thresholds():
    # threshold below the range: every hostable cluster is usable
    _, wl = workload("hetero-6", seed=1, overrides=["connectivity.threshold=0.5", "task_types.1.min_req=[10,2]"])
    assert np.array_equal(wl.eligible, hostable(load_scenario("hetero-6", ["task_types.1.min_req=[10,2]"]))[wl.task_type])
    # threshold above the range: exactly one cluster (the best hostable link) per task
    _, wl = workload("hetero-6", seed=1, overrides=["connectivity.threshold=100", "task_types.1.min_req=[10,2]"])
    assert np.all(wl.eligible.sum(axis=1) == 1)
    assert not wl.eligible[wl.task_type == 1][:, :2].any()
    # with a single reachable cluster the choice still spreads over clusters
    assert (wl.eligible.sum(axis=0) > 0).sum() >= 4


def test_random_subset_sizes_are_uniform():
    cfg, wl = workload("synthetic-6", seed=8, overrides=["connectivity.model=random_subset", "num_tasks=6000"])
    sizes = wl.eligible.sum(axis=1)
    assert sizes.min() >= 1 and sizes.max() <= 6
    freq = np.bincount(sizes, minlength=7)[1:] / sizes.size
    assert np.allclose(freq, 1 / 6, atol=0.025)
    # every cluster is equally likely to be in a subset of a given size
    single = wl.eligible[sizes == 1]
    assert np.allclose(single.mean(axis=0), 1 / 6, atol=0.04)
    assert wl.eligible.mean(axis=0) == pytest.approx(np.full(6, 3.5 / 6), abs=0.03)


def test_random_subset_respects_hostability_sizes():
    # lm fits only clusters 3..5 of hetero-6: its subset size is uniform over 1..3
    cfg, wl = workload(
        "hetero-6", seed=3,
        overrides=["connectivity.model=random_subset", "task_types.1.min_req=[13,13]", "num_tasks=6000"],
    )
    lm = wl.eligible[wl.task_type == 1]
    sizes = lm.sum(axis=1)
    assert not lm[:, :3].any()
    assert np.allclose(np.bincount(sizes, minlength=4)[1:] / sizes.size, 1 / 3, atol=0.03)
