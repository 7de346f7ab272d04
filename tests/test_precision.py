"""bfloat16 autocast of the policy's network passes (``train.precision``, agents/training/precision.py):
both encoders run under it, the distributions stay float32 and close to the float32 policy,
gradients reach every parameter, and training applies it to collection and the update only."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from test_dense_encoder import scenario_batch  # tests/ is on sys.path (pytest rootdir insertion)

from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.training.config import TrainConfig
from agents.training.precision import BFLOAT16, FLOAT32, PRECISIONS, autocast, check_precision
from agents.training.tianshou_glue.algorithm import TianshouJointPolicy
from envs.config import ConfigError
from envs.gym_env import EdgeClustersEnv

torch.set_num_threads(1)
SMALL = dict(hidden=32, han_layers=2, heads=4, pointer_dim=16, pointer_ffn=32)
#: bfloat16 keeps 8 bits of mantissa: log-probabilities move by a few 1e-3 on average
MEAN_LOGP_TOL = 0.02
MAX_LOGP_TOL = 0.25


def _policy(name: str, **cfg) -> tuple[TapFingerPolicy, dict[str, torch.Tensor]]:
    spec, obs = scenario_batch(name)
    torch.manual_seed(0)
    return TapFingerPolicy(spec, PolicyConfig(**{**SMALL, **cfg})), obs


def test_precision_names_are_checked():
    assert PRECISIONS == (FLOAT32, BFLOAT16)
    assert check_precision(BFLOAT16) == BFLOAT16
    with pytest.raises(ValueError, match="precision must be one of"):
        check_precision("float16")
    with pytest.raises(ValueError, match="precision must be one of"):
        autocast("half", "cpu")
    with pytest.raises(ConfigError, match="precision must be one of"):
        TrainConfig.from_dict({"precision": "fp16"}).validate()
    net, _ = _policy("sjf-3")
    with pytest.raises(ValueError, match="precision must be one of"):
        TianshouJointPolicy(net, action_space=EdgeClustersEnv("sjf-3").action_space, precision="bf16")
    assert not torch.is_autocast_enabled("cpu")
    with autocast(BFLOAT16, "cpu"):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast(FLOAT32, "cpu"):
        assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("encoder", ["dense", "pyg"])
@pytest.mark.parametrize("conflicts", ["bayes", "room"])
@pytest.mark.parametrize("name", ["synthetic-3", "hetero-6"])
def test_bfloat16_evaluate_is_float32_and_close(name, conflicts, encoder, faithful):
    cfg = dict(encoder=encoder, conflicts=conflicts)
    pol, obs = _policy(name, **(PolicyConfig.paper(**SMALL, **cfg).to_dict() if faithful else cfg))
    gen = torch.Generator().manual_seed(0)
    action = pol.act(obs, generator=gen).action
    with torch.no_grad():
        lp32, ent32, skip32, v32 = pol.evaluate(obs, action)
        with autocast(BFLOAT16, "cpu"):
            lp16, ent16, skip16, v16 = pol.evaluate(obs, action)
    for t in (lp16, ent16, v16):
        assert t.dtype == torch.float32 and bool(torch.isfinite(t).all())
    assert torch.equal(skip16, skip32)
    active = ~skip32
    assert bool(active.any())
    diff = (lp16 - lp32)[active].abs()
    assert float(diff.mean()) < MEAN_LOGP_TOL and float(diff.max()) < MAX_LOGP_TOL
    assert float(diff.max()) > 0.0, "autocast did not reach the network passes"
    assert float((v16 - v32).abs().max()) < 0.05 * max(1.0, float(v32.abs().max()))


@pytest.mark.parametrize("conflicts", ["bayes", "sequential"])
def test_bfloat16_act_samples_valid_actions_with_float32_log_probs(conflicts):
    pol, obs = _policy("synthetic-3", conflicts=conflicts)
    with autocast(BFLOAT16, "cpu"):
        out16 = pol.act(obs, generator=torch.Generator().manual_seed(0), with_value=True)
        lp_again, _, _, _ = pol.evaluate(obs, out16.action)
    out32 = pol.act(obs, generator=torch.Generator().manual_seed(0))
    assert out16.log_prob.dtype == torch.float32 and out16.value.dtype == torch.float32
    assert torch.equal(out16.skip, out32.skip)
    feasible = obs["feasible"].bool()
    slot, alloc = out16.action[..., 0], out16.action[..., 1]
    chosen_ok = feasible.gather(-1, slot.unsqueeze(-1)).squeeze(-1)
    assert bool((chosen_ok | out16.skip).all()), "a sampled slot is not feasible"
    assert bool((alloc[out16.skip] == 0).all())
    # the behaviour log-prob is the one the update recomputes under the same precision
    active = ~out16.skip
    assert float((lp_again.detach() - out16.log_prob)[active].abs().max()) < 0.05


@pytest.mark.parametrize("encoder", ["dense", "pyg"])
def test_bfloat16_backward_gives_float32_gradients_to_the_same_parameters(encoder):
    pol, obs = _policy("hetero-6", encoder=encoder)
    action = pol.act(obs, generator=torch.Generator().manual_seed(1)).action

    def grads(precision: str) -> dict[str, torch.Tensor]:
        pol.zero_grad()
        with autocast(precision, "cpu"):
            lp, ent, _, v = pol.evaluate(obs, action)
        (lp.sum() + 0.01 * ent.sum() + v.sum()).backward()
        return {n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None}

    g32, g16 = grads(FLOAT32), grads(BFLOAT16)
    assert g16.keys() == g32.keys() and len(g32) > 20
    for n, g in g16.items():
        assert g.dtype == torch.float32 and bool(torch.isfinite(g).all()), n
    flat32 = torch.cat([g.flatten() for g in g32.values()])
    flat16 = torch.cat([g16[n].flatten() for n in g32])
    cos = float(torch.nn.functional.cosine_similarity(flat32, flat16, dim=0))
    assert cos > 0.98, f"bfloat16 gradient direction differs: cosine {cos:.4f}"


#: elementwise arithmetic whose operands should share a dtype under autocast
_ELEMENTWISE = {"aten.mul.Tensor", "aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor"}


class _MixedProducts(TorchDispatchMode):
    """Records elementwise arithmetic on two activations of different floating dtypes (an
    operand that is a parameter, e.g. an attention vector times activations, is allowed)."""

    def __init__(self, params: set[int]) -> None:
        super().__init__()
        self.params = params
        self.hits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in _ELEMENTWISE:
            ts = [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dim() > 0]
            if len({t.dtype for t in ts}) > 1 and not any(t.untyped_storage().data_ptr() in self.params for t in ts):
                self.hits.append(f"{func} {[(tuple(t.shape), t.dtype) for t in ts]}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("encoder", ["dense", "pyg"])
def test_bfloat16_passes_multiply_activations_in_one_dtype(encoder, faithful):
    """A bfloat16 activation times a float32 one runs a slow mixed-dtype kernel on CPU: none in
    the update's pass."""
    cfg = PolicyConfig.paper(**SMALL, encoder=encoder).to_dict() if faithful else {"encoder": encoder}
    pol, obs = _policy("hetero-6", **cfg)
    action = pol.act(obs, generator=torch.Generator().manual_seed(0)).action
    params = {p.untyped_storage().data_ptr() for p in pol.parameters()}
    probe = _MixedProducts(params)
    with probe, autocast(BFLOAT16, "cpu"):  # (act runs the same encoder and heads, under
        pol.evaluate(obs, action)           # inference mode, which a dispatch mode cannot watch)
    assert probe.hits == []


