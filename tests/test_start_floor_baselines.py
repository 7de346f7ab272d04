"""Baselines behind the start floor (``name:floor=scenario|online``): what they are offered,
that they never start a held-back task, and that a floor of 0 changes nothing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agents.baselines import make_scheduler, uses_oracle
from agents.baselines.start_floor import StartFloorScheduler
from agents.evaluation.runner import resolve_schedulers, run_evaluation
from envs.config import ConfigError, ScenarioConfig, load_scenario
from envs.core import Simulator
from envs.durations import duration_table
from envs.scheduling import Decision, run_episode

SEEDS = (500000, 500001)


def floored_config(factor: float = 3.0, name: str = "synthetic-3"):
    return ScenarioConfig.from_dict({**load_scenario(name).to_dict(), "max_start_slowdown": factor, "num_tasks": 60})


class Spy:
    """Wraps a real baseline; records what it was shown and what it decided."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.rounds = inner, inner.name, []

    def reset(self, sim: Simulator) -> None:
        self.inner.reset(sim)

    def decide(self, sim: Simulator) -> Decision:
        shown = sim.pending.copy()
        decision = self.inner.decide(sim)
        self.rounds.append((sim.t, shown, np.minimum(sim.free, sim.max_alloc).copy(), decision))
        return decision


class Checked(StartFloorScheduler):
    """Records the true pending set beside what the wrapped scheduler saw."""

    def decide(self, sim: Simulator) -> Decision:
        before = sim.pending.copy()
        decision = super().decide(sim)
        assert np.array_equal(sim.pending, before), "the pending slots were not restored"
        self.inner.rounds[-1] = (*self.inner.rounds[-1], before)
        return decision


def _starts_hidden(decision: Decision, truth: np.ndarray, hidden: np.ndarray) -> list[tuple[int, int]]:
    """The placements of a task on a cluster whose pending slot for it was hidden (a task may
    be pending at several clusters and held back at only some of them)."""
    return [(i, task) for i, task, _, _ in decision.placements if task in truth[i][hidden[i]].tolist()]


@pytest.mark.parametrize("preemptive", [True, False])
def test_scenario_floor_hides_exactly_the_slow_starts(preemptive):
    """Every hidden task would take more than the factor x its fastest at the free resources
    (read independently from the duration table), every shown one not; no hidden task starts."""
    cfg = floored_config()
    sim_for_table = Simulator(cfg, SEEDS[0])
    table = duration_table(cfg, sim_for_table.functions)
    steps, best = table.grid_steps(), table.fastest(cfg.capacities)  # (K, C1, G1), (K, N)
    mins = np.array([t.min_req for t in cfg.task_types])
    spy = Spy(make_scheduler("optimus", preemptive=preemptive))
    sched = Checked(spy, "scenario")
    run_episode(cfg, sched, SEEDS[0])
    hidden_total = 0
    for _, shown, high, decision, truth in spy.rounds:
        hidden = (truth >= 0) & (shown < 0)
        hidden_total += int(hidden.sum())
        for i, slot in zip(*np.nonzero(truth >= 0)):
            k = int(sim_for_table.task_type[truth[i, slot]])
            c, g = high[i]
            fits = c >= mins[k, 0] and g >= mins[k, 1]
            slow = fits and not (0 <= steps[k, c, g] <= 3.0 * best[k, i]) and 0 <= best[k, i] < table.limit
            assert bool(hidden[i, slot]) is bool(slow), (i, slot, k, c, g)
        assert not _starts_hidden(decision, truth, hidden)
    assert hidden_total > 0 and sched.held == hidden_total  # the floor acted on this workload


def test_online_floor_never_reads_the_oracle_and_never_starts_a_hidden_task():
    cfg = floored_config()
    spy = Spy(make_scheduler("optimus", preemptive=False))
    sched = Checked(spy, "online")
    result = run_episode(cfg, sched, SEEDS[1])
    assert np.isfinite(result.mean_jct) and sched.held > 0
    for _, shown, _, decision, truth in spy.rounds:
        assert not _starts_hidden(decision, truth, (truth >= 0) & (shown < 0))
    assert not uses_oracle("optimus", {"floor": "online"})
    assert uses_oracle("optimus", {"floor": "scenario"}) and uses_oracle("min", {"floor": "scenario"})


@pytest.mark.parametrize("spec", ["optimus:floor=online", "optimus:floor=scenario", "optimus:floor=online,floor_factor=0"])
def test_a_floor_of_zero_changes_nothing(spec):
    cfg = floored_config(0.0) if "factor" not in spec else floored_config(3.0)
    plain, floored = (run_evaluation(cfg, resolve_schedulers(s, (), cfg), list(SEEDS), workers=1, progress=False)
                      for s in ("optimus", spec))
    for a, b in zip(plain.results["optimus"], floored.results[spec]):
        assert a.mean_jct == b.mean_jct


def test_the_floor_changes_the_schedule_and_is_reported_as_its_own_scheduler():
    cfg = floored_config()
    run = run_evaluation(cfg, resolve_schedulers("optimus,optimus:floor=scenario,optimus:floor=online", (), cfg),
                         list(SEEDS), workers=1, progress=False)
    assert {s.name: s.is_oracle for s in run.specs} == {
        "optimus": False, "optimus:floor=scenario": True, "optimus:floor=online": False}
    jct = {name: [r.mean_jct for r in results] for name, results in run.results.items()}
    assert jct["optimus:floor=scenario"] != jct["optimus"]
    assert run.preemptive["optimus:floor=scenario"] is True


@pytest.mark.parametrize(("options", "message"), [
    ({"floor": "always"}, "start floor must be one of"),
    ({"floor": "online", "floor_factor": -1}, "floor_factor must be a number >= 0"),
    ({"floor": "online", "floor_factor": "3"}, "floor_factor must be a number >= 0"),
    ({"floor_factor": 2}, "floor_factor needs floor"),
])
def test_bad_floor_options_are_config_errors(options, message):
    with pytest.raises(ConfigError, match=message):
        make_scheduler("optimus", **options)
