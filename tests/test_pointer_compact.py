"""The pointer's compact rows (only agents with a feasible slot, CPU batches) compute the same
function as the full static rows: logits, sampled actions, log-probs, entropies and gradients."""

from __future__ import annotations

import pytest
import torch

from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.pointer_rows import POINTER_WIDTH_GROUPS, pointer_row_groups, pointer_widths
from agents.training.precision import BFLOAT16, autocast
from networks.gemm import bucket_rows
from networks.heads import COMPACT_MIN_BATCH, MASK_VALUE, compact_pays
from tests.test_dense_encoder import empty_like, scenario_batch, stack

TOL = 1e-5


def _policy(spec, **cfg) -> TapFingerPolicy:
    torch.manual_seed(0)
    pol = TapFingerPolicy(spec, PolicyConfig(hidden=32, pointer_dim=32, pointer_ffn=64, **cfg))
    with torch.no_grad():  # sharper attention than the initialisation's
        for p in pol.pointer.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return pol


def _run(pol: TapFingerPolicy, batch, mode: str):
    pol.pointer_compact = mode
    pol.zero_grad()
    out = pol.act(batch, generator=torch.Generator().manual_seed(3), with_value=True)
    lp, ent, skip, value = pol.evaluate(batch, out.action)
    (lp.sum() + 0.1 * ent.sum() + value.sum()).backward()
    grads = {k: p.grad.clone() for k, p in pol.named_parameters() if p.grad is not None}
    with torch.no_grad():
        obs = pol.as_tensors(batch)
        logits = pol._selection_logits(obs, pol.encode(obs))
    return out, lp, ent, skip, logits, grads


@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6", "testbed-3"])
def test_compact_pointer_matches_full_rows(name):
    spec, batch = scenario_batch(name)
    pol = _policy(spec)
    skip = ~batch["feasible"].bool().any(-1)
    assert skip.any() and (~skip).any(), "the batch must mix agents with and without a choice"
    full = _run(pol, batch, "never")
    comp = _run(pol, batch, "always")
    assert torch.equal(full[0].action, comp[0].action)
    for a, b in zip(full[1:3], comp[1:3]):
        assert (a - b).abs().max() <= TOL
    assert torch.equal(full[3], comp[3])
    assert (full[4] - comp[4]).abs().max() <= TOL
    assert (comp[4][skip] == MASK_VALUE).all()  # skipped agents: every logit masked, as in full rows
    assert full[5].keys() == comp[5].keys() and "pointer.layers.0.qkv.weight" in comp[5]
    for k in full[5]:
        assert (full[5][k] - comp[5][k]).abs().max() <= TOL * max(1.0, float(full[5][k].abs().max())), k


def test_compact_pointer_handles_a_batch_where_no_agent_can_act():
    spec, batch = scenario_batch("synthetic-3")
    empty = stack([empty_like({k: v[0].numpy() for k, v in batch.items()})] * COMPACT_MIN_BATCH)
    pol = _policy(spec)
    pol.pointer_compact = "always"
    lp, ent, skip = pol.evaluate_actions(empty, torch.zeros(COMPACT_MIN_BATCH, spec.N, 3, dtype=torch.long))
    assert skip.all() and (lp == 0).all() and (ent == 0).all()


def test_compact_pointer_auto_rule_and_unshared_actors():
    spec, batch = scenario_batch("synthetic-3")
    assert compact_pays(batch["feasible"]) and not compact_pays(batch["feasible"][:1])
    pol = _policy(spec, shared_actors=False)  # per-agent weights: always the full rows
    full, comp = _run(pol, batch, "never"), _run(pol, batch, "always")
    assert torch.equal(full[0].action, comp[0].action) and torch.equal(full[4], comp[4])
    pol.pointer_compact = "sometimes"
    with pytest.raises(ValueError, match="pointer_compact"):
        pol.evaluate_actions(batch, full[0].action)
    assert torch.isfinite(full[1]).all()


def test_bfloat16_compact_rows_are_padded_to_a_bucket_and_match_full_rows():
    """Under bf16 autocast on CPU each width group's rows are padded (with copies of its first
    row) to a bucket of networks/gemm.py, so the pointer's products see repeated shapes; the
    padding is dropped."""
    spec, batch = scenario_batch("hetero-6")
    pol = _policy(spec)
    feasible = batch["feasible"].bool()
    B, N, P = feasible.shape
    groups = pointer_row_groups(batch["pending_mask"].bool().reshape(-1, P), feasible.reshape(-1, P))
    assert len(groups) == 2 and any(bucket_rows(g.count) != g.count for g in groups), "the batch must need padding"
    seen: list[tuple[int, int]] = []
    forward = pol.pointer.forward
    pol.pointer.forward = lambda slots, occ, feas: (seen.append(tuple(occ.shape[::2])), forward(slots, occ, feas))[1]
    logits = {}
    for mode in ("never", "always"):
        pol.pointer_compact = mode
        seen.clear()
        with torch.no_grad(), autocast(BFLOAT16, "cpu"):
            obs = pol.as_tensors(batch)
            logits[mode] = pol._selection_logits(obs, pol.encode(obs))
    assert seen == [(bucket_rows(g.count), g.slots.shape[1]) for g in groups]
    masked = logits["always"] == MASK_VALUE
    assert torch.equal(masked, logits["never"] == MASK_VALUE)
    assert (logits["always"] - logits["never"])[~masked].abs().max() < 0.05


@pytest.mark.parametrize("name", ["synthetic-3", "multi-3", "hetero-6", "testbed-3"])
@pytest.mark.parametrize("pad", [False, True])
def test_pointer_row_groups_partition_the_agents_by_needed_slots(name, pad):
    _, batch = scenario_batch(name)
    P = batch["feasible"].shape[-1]
    occ, feas = batch["pending_mask"].bool().reshape(-1, P), batch["feasible"].bool().reshape(-1, P)
    groups = pointer_row_groups(occ, feas, pad=pad)
    widths = pointer_widths(P)
    assert widths[-1] == P and len(widths) == POINTER_WIDTH_GROUPS and list(widths) == sorted(set(widths))
    real = torch.cat([g.rows[: g.count] for g in groups])
    assert torch.equal(real.sort().values, feas.any(-1).nonzero().squeeze(1))  # every agent with a choice, once
    need = occ | feas
    below = 0
    for g in groups:
        n, w = g.slots.shape
        assert w in widths and w > below and n == (bucket_rows(g.count) if pad else g.count)
        assert torch.equal(g.rows[g.count:], g.rows[:1].expand(n - g.count))  # padding repeats the first row
        assert torch.equal(g.slots // P, g.rows.unsqueeze(1).expand(n, w))  # slots of the row's own agent
        counts = need[g.rows].sum(-1)
        assert (counts > below).all() and (counts <= w).all()  # the smallest width that holds them
        held = need.reshape(-1)[g.slots]
        assert torch.equal(held.sum(-1), counts)  # every needed slot inside the width ...
        assert torch.equal(held, torch.arange(w) < counts.unsqueeze(1))  # ... and first, in slot order
        assert (g.slots.diff(dim=1)[held[:, 1:]] > 0).all()
        below = w


def test_pointer_widths():
    assert pointer_widths(10, 2) == (5, 10) and pointer_widths(10, 1) == (10,)
    assert pointer_widths(3, 5) == (1, 2, 3) and pointer_widths(1, 2) == (1,)