class _Probe(torch.nn.Module):
    """Wraps a policy's ``act``/``evaluate`` and records the autocast state each call ran in."""

    def __init__(self, net: TapFingerPolicy) -> None:
        super().__init__()
        self.inner = net
        self.seen: list[tuple[str, bool]] = []

    def act(self, *a, **k):
        self.seen.append(("act", torch.is_autocast_enabled("cpu")))
        return self.inner.act(*a, **k)

    def evaluate(self, *a, **k):
        self.seen.append(("evaluate", torch.is_autocast_enabled("cpu")))
        return self.inner.evaluate(*a, **k)

    def value(self, *a, **k):
        self.seen.append(("value", torch.is_autocast_enabled("cpu")))
        return self.inner.value(*a, **k)


def test_collection_and_update_run_in_the_training_precision(tmp_path: Path):
    """The PPO update and collection inside training steps use ``train.precision``; evaluation
    outside training steps stays float32 (best.pt is chosen by what evaluate.py measures)."""
    from test_training import _spec

    from agents.training.envs import training_envs
    from agents.training.loop import build_algorithm, make_collectors
    from tianshou.utils.torch_utils import policy_within_training_step, torch_train_mode

    spec = _spec(tmp_path, "train.precision=bfloat16")
    envs = training_envs(spec.scenario, spec.train, 0)
    try:
        algorithm, net = build_algorithm(spec, envs, torch.device("cpu"))
        assert algorithm.precision == BFLOAT16 and algorithm.policy.precision == BFLOAT16
        probe = _Probe(net)
        algorithm.policy.actor.net = probe
        collector, _ = make_collectors(spec, algorithm, envs, None)
        collector.reset()
        collector.collect(n_step=8)  # outside a training step: evaluation
        assert probe.seen and all(not on for _, on in probe.seen)
        probe.seen.clear()
        with policy_within_training_step(algorithm.policy), torch_train_mode(algorithm.policy, False):
            collector.collect(n_step=40)
            assert {k for k, _ in probe.seen} == {"act"} and all(on for _, on in probe.seen)
            probe.seen.clear()
            stats = algorithm.update(buffer=collector.buffer, batch_size=16, repeat=1)
    finally:
        envs.close()
    assert "evaluate" in {k for k, _ in probe.seen} and all(on for _, on in probe.seen)
    assert math.isfinite(stats.loss) and math.isfinite(stats.policy_loss)
    assert stats.logp_mismatch < 0.05  # behaviour and recomputed log-probs, both in bfloat16
    for p in net.parameters():
        assert p.dtype == torch.float32
