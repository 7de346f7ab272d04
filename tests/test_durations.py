"""The duration oracle (``envs/durations.py``) against the simulator, its caches, the progress registry."""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import pytest

from agents.baselines import primal_dual
from agents.baselines.primal_dual import catalogue_for
from envs import progress_registry, trace_models
from envs.config import ConfigError, ScenarioConfig, load_scenario
from envs.core import Simulator
from envs.durations import DurationTable, duration_table, forward, steps_to_finish
from envs.progress import ConstantProgress, TanhProgress, build_progress_functions
from envs.progress_registry import Param, ProgressKind
from envs.workload import Workload

SCENARIOS = [
    ("synthetic-3", []),  # constant + tanh, switch overhead 0.5
    ("sjf-3", []),
    ("testbed-3", []),  # trace power law, switch overhead 0.5
    ("testbed-3", ["trace.mode=legacy"]),
    ("testbed-3", ["trace.mode=constant_rate", "switch_overhead=0.3"]),
]


def one_task(cfg, ttype: int) -> Simulator:
    """A simulator whose only task (id 0, type ``ttype``) arrives at step 0 on every cluster."""
    eligible = np.ones((1, cfg.num_clusters), dtype=bool)
    wl = Workload(arrival=np.array([0]), task_type=np.array([ttype]), eligible=eligible)
    with mock.patch("envs.core.generate_workload", lambda cfg, streams: wl):
        return Simulator(cfg, seed=0)


