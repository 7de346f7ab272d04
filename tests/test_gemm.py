"""Row bucketing of the linear layers under bfloat16 autocast on CPU (networks/gemm.py): the
buckets are few and tight, the padded products give the plain products' values and gradients,
float32 is untouched, and every linear layer of the policy's update pass sees a row count that
repeats (oneDNN builds a kernel per shape, so data-dependent row counts would build one per call): a
bucket, or a pointer group's bucketed agent count times its slot width (``rows_prebucketed``).
Also the per-head product ``scale_heads``."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from test_dense_encoder import scenario_batch  # tests/ is on sys.path (pytest rootdir insertion)

from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.pointer_rows import pointer_widths
from agents.training.precision import BFLOAT16, autocast
from networks.gemm import (
    BUCKETS_PER_OCTAVE, MIN_ROW_STEP, bucket_rows, buckets_rows, linear, rows_prebucketed, scale_heads,
)

torch.set_num_threads(1)


def test_buckets_are_tight_few_and_stable():
    sizes = range(0, 70_000)
    b = [bucket_rows(m) for m in sizes]
    assert b[0] == 0 and b[1] == MIN_ROW_STEP and b[1024] == 1024 and b[1025] == 1024 + 128
    for m, k in zip(sizes, b):
        assert k >= m and k % MIN_ROW_STEP == 0
        assert k - m < max(MIN_ROW_STEP, m / BUCKETS_PER_OCTAVE + 1)
        assert bucket_rows(k) == k  # a bucket is its own bucket
    # the compact layouts' row counts: a few thousand distinct sizes -> a few dozen shapes
    assert len({bucket_rows(m) for m in range(2000, 5001)}) <= 2 * BUCKETS_PER_OCTAVE


@pytest.mark.parametrize("precision", ["float32", BFLOAT16])
def test_rows_are_padded_only_under_bfloat16_autocast_on_cpu(precision):
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 37, 8), torch.randn(6, 8), torch.randn(6)
    probe = _MatmulRows()
    with probe, autocast(precision, "cpu"):
        assert buckets_rows(x) == (precision == BFLOAT16)
        y = linear(x, w, b)
    assert y.shape == (3, 37, 6)
    assert probe.rows == ([112] if precision == BFLOAT16 else [111])  # 111 rows, bucket 112
    if precision != BFLOAT16:
        assert torch.equal(y, F.linear(x, w, b))


@pytest.mark.parametrize("rows", [1, 37, 1000, 1024, 2049])  # 1024: a bucket, not padded
def test_bucketed_linear_matches_plain_autocast_values_and_gradients(rows):
    torch.manual_seed(rows)
    x = torch.randn(rows, 3, 24, requires_grad=True)
    w = torch.randn(16, 24, requires_grad=True)
    b = torch.randn(16, requires_grad=True)
    grads = []
    outs = []
    for fn in (F.linear, linear):
        with autocast(BFLOAT16, "cpu"):
            y = fn(x, w, b)
        outs.append(y.float())
        g = torch.autograd.grad((y.float() * torch.linspace(-1, 1, 16)).sum(), (x, w, b))
        grads.append(g)
    assert outs[1].shape == (rows, 3, 16)
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-2, atol=1e-2)
    for g1, g0 in zip(grads[1], grads[0]):
        torch.testing.assert_close(g1, g0, rtol=2e-2, atol=5e-2)


class _MatmulRows(TorchDispatchMode):
    """Records the row count of every 2-D matrix product (the linear layers' forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) == "aten.addmm.default":
            self.rows.append(args[1].shape[0])
        elif str(func) == "aten.mm.default":
            self.rows.append(args[0].shape[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("faithful", [False, True])
@pytest.mark.parametrize("encoder", ["dense", "pyg"])
def test_every_linear_layer_of_the_update_sees_bucketed_rows(encoder, faithful):
    spec, obs = scenario_batch("hetero-6")
    small = dict(hidden=32, han_layers=2, heads=4, pointer_dim=16, pointer_ffn=32, encoder=encoder)
    torch.manual_seed(0)
    cfg = PolicyConfig.paper(**small) if faithful else PolicyConfig(**small)
    pol = TapFingerPolicy(spec, cfg)
    action = pol.act(obs, generator=torch.Generator().manual_seed(0)).action
    probe = _MatmulRows()
    with probe, autocast(BFLOAT16, "cpu"):
        pol.evaluate(obs, action)
    assert len(probe.rows) > 10
    P = obs["pending_mask"].shape[-1]

    def repeats(m: int) -> bool:  # a bucket, or a bucketed pointer group at one of its widths
        return bucket_rows(m) == m or any(m % w == 0 and bucket_rows(m // w) == m // w for w in pointer_widths(P))

    unbucketed = sorted({m for m in probe.rows if not repeats(m)})
    assert unbucketed == [], f"linear layers ran on row counts that do not repeat: {unbucketed}"


def test_prebucketed_rows_are_not_padded_again_on_this_thread_only():
    torch.manual_seed(0)
    x, w = torch.randn(111, 8), torch.randn(6, 8)
    seen: dict[str, list[int]] = {}

    def run(name: str) -> None:
        probe = _MatmulRows()
        with probe, autocast(BFLOAT16, "cpu"):
            linear(x, w)
        seen[name] = probe.rows

    with rows_prebucketed():
        run("inside")
        with rows_prebucketed():
            run("nested")
        run("after nested")
        other = threading.Thread(target=run, args=("other thread",))
        other.start()
        other.join()
    run("outside")
    assert seen == {"inside": [111], "nested": [111], "after nested": [111], "other thread": [112], "outside": [112]}


@pytest.mark.parametrize("dim", [16, 32])  # below / at BROADCAST_MIN_INNER
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_scale_heads_is_the_broadcast_product(dtype, dim):
    torch.manual_seed(0)
    x = torch.randn(37, 4, dim).to(dtype).requires_grad_()
    a = torch.randn(37, 4).to(dtype).requires_grad_()
    got = scale_heads(x, a)
    want = x * a.unsqueeze(-1)
    assert got.shape == (37, 4, dim) and got.dtype == dtype
    assert torch.equal(got, want)  # the same products, elementwise
    g = torch.randn(37, 4, dim).to(dtype)
    gx, ga = torch.autograd.grad(got, (x, a), g)
    wx, wa = torch.autograd.grad(want, (x, a), g)
    assert torch.equal(gx, wx)
    torch.testing.assert_close(ga, wa, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=1e-2 if dtype == torch.bfloat16 else 1e-6)
