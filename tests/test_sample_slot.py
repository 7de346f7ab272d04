"""Acting by ``sample-slot`` (``train.eval_action``, ``evaluate.py --policy-action``): the slots are
sampled as ``sample`` samples them, and every placing agent takes its most likely allocation; and by
``argmax-busy``: the most likely joint action, an idle cluster's agent starting its task when it can."""

from __future__ import annotations

import numpy as np
import torch

from agents.policy.config import PolicyConfig
from agents.policy.modes import ARGMAX_BUSY, EVAL_ACTIONS, SAMPLE_SLOT
from agents.policy.network import TapFingerPolicy
from agents.policy.scheduler import TapFingerScheduler
from envs.config import load_scenario
from envs.gym_env import EdgeClustersEnv
from envs.observation import ObservationSpec


def _busy_batch(conflicts: str = "bayes") -> tuple[TapFingerPolicy, dict[str, torch.Tensor]]:
    cfg = load_scenario("testbed-6", [])
    env = EdgeClustersEnv(cfg)
    obs, _ = env.reset(seed=5)
    for _ in range(30):  # nothing placed: the queues fill
        obs, *_ = env.step(np.zeros((cfg.num_clusters, 3), dtype=np.int64))
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, conflicts=conflicts))
    return policy, {k: torch.as_tensor(v)[None].repeat(8, *[1] * np.ndim(v)) for k, v in obs.items()}


def test_sample_slot_samples_the_slots_and_takes_the_most_likely_allocation():
    policy, batch = _busy_batch()
    sampled = policy.act(batch, generator=torch.Generator().manual_seed(3))
    slot_only = policy.act(batch, generator=torch.Generator().manual_seed(3), argmax_allocation=True)
    # the same selection and tie draws come first: the same slots and the same conflict losers
    assert torch.equal(sampled.action[..., 0], slot_only.action[..., 0])
    assert torch.equal(sampled.action[..., 2], slot_only.action[..., 2])
    _, alloc = policy.probabilities(batch)  # (B, N, P, A)
    placing = ~slot_only.skip & (slot_only.action[..., 2] == 0)
    assert placing.sum() >= 8
    best = alloc.gather(2, slot_only.action[..., 0, None, None].expand(-1, -1, 1, alloc.shape[-1])).squeeze(2).argmax(-1)
    assert torch.equal(slot_only.action[..., 1][placing], best[placing])
    assert not torch.equal(sampled.action[..., 1][placing], best[placing])  # sampling differs somewhere


def test_sample_slot_holds_in_the_sequential_modes_too():
    policy, batch = _busy_batch("room")
    out = policy.act(batch, generator=torch.Generator().manual_seed(1), argmax_allocation=True)
    _, alloc = policy.probabilities(batch)
    placing = ~out.skip & (out.action[..., 1] > 0)
    best = alloc.gather(2, out.action[..., 0, None, None].expand(-1, -1, 1, alloc.shape[-1])).squeeze(2).argmax(-1)
    # agents choose one after another; each allocation is drawn right after its slot, by argmax here
    assert placing.any() and torch.equal(out.action[..., 1][placing], best[placing])


def test_the_scheduler_acts_by_sample_slot_when_asked():
    assert SAMPLE_SLOT in EVAL_ACTIONS
    policy, _ = _busy_batch()
    scheduler = TapFingerScheduler(policy=policy, deterministic=False, argmax_allocation=True)
    assert scheduler.argmax_allocation and not scheduler.deterministic
    assert not TapFingerScheduler(policy=policy).argmax_allocation  # a policy object acts by argmax


def test_argmax_busy_starts_a_task_where_argmax_leaves_an_idle_cluster_idle():
    """The deterministic choice with the void allocation skipped where the agent's cluster runs nothing
    (``argmax-busy``): on a distribution whose most likely entry is void, an idle agent takes its most
    likely start and a busy one keeps the void; an agent with no valid start keeps the void."""
    from agents.policy.distribution import MaskedCategorical

    logits = torch.tensor([[[3.0, 1.0, 2.0, 0.5], [3.0, 1.0, 2.0, 0.5], [3.0, 1.0, 2.0, 0.5]]])
    mask = torch.tensor([[[True, True, True, True], [True, True, True, True], [True, False, False, False]]])
    dist = MaskedCategorical.from_logits(logits, mask)
    idle = torch.tensor([[True, False, True]])
    assert dist.mode().tolist() == [[0, 0, 0]]
    assert dist.mode_starting(idle).tolist() == [[2, 0, 0]]
    assert ARGMAX_BUSY in EVAL_ACTIONS


def test_argmax_busy_acts_as_argmax_except_on_idle_clusters():
    for conflicts in ("bayes", "room"):
        policy, batch = _busy_batch(conflicts)
        with torch.no_grad():  # some agents' void allocation made the most likely
            policy.alloc_head.out.bias[::2, -1] += 30.0
        assert (batch["cluster_x"][..., 5] == 0).all()  # nothing placed yet: every cluster is idle
        plain = policy.act(batch, deterministic=True, generator=torch.Generator().manual_seed(2))
        busy = policy.act(batch, deterministic=True, generator=torch.Generator().manual_seed(2), keep_busy=True)
        placing = ~busy.skip & (busy.action[..., 2] == 0)
        assert (plain.action[..., 1][placing] == 0).any(), conflicts  # argmax leaves idle clusters idle
        assert placing.any() and (busy.action[..., 1][placing] > 0).all(), conflicts  # no idle agent voids
        starts = plain.action[..., 1] > 0
        assert torch.equal(busy.action[starts], plain.action[starts]), conflicts  # argmax's starts are kept
        busy_batch = {k: v.clone() for k, v in batch.items()}
        busy_batch["cluster_x"][..., 5] = 0.5  # every cluster runs something: argmax-busy is argmax
        assert torch.equal(policy.act(busy_batch, deterministic=True, generator=torch.Generator().manual_seed(2),
                                      keep_busy=True).action,
                           policy.act(busy_batch, deterministic=True, generator=torch.Generator().manual_seed(2)).action)
    scheduler = TapFingerScheduler(policy=policy, keep_busy=True)
    assert scheduler.keep_busy and scheduler.deterministic
