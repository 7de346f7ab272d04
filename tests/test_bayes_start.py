"""``conflicts="bayes-start"``: Bayes' rule among the claims that would start a task. Every agent's
allocation is drawn before the conflicts are resolved, and a claim with the void allocation stands
aside: it never makes another agent lose."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from agents.policy.checkpoint import load_policy_checkpoint
from envs.config import load_scenario
from envs.gym_env import EdgeClustersEnv
from networks.graph import canonical_slots

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints" / "hetero-6.pt"


def _state(samples: int) -> dict[str, torch.Tensor]:
    """A state of hetero-6 (multi mode) that every agent can act on, repeated ``samples`` times."""
    cfg = load_scenario("hetero-6", []).for_evaluation()
    env = EdgeClustersEnv(cfg)
    obs, _ = env.reset(seed=10_000)
    for _ in range(8):  # no placements: the pending sets fill
        obs, *_ = env.step(np.zeros((cfg.num_clusters, 3), dtype=np.int64))
    return {k: torch.as_tensor(v)[None].repeat(samples, *[1] * np.ndim(v)) for k, v in obs.items()}


def _act(conflicts: str, samples: int = 256):
    """The shipped hetero-6 weights (which often draw the void allocation) acting in ``conflicts``."""
    policy, _ = load_policy_checkpoint(SHIPPED, "cpu")
    policy.cfg = dataclasses.replace(policy.cfg, conflicts=conflicts)
    batch = _state(samples)
    out = policy.act(batch, generator=torch.Generator().manual_seed(5))
    tasks = canonical_slots(batch["pending_mask"], batch["pending_where"])[0]
    return policy, batch, out, tasks.gather(-1, out.action[..., :1]).squeeze(-1)  # (B, N): each agent's claimed task


def _blocked_by_a_void_winner(out, task) -> int:
    """Lost claims whose task no agent then started (its winner drew the void allocation)."""
    alloc, lost = out.action[..., 1], out.action[..., 2].bool()
    count = 0
    for b, i in torch.nonzero(lost).tolist():
        starters = (task[b] == task[b, i]) & ~lost[b] & ~out.skip[b] & (alloc[b] > 0)
        count += int(not starters.any())
    return count


def test_under_the_papers_rule_a_void_winner_blocks_the_others():
    """The case bayes-start removes happens under the paper's rule on this state."""
    _, _, out, task = _act("bayes")
    assert _blocked_by_a_void_winner(out, task) > 0


def test_a_void_claim_stands_aside():
    _, _, out, task = _act("bayes-start")
    assert out.action[..., 2].any()  # still contested: claims that would start a task do conflict
    assert _blocked_by_a_void_winner(out, task) == 0  # every loser lost to a claim that starts its task


def test_bayes_start_scores_its_own_actions():
    """Re-evaluating the stored actions gives the log-probabilities acting gave (eq. 13 as under bayes)."""
    policy, batch, out, _ = _act("bayes-start", samples=16)
    logp, _, skip, _ = policy.evaluate(batch, out.action)
    assert torch.allclose(logp, out.log_prob, atol=1e-5) and torch.equal(skip, out.skip)
