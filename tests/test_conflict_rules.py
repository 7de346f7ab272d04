"""The conflict-rule registry, the masked distributions and the named result of the joint pass."""

from __future__ import annotations

import dataclasses

import torch

from agents.policy.config import PolicyConfig
from agents.policy.conflict_rules import (
    CONFLICT_RULES, BayesRule, ConflictRule, RoomRule, SequentialRule, conflict_rule,
)
from agents.policy.distribution import JointDistribution, MaskedCategorical
from agents.policy.modes import CONFLICT_MODES, SEQUENTIAL_MODES
from agents.policy.network import JointPass, TapFingerPolicy
from agents.policy.variants import ENCODER_BUILDERS, SELECTOR_BUILDERS, VARIANTS
from envs import load_scenario

from test_policy import batch_of, drive

TINY = dict(hidden=16, han_layers=1, heads=2, pointer_dim=8, pointer_ffn=16)


def test_every_conflict_mode_has_one_rule():
    assert set(CONFLICT_RULES) == set(CONFLICT_MODES)
    assert all(issubclass(rule, ConflictRule) for rule in CONFLICT_RULES.values())
    assert {m for m, rule in CONFLICT_RULES.items() if issubclass(rule, SequentialRule)} == set(SEQUENTIAL_MODES)
    rule = conflict_rule(PolicyConfig(conflicts="bayes", prior="code"))
    assert isinstance(rule, BayesRule) and rule.prior == "code"
    assert isinstance(conflict_rule(PolicyConfig(conflicts="room")), RoomRule)


def test_masked_categorical_excludes_the_masked_entries():
    logits = torch.tensor([[2.0, 1.0, 3.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [False, True, True]])
    dist = MaskedCategorical.from_logits(logits, mask)
    assert torch.equal(dist.mode(), torch.tensor([0, 1]))
    torch.testing.assert_close(dist.log_probs.exp().sum(-1), torch.ones(2))
    assert torch.all(dist.log_probs.exp()[~mask] == 0)
    samples = dist.sample(torch.rand(2000, 2, 3))
    assert mask.gather(-1, samples.T).all()  # (2, 2000): every sample is an unmasked entry
    assert torch.equal(dist.log_prob(torch.tensor([1, 2])), dist.log_probs[[0, 1], [1, 2]])


def test_joint_distribution_masks_skipped_agents_and_losers():
    sel = MaskedCategorical.from_logits(torch.randn(1, 3, 4))
    alloc = MaskedCategorical.from_logits(torch.randn(1, 3, 5))
    slot, a = torch.tensor([[0, 1, 2]]), torch.tensor([[1, 2, 3]])
    skip, lost = torch.tensor([[True, False, False]]), torch.tensor([[False, True, False]])
    log_prob, entropy = JointDistribution(sel, alloc, skip, lost).log_prob_and_entropy(slot, a)
    assert log_prob[0, 0] == 0 and entropy[0, 0] == 0
    assert log_prob[0, 1] == sel.log_prob(slot)[0, 1]
    assert log_prob[0, 2] == sel.log_prob(slot)[0, 2] + alloc.log_prob(a)[0, 2]


def test_the_joint_pass_returns_named_fields():
    spec, obs = drive(load_scenario("synthetic-3"), seed=5, steps=10)
    batch_np = batch_of(obs[-3:])
    assert [f.name for f in dataclasses.fields(JointPass)] == [
        "slot", "allocation", "lost", "log_prob", "entropy", "skip", "posterior"]
    for mode in CONFLICT_MODES:
        torch.manual_seed(0)
        pol = TapFingerPolicy(spec, PolicyConfig(**TINY, conflicts=mode)).eval()
        batch = pol.as_tensors(batch_np)
        with torch.inference_mode():
            enc = pol.encode(batch)
            noise = pol.draw_noise(batch, False, torch.Generator().manual_seed(1))
            out = pol._joint_pass(batch, enc, noise=noise)
            again = pol._joint_pass(batch, enc, torch.stack([out.slot, out.allocation, out.lost.long()], -1))
        assert (out.posterior is None) == (mode in SEQUENTIAL_MODES) and again.posterior is None
        assert torch.equal(again.log_prob, out.log_prob) and torch.equal(again.skip, out.skip)


def test_variants_build_from_their_constructors():
    assert {v.encoder for v in VARIANTS} <= set(ENCODER_BUILDERS)
    assert {v.selector for v in VARIANTS} <= set(SELECTOR_BUILDERS)
    assert {type(v.build_selector()).__name__ for v in VARIANTS} == {"PointerSelector", "UniformSelector", "FifoSelector"}
