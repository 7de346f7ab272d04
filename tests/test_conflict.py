"""Bayes conflict resolution (paper eq. 11) against hand-computed examples."""

from __future__ import annotations

import math

import pytest
import torch

from agents.policy.conflict import prior_weight, resolve_conflicts


def _t(rows, dtype=torch.float64):
    return torch.tensor(rows, dtype=dtype)


def _resolve(keys, score, free, minreq, active, prior="paper", seed=0):
    gen = torch.Generator().manual_seed(seed)
    return resolve_conflicts(
        torch.tensor([keys]), _t([score]), torch.tensor([free]), torch.tensor([minreq]),
        torch.tensor([active]), prior=prior, generator=gen,
    )


def test_prior_weights_hand_computed():
    free = torch.tensor([[[16, 16], [7, 5], [16, 0], [3, 9]]])
    minreq = torch.tensor([[[2, 1], [2, 1], [2, 1], [0, 3]]])
    # paper: min_r floor(free/minreq) over required resources
    # (16,16): 8 vs 16 -> 8; (7,5): 3 vs 5 -> 3; (16,0): gpu 0 -> 0; cpu not required: 9 // 3 = 3
    assert prior_weight(free, minreq, "paper").tolist() == [[8.0, 3.0, 0.0, 3.0]]
    # code: real ratio, (7,5) -> 3.5
    assert prior_weight(free, minreq, "code").tolist() == [[8.0, 3.5, 0.0, 3.0]]


def test_paper_posterior_hand_computed_three_agents():
    # all three pick task 5; scores 0.5, 0.3, 0.9; capacity counts 8, 4, 1 at min (2, 1)
    res = _resolve([5, 5, 5], [0.5, 0.3, 0.9], [[16, 16], [8, 8], [2, 1]], [[2, 1]] * 3, [True] * 3)
    joint = [0.5 * 8, 0.3 * 4, 0.9 * 1]
    z = sum(joint)
    assert res.posterior[0].tolist() == pytest.approx([j / z for j in joint])
    assert res.lost[0].tolist() == [False, True, True]  # agent 0 has the largest posterior (4.0)


def test_score_can_beat_capacity():
    # scores 0.1 vs 0.9, counts 8 vs 2: joint 0.8 vs 1.8 -> agent 1 wins
    res = _resolve([3, 3], [0.1, 0.9], [[16, 16], [4, 4]], [[2, 1], [2, 1]], [True, True])
    assert res.lost[0].tolist() == [True, False]
    assert res.posterior[0].tolist() == pytest.approx([0.8 / 2.6, 1.8 / 2.6])


def test_uncontested_and_different_tasks_never_lose():
    res = _resolve([1, 2, 3], [0.2, 0.2, 0.2], [[16, 16]] * 3, [[2, 1]] * 3, [True] * 3)
    assert not res.lost.any()
    assert res.posterior[0].tolist() == [1.0, 1.0, 1.0]


def test_two_separate_conflicts_in_one_sample():
    res = _resolve([7, 9, 7, 9], [0.5, 0.5, 0.5, 0.4], [[16, 16], [16, 16], [4, 4], [16, 16]],
                   [[2, 1]] * 4, [True] * 4)
    # task 7: agents 0 (8*0.5=4) vs 2 (2*0.5=1) -> 0 wins; task 9: agents 1 (4) vs 3 (3.2) -> 1 wins
    assert res.lost[0].tolist() == [False, False, True, True]


def test_inactive_agents_do_not_compete():
    # agent 1 would win (largest joint) but the task is infeasible for it: it is not active
    res = _resolve([4, 4, 4], [0.3, 0.9, 0.2], [[4, 4], [16, 16], [16, 16]], [[2, 1]] * 3, [True, False, True])
    # active: agent 0 joint 0.3*2=0.6, agent 2 joint 0.2*8=1.6 -> agent 2 wins
    assert res.lost[0].tolist() == [True, False, False]
    assert res.posterior[0, 1].item() == 0.0
    assert res.posterior[0].tolist() == pytest.approx([0.6 / 2.2, 0.0, 1.6 / 2.2])


