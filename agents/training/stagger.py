"""Staggered starts of the training envs (``train.stagger_start``).

All training envs start their first episode together, so without this every collection of the
first episode lengths comes from the same part of the episode (all early states, then all
middle ones...). With it, env ``i`` is first fast-forwarded to a real time drawn uniformly from
``[0, num_tasks / arrival_rate)`` (the arrival horizon) by a random feasible policy
(:func:`random_feasible_actions`), so from the first collection on a batch holds early, middle
and late states of episodes. The target and the random decisions are drawn from env ``i``'s seed
key ``(seed, restart, i)``, so every vector env kind fast-forwards identically, and a resumed run
(a new restart) staggers its fresh episodes the same way. The fast-forward steps are not
collected: PPO never trains on them.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from envs.config import ScenarioConfig

#: appended to an env's seed key for the stagger's own random stream (apart from its workload seeds)
STAGGER_STREAM = 0x57A6


def stagger_rng(key: Sequence[int]) -> np.random.Generator:
    """The generator of env ``key``'s stagger: its target time, then its random decisions."""
    return np.random.default_rng(np.random.SeedSequence([*(int(k) for k in key), STAGGER_STREAM]))


def stagger_target(rng: np.random.Generator, scenario: ScenarioConfig) -> int:
    """The real time an env is fast-forwarded to: uniform in ``[0, num_tasks / arrival_rate)``."""
    return int(rng.random() * scenario.num_tasks / scenario.arrival_rate)


def random_feasible_actions(
    obs: Mapping[str, np.ndarray], rngs: Sequence[np.random.Generator], scenario: ScenarioConfig
) -> np.ndarray:
    """Joint actions ``(R, N, 3)`` for observations with a leading batch axis ``R``: every agent
    with a feasible slot picks one uniformly (by its own env's generator ``rngs[r]``) and an
    allocation uniformly within ``[the task's minimum, alloc_high]``; the others stay void."""
    feasible = np.asarray(obs["feasible"], dtype=bool)  # (R, N, P)
    low_all = np.asarray(obs["pending_min"], dtype=np.int64)  # (R, N, P, 2)
    high = np.asarray(obs["alloc_high"], dtype=np.int64)  # (R, N, 2)
    R, N, _ = feasible.shape
    g1 = scenario.alloc_dims[1]  # allocation index = cpu * G1 + gpu
    actions = np.zeros((R, N, 3), dtype=np.int64)
    for r in range(R):
        u = rngs[r].random((N, 3))  # one draw per agent and choice, whether or not it is used
        for i in range(N):
            slots = np.flatnonzero(feasible[r, i])
            if slots.size == 0:
                continue
            slot = int(slots[min(int(u[i, 0] * slots.size), slots.size - 1)])
            low = low_all[r, i, slot]
            span = np.maximum(high[r, i] - low + 1, 1)
            cpu, gpu = low + np.minimum((u[i, 1:] * span).astype(np.int64), span - 1)
            actions[r, i] = (slot, cpu * g1 + gpu, 0)
    return actions
