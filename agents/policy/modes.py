"""The policy's conflict modes and Bayes priors, as names (no torch: read by the command lines and
the evaluation runner as well as by :mod:`agents.policy.conflict`)."""

from __future__ import annotations

#: Bayes conflict priors (``PolicyConfig.prior``): the paper's eq. 11, or the reference code's softmax
PRIORS = ("paper", "code")
#: how agents that want the same task are reconciled (``PolicyConfig.conflicts``): ``bayes``
#: (paper eq. 11: every agent chooses independently, ``agents.policy.conflict.resolve_conflicts``
#: keeps one claim per task and the others lose the step), ``sequential`` (agents choose in index
#: order and a task started by an earlier agent is masked for the later ones: no conflict can arise;
#: :mod:`agents.policy.sequential`) or ``room`` (the same, agents ordered by decreasing free room of
#: their clusters, ``agents.policy.sequential.room_order``)
CONFLICT_MODES = ("bayes", "sequential", "room")
#: the modes in which agents choose one after another
SEQUENTIAL_MODES = ("sequential", "room")
#: the paper's mode: a policy acting in any other is a labelled option beyond the paper
PAPER_CONFLICTS = "bayes"
