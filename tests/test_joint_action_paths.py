"""One joint-action decoder: the Gymnasium env path (``apply_joint_action``) and the learned
scheduler path (``joint_action_to_decision`` + the episode runner's ``apply_decision``) give
identical placements and counters (``sim.conflicts``, ``sim.invalid``, ``sim.void``) for the
same action sequence, valid, conflicting, void and malformed actions mixed."""

from __future__ import annotations

import numpy as np
import pytest

from agents.policy.scheduler import joint_action_to_decision
from envs.config import load_scenario
from envs.core import Simulator
from envs.joint_action import apply_joint_action, decode_joint_action, needs_advance, random_valid_action
from envs.observation import ObservationSpec, build_observation
from envs.scheduling import apply_decision


def _state(sim: Simulator) -> tuple:
    return (sim.t, sim.placements, sim.conflicts, sim.invalid, sim.void, sim.pending.tolist(),
            sim.free.tolist(), sim.run_slots.tolist())


def _action(rng: np.random.Generator, sim: Simulator, spec: ObservationSpec) -> np.ndarray:
    """Mostly valid actions, with lost flags, voids, duplicate claims and garbage mixed in."""
    obs = build_observation(sim, spec)
    act = random_valid_action(obs, spec.alloc_dims[1], rng)
    n, P, A = sim.num_clusters, sim.pending.shape[1], spec.alloc_dims[0] * spec.alloc_dims[1]
    for i in range(n):
        r = rng.random()
        if r < 0.1:
            act[i] = (act[i, 0], 0, 0)  # deliberate void
        elif r < 0.2:
            act[i, 2] = 1  # lost a conflict
        elif r < 0.25:
            act[i] = (rng.integers(-2, P + 2), rng.integers(-2, A + 2), rng.integers(-1, 3))  # garbage
        elif r < 0.3 and i > 0:
            act[i] = act[i - 1]  # the same slot index as the neighbour (often the same task)
    return act


@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6"])
def test_env_and_scheduler_paths_agree(name):
    cfg = load_scenario(name, ["num_tasks=40"])
    spec = ObservationSpec.from_config(cfg)
    env_sim, sched_sim = Simulator(cfg, 5), Simulator(cfg, 5)
    rng = np.random.default_rng(0)
    rounds = 0
    while not env_sim.done and rounds < 400:
        act = _action(rng, env_sim, spec)
        report = apply_joint_action(env_sim, act)
        decision = joint_action_to_decision(sched_sim, act)
        placed = apply_decision(sched_sim, decision)
        assert placed == report.placed
        assert _state(env_sim) == _state(sched_sim)
        if needs_advance(env_sim, report):
            env_sim.advance()
            sched_sim.advance()
        rounds += 1
    assert env_sim.conflicts > 0 and env_sim.invalid > 0 and env_sim.void > 0 and env_sim.placements > 0


def test_void_meanings():
    """StepReport.void = every agent that placed nothing; sim.void = deliberate voids of agents with a feasible task."""
    cfg = load_scenario("synthetic-3", ["num_tasks=40"])
    sim = Simulator(cfg, 1)
    while not (sim.pending[0] >= 0).any():
        sim.advance()
    spec = ObservationSpec.from_config(cfg)
    feasible = build_observation(sim, spec)["feasible"].astype(bool).any(axis=1)
    act = np.zeros((cfg.num_clusters, 3), dtype=np.int64)  # everyone sends [0, 0, 0]
    decoded = decode_joint_action(sim, act)
    assert decoded.deliberate_void == int(feasible.sum()) and decoded.void == cfg.num_clusters
    before = (sim.void, sim.conflicts, sim.invalid)
    report = apply_joint_action(sim, act)
    assert report.void == cfg.num_clusters and report.placed == 0
    assert (sim.void, sim.conflicts, sim.invalid) == (before[0] + int(feasible.sum()), before[1], before[2])
