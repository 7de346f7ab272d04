"""Schedulers: the learned TapFinger policy and the baselines it is compared against.

One sub-package per role: :mod:`agents.policy` (the network, its config and checkpoints, the
scheduler that runs it), :mod:`agents.training` (PPO and training runs), :mod:`agents.evaluation`
(evaluation runs, summaries, reports) and :mod:`agents.baselines`. Small modules serve more
than one of them: :mod:`agents.output_dirs` (output locations checked before any work starts, by
training and by ``evaluate.py``), :mod:`agents.json_files` (the JSON writer) and
:mod:`agents.limits` (the command lines' integer ceilings). The packages re-export nothing:
every name is imported from the module that owns it.
"""
