"""The TapFinger policy: the network, its config and checkpoints, and the scheduler that runs it.

Callers import each name from the module that owns it. One module per job:

* :mod:`.config` -- :class:`PolicyConfig`, the architecture stored in every checkpoint;
* :mod:`.modes` -- the policy's modes as names: conflict modes, Bayes priors, evaluation actions,
  compile modes (no torch);
* :mod:`.variants` -- the registry of the policy and its ablations (encoder and task selector;
  pure Python, no torch);
* :mod:`.observations` -- the spec numbers a policy is built for, observations as tensors;
* :mod:`.noise` -- the random draws of an acting pass and the choice rules that use them;
* :mod:`.conflict` -- Bayes conflict resolution between agents that picked the same task (eq. 11);
* :mod:`.sequential` -- agents that choose one after another (``conflicts="sequential"``/``"room"``);
* :mod:`.conflict_rules` -- the conflict rules, one class per conflict mode, and their registry;
* :mod:`.distribution` -- the masked slot and allocation distributions and the joint one (eqs. 13-14);
* :mod:`.selectors` -- the task selectors of the variants (pointer, uniform, FIFO);
* :mod:`.pointer_rows` -- the pointer run on compact rows, grouped by the slots they need;
* :mod:`.outputs` -- what the passes return, the per-agent log-probability and entropy terms;
* :mod:`.network` -- :class:`TapFingerPolicy`, the actor-critic for all agents of a scenario;
* :mod:`.checkpoint` -- the one checkpoint reader (safe loading only), the writer, :class:`CheckpointError`;
* :mod:`.scheduler` -- :class:`TapFingerScheduler`, a trained policy behind the scheduler interface;
* :mod:`.coordination` -- how well the agents coordinate on the states they meet (distinct claims).
"""
