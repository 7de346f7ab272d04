"""Dense HAN encoder == the torch-geometric reference; static shapes on the act/evaluate path;
vectorised per-agent GAE == tianshou's ``compute_episodic_return``."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.policy.checkpoint import load_policy_checkpoint
from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from envs.gym_env import EdgeClustersEnv
from networks.dense_han import DenseGraphEncoder
from networks.heads import COMPACT_MIN_BATCH
from networks.graph import ONE_SOURCE_RELATIONS
from networks.han import GraphEncoder

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(os.path.basename(f)[:-5] for f in glob.glob(str(ROOT / "configs" / "*.yaml")))
TOL = 1e-5
#: a trained checkpoint's head outputs (log-probabilities, entropies, values) from the two encoders
HEAD_TOL = 5e-5


def env_observations(name: str, steps: int = 30, seed: int = 0, p_act: float = 0.6):
    """Observations of an env driven by random valid actions (conflicts included)."""
    env = EdgeClustersEnv(name)
    spec = env.obs_spec
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for _ in range(steps):
        act = np.zeros((spec.N, 3), dtype=np.int64)
        for i in range(spec.N):
            f = np.flatnonzero(obs["feasible"][i])
            if f.size and rng.random() < p_act:
                p = int(rng.choice(f))
                lo = obs["pending_min"][i, p]
                act[i] = [p, spec.encode_allocation(int(lo[0]), int(lo[1])), 0]
        obs, _, term, trunc, _ = env.step(act)
        out.append(obs)
        if term or trunc:
            obs, _ = env.reset(seed=seed + 1)
    return spec, out


def empty_like(obs: dict) -> dict:
    """The same observation with nothing pending and nothing running."""
    o = {k: np.array(v, copy=True) for k, v in obs.items()}
    o["pending_mask"][:] = 0
    o["pending_where"][:] = -1
    o["feasible"][:] = 0
    o["pending_min"][:] = 0
    o["pending_x"][:] = 0
    o["pending_x"][..., -1] = 1.0
    o["running_mask"][:] = 0
    o["running_x"][:] = 0
    return o


def stack(obs_list) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(np.stack([o[k] for o in obs_list])) for k in obs_list[0]}


_CACHE: dict[str, tuple] = {}


def scenario_batch(name: str):
    """Realistic observations of ``name``, with empty states mixed in."""
    if name not in _CACHE:
        spec, obs = env_observations(name)
        obs = obs + [empty_like(obs[3]), empty_like(obs[-1])]
        order = np.random.default_rng(1).permutation(len(obs))
        _CACHE[name] = spec, stack([obs[i] for i in order])
    return _CACHE[name]


def max_diff(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in ((a.task, b.task), (a.cluster, b.cluster), (a.glob, b.glob)))


ENCODER_OPTIONS = [
    pytest.param(dict(), id="residual"),
    pytest.param(dict(self_relation=True), id="residual-self"),
    pytest.param(dict(faithful=True), id="faithful"),
]


@pytest.mark.parametrize("compact", ["never", "always"])
@pytest.mark.parametrize("opts", ENCODER_OPTIONS)
@pytest.mark.parametrize("name", SCENARIOS)
def test_dense_encoder_matches_pyg(name, opts, compact):
    spec, batch = scenario_batch(name)
    torch.manual_seed(0)
    ref = GraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=3, heads=4, **opts)
    with torch.no_grad():  # non-trivial attention and a non-zero dummy
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    dense = DenseGraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=3, heads=4, **opts)
    assert [(k, v.shape) for k, v in dense.state_dict().items()] == [(k, v.shape) for k, v in ref.state_dict().items()]
    dense.load_state_dict(ref.state_dict())
    dense.compact = compact  # static rows (every slot) or node rows only
    with torch.no_grad():
        a, b = ref(batch), dense(batch)
    assert max_diff(a, b) <= TOL
    # per-sample: batching does not change the dense output either
    with torch.no_grad():
        one = dense({k: v[:1] for k, v in batch.items()})
    assert (one.task[0] - b.task[0]).abs().max() <= TOL


@pytest.mark.parametrize("opts", ENCODER_OPTIONS)
@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6", "testbed-3"])
def test_one_source_relations_gathered_equal_the_reference_attention(name, opts):
    """The torch-geometric pass of ``policy.encoder=auto`` gathers the messages of the relations
    with one source per destination (hosts, from_hub) instead of running their attention: the
    same outputs and gradients as the plain reference (``policy.encoder=pyg``), whose attention
    over one edge is exactly 1 and passes an exactly zero gradient."""
    spec, batch = scenario_batch(name)
    torch.manual_seed(0)
    ref = GraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=2, heads=4, **opts)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
    fast = DenseGraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=2, heads=4, auto_pyg=True, **opts)
    fast.load_state_dict(ref.state_dict())
    assert not ref.one_source and fast.one_source and fast.uses_pyg(batch)
    outs = []
    for enc in (ref, fast):
        out = enc(batch)
        (out.task.square().sum() + out.cluster.sum() + out.glob.sum()).backward()
        outs.append(out)
    a, b = outs
    pairs = ((a.task, b.task), (a.cluster, b.cluster), (a.glob, b.glob))
    assert max(float((x.detach() - y.detach()).abs().max()) for x, y in pairs) <= 1e-6
    skipped = {relation for _, relation, _ in ONE_SOURCE_RELATIONS}
    assert skipped == {"hosts", "from_hub"}
    grads = dict(ref.named_parameters())
    zero_grads = 0
    for k, p in fast.named_parameters():
        ref_grad = grads[k].grad
        if any(f"__{r}__" in k for r in skipped) and ("lin_src" in k or "lin_dst" in k):
            assert p.grad is None and (ref_grad is None or (ref_grad == 0).all()), k  # None: output unused
            zero_grads += ref_grad is not None
            continue
        assert (ref_grad is None) == (p.grad is None), k  # both None: the parameter does not reach the outputs
        if ref_grad is not None:
            assert (ref_grad - p.grad).abs().max() <= 1e-5 * (1 + ref_grad.abs().max()), k
    assert zero_grads >= 2  # the first layer's skipped relations do reach the outputs in the reference


def test_one_source_relations_refuse_attention_dropout():
    spec, batch = scenario_batch("synthetic-3")
    enc = GraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=1, heads=4)
    enc.han.convs[0].dropout = 0.1
    enc.one_source = True
    with pytest.raises(ValueError, match="dropout"):
        enc(batch)
    enc.one_source = False
    enc(batch)  # the reference keeps its dropout


def _policies(spec, **cfg):
    torch.manual_seed(0)
    pyg = TapFingerPolicy(spec, PolicyConfig(encoder="pyg", **cfg))
    dense = TapFingerPolicy(spec, PolicyConfig(encoder="dense", **cfg))
    assert [(k, v.shape) for k, v in dense.state_dict().items()] == [(k, v.shape) for k, v in pyg.state_dict().items()]
    dense.load_state_dict(pyg.state_dict())
    return pyg, dense


POLICY_OPTIONS = [
    pytest.param(dict(hidden=32, pointer_dim=32, pointer_ffn=64), id="shared"),
    pytest.param(dict(hidden=32, pointer_dim=32, pointer_ffn=64, shared_actors=False), id="unshared"),
    pytest.param(dict(hidden=32, self_relation=True, alloc_head="joint"), id="self-joint"),
    pytest.param(
        dict(faithful=True, hidden=32, han_layers=2, shared_actors=False, pointer_dim=32, pointer_ffn=64,
             alloc_head="joint"),
        id="faithful-unshared",
    ),
]


@pytest.mark.parametrize("opts", POLICY_OPTIONS)
@pytest.mark.parametrize("name", ["synthetic-3", "hetero-6", "testbed-6"])
def test_policy_evaluate_matches_pyg(name, opts):
    spec, batch = scenario_batch(name)
    pyg, dense = _policies(spec, **opts)
    gen = torch.Generator().manual_seed(0)
    action = pyg.act(batch, generator=gen).action
    for pol in (pyg, dense):
        pol.train()
    lp_a, ent_a, skip_a, v_a = pyg.evaluate(batch, action)
    lp_b, ent_b, skip_b, v_b = dense.evaluate(batch, action)
    assert torch.equal(skip_a, skip_b)
    for x, y in ((lp_a, lp_b), (ent_a, ent_b), (v_a, v_b)):
        assert (x - y).abs().max() <= TOL
    # gradients agree too
    (lp_a.sum() + v_a.sum()).backward()
    (lp_b.sum() + v_b.sum()).backward()
    ga = dict(pyg.named_parameters())
    for k, p in dense.named_parameters():
        if ga[k].grad is None or p.grad is None:
            # single-edge relations (hosts, from_hub): PyG's softmax over one edge passes a
            # (numerically) zero gradient, the dense path none at all
            other = ga[k].grad if p.grad is None else p.grad
            assert other is None or other.abs().max() <= 1e-6, k
            continue
        assert (ga[k].grad - p.grad).abs().max() <= 1e-4 * (1 + ga[k].grad.abs().max()), k


def test_sampled_actions_equal_with_same_generator():
    spec, batch = scenario_batch("synthetic-6")
    pyg, dense = _policies(spec, hidden=32)
    for det in (True, False):
        a = pyg.act(batch, deterministic=det, generator=torch.Generator().manual_seed(3), with_value=True)
        b = dense.act(batch, deterministic=det, generator=torch.Generator().manual_seed(3), with_value=True)
        assert torch.equal(a.action, b.action)
        assert (a.log_prob - b.log_prob).abs().max() <= TOL
        assert (a.value - b.value).abs().max() <= TOL


def test_shipped_checkpoint_loads_into_both_encoders():
    path = ROOT / "checkpoints" / "synthetic-3.pt"
    if not path.exists():
        pytest.skip("no shipped checkpoint")
    pol, meta = load_policy_checkpoint(path)
    assert meta["policy_config"].encoder == "auto"  # stored config has no encoder key: default
    ref = TapFingerPolicy(pol.spec, PolicyConfig.from_dict({**meta["policy_config"].to_dict(), "encoder": "pyg"}))
    ref.load_state_dict(pol.state_dict())
    ref.eval()
    _, batch = scenario_batch("synthetic-3")
    # the trained policy sees equal-probability slots (same task type and age); the
    # deterministic choice resolves such ties identically whatever the encoder's round-off
    action = ref.act(batch, deterministic=True, generator=torch.Generator().manual_seed(0)).action
    pol.encoder.auto_pyg = False  # the dense path on this CPU batch
    other = pol.act(batch, deterministic=True, generator=torch.Generator().manual_seed(0)).action
    assert torch.equal(action, other)
    with torch.no_grad():
        obs = pol.as_tensors(batch)
        enc_ref, enc = ref.encode(obs), pol.encode(obs)
        a, b = ref.evaluate(batch, action), pol.evaluate(batch, action)
    for field in ("task", "cluster", "glob"):  # the encoders agree to TOL on real observations
        assert (getattr(enc_ref, field) - getattr(enc, field)).abs().max() <= TOL
    # The trained heads amplify the encoders' float32 round-off into their outputs (the
    # log-probabilities and entropies of a shipped file), so those get HEAD_TOL; the untrained
    # models above meet TOL throughout.
    for x, y in zip(a, b):
        assert (x.float() - y.float()).abs().max() <= HEAD_TOL


SYNC_OPS = {"aten::nonzero", "aten::_local_scalar_dense", "aten::masked_select", "aten::item",
            "aten::unique", "aten::_unique2", "aten::bincount", "aten::repeat_interleave"}


@pytest.mark.parametrize("variant", ["tapfinger", "no-pointer", "no-han", "vanilla"])
def test_dense_act_and_evaluate_have_no_host_syncs(variant):
    """No data-dependent shapes or host reads on the dense path (profiled op names)."""
    from torch.profiler import ProfilerActivity, profile

    spec, batch = scenario_batch("synthetic-6")
    pol = TapFingerPolicy(spec, PolicyConfig(variant=variant, hidden=32))
    if isinstance(pol.encoder, DenseGraphEncoder):
        pol.encoder.compact = "never"  # the static layout (what "auto" runs off the CPU)
        pol.encoder.auto_pyg = False  # the dense path even for this CPU batch
    pol.pointer_compact = "never"  # likewise the pointer's static rows
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = pol.act(batch, generator=torch.Generator().manual_seed(0), with_value=True)
        lp, ent, skip, value = pol.evaluate(batch, out.action)
        (lp.sum() + value.sum()).backward()
    names = {e.key for e in prof.key_averages()}
    assert not names & SYNC_OPS, names & SYNC_OPS


def test_compact_rows_handle_empty_batches_and_auto_mode():
    spec, batch = scenario_batch("synthetic-3")
    empty = stack([empty_like({k: v[0].numpy() for k, v in batch.items()})] * 9)
    torch.manual_seed(0)
    ref = GraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=16, layers=2, heads=4, self_relation=True)
    dense = DenseGraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=16, layers=2, heads=4, self_relation=True)
    dense.load_state_dict(ref.state_dict())
    assert dense.compact == "auto"
    assert dense._use_compact(batch) and not dense._use_compact({k: v[:1] for k, v in batch.items()})
    with torch.no_grad():
        for mode in ("always", "never"):
            dense.compact = mode
            assert max_diff(ref(empty), dense(empty)) <= TOL


def test_policy_config_encoder_field():
    from envs.config import ConfigError

    assert PolicyConfig().encoder == "auto"
    assert PolicyConfig.from_dict({"encoder": "pyg"}).encoder == "pyg"
    assert PolicyConfig.from_dict({"encoder": "dense"}).encoder == "dense"
    with pytest.raises(ConfigError):
        PolicyConfig(encoder="sparse")


# ------------------------------------------------------------------ vectorised per-agent GAE
def test_vectorised_gae_equals_tianshou_per_column():
    """Per-agent GAE (:func:`~agents.training.gae.gae_advantages` on the episode structure
    :meth:`MultiAgentPPO.episode_structure` reads) == tianshou's ``compute_episodic_return`` per agent column
    on a multi-env buffer with terminations, truncations, unfinished episodes and wrap-around."""
    from types import SimpleNamespace

    from tianshou.algorithm.algorithm_base import Algorithm
    from tianshou.data import Batch, VectorReplayBuffer

    from agents.training.gae import gae_advantages
    from agents.training.tianshou_glue.algorithm import MultiAgentPPO

    rng = np.random.default_rng(0)
    n_env, n_agents = 4, 3
    buf = VectorReplayBuffer(4 * 25, n_env)  # 25 per env: the long run below wraps around
    for _ in range(37):
        term = rng.random(n_env) < 0.08
        trunc = ~term & (rng.random(n_env) < 0.05)
        buf.add(Batch(
            obs=rng.random((n_env, 2)), act=np.zeros(n_env), rew=rng.random(n_env),
            terminated=term, truncated=trunc, obs_next=rng.random((n_env, 2)), info=[{}] * n_env,
        ))
    batch, indices = buf.sample(0)
    T = len(indices)
    rew = rng.normal(size=(T, n_agents))
    v_s = rng.normal(size=(T, n_agents))
    v_next = rng.normal(size=(T, n_agents))
    fake = SimpleNamespace(value_mask=Algorithm.value_mask)
    bootstrap, end_flag = MultiAgentPPO.episode_structure(fake, batch, buf, indices)
    for lam in (0.95, 1.0):
        adv = gae_advantages(v_s, v_next * bootstrap[:, None], rew, end_flag, 0.97, lam)
        ret = adv + v_s
        for i in range(n_agents):
            col = Batch(rew=rew[:, i], terminated=batch.terminated, truncated=batch.truncated)
            r_ref, a_ref = Algorithm.compute_episodic_return(
                col, buf, indices, v_next[:, i], v_s[:, i], gamma=0.97, gae_lambda=lam
            )
            np.testing.assert_array_equal(adv[:, i], a_ref)
            np.testing.assert_array_equal(ret[:, i], r_ref)
    assert batch.terminated.any() and batch.truncated.any() and len(buf.unfinished_index())


def test_auto_encoder_runs_pyg_on_cpu_batches_and_dense_at_batch_one():
    """``encoder=auto`` picks the implementation per call; both give the reference's outputs."""
    spec, batch = scenario_batch("hetero-6")
    torch.manual_seed(0)
    ref = GraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=2, heads=4)
    auto = DenseGraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=2, heads=4, auto_pyg=True)
    auto.load_state_dict(ref.state_dict())
    big = {k: torch.cat([v] * 4) for k, v in batch.items()}
    one = {k: v[:1] for k, v in batch.items()}
    assert big["pending_mask"].shape[0] >= COMPACT_MIN_BATCH
    assert auto.uses_pyg(big) and not auto.uses_pyg(one)
    dense_only = DenseGraphEncoder(spec.Fp, spec.Fr, spec.Fc, hidden=32, layers=2, heads=4)
    assert not dense_only.uses_pyg(big)
    with torch.no_grad():
        assert max_diff(ref(big), auto(big)) <= TOL
        assert max_diff(ref(one), auto(one)) <= TOL
    pol = TapFingerPolicy(spec, PolicyConfig(hidden=32))
    assert isinstance(pol.encoder, DenseGraphEncoder) and pol.encoder.auto_pyg
