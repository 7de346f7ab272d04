"""``policy.conflicts=sequential`` / ``room``: agents choose one after another (index order,
or by decreasing free room) over the tasks no earlier agent started, so there is never a
conflict; stored actions re-evaluate to the same log-probabilities; blocked agents are
skipped; checkpoints of either mode start runs of the other."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from agents.policy.scheduler import TapFingerScheduler
from agents.policy.sequential import room_order, sequential_choice
from envs import load_scenario, run_episode
from envs.config import ConfigError
from networks.graph import canonical_slots
from networks.heads import MASK_VALUE
from tests.test_dense_encoder import scenario_batch

SMALL = dict(hidden=32, pointer_dim=32, pointer_ffn=64)


def _policy(spec, conflicts: str = "sequential", **cfg) -> TapFingerPolicy:
    torch.manual_seed(0)
    return TapFingerPolicy(spec, PolicyConfig(conflicts=conflicts, **SMALL, **cfg)).eval()


@pytest.mark.parametrize("opts", [{}, {"shared_actors": False, "alloc_head": "joint"}], ids=["shared", "per-agent-joint"])
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("name", ["synthetic-6", "hetero-6", "multi-3"])
@pytest.mark.parametrize("mode", ["sequential", "room"])
def test_no_two_agents_start_the_same_task_and_evaluate_matches_act(mode, name, deterministic, opts):
    spec, batch = scenario_batch(name)
    pol = _policy(spec, mode, **opts)
    out = pol.act(batch, deterministic=deterministic, generator=torch.Generator().manual_seed(3))
    sel, alloc, lost = out.action.unbind(-1)
    assert not lost.any()  # nothing is lost to a conflict
    key = canonical_slots(batch["pending_mask"].bool(), batch["pending_where"])[0].gather(-1, sel.unsqueeze(-1))
    starts = (alloc > 0) & ~out.skip
    for b in range(sel.shape[0]):
        started = key[b, :, 0][starts[b]].tolist()
        assert len(started) == len(set(started)), (b, started)
        # every start is feasible for its agent
        assert batch["feasible"][b].bool()[starts[b], sel[b][starts[b]]].all()
    lp, ent, skip, _ = pol.evaluate(batch, out.action)
    assert torch.equal(skip, out.skip)
    assert (lp - out.log_prob).abs().max() < 1e-5
    assert (ent - out.entropy).abs().max() < 1e-5


def test_later_agents_are_masked_and_blocked_by_hand():
    """Two agents, one shared feasible task: agent 0 starts it, agent 1 is blocked (skipped);
    if agent 0 chooses the void allocation, agent 1 may still start it."""
    logits = torch.tensor([[[0.0, 0.0], [0.0, 0.0]]])
    key = torch.tensor([[[1, 0], [1, 0]]])  # slot 0 of both agents holds the task with id 1; slot 1 empty
    feasible = torch.tensor([[[True, False], [True, False]]])
    skip = torch.tensor([[False, False]])
    started = torch.tensor([[[0, 3], [0, 0]]])  # agent 0 starts it (allocation 3)
    sel, alloc, logp, al_logp, blocked = sequential_choice(logits, key, feasible, skip, chosen=started)
    assert alloc is None and al_logp is None and blocked.tolist() == [[False, True]]
    assert logp[0, 0].exp().tolist() == pytest.approx([1.0, 0.0])
    declined = torch.tensor([[[0, 0], [0, 2]]])  # agent 0 picks it with the void allocation
    _, _, logp, _, blocked = sequential_choice(logits, key, feasible, skip, chosen=declined)
    assert blocked.tolist() == [[False, False]] and logp[0, 1].exp().tolist() == pytest.approx([1.0, 0.0])
    # choosing: agent 0's only start-able allocation is 1 -> agent 1 blocked
    only_one = torch.tensor([[MASK_VALUE, 0.0, MASK_VALUE]]).log_softmax(-1)  # (B, A): allocation 1 only
    sel, alloc, _, al_logp, blocked = sequential_choice(logits, key, feasible, skip,
                                                         alloc_logp=lambda i, slot: only_one, deterministic=True)
    assert sel[0, 0] == 0 and alloc[0, 0] == 1 and blocked.tolist() == [[False, True]]
    assert al_logp.shape == (1, 2, 3)


def test_room_order_puts_the_roomiest_cluster_first_and_keeps_index_order_on_ties():
    free = torch.tensor([[[0.25, 0.5], [1.0, 0.0], [0.5, 0.5]],   # rooms 0.75, 1.0, 1.0
                         [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]])    # all equal
    assert room_order(free).tolist() == [[1, 2, 0], [0, 1, 2]]


def test_ordered_choice_lets_the_first_in_order_take_the_shared_task_and_reports_in_agent_order():
    """Both agents can only start task 1; with order (agent 1, agent 0) agent 1 takes it and
    agent 0 is blocked; the outputs stay indexed by agent; re-evaluating the stored choice
    rebuilds the same masks."""
    logits = torch.tensor([[[0.0, 0.0], [0.0, 0.0]]])
    key = torch.tensor([[[1, 0], [1, 0]]])
    feasible = torch.tensor([[[True, False], [True, False]]])
    skip = torch.tensor([[False, False]])
    order = torch.tensor([[1, 0]])
    alloc_by_agent = {0: torch.tensor([[0.0, -1.0]]), 1: torch.tensor([[-1.0, 0.0]])}  # agent 0 likes void, 1 a start

    def alloc_logp(i, slot):
        assert torch.is_tensor(i) and i.shape == (1,)
        return alloc_by_agent[int(i)].log_softmax(-1)

    sel, alloc, logp, al_logp, blocked = sequential_choice(
        logits, key, feasible, skip, alloc_logp=alloc_logp, deterministic=True, order=order)
    assert alloc.tolist() == [[0, 1]] and blocked.tolist() == [[True, False]]
    assert torch.allclose(al_logp[0, 1], alloc_by_agent[1].log_softmax(-1)[0])
    again = sequential_choice(logits, key, feasible, skip, chosen=torch.stack([sel, alloc], -1), order=order)
    assert again[4].tolist() == [[True, False]] and torch.equal(again[2], logp)
    # in index order agent 0 (which declines with the void allocation) goes first: nobody is blocked
    _, alloc0, _, _, blocked0 = sequential_choice(
        logits, key, feasible, skip, alloc_logp=lambda i, slot: alloc_by_agent[i].log_softmax(-1), deterministic=True)
    assert alloc0.tolist() == [[0, 1]] and blocked0.tolist() == [[False, False]]


def test_bayes_is_the_default_and_unknown_modes_are_refused():
    assert PolicyConfig().conflicts == "bayes"
    with pytest.raises(ConfigError, match="conflicts"):
        PolicyConfig(conflicts="greedy")


def test_sequential_scheduler_has_no_conflicts_and_is_seeded(tmp_path):
    cfg = load_scenario("synthetic-6", ["num_tasks=40"])
    spec, _ = scenario_batch("synthetic-6")
    pol = _policy(spec)
    bayes = TapFingerPolicy(spec, PolicyConfig(**SMALL)).eval()
    bayes.load_state_dict(pol.state_dict())
    runs = [run_episode(cfg, TapFingerScheduler(policy=p, deterministic=False), seed=7) for p in (pol, pol, bayes)]
    assert runs[0].conflicts == 0 and runs[2].conflicts > 0
    assert np.array_equal(runs[0].jct, runs[1].jct)  # same seed, same episode
