"""How well a learned policy's agents coordinate, measured on the states it meets.

Under the paper's Bayes rule every agent chooses a task on its own; when several choose the
same one, one wins and the others place nothing that round. Per decision with at least two
agents that could start a task, :class:`CoordinationTally` counts

* ``distinct``: the distinct tasks the agents claimed: the slots they chose among those they
  were offered (an agent that chose no offered slot, as one blocked in turn-taking modes,
  claimed nothing);
* ``uniform``: the distinct tasks expected if every such agent chose uniformly among its
  feasible slots: ``sum_t 1 - prod_{i: t feasible for i} (1 - 1 / |F_i|)``;
* ``matching``: the most distinct tasks they could claim, the maximum matching of agents to
  their feasible tasks;

and per real step whether it ended *idle*: some cluster that placed nothing in the step's last
decision was offered a task that no cluster started in it (single mode: a lost claim or a void
while work the others left waits; multi mode: a real step that ends while work waits). A
cluster whose offered tasks all went to other clusters is not idle: no task waits for it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment


@dataclass
class CoordinationTally:
    """Sums over one episode's decisions (see the module docstring)."""

    contested: int = 0  # decisions with at least two agents that could start a task
    distinct: float = 0.0
    uniform: float = 0.0
    matching: float = 0.0
    real_steps: int = 0
    idle_ends: int = 0

    def add(self, pending: np.ndarray, feasible: np.ndarray, slots: np.ndarray, placed: set[int],
            ends_step: bool) -> None:
        """One decision: ``pending (N, P)`` task ids of the slots, ``feasible (N, P)`` the slots each
        agent was offered, ``slots (N,)`` the slot each agent chose, ``placed`` the clusters that
        started a task, ``ends_step`` whether the real step advances after it."""
        feasible = np.asarray(feasible, dtype=bool)
        able = np.flatnonzero(feasible.any(axis=1))
        if ends_step:
            self.real_steps += 1
            started = {int(pending[i, slots[i]]) for i in placed}
            self.idle_ends += int(any(i not in placed and not started.issuperset(pending[i, feasible[i]].tolist())
                                      for i in able.tolist()))
        if able.size < 2:
            return
        self.contested += 1
        self.distinct += len({int(pending[i, slots[i]]) for i in able.tolist() if feasible[i, slots[i]]})
        tasks, column = np.unique(pending[feasible], return_inverse=True)
        rows = np.repeat(np.arange(feasible.shape[0]), feasible.sum(axis=1))
        offered = np.zeros((feasible.shape[0], tasks.size))
        offered[rows, column] = 1.0
        share = offered / np.maximum(offered.sum(axis=1, keepdims=True), 1.0)  # each agent's uniform choice
        self.uniform += float((1.0 - np.prod(1.0 - share[able], axis=0)).sum())
        r, c = linear_sum_assignment(offered[able], maximize=True)
        self.matching += float(offered[able][r, c].sum())

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)