def test_ties_broken_by_seeded_generator():
    # joint 0.5*8 = 1.0*4 = 4.0 for agents 0 and 1; agent 2 is below (0.5*2 = 1)
    args = ([6, 6, 6], [0.5, 1.0, 0.5], [[16, 16], [8, 8], [4, 4]], [[2, 1]] * 3, [True] * 3)
    winners = []
    for seed in range(40):
        a = _resolve(*args, seed=seed).lost[0]
        b = _resolve(*args, seed=seed).lost[0]
        assert torch.equal(a, b)  # same seed, same outcome
        assert int((~a).sum()) == 1
        assert bool(a[2])  # the lower posterior never wins a tie among others
        winners.append(int((~a).nonzero()[0, 0]))
    assert set(winners) == {0, 1}  # both tied agents win for some seeds


@pytest.mark.parametrize(("score", "tied"), [(0.5 * (1 + 3e-7), True), (0.5 * (1 + 1e-3), False)])
def test_claims_equal_up_to_round_off_tie(score, tied):
    """Identical clusters wanting one task: a float32 round-off between their scores (another
    batch size) is a tie the generator breaks, a real difference is not."""
    args = ([4, 4], [score, 0.5], [[16, 16], [16, 16]], [[3, 3]] * 2, [True, True])
    winners = {int((~_resolve(*args, seed=seed).lost[0]).nonzero()[0, 0]) for seed in range(40)}
    assert winners == ({0, 1} if tied else {0})


def test_code_prior_is_softmax_over_competitors():
    # ratios: 16/2=8 vs 8/2=4 (cpu binding); scores 0.2 vs 0.8
    res = _resolve([2, 2], [0.2, 0.8], [[16, 16], [8, 8]], [[2, 1], [2, 1]], [True, True], prior="code")
    p0 = math.exp(8) / (math.exp(8) + math.exp(4))
    p1 = 1 - p0
    z = 0.2 * p0 + 0.8 * p1
    assert res.posterior[0].tolist() == pytest.approx([0.2 * p0 / z, 0.8 * p1 / z])
    assert res.lost[0].tolist() == [False, True]
    # the paper prior decides differently here: 0.2*8 = 1.6 < 0.8*4 = 3.2
    paper = _resolve([2, 2], [0.2, 0.8], [[16, 16], [8, 8]], [[2, 1], [2, 1]], [True, True], prior="paper")
    assert paper.lost[0].tolist() == [True, False]


def test_code_prior_uses_real_ratio_not_floor():
    # ratios 7/2 = 3.5 and 6/2 = 3.0 (floors equal: 3 and 3); equal scores -> code prior prefers agent 0
    args = ([1, 1], [0.5, 0.5], [[7, 16], [6, 16]], [[2, 1], [2, 1]], [True, True])
    assert _resolve(*args, prior="code").lost[0].tolist() == [False, True]
    expect = math.exp(3.5) / (math.exp(3.5) + math.exp(3.0))
    assert _resolve(*args, prior="code").posterior[0, 0].item() == pytest.approx(expect)
    # the paper prior sees a tie (3 vs 3) which the generator breaks
    outcomes = {tuple(_resolve(*args, prior="paper", seed=s).lost[0].tolist()) for s in range(30)}
    assert outcomes == {(False, True), (True, False)}


def test_batched_call_matches_single_calls():
    keys = torch.tensor([[1, 1, 2], [3, 4, 3]])
    score = _t([[0.2, 0.6, 0.9], [0.9, 0.5, 0.3]])
    free = torch.tensor([[[16, 16], [8, 8], [2, 2]], [[4, 4], [16, 16], [16, 16]]])
    minreq = torch.full((2, 3, 2), 1)
    minreq[..., 0] = 2
    active = torch.ones(2, 3, dtype=torch.bool)
    out = resolve_conflicts(keys, score, free, minreq, active, generator=torch.Generator().manual_seed(0))
    for b in range(2):
        single = resolve_conflicts(keys[b:b + 1], score[b:b + 1], free[b:b + 1], minreq[b:b + 1], active[b:b + 1],
                                   generator=torch.Generator().manual_seed(0))
        assert torch.equal(out.lost[b], single.lost[0])
    # sample 0: task 1: 0.2*8=1.6 vs 0.6*4=2.4 -> agent 1; sample 1: task 3: 0.9*2=1.8 vs 0.3*8=2.4 -> agent 2
    assert out.lost.tolist() == [[True, False, False], [True, False, False]]


def test_bad_prior_name():
    with pytest.raises(ValueError, match="prior"):
        prior_weight(torch.zeros(1, 1, 2), torch.ones(1, 1, 2), "softmax")
