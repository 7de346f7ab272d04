"""The training-side batched plumbing: vectorised replay buffer, batch vector env, collector."""

from __future__ import annotations

import numpy as np
import pytest
from tianshou.data import Batch, VectorReplayBuffer

from agents.training.tianshou_glue.collector import BatchedReplayBuffer


def _rollout(rng: np.random.Generator, n: int, steps: int) -> list[tuple[Batch, np.ndarray]]:
    out = []
    for t in range(steps):
        k = int(rng.integers(1, n + 1))
        ids = np.sort(rng.choice(n, size=k, replace=False))
        term = rng.random(k) < 0.15
        trunc = (rng.random(k) < 0.05) & ~term
        batch = Batch(
            obs=Batch(x=rng.normal(size=(k, 3)).astype(np.float32), m=rng.integers(0, 2, (k, 2)).astype(np.int8)),
            act=rng.integers(0, 5, (k, 2, 3)),
            rew=rng.normal(size=k),
            terminated=term,
            truncated=trunc,
            obs_next=Batch(x=rng.normal(size=(k, 3)).astype(np.float32), m=rng.integers(0, 2, (k, 2)).astype(np.int8)),
            info=Batch(agent_rewards=rng.normal(size=(k, 2)), placed=rng.integers(0, 3, k)),
            policy=Batch(logp=rng.normal(size=(k, 2)).astype(np.float32)),
        )
        out.append((batch, ids))
    return out


@pytest.mark.parametrize("n,size_per_env,steps", [(1, 7, 30), (4, 5, 60), (9, 16, 80)])
def test_batched_buffer_matches_tianshou(n: int, size_per_env: int, steps: int) -> None:
    rng = np.random.default_rng(n * 100 + steps)
    ref = VectorReplayBuffer(size_per_env * n, n)
    new = BatchedReplayBuffer(size_per_env * n, n)
    for step, (batch, ids) in enumerate(_rollout(rng, n, steps)):
        a = ref.add(Batch(batch), buffer_ids=ids)
        b = new.add(Batch(batch), buffer_ids=ids)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        assert len(ref) == len(new)
        np.testing.assert_array_equal(ref.last_index, new.last_index)
        np.testing.assert_array_equal(ref._lengths, new._lengths)
        if step % 7 == 6:
            idx = ref.sample_indices(0)
            np.testing.assert_array_equal(idx, new.sample_indices(0))
            np.testing.assert_array_equal(ref.prev(idx), new.prev(idx))
            np.testing.assert_array_equal(ref.next(idx), new.next(idx))
            np.testing.assert_array_equal(ref.unfinished_index(), new.unfinished_index())
            got, want = new[idx], ref[idx]
            np.testing.assert_array_equal(got.rew, want.rew)
            np.testing.assert_array_equal(got.obs.x, want.obs.x)
            np.testing.assert_array_equal(got.info.placed, want.info.placed)
            np.testing.assert_array_equal(got.done, want.done)
        if step == steps // 2:  # on-policy training resets the buffer after every update
            ref.reset()
            new.reset()
            assert len(new) == 0


def test_batched_buffer_duplicate_ids_fall_back_to_sequential() -> None:
    ref = VectorReplayBuffer(8, 2)
    new = BatchedReplayBuffer(8, 2)
    batch = Batch(obs=np.arange(3.0), act=np.zeros(3), rew=np.ones(3), terminated=np.array([False, True, False]),
                  truncated=np.zeros(3, bool), obs_next=np.arange(3.0), info=Batch())
    for x, y in zip(ref.add(Batch(batch), buffer_ids=[0, 0, 1]), new.add(Batch(batch), buffer_ids=[0, 0, 1])):
        np.testing.assert_array_equal(x, y)


def test_batched_buffer_prev_next_scalar_and_arrays() -> None:
    rng = np.random.default_rng(5)
    ref = VectorReplayBuffer(24, 3)
    new = BatchedReplayBuffer(24, 3)
    for batch, ids in _rollout(rng, 3, 40):
        ref.add(Batch(batch), buffer_ids=ids)
        new.add(Batch(batch), buffer_ids=ids)
    for i in range(24):
        assert ref.prev(i) == new.prev(i) and ref.next(i) == new.next(i)
    idx = rng.integers(0, 48, 100)  # indices past the end wrap around, as in tianshou
    np.testing.assert_array_equal(ref.prev(idx), new.prev(idx))
    np.testing.assert_array_equal(ref.next(idx), new.next(idx))


# ---------------------------------------------------------------------------------------
# the batch vector env against tianshou's DummyVectorEnv of per-env wrappers
# ---------------------------------------------------------------------------------------
def _per_env_reference(cfg, keys):
    import functools

    from tianshou.env import DummyVectorEnv

    from agents.training.envs import make_env

    return DummyVectorEnv([functools.partial(make_env, cfg.to_dict(), k) for k in keys])


def _obs_equal(batch_obs, list_obs, keys) -> None:
    for k in keys:
        np.testing.assert_array_equal(np.asarray(batch_obs[k]), np.stack([o[k] for o in list_obs]), err_msg=k)


