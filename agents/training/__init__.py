"""Training runs: resolved configs, envs, tianshou trainer, logging, checkpoints, resume.

:func:`.prepare.prepare_run` turns a scenario, ``key=value`` overrides and CLI flags into a
:class:`.run_spec.RunSpec` (scenario + policy + train config, run directory, optional checkpoint
to resume); :func:`.loop.run_training` trains it with tianshou 2.0's on-policy trainer. Callers
import each name from the module that owns it. One module per job:

* :mod:`.config` -- :class:`TrainConfig` (the ``train:`` section) and the override rules; light
  (no torch), ``train.py``'s argument parser reads it;
* :mod:`.run_spec` -- :class:`RunSpec`, the resolved run every stage reads;
* :mod:`.prepare` -- :func:`prepare_run` (the scenario is checked by :func:`check_scenario`:
  progress functions, trace files, before any worker process or run directory exists), device
  checks, the learner process's settings, ``config.yaml``;
* :mod:`.rundir` -- run directories: exclusive creation, the lock, run ids, ``config.yaml``'s name;
* :mod:`.budget` -- the plan's size (env steps, memory), checked before anything is built;
* :mod:`.loss` -- the MAPPO loss with the paper's masked per-agent terms (eqs. 12-14);
* :mod:`.gae` -- per-agent GAE and the rewards it reads; :mod:`.return_scale` -- the value targets' scale;
* :mod:`.optimizer` -- Adam, fused (the same bits on every x86-64 CPU under the learning pin's numerics);
* :mod:`.tianshou_glue` -- everything that overrides or reads tianshou's private surface:
  :class:`~agents.training.tianshou_glue.algorithm.MultiAgentPPO` (the loss, GAE and return
  scaling as a tianshou algorithm), the collector and buffer without per-env loops, the trainer;
* :mod:`.vector_env` -- the batched simulator as a tianshou vector env;
* :mod:`.precision` -- ``train.precision``: bfloat16 autocast of the network passes;
* :mod:`.shards` -- ``train.shards``: a batch's rows split over parallel CPU threads;
* :mod:`.malloc` -- ``train.malloc``: glibc ``malloc`` settings that keep freed memory in the process;
* :mod:`.imitation` -- behaviour cloning of a baseline scheduler (``train.imitate``);
* :mod:`.envs` -- training envs (``train.vector``): ``batch`` (default) -- :mod:`envs.batched`
  behind :class:`~agents.training.vector_env.BatchVectorEnv`, in process or split over ``train.workers``
  processes; ``ray`` -- the same split over Ray actors; ``dummy``/``subproc`` -- one
  ``envs.gym_env.EdgeClustersEnv`` per env wrapped by :class:`TrainingEnv`. Every kind gives
  env ``i`` the workload seeds of :class:`~agents.training.vector_env.SeedSchedule` key
  ``(seed, restart, i)``, drawn from ``[TRAIN_SEED_MIN, 2**62)``, and the same ``info`` schema;
  evaluation envs replay the held-out workload seeds ``eval_seed + j``;
* :mod:`.stats` -- collect statistics with the scheduling metrics, and the evaluation score
  ``-mean JCT`` (``best.pt`` is saved whenever the evaluation mean JCT improves on the best of the run);
* :mod:`.monitor` -- machine utilisation for ``usage/*`` (:class:`SystemMonitor`);
* :mod:`.rng` -- seeding and the RNG states saved in checkpoints;
* :mod:`.checkpoints` -- ``last.pt``/``best.pt``: reading, writing, restoring a run;
* :mod:`.logger` -- TensorBoard scalars through a subclass of tianshou's ``TensorboardLogger``
  that keeps only :data:`TENSORBOARD_KEEP` (``training/``, ``update/``, ``test/``);
* :mod:`.callbacks` -- :class:`TrainerCallbacks`, the state tianshou's trainer callbacks share:
  ``last.pt`` at the end of every epoch (tianshou's ``save_checkpoint_fn``) and every
  ``save_every`` env steps, ``best.pt``, one line ``step X: eval mean JCT Y (best Z at step S)``
  per evaluation (tianshou's own ``test_reward`` line is off), ``usage/*`` scalars (throughput,
  CPU/GPU utilisation of the machine);
* :mod:`.progress` -- what a run shows between its evaluation lines (a bar or a status line);
* :mod:`.validation_baselines` -- the baselines measured once per run on its validation workloads;
* :mod:`.stagger` -- staggered starts of the training envs (``train.stagger_start``);
* :mod:`.recipe_file` -- values written into a scenario YAML's recipe sections, its other lines kept;
* :mod:`.warmstart` -- the warm start of a fresh run by imitation (``train.imitate``);
* :mod:`.loop` -- :func:`run_training`: one tianshou *epoch* = one evaluation interval
  (:meth:`TrainConfig.epoch_plan`; the rounding of ``--steps`` is
  :meth:`TrainConfig.planned_env_steps`); ``last.pt`` is also written at the end of the run and on Ctrl-C.

Checkpoints are written with :func:`agents.policy.checkpoint.save_policy_checkpoint` (keys ``model``,
``policy_config``, ``scenario``, ``obs_spec``) plus ``optimizer``, ``counters``, ``rng``,
``train_config`` and ``return_scaler``; every value is a tensor or a plain Python value, and
every read goes through :func:`agents.policy.checkpoint.read_checkpoint` (``weights_only=True``).
"""
