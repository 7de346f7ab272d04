"""Per-agent generalised advantage estimation (Schulman et al. 2016) and the rewards it reads.

Each agent has its own reward column (``info["agent_rewards"]``, ``(T, N)``) and its own value
column from the centralised critic; GAE runs on every column at once.
"""

from __future__ import annotations

import numpy as np


def gae_advantages(
    v_s: np.ndarray, v_next: np.ndarray, rew: np.ndarray, end_flag: np.ndarray, gamma: float, gae_lambda: float
) -> np.ndarray:
    """GAE over a sequence of ``T`` steps for several columns at once: ``(T, ...)`` arrays,
    ``end_flag (T,)`` (the step ends its episode, or its successor is not in the sequence).

    ``v_next`` must already be 0 where the next state is terminal. The recursion of tianshou's
    ``_gae`` (float64, the same operation order), one vector operation per step::

        delta_t = r_t + gamma * V(s_t+1) - V(s_t)
        A_t     = delta_t + gamma * lambda * (1 - end_t) * A_t+1
    """
    delta = rew + v_next * gamma - v_s
    discount = (1.0 - end_flag.astype(np.float64)) * (gamma * gae_lambda)
    out = np.zeros(delta.shape)
    gae = np.zeros(delta.shape[1:])
    for i in range(len(delta) - 1, -1, -1):
        gae = delta[i] + discount[i] * gae
        out[i] = gae
    return out


def monte_carlo_returns(rew: np.ndarray, end_flag: np.ndarray, gamma: float) -> np.ndarray:
    """Discounted rewards to go of every column, cut at ``end_flag`` (GAE with zero values, lambda 1)."""
    zeros = np.zeros_like(rew)
    return gae_advantages(zeros, zeros, rew, end_flag, gamma, 1.0) + zeros


def penalise_lost_claims(rew: np.ndarray, lost: np.ndarray, penalty: float) -> np.ndarray:
    """The rewards PPO learns from: the env's per-agent rewards ``(T, N)`` less ``penalty`` at
    every step an agent's claim lost a Bayes conflict (``lost (T, N)``; ``train.lost_claim_penalty``).
    The env's rewards, and so every reported return, are unchanged."""
    if penalty == 0.0:
        return rew
    return rew - penalty * lost
