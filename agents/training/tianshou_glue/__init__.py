"""Everything that reaches into tianshou's private surface (tianshou 2.0.1, pinned in pyproject.toml).

No module outside this package overrides a private tianshou method or reads a private
tianshou attribute; a tianshou upgrade is checked here:

* :mod:`.algorithm` -- :class:`~.algorithm.MultiAgentPPO` replaces ``PPO._preprocess_batch``,
  ``_add_returns_and_advantages`` and ``_update_with_batch``, and reads the optimizer wrapper's
  ``_optim``, ``_module`` and ``_max_grad_norm``; :class:`~.algorithm.TianshouJointPolicy` is the
  policy it trains;
* :mod:`.collector` -- :class:`~.collector.BatchCollector` replaces
  ``Collector._compute_action_policy_hidden``; :class:`~.collector.BatchedReplayBuffer` replaces
  ``add``/``prev``/``next`` and keeps the sub-buffers' private ring counters in shared arrays;
* :mod:`.trainer` -- :class:`~.trainer.ResumableOnPolicyTrainer` overrides ``reset``,
  ``execute_epoch`` and ``_update_step`` and resets ``_best_score``;
  :func:`~.trainer.trainer_env_step` reads ``_env_step``.
"""