@pytest.mark.parametrize("scenario", ["synthetic-3", "hetero-6", "testbed-3"])
def test_batch_vector_env_matches_per_env_wrappers(scenario: str) -> None:
    from agents.training.envs import running_mean_jct
    from agents.training.vector_env import BatchVectorEnv
    from envs import load_scenario
    from envs.batched import EPISODE_INFO, STEP_INFO, random_valid_actions
    from envs.observation import KEYS

    cfg = load_scenario(scenario, ["num_tasks=30"])
    B = 5
    keys = [(7, 1, i) for i in range(B)]
    ours, ref = BatchVectorEnv(cfg, B, seed_keys=keys), _per_env_reference(cfg, keys)
    obs, info = ours.reset()
    ref_obs, ref_info = ref.reset()
    ref_obs = list(ref_obs)
    np.testing.assert_array_equal(info.workload_seed, [d["workload_seed"] for d in ref_info])
    rng = np.random.default_rng(1)
    g1 = ours.batched.obs_spec.alloc_dims[1]
    episodes = 0
    for _ in range(300):
        _obs_equal(obs, ref_obs, KEYS)
        act = random_valid_actions({k: np.asarray(obs[k]) for k in KEYS}, g1, rng)
        obs, rew, term, trunc, info = ours.step(act)
        ref_obs, ref_rew, ref_term, ref_trunc, ref_info = ref.step(act)
        ref_obs = list(ref_obs)
        np.testing.assert_array_equal(rew, ref_rew)
        np.testing.assert_array_equal(term, ref_term)
        np.testing.assert_array_equal(trunc, ref_trunc)
        for key in (*STEP_INFO, "advanced", "episode_end", "workload_seed", *(f"ep_{k}" for k in EPISODE_INFO)):
            np.testing.assert_allclose(np.asarray(info[key], float), [float(d[key]) for d in ref_info], rtol=1e-12,
                                       err_msg=key)
        np.testing.assert_array_equal(info.agent_rewards, np.stack([d["agent_rewards"] for d in ref_info]))
        # the episodes in progress: the same mean JCT so far from both kinds (training/running_mean_jct)
        np.testing.assert_allclose(ours.running_mean_jct(), ref.get_env_attr("running_mean_jct"), rtol=1e-12)
        a, b = running_mean_jct(ours), running_mean_jct(ref)
        assert (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-12))
        done = np.flatnonzero(term | trunc)
        if done.size:  # what tianshou's Collector does on episode ends
            episodes += done.size
            new_obs, new_info = ours.reset(done)
            ref_new, ref_new_info = ref.reset(done)
            obs[done] = new_obs
            for j, d in enumerate(done.tolist()):
                ref_obs[d] = ref_new[j]
            np.testing.assert_array_equal(new_info.workload_seed, [d["workload_seed"] for d in ref_new_info])
    assert episodes >= B  # resets were exercised


def test_sharded_process_env_matches_single_process_on_any_id_order() -> None:
    from agents.training.vector_env import BatchVectorEnv, ShardedBatchVectorEnv
    from envs import load_scenario
    from envs.batched import random_valid_actions
    from envs.observation import KEYS

    cfg = load_scenario("synthetic-6", ["num_tasks=30"])
    B = 5
    keys = [(2, 0, i) for i in range(B)]
    one = BatchVectorEnv(cfg, B, seed_keys=keys)
    sharded = ShardedBatchVectorEnv(cfg, B, workers=2, seed_keys=keys)
    try:
        assert [hi - lo for lo, hi in sharded.bounds] == [2, 3]
        a, ia = sharded.reset()
        b, ib = one.reset()
        np.testing.assert_array_equal(ia.workload_seed, ib.workload_seed)
        rng = np.random.default_rng(3)
        g1 = one.batched.obs_spec.alloc_dims[1]
        state = {k: np.asarray(b[k]).copy() for k in KEYS}
        for step in range(120):
            ids = rng.permutation(B)[: rng.integers(1, B + 1)]  # a subset, in any order
            act = random_valid_actions({k: v[ids] for k, v in state.items()}, g1, rng)
            a, ra, ta, ua, fa = sharded.step(act, ids)
            b, rb, tb, ub, fb = one.step(act, ids)
            for k in KEYS:
                np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=f"{step} {k}")
                state[k][ids] = np.asarray(b[k])
            np.testing.assert_array_equal(ra, rb)
            np.testing.assert_array_equal(fa.ep_mean_jct, fb.ep_mean_jct)
            np.testing.assert_array_equal(sharded.running_mean_jct(), one.running_mean_jct())
            done = ids[np.flatnonzero(tb | ub)]
            if done.size:
                a, _ = sharded.reset(done)
                b, _ = one.reset(done)
                for k in KEYS:
                    np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]))
                    state[k][done] = np.asarray(b[k])
    finally:
        sharded.close()