def allocations(cfg, ttype: int) -> list[tuple[int, int]]:
    lo = cfg.task_types[ttype].min_req
    hi = cfg.per_task_max
    mid = ((lo[0] + hi[0]) // 2, (lo[1] + hi[1]) // 2)
    return [tuple(lo), mid, tuple(hi), (hi[0], lo[1]), (lo[0] + 1, hi[1])]


def run_until_done(sim: Simulator, limit: int = 500) -> int:
    while not sim.done and sim.t < limit:
        sim.advance()
    assert sim.done
    return int(sim.finish[0])


@pytest.mark.parametrize("scenario, overrides", SCENARIOS)
def test_durations_from_zero_match_stepping_the_simulator(scenario, overrides):
    cfg = load_scenario(scenario, overrides)
    table = duration_table(cfg, build_progress_functions(cfg))
    for k in range(cfg.num_types):
        for c, g in allocations(cfg, k):
            sim = one_task(cfg, k)
            assert sim.place(0, 0, c, g), sim.last_error
            jct = run_until_done(sim)
            assert table.steps[k, table.index(c, g)] == jct, (scenario, k, c, g)
            assert table.disc[k, table.index(c, g)] == jct
            assert steps_to_finish(sim.functions[k], np.array([c]), np.array([g]))[0] == jct
            assert table.remaining_steps([k], [c], [g], [0.0], 10_000)[0] == jct
            assert jct - 1 < table.cont[k, table.index(c, g)] <= jct


@pytest.mark.parametrize("scenario, overrides", SCENARIOS)
def test_remaining_steps_after_a_switch_match_the_simulator(scenario, overrides):
    """Resized (or resumed) after ``m`` steps: the first step pays the switching overhead."""
    cfg = load_scenario(scenario, overrides)
    table = duration_table(cfg, build_progress_functions(cfg))
    overhead_mattered = False
    for k in range(cfg.num_types):
        lo = cfg.task_types[k].min_req
        hi = cfg.per_task_max
        for first, second, pause in [(lo, hi, 0), (hi, lo, 0), (lo, hi, 2), (lo, lo, 1)]:
            sim = one_task(cfg, k)
            assert sim.place(0, 0, *first)
            sim.advance()
            if sim.done:
                continue
            for _ in range(pause):  # paused at (0, 0): no progress, and resuming is a switch
                assert sim.set_allocations(0, {0: (0, 0)})
                sim.advance()
            p, t = float(sim.progress[0]), sim.t
            assert sim.set_allocations(0, {0: tuple(second)})
            switched = tuple(second) != tuple(first) or pause > 0
            factor = cfg.switch_overhead if switched else 1.0
            want = table.remaining_steps([k], [second[0]], [second[1]], [p], 10_000, first_factor=factor)[0]
            got = run_until_done(sim) - t
            assert got == want, (scenario, k, first, second, pause)
            plain = table.remaining_steps([k], [second[0]], [second[1]], [p], 10_000)[0]
            overhead_mattered |= switched and plain != want
    if cfg.switch_overhead < 1 and scenario != "sjf-3":
        assert overhead_mattered  # the cases above do exercise the overhead


def test_below_the_minimum_a_task_never_finishes():
    cfg = load_scenario("synthetic-3")
    table = duration_table(cfg, build_progress_functions(cfg))
    lm = 1
    assert table.steps[lm, table.index(1, 16)] == -1 and table.disc[lm, table.index(1, 16)] >= 1e12
    assert table.remaining_steps([lm, lm], [1, 2], [16, 0], [0.5, 0.5], 77).tolist() == [77, 77]
    # a complete task still counts one step; a zero gain is never done
    assert table.remaining_steps([0], [2], [1], [1.0], 77).tolist() == [1]
    fin = forward(TanhProgress(), np.array([2, 2]), np.array([0, 3]), limit=50)
    assert fin.steps.tolist() == [-1, 7]


def test_forward_time_and_trajectory():
    fin = forward(ConstantProgress(4), np.array([2]), np.array([1]), record=True)
    assert fin.steps.tolist() == [4] and fin.time.tolist() == [4.0]
    np.testing.assert_allclose(fin.trajectory[0], [0.0, 0.25, 0.5, 0.75, 1.0])
    # the first step at half speed: 0.125, then 0.25 per step -> done after 5 steps (4.5 fractional)
    half = forward(ConstantProgress(4), np.array([2]), np.array([1]), first_factor=0.5)
    assert half.steps.tolist() == [5] and half.time[0] == pytest.approx(4.5)
    assert steps_to_finish(ConstantProgress(4), 2, 1, progress=0.5).tolist() == 2


def test_duration_table_is_cached_by_value():
    cfg = load_scenario("synthetic-3")
    a = duration_table(cfg, build_progress_functions(cfg))
    b = duration_table(cfg, build_progress_functions(cfg))  # new but equal function objects
    assert a is b
    other = load_scenario("synthetic-3", {"task_types.1.progress.scale": 8})
    assert duration_table(other, build_progress_functions(other)) is not a
    assert Simulator(cfg, 0).fastest.tolist() == a.fastest(cfg.capacities).tolist()

    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def delta(self, cpu, gpu, progress):
            return np.full(np.shape(progress), 0.5)

    fresh = duration_table(cfg, [Unhashable(), Unhashable()])
    assert isinstance(fresh, DurationTable) and fresh.steps[0, fresh.index(2, 1)] == 2


def test_catalogue_cache_is_shared_across_episodes_and_bounded():
    cfg = load_scenario("hetero-6")
    c1 = catalogue_for(Simulator(cfg, 0))
    assert catalogue_for(Simulator(cfg, 1)) is c1
    assert catalogue_for(Simulator(load_scenario("hetero-6", {"capacities": [[8, 8]]}), 0)) is not c1
    assert primal_dual._catalogue.cache_info().maxsize == 16


def test_trace_model_cache_is_bounded(tmp_path, monkeypatch):
    table = trace_models.load_table(None)
    cache = trace_models._ModelCache(maxsize=2)
    monkeypatch.setattr(trace_models, "_MODELS", cache)
    paths = []
    for i in range(3):
        p = tmp_path / f"t{i}.json"
        p.write_text(json.dumps(table))
        paths.append(p)
    first = trace_models.load_trace_models(paths[0], "powerlaw")
    assert trace_models.load_trace_models(paths[0], "powerlaw")["lm"] is first["lm"]
    trace_models.load_trace_models(paths[1], "powerlaw")
    trace_models.load_trace_models(paths[2], "powerlaw")
    assert len(cache._entries) == 2
    assert trace_models.load_trace_models(paths[0], "powerlaw")["lm"] is not first["lm"]  # evicted, reloaded
    assert trace_models.load_trace_models(paths[0], "powerlaw")["lm"] == first["lm"]  # same values


class DoubleSpeed:
    """A progress form registered by a test: constant ``rate`` per step, twice as fast with 2+ GPUs."""

    def __init__(self, rate: float) -> None:
        self.rate = rate

    @classmethod
    def from_task(cls, task, cfg) -> DoubleSpeed:
        return cls(task.progress["rate"])

    def delta(self, cpu, gpu, progress):
        return np.where(np.asarray(gpu) >= 2, 2 * self.rate, self.rate) + 0 * np.asarray(progress)


def test_a_new_progress_kind_is_one_registration(monkeypatch):
    kind = ProgressKind(f"{__name__}:DoubleSpeed.from_task", {"rate": Param("float", lo=1e-9)}, needs_gpu=True)
    monkeypatch.setitem(progress_registry.PROGRESS_KINDS, "double", kind)
    raw = {
        "name": "custom", "mode": "multi", "num_clusters": 1, "capacities": [[4, 4]], "per_task_max": [4, 4],
        "arrival_rate": 1.0, "num_tasks": 3,
        "task_types": [{"name": "d", "prob": 1.0, "min_req": [1, 1], "progress": {"kind": "double", "rate": 0.25}}],
    }
    cfg = ScenarioConfig.from_dict(raw)
    (fn,) = build_progress_functions(cfg)
    assert isinstance(fn, DoubleSpeed) and fn.rate == 0.25
    table = duration_table(cfg, [fn])
    assert table.steps[0, table.index(1, 1)] == 4 and table.steps[0, table.index(1, 2)] == 2
    bad = dict(raw, task_types=[dict(raw["task_types"][0], progress={"kind": "double", "rate": 0})])
    with pytest.raises(ConfigError, match=r"task_types\[0\].progress.rate"):
        ScenarioConfig.from_dict(bad)
    no_gpu = dict(raw, task_types=[dict(raw["task_types"][0], min_req=[1, 0])])
    with pytest.raises(ConfigError, match="double progress gains nothing without a GPU"):
        ScenarioConfig.from_dict(no_gpu)


def test_tanh_defaults_are_stated_once():
    cfg = ScenarioConfig.from_dict({
        "name": "t", "mode": "multi", "num_clusters": 1, "capacities": [[4, 4]], "per_task_max": [4, 4],
        "arrival_rate": 1.0, "num_tasks": 1,
        "task_types": [{"name": "lm", "prob": 1.0, "min_req": [1, 1], "progress": {"kind": "tanh"}}],
    })
    spec = cfg.task_types[0].progress
    assert (spec["scale"], spec["offset"]) == (progress_registry.TANH_SCALE, progress_registry.TANH_OFFSET)
    assert build_progress_functions(cfg)[0] == TanhProgress()
