"""The policy's modes as names: conflict modes, Bayes priors, how it acts outside training, its
compile modes (no torch: read by the command lines, the training config and the evaluation
runner as well as by the policy itself)."""

from __future__ import annotations

from typing import NamedTuple

#: Bayes conflict priors (``PolicyConfig.prior``): the paper's eq. 11, or the reference code's softmax
PRIORS = ("paper", "code")
#: how agents that want the same task are reconciled (``PolicyConfig.conflicts``); each mode's
#: rule is a class in ``agents.policy.conflict_rules.CONFLICT_RULES``: ``bayes`` (paper eq. 11:
#: every agent chooses independently, Bayes' rule keeps one claim per task and the others lose the
#: step), ``sequential`` (agents choose in index order and a task started by an earlier agent is
#: masked for the later ones: no conflict can arise) or ``room`` (the same, agents ordered by
#: decreasing free room of their clusters)
CONFLICT_MODES = ("bayes", "sequential", "room")
#: what each conflict mode beyond the paper does, in words (a results page names the recipe's)
CONFLICT_WORDS = {
    "sequential": "agents choose in turn, in index order, a task taken by an earlier agent masked for the later ones",
    "room": "agents choose in turn, by decreasing free room of their clusters, a task taken by an earlier agent "
            "masked for the later ones",
}
#: the modes in which agents choose one after another
SEQUENTIAL_MODES = ("sequential", "room")
#: the paper's mode: a policy acting in any other is a labelled option beyond the paper
PAPER_CONFLICTS = "bayes"
#: how a trained policy acts outside training (``train.eval_action``, saved with every checkpoint,
#: the default of ``evaluate.py --policy-action``): the most likely joint action, a sample from
#: the policy (seeded, so reproducible), or the slot sampled and the most likely allocation for
#: it (``sample-slot``), or the most likely joint action with an idle cluster's agent starting its
#: chosen task instead of taking the void allocation when it can start it (``argmax-busy``: a
#: deterministic policy that prefers void on an idle cluster meets the same state again and again, and
#: its queue only grows). Sampling breaks the symmetry of identical agents that pick the same task
#: (a lost single-mode conflict idles the cluster for a real step).
EVAL_ACTIONS = ("argmax", "sample", "sample-slot", "argmax-busy")
ARGMAX, SAMPLE, SAMPLE_SLOT, ARGMAX_BUSY = EVAL_ACTIONS
#: the acting modes of the paper's policy as it stands (its most likely or a sampled joint action)
PAPER_ACTIONS = frozenset({ARGMAX, SAMPLE})
#: what each acting mode beyond the paper does, in words after "acting by" (a results page names the
#: recipe's, an evaluation report the checkpoint's)
ACTION_WORDS = {
    SAMPLE_SLOT: "seeded sampling of the slot with the most likely allocation",
    ARGMAX_BUSY: "the most likely joint action, an idle cluster's agent starting its task when it can",
}


class ActingFlags(NamedTuple):
    """The arguments of :meth:`agents.policy.network.TapFingerPolicy.act` that make an acting mode."""

    deterministic: bool  # the most likely joint action, no random draw deciding
    argmax_allocation: bool  # sampled slots, each with its most likely allocation
    keep_busy: bool  # an idle cluster's agent starts its chosen task rather than take the void allocation


def acting_flags(action: str) -> ActingFlags:
    """How a policy acting by ``action`` (:data:`EVAL_ACTIONS`) calls ``act``."""
    return ActingFlags(deterministic=action in (ARGMAX, ARGMAX_BUSY), argmax_allocation=action == SAMPLE_SLOT,
                       keep_busy=action == ARGMAX_BUSY)
#: torch.compile modes of :meth:`agents.policy.network.TapFingerPolicy.compile_passes` (``train.compile``)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
