"""The TapFinger policy: the network, its config and checkpoints, and the scheduler that runs it.

One module per job:

* :mod:`.config` -- :class:`PolicyConfig`, the architecture stored in every checkpoint;
* :mod:`.variants` -- the registry of the policy and its ablations (encoder and task selector;
  pure Python, no torch);
* :mod:`.observations` -- the spec numbers a policy is built for, observations as tensors;
* :mod:`.noise` -- the random draws of an acting pass and the choice rules that use them;
* :mod:`.conflict` -- Bayes conflict resolution between agents that picked the same task (eq. 11);
* :mod:`.sequential` -- agents that choose one after another (``conflicts="sequential"``/``"room"``);
* :mod:`.pointer_rows` -- the pointer run on compact rows, grouped by the slots they need;
* :mod:`.outputs` -- what the passes return, the per-agent log-probability and entropy terms;
* :mod:`.network` -- :class:`TapFingerPolicy`, the actor-critic for all agents of a scenario;
* :mod:`.checkpoint` -- the one checkpoint reader (safe loading only), the writer, :class:`CheckpointError`;
* :mod:`.scheduler` -- :class:`TapFingerScheduler`, a trained policy behind the scheduler interface.

The names below are re-exported here and imported on first use (:mod:`agents.lazy_exports`),
so that importing a light submodule (:mod:`.variants`) does not import torch.
"""

from __future__ import annotations

from agents.lazy_exports import lazy_exports

#: submodule -> the names this package re-exports from it
_EXPORTS = {
    "config": ("ENCODERS", "POLICY_VARIANTS", "PolicyConfig"),
    "observations": ("obs_to_torch", "spec_dims", "spec_to_dict"),
    "noise": ("ActNoise", "draw_act_noise"),
    "sequential": ("room_order",),
    "pointer_rows": ("POINTER_WIDTH_GROUPS", "PointerRowGroup", "compact_pointer_logits", "pointer_row_groups",
                     "pointer_widths"),
    "outputs": ("ActOutput", "PolicyDistributions"),
    "network": ("TapFingerPolicy",),
    "checkpoint": ("POLICY_KEYS", "CheckpointError", "check_compatible", "checkpoint_eval_action",
                   "load_policy_checkpoint", "read_checkpoint", "save_policy_checkpoint"),
    "scheduler": ("TapFingerScheduler",),
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