def test_batch_collector_fills_the_buffer_like_the_stock_collector() -> None:
    """Same policy, same torch seed: BatchCollector + batch env + vectorised buffer store
    exactly what tianshou's Collector + DummyVectorEnv + VectorReplayBuffer store."""
    import torch
    from tianshou.data import Collector
    from tianshou.utils.torch_utils import policy_within_training_step

    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from agents.training.tianshou_glue.algorithm import TianshouJointPolicy
    from agents.training.tianshou_glue.collector import BatchCollector
    from agents.training.vector_env import BatchVectorEnv
    from envs import load_scenario
    from envs.observation import KEYS, ObservationSpec

    cfg = load_scenario("synthetic-3", ["num_tasks=12"])
    B = 3
    keys = [(0, 0, i) for i in range(B)]
    torch.manual_seed(0)
    net = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1, pointer_dim=16,
                                                                         pointer_ffn=16))
    results = []
    for batched in (True, False):
        env = BatchVectorEnv(cfg, B, seed_keys=keys) if batched else _per_env_reference(cfg, keys)
        policy = TianshouJointPolicy(net, action_space=env.action_space[0], observation_space=env.observation_space[0])
        buf = BatchedReplayBuffer(64 * B, B) if batched else VectorReplayBuffer(64 * B, B)
        collector = (BatchCollector if batched else Collector)(policy, env, buf)
        torch.manual_seed(11)
        collector.reset()
        with policy_within_training_step(policy):
            stats = collector.collect(n_step=90)
        results.append((buf, stats))
        env.close()
    (ours, s1), (ref, s2) = results
    assert s1.n_collected_steps == s2.n_collected_steps and s1.n_collected_episodes == s2.n_collected_episodes > 0
    assert len(ours) == len(ref)
    idx = ref.sample_indices(0)
    np.testing.assert_array_equal(idx, ours.sample_indices(0))
    a, b = ours[idx], ref[idx]
    for k in KEYS:
        np.testing.assert_array_equal(a.obs[k], b.obs[k])
        np.testing.assert_array_equal(a.obs_next[k], b.obs_next[k])
    np.testing.assert_array_equal(a.act, b.act)
    np.testing.assert_array_equal(a.rew, b.rew)
    np.testing.assert_array_equal(a.done, b.done)
    np.testing.assert_array_equal(a.info.agent_rewards, b.info.agent_rewards)
    np.testing.assert_array_equal(a.info.ep_mean_jct, b.info.ep_mean_jct)
    np.testing.assert_array_equal(ours.next(idx), ref.next(idx))


@pytest.mark.parametrize("collect", [{"n_step": 150}, {"n_episode": 4}])
def test_next_values_reuse_stored_observations(tmp_path, collect) -> None:
    """PPO's bootstrap values: reusing V(obs of the next stored step) gives V(obs_next)."""
    import torch
    from tianshou.utils.torch_utils import policy_within_training_step

    from agents.training.envs import training_envs
    from agents.training.loop import build_algorithm, make_collectors
    from agents.training.prepare import prepare_run

    spec = prepare_run("multi-3", ["num_tasks=10", "policy.hidden=16", "policy.pointer_dim=16",
                                   "policy.pointer_ffn=16", "train.collect_steps=150", "train.eval_episodes=1"],
                       flags={"envs": 3, "logdir": str(tmp_path), "device": "cpu"})
    envs = training_envs(spec.scenario, spec.train, 0)
    algorithm, _ = build_algorithm(spec, envs, torch.device("cpu"))
    collector, _ = make_collectors(spec, algorithm, envs, None)
    collector.reset()
    with policy_within_training_step(algorithm.policy):
        collector.collect(**collect)
    buffer = collector.buffer
    batch, indices = buffer.sample(0)
    v_s = algorithm._values(batch.obs)
    reused = algorithm._next_values(batch, buffer, indices, v_s)
    direct = algorithm._values(batch.obs_next)
    assert reused.shape == direct.shape == (len(indices), 3)
    torch.testing.assert_close(reused, direct, rtol=1e-5, atol=1e-5)
    envs.close()


def test_the_running_mean_jct_is_the_episode_so_far() -> None:
    """Before the first real step there is none; mid-episode each env's value is its episode metrics' mean JCT
    at that real step (unfinished tasks counted until now), and it only grows while nothing finishes."""
    from agents.training.envs import running_mean_jct
    from agents.training.vector_env import BatchVectorEnv
    from envs import load_scenario
    from envs.batched import random_valid_actions
    from envs.observation import KEYS

    cfg = load_scenario("synthetic-3", ["num_tasks=30"])
    env = BatchVectorEnv(cfg, 3, seed_keys=[(5, 0, i) for i in range(3)])
    obs, _ = env.reset()
    assert np.isnan(env.running_mean_jct()).all() and running_mean_jct(env) is None  # no real step yet
    rng = np.random.default_rng(0)
    g1 = env.batched.obs_spec.alloc_dims[1]
    for _ in range(12):
        obs, *_ = env.step(random_valid_actions({k: np.asarray(obs[k]) for k in KEYS}, g1, rng))
    values = env.running_mean_jct()
    expected = [env.batched.episode_metrics(b)["mean_jct"] for b in range(3)]
    np.testing.assert_allclose(values, expected, rtol=1e-12)
    assert np.isfinite(values).all() and (values >= 1.0).all()
    assert running_mean_jct(env) == pytest.approx(float(np.mean(values)))
