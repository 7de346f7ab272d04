"""The batched simulator (envs.batched) against separate EdgeClustersEnv instances.

For the same workload seeds and the same joint actions, B batched environments must give
exactly the trajectories of B ``EdgeClustersEnv``: every observation array bit for bit,
rewards, agent rewards, terminated/truncated, the step counts in ``info``, the episode
metrics and the per-task records. Checked over random scenarios (hypothesis) with valid and
invalid actions, subsets of environments stepped via ``env_ids`` and environments reset
mid-way, and over every shipped scenario with the random valid policy.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from test_core_properties import scenarios  # tests/ is on sys.path (pytest rootdir insertion)

from envs import BatchedEdgeClusters, BatchStep
from envs.batched import EPISODE_INFO, STEP_INFO, random_valid_actions
from envs.config import ScenarioConfig, available_scenarios
from envs.gym_env import EdgeClustersEnv, resolve_scenario
from envs.joint_action import ActionShapeError, random_valid_action
from envs.metrics import episode_metrics
from envs.observation import KEYS, ObservationSpec

REL = 1e-12  # cpu_util / gpu_util are accumulated incrementally


# ------------------------------------------------------------------ comparison helpers
def assert_obs_equal(single: dict, batched: dict, row: int, where: str = "") -> None:
    for key in KEYS:
        a, b = single[key], batched[key][row]
        assert a.dtype == b.dtype and a.shape == b.shape, (where, key, a.dtype, b.dtype, a.shape, b.shape)
        assert np.array_equal(a, b), (where, key, a, b)
        if a.dtype.kind == "f":  # bit-identical, signed zeros included
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (where, key)


def assert_metrics_equal(m: dict, info: dict, row: int) -> None:
    for k, v in m.items():
        got = info["ep_" + k][row]
        if k == "mean_jct" and np.isnan(v):
            assert got == 0.0
        elif k in ("cpu_util", "gpu_util"):
            assert abs(got - v) <= REL * max(abs(v), 1e-300), (k, v, got)
        else:
            assert got == v, (k, v, got)


def assert_records_equal(env: EdgeClustersEnv, batch: BatchedEdgeClusters, b: int) -> None:
    ra, rb = env.sim.records(), batch.records(b)
    assert ra.keys() == rb.keys()
    for k in ra:
        assert ra[k].dtype == rb[k].dtype and np.array_equal(ra[k], rb[k]), (b, k, ra[k], rb[k])
    ma, mb = episode_metrics(env.sim), batch.episode_metrics(b)
    for k in ma:
        if k in ("cpu_util", "gpu_util"):
            assert abs(ma[k] - mb[k]) <= REL * max(abs(ma[k]), 1e-300), (k, ma[k], mb[k])
        elif isinstance(ma[k], float) and np.isnan(ma[k]):
            assert np.isnan(mb[k])
        else:
            assert ma[k] == mb[k], (k, ma[k], mb[k])


def compare_step(envs, ids, actions, out: BatchStep, over: np.ndarray) -> list[int]:
    """Step the single envs with the same actions and compare; returns the envs that ended."""
    ended = []
    for row, b in enumerate(ids.tolist()):
        obs, reward, terminated, truncated, info = envs[b].step(actions[row])
        where = f"env {b}"
        assert_obs_equal(obs, out.obs, row, where)
        assert reward == out.reward[row], (where, reward, out.reward[row])
        assert np.array_equal(info["agent_rewards"], out.info["agent_rewards"][row]), where
        for k in STEP_INFO:
            assert info[k] == out.info[k][row], (where, k, info[k], out.info[k][row])
        assert info["advanced"] == out.info["advanced"][row]
        assert terminated == out.terminated[row] and truncated == out.truncated[row], where
        assert out.info["episode_end"][row] == (terminated or truncated)
        if terminated or truncated:
            assert_metrics_equal(info["episode_metrics"], out.info, row)
            assert out.info["ep_length"][row] == envs[b].logical_steps
            over[b] = True
            ended.append(b)
        else:
            for k in EPISODE_INFO:
                assert out.info["ep_" + k][row] == 0.0
    return ended


# ------------------------------------------------------------------ random actions
def random_actions(rng, obs: dict, spec: ObservationSpec) -> np.ndarray:
    """Per env: the random valid policy, or a mix of valid and invalid / conflicting requests."""
    R, N = obs["feasible"].shape[:2]
    P, A = spec.P, spec.A
    out = np.zeros((R, N, 3), dtype=np.int64)
    for r in range(R):
        one = {k: v[r] for k, v in obs.items()}
        out[r] = random_valid_action(one, spec.alloc_dims[1], rng)
        if rng.random() < 0.5:
            continue
        for i in range(N):
            kind = rng.integers(8)
            if kind == 0:  # anything, out of range included
                out[r, i] = (rng.integers(-2, P + 2), rng.integers(-2, A + 3), rng.integers(-1, 3))
            elif kind == 1:  # lost flag
                out[r, i, 2] = 1
            elif kind == 2:  # void
                out[r, i] = (rng.integers(P), 0, 0)
            elif kind == 3:  # an empty slot or any slot, any in-range allocation
                out[r, i] = (rng.integers(P), rng.integers(A), 0)
            elif kind == 4 and i > 0:  # duplicate: the task another agent asked for, if pending here
                j = int(rng.integers(i))
                p = out[r, j, 0]
                if 0 <= p < P and obs["pending_mask"][r, j, p]:
                    q = obs["pending_where"][r, j, p, i]
                    if q >= 0:
                        out[r, i] = (q, out[r, j, 1] if out[r, j, 1] > 0 else 1 + rng.integers(A - 1), 0)
            elif kind == 5:  # allocation just above alloc_high
                hi = obs["alloc_high"][r, i]
                c, g = int(hi[0]) + rng.integers(0, 2), int(hi[1]) + rng.integers(0, 2)
                if c < spec.alloc_dims[0] and g < spec.alloc_dims[1]:
                    out[r, i] = (rng.integers(P), c * spec.alloc_dims[1] + g, 0)
    return out


def run_pair(cfg, num_envs: int, seeds: list[int], action_seed: int, steps: int, subset: bool = True,
             policy: str = "mixed", stats: bool = False):
    """Drive a batch and separate envs in lockstep, resetting and sub-stepping at random."""
    rng = np.random.default_rng(action_seed)
    batch = BatchedEdgeClusters(cfg, num_envs)
    envs = [EdgeClustersEnv(cfg) for _ in range(num_envs)]
    spec = batch.obs_spec
    ids = np.arange(num_envs)
    obs = batch.reset(ids, seeds)
    for b in range(num_envs):
        single, info = envs[b].reset(seed=seeds[b])
        assert_obs_equal(single, obs, b, "reset")
    over = np.zeros(num_envs, dtype=bool)
    next_seed = max(seeds) + 1
    ended_any = 0
    for _ in range(steps):
        live = np.flatnonzero(~over)
        if live.size == 0:
            break
        if subset and rng.random() < 0.5:
            ids = rng.permutation(live)[: rng.integers(1, live.size + 1)]
            env_ids = ids
        else:
            ids, env_ids = live, (None if live.size == num_envs else live)
        cur = batch.observe(ids)
        if policy in ("valid", "min"):
            actions = random_valid_actions(cur, spec.alloc_dims[1], rng)
            if policy == "min":  # smallest allocations: many tasks per cluster
                r, i = np.nonzero(actions[..., 1] > 0)
                lo = cur["pending_min"][r, i, actions[r, i, 0]]
                actions[r, i, 1] = lo[:, 0] * spec.alloc_dims[1] + lo[:, 1]
        else:
            actions = random_actions(rng, cur, spec)
        untouched = np.setdiff1d(np.arange(num_envs), ids)
        before = {b: batch.state_of(b) for b in untouched.tolist() if not over[b]}
        out = batch.step(actions, env_ids)
        if policy in ("valid", "min"):
            assert np.all(out.info["invalid"] == 0) and np.all(out.info["conflicts"] == 0)
        assert np.array_equal(out.info["workload_seed"], [envs[b].sim.seed for b in ids])
        ended = compare_step(envs, ids, actions, out, over)
        ended_any += len(ended)
        for b, st_b in before.items():  # envs not listed did not change
            after = batch.state_of(b)
            for k, v in st_b.items():
                if k == "running":
                    assert all(np.array_equal(x, y) for x, y in zip(v, after[k])), (b, k)
                else:
                    assert np.array_equal(v, after[k]), (b, k)
        for b in ended:
            assert_records_equal(envs[b], batch, b)
            with pytest.raises(RuntimeError):
                batch.step(np.zeros((1, cfg.num_clusters, 3), dtype=np.int64), [b])
        # reset a random subset of the finished envs with new seeds
        done = np.flatnonzero(over)
        if done.size and rng.random() < 0.7:
            pick = rng.permutation(done)[: rng.integers(1, done.size + 1)]
            new = list(range(next_seed, next_seed + pick.size))
            next_seed += pick.size
            o = batch.reset(pick, new)
            for row, b in enumerate(pick.tolist()):
                single, _ = envs[b].reset(seed=new[row])
                assert_obs_equal(single, o, row, "mid reset")
                over[b] = False
    for b in range(num_envs):
        assert_records_equal(envs[b], batch, b)
    if not stats:
        return batch, envs, ended_any
    if batch._width.max() > spec.M:
        event("run slots widened beyond M")
    if any(e.sim.truncated for e in envs):
        event("truncated")
    if next_seed > max(seeds) + 1:
        event("reset mid-way")
    if cfg.progress_noise > 0:
        event("noise")
    return batch, envs, ended_any


# ------------------------------------------------------------------ properties
@st.composite
def batched_configs(draw):
    cfg = draw(scenarios())
    raw = cfg.to_dict()
    raw["reward"] = draw(st.sampled_from(["team", "per_cluster"]))
    raw["max_steps"] = draw(st.sampled_from([3, 8, 30, 100_000]))
    raw["max_start_slowdown"] = draw(st.sampled_from([0.0, 0.0, 1.0, 1.5, 3.0]))  # the start floor, both builders
    return ScenarioConfig.from_dict(raw)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=batched_configs(), num_envs=st.integers(1, 4), seed=st.integers(0, 2**16),
       action_seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 60))
def test_batched_equals_separate_envs(cfg, num_envs, seed, action_seed, steps):
    run_pair(cfg, num_envs, [seed + 7 * b for b in range(num_envs)], action_seed, steps, stats=True)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=scenarios(noise=False), seed=st.integers(0, 2**16), action_seed=st.integers(0, 2**32 - 1))
def test_invariants_on_the_batched_path(cfg, seed, action_seed):
    """Capacity never exceeded, every task completes exactly once, JCT >= fastest."""
    B = 3
    rng = np.random.default_rng(action_seed)
    batch = BatchedEdgeClusters(cfg, B)
    batch.reset(np.arange(B), [seed, seed + 1, seed + 2])
    over = np.zeros(B, dtype=bool)
    finished_seen = np.zeros((B, cfg.num_tasks), dtype=int)
    prev_done = [np.zeros(cfg.num_tasks, dtype=bool) for _ in range(B)]
    prev_finish = [np.full(cfg.num_tasks, -1) for _ in range(B)]
    for _ in range(5000):
        live = np.flatnonzero(~over)
        if live.size == 0:
            break
        out = batch.step(random_valid_actions(batch.observe(live), batch.obs_spec.alloc_dims[1], rng), live)
        for b in live.tolist():
            s = batch.state_of(b)
            done = s["status"] == 3
            assert np.all(done[prev_done[b]])  # DONE is final ...
            assert np.array_equal(batch.records(b)["finish"][prev_done[b][: s["next_arrival"]]],
                                  prev_finish[b][prev_done[b]])  # ... and its finish step never changes
            assert s["num_finished"] == int(done.sum())
            prev_done[b] = done
            prev_finish[b] = np.full(cfg.num_tasks, -1)
            prev_finish[b][: s["next_arrival"]] = batch.records(b)["finish"]
            assert np.all(s["free"] >= 0) and np.all(s["free"] <= batch.capacity)
            used = np.zeros_like(s["free"])
            for i, run in enumerate(s["running"]):
                used[i] = s["alloc"][run].sum(axis=0)
            assert np.array_equal(used + s["free"], batch.capacity)
        over[live[out.terminated | out.truncated]] = True
    assert over.all()
    fastest = EdgeClustersEnv(cfg)
    fastest.reset(seed=0)
    fast = fastest.sim.fastest
    for b in range(B):
        rec = batch.records(b)
        assert rec["task_id"].size == cfg.num_tasks and np.all(rec["finish"] >= 1)
        assert batch.episode_metrics(b)["num_finished"] == cfg.num_tasks
        finished_seen[b] = (batch.state_of(b)["status"] == 3).astype(int)
        assert np.all(rec["jct"] >= fast[rec["type"], rec["cluster"]])
    assert finished_seen.sum() == B * cfg.num_tasks


@pytest.mark.parametrize("name", available_scenarios())
def test_shipped_scenarios_random_valid_policy(name):
    cfg_over = {"num_tasks": 80} if name.startswith("testbed") else {"num_tasks": 60}
    cfg = resolve_scenario(name, cfg_over)
    _, _, ended = run_pair(cfg, 3, [1, 2, 3], 11, 300, policy="valid")
    assert ended >= 1


@pytest.mark.parametrize("name,over", [("testbed-6", {"progress_noise": 0.2, "reward": "per_cluster"}),
                                       ("testbed-3", {"trace.mode": "legacy"}),
                                       ("testbed-3", {"trace.mode": "constant_rate", "switch_overhead": 0.3}),
                                       ("testbed-3", {"task_types.0.progress": {"kind": "tanh"}, "mode": "multi",
                                                      "progress_noise": 0.1})])
def test_testbed_variants(name, over):
    cfg = resolve_scenario(name, {"num_tasks": 60, **over})
    batch, _, _ = run_pair(cfg, 3, [5, 6, 7], 3, 200)
    assert (batch.progress_step.table is None) == (cfg.task_types[0].progress["kind"] == "tanh")  # per-type fallback


@pytest.mark.parametrize("mode", ["single", "multi"])
def test_run_slots_widen_beyond_m(mode):
    """Types with a zero minimum on one resource: a cluster runs more than M tasks."""
    cfg = ScenarioConfig.from_dict({
        "name": "wide", "mode": mode, "num_clusters": 2, "capacities": [[2, 2], [3, 2]], "per_task_max": [2, 2],
        "arrival_rate": 20, "num_tasks": 40, "switch_overhead": 0.5, "progress_noise": 0.1,
        "task_types": [
            {"name": "c", "prob": 0.5, "min_req": [1, 0], "progress": {"kind": "constant", "steps": 6}},
            {"name": "g", "prob": 0.5, "min_req": [0, 1], "progress": {"kind": "constant", "steps": 3}},
        ],
    })
    batch, _, ended = run_pair(cfg, 3, [0, 1, 2], 5, 400, policy="min")
    assert batch._width.max() > batch.obs_spec.M and ended >= 3


def test_evaluation_variant_and_full_testbed_episode():
    batch = BatchedEdgeClusters("testbed-6", 2, evaluation=True, overrides=["num_tasks=150"])
    assert batch.cfg.capacities[0] == (32, 16)
    run_pair(batch.cfg, 2, [0, 1], 0, 400, policy="valid")


# ------------------------------------------------------------------ interface
@pytest.mark.parametrize("mode", ["single", "multi"])
def test_truncated_episode_metrics_agree_and_count_unfinished_tasks(mode):
    """One metric definition (envs.metrics): a cut-off episode's mean JCT counts the unfinished
    tasks at their time in system, in the single env and in the batched one alike."""
    cfg = resolve_scenario("synthetic-3", ["num_tasks=40", "max_steps=9", f"mode={mode}"])
    batch, envs, ended = run_pair(cfg, 2, [3, 4], 0, 200, subset=False, policy="valid")
    assert ended >= 2  # episodes cut off at the cap, their ep_* metrics compared by run_pair
    for b, env in enumerate(envs):  # the last episode of each, ended or in progress
        m, rec = batch.episode_metrics(b), env.sim.records()
        assert m["truncated"] and m["num_unfinished"] == int((rec["finish"] < 0).sum()) > 0
        in_system = np.where(rec["finish"] >= 0, rec["finish"], env.sim.t) - rec["arrival"]
        assert m["mean_jct"] == pytest.approx(in_system.mean()) == episode_metrics(env.sim)["mean_jct"]


def test_interface_errors_and_shapes():
    batch = BatchedEdgeClusters("synthetic-3", 3, overrides=["num_tasks=10"])
    N = 3
    with pytest.raises(RuntimeError):
        batch.step(np.zeros((3, N, 3), dtype=np.int64))
    obs = batch.reset([0, 2], [4, 5])
    assert obs["pending_x"].shape[0] == 2
    with pytest.raises(RuntimeError):  # env 1 was never reset
        batch.step(np.zeros((3, N, 3), dtype=np.int64))
    with pytest.raises(RuntimeError):
        batch.observe([1])
    with pytest.raises(ActionShapeError):
        batch.step(np.zeros((2, N, 2), dtype=np.int64), [0, 2])
    with pytest.raises(ActionShapeError):
        batch.step(np.full((2, N, 3), 0.5), [0, 2])
    with pytest.raises(ValueError):
        batch.step(np.zeros((2, N, 3), dtype=np.int64), [0, 0])
    out = batch.step(np.zeros((2, N, 3), dtype=np.float64), [2, 0])  # integral floats are fine
    spec = ObservationSpec.from_config(batch.cfg)
    for key, (shape, dtype) in spec.shapes().items():
        assert out.obs[key].shape == (2, *shape) and out.obs[key].dtype == dtype
    assert out.reward.dtype == np.float64 and out.terminated.dtype == bool
    assert out.info["agent_rewards"].shape == (2, N)
    for k in STEP_INFO:
        assert out.info[k].dtype == np.int64
    for k in EPISODE_INFO:
        assert out.info["ep_" + k].dtype == np.float64
    assert out.info["workload_seed"].tolist() == [5, 4]


def test_random_valid_actions_only_valid():
    batch = BatchedEdgeClusters("hetero-6", 16, overrides=["num_tasks=100"])
    rng = np.random.default_rng(0)
    obs = batch.reset(np.arange(16), np.arange(16))
    placed = 0
    for _ in range(100):
        out = batch.step(random_valid_actions(obs, batch.obs_spec.alloc_dims[1], rng))
        assert np.all(out.info["invalid"] == 0) and np.all(out.info["conflicts"] == 0)
        placed += int(out.info["placed"].sum())
        obs = out.obs
        end = np.flatnonzero(out.terminated | out.truncated)
        if end.size:
            o = batch.reset(end, end + 100)
            for k in o:
                obs[k][end] = o[k]
    assert placed > 100
