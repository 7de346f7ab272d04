"""Progress models: constant, tanh, SJF toy, fastest steps per scenario, the shipped trace table."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from envs import trace_table
from envs.config import load_scenario
from envs.durations import fastest_steps, steps_to_finish
from envs.progress import ConstantProgress, TanhProgress, build_progress_functions
from envs.progress_registry import TRACE_MODES
from envs.trace_models import load_trace_models

TANH_STEPS = [21, 10, 7, 5, 4, 4, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2]


def test_constant_progress_gain_and_steps() -> None:
    fn = ConstantProgress(4)
    cpu, gpu = np.array([2, 16, 3]), np.array([1, 16, 7])
    np.testing.assert_array_equal(fn.delta(cpu, gpu, np.array([0.0, 0.5, 0.9])), [0.25, 0.25, 0.25])
    np.testing.assert_array_equal(steps_to_finish(fn, cpu, gpu), [4, 4, 4])
    # ten gains of 0.1 sum to 0.9999999999999999: still complete after exactly 10 steps
    assert steps_to_finish(ConstantProgress(10), np.array([1]), np.array([1]))[0] == 10


def test_tanh_steps_by_gpu_count() -> None:
    g = np.arange(1, 17)
    np.testing.assert_array_equal(steps_to_finish(TanhProgress(), np.full(16, 2), g), TANH_STEPS)
    # CPU-blind: the same table with 16 CPUs
    np.testing.assert_array_equal(steps_to_finish(TanhProgress(), np.full(16, 16), g), TANH_STEPS)


def test_tanh_gain_is_hand_computed() -> None:
    fn = TanhProgress(16.0, 1.2)
    got = fn.delta(np.array([2, 2, 5]), np.array([16, 8, 8]), np.array([0.2, 1.11, 1.5]))
    expected = [math.tanh(1.0) * 1.0, math.tanh(0.5) * 0.3, 0.0]  # sqrt(1.2 - 0.2), sqrt(0.09), past the offset
    np.testing.assert_allclose(got, expected)


def test_sjf_toy_is_one_versus_ten_steps() -> None:
    cfg = load_scenario("sjf-3")
    fns = build_progress_functions(cfg)
    c, g = np.array([3, 16]), np.array([3, 16])
    assert [t.name for t in cfg.task_types] == ["short", "long"]
    np.testing.assert_array_equal(steps_to_finish(fns[0], c, g), [1, 1])
    np.testing.assert_array_equal(steps_to_finish(fns[1], c, g), [10, 10])
    np.testing.assert_array_equal(fastest_steps(cfg), [[1, 1, 1], [10, 10, 10]])


def test_fastest_steps_synthetic_and_heterogeneous() -> None:
    np.testing.assert_array_equal(fastest_steps(load_scenario("synthetic-3")), [[4, 4, 4], [2, 2, 2]])
    # hetero-6: GPUs reachable per task = min(capacity, 16) = 4, 8, 12, 16, 16, 16
    hetero = load_scenario("hetero-6")
    expected_lm = [TANH_STEPS[g - 1] for g in (4, 8, 12, 16, 16, 16)]
    np.testing.assert_array_equal(fastest_steps(hetero), [[4] * 6, expected_lm])
    # a minimum requirement above the smallest cluster's capacity: the type cannot run there
    big = load_scenario("hetero-6", {"task_types.1.min_req": [6, 6]})
    assert fastest_steps(big)[1].tolist() == [-1] + expected_lm[1:]


def test_shipped_trace_table_gives_finite_positive_gains_on_the_whole_grid() -> None:
    table = json.loads(trace_table.DEFAULT_TABLE.read_text())
    c, g = np.meshgrid(table["cpu"], table["gpu"], indexing="ij")
    assert c.shape == (16, 8)
    for mode in TRACE_MODES:
        models = load_trace_models(None, mode)
        assert set(models) == {"mnist", "lm", "audio"}
        for task, fn in models.items():
            for p in (0.0, 0.3, 0.95, 1.2):
                gain = fn.delta(c.ravel(), g.ravel(), np.full(c.size, p))
                assert gain.shape == (c.size,)
                assert np.all(np.isfinite(gain)) and np.all(gain > 0), (mode, task, p)


def test_fastest_steps_on_the_testbed_scenario() -> None:
    table = json.loads(trace_table.DEFAULT_TABLE.read_text())
    cfg = load_scenario("testbed-3")
    got = fastest_steps(cfg)
    step = table["step_seconds"]
    for k, t in enumerate(cfg.task_types):
        total = np.array(table["tasks"][t.progress["task"]]["total_seconds"])
        # allowed: cpu >= 2 (min requirement) up to the (16, 8) per-task maximum
        fastest = int(np.ceil(total[t.min_req[0] - 1 :, t.min_req[1] - 1 :].min() / step))
        assert got[k].tolist() == [fastest] * cfg.num_clusters, t.name
    legacy = fastest_steps(load_scenario("testbed-3", {"trace.mode": "legacy"}))
    const = fastest_steps(load_scenario("testbed-3", {"trace.mode": "constant_rate"}))
    assert np.all(legacy <= got) and np.all(const > got)


def test_missing_trace_task_is_a_config_error() -> None:
    from envs.config import ConfigError

    cfg = load_scenario("testbed-3", {"task_types.2.progress": {"kind": "trace", "task": "video"}})
    with pytest.raises(ConfigError, match="'video' is not in the fitted table"):
        build_progress_functions(cfg)


@pytest.mark.parametrize(
    "scenario, overrides",
    [
        ("synthetic-3", []),
        ("sjf-3", []),
        ("testbed-3", ["trace.mode=powerlaw"]),
        ("testbed-3", ["trace.mode=legacy"]),
        ("testbed-3", ["trace.mode=constant_rate"]),
    ],
)
def test_progress_table_fast_path_equals_each_function(scenario, overrides):
    """The simulator's one-gather table gives exactly each progress function's own gain."""
    from envs.progress import ProgressTable

    cfg = load_scenario(scenario, overrides)
    fns = build_progress_functions(cfg)
    table = ProgressTable.build(fns, cfg.alloc_dims)
    assert table is not None
    rng = np.random.default_rng(7)
    c1, g1 = cfg.alloc_dims
    n = 4000
    types = rng.integers(0, len(fns), n)
    cpu, gpu = rng.integers(0, c1, n), rng.integers(0, g1, n)
    progress = np.where(rng.random(n) < 0.2, 0.0, rng.random(n))
    got = table.delta(types, cpu, gpu, progress)
    for k, fn in enumerate(fns):
        m = types == k
        np.testing.assert_array_equal(got[m], np.asarray(fn.delta(cpu[m], gpu[m], progress[m]), dtype=float))


def test_progress_table_is_none_without_a_shared_form():
    from envs.progress import ProgressTable

    class Opaque:
        def delta(self, cpu, gpu, progress):
            return np.ones_like(progress)

    assert ProgressTable.build([ConstantProgress(2), Opaque()], (3, 3)) is None
