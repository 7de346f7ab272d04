"""Training runs: resolved configs, envs, tianshou trainer, logging, checkpoints, resume.

:func:`prepare_run` turns a scenario, ``key=value`` overrides and CLI flags into a
:class:`RunSpec` (scenario + policy + train config, run directory, optional checkpoint to
resume); :func:`run_training` trains it with tianshou 2.0's on-policy trainer. One module per job:

* :mod:`.envs` -- training envs (``train.vector``): ``batch`` (default) -- :mod:`envs.batched`
  behind :class:`~agents.vector_env.BatchVectorEnv`, in process or split over ``train.workers``
  processes; ``ray`` -- the same split over Ray actors; ``dummy``/``subproc`` -- one
  ``envs.gym_env.EdgeClustersEnv`` per env wrapped by :class:`TrainingEnv`. Every kind gives
  env ``i`` the workload seeds of :class:`~agents.vector_env.SeedSchedule` key
  ``(seed, restart, i)``, drawn from ``[TRAIN_SEED_MIN, 2**62)``, and the same ``info`` schema;
  evaluation envs replay the held-out workload seeds ``eval_seed + j``;
* :mod:`.stats` -- collect statistics with the scheduling metrics, and the evaluation score
  ``-mean JCT`` (``best.pt`` is saved whenever the evaluation mean JCT improves on the best of the run);
* :mod:`.monitor` -- machine utilisation for ``system/*`` (:class:`SystemMonitor`);
* :mod:`.run_spec` -- :class:`RunSpec`, :func:`prepare_run` (the scenario is checked by
  :func:`check_scenario`: progress functions, trace files, before any worker process or run
  directory exists), device checks, ``config.yaml``;
* :mod:`.rng` -- seeding and the RNG states saved in checkpoints;
* :mod:`.checkpoints` -- ``last.pt``/``best.pt``: reading, writing, restoring a run;
* :mod:`.logger` -- TensorBoard scalars through a subclass of tianshou's ``TensorboardLogger``
  that keeps only :data:`TENSORBOARD_KEEP` (``training/``, ``update/``, ``test/``);
* :mod:`.session` -- the trainer callbacks: ``last.pt`` at the end of every epoch (tianshou's
  ``save_checkpoint_fn``) and every ``save_every`` env steps, ``best.pt``, one line
  ``step X: eval mean JCT Y (best Z at step S)`` per evaluation (tianshou's own ``test_reward``
  line is off), ``system/*`` scalars (throughput, CPU/GPU utilisation of the machine);
* :mod:`.warmstart` -- ``train.imitate``, the imitation warm start of a fresh run;
* :mod:`.loop` -- :func:`run_training`: one tianshou *epoch* = one evaluation interval
  (:meth:`TrainConfig.epoch_plan`; the rounding of ``--steps`` is
  :meth:`TrainConfig.planned_env_steps`); ``last.pt`` is also written at the end of the run and on Ctrl-C.

Checkpoints are written with :func:`agents.checkpoint.save_policy_checkpoint` (keys ``model``,
``policy_config``, ``scenario``, ``obs_spec``) plus ``optimizer``, ``counters``, ``rng``,
``train_config`` and ``return_scaler``; every value is a tensor or a plain Python value, and
every read goes through :func:`agents.checkpoint.read_checkpoint` (``weights_only=True``).
"""

from __future__ import annotations

from ..vector_env import SeedSchedule, WorkerDied  # re-exported: callers import them from here
from .checkpoints import BEST, CKPT_KEYS, LAST, load_checkpoint, save_checkpoint
from .envs import (
    TrainingEnv,
    batched_vector_env,
    build_vector_env,
    evaluation_envs,
    evaluation_scenario,
    make_env,
    ray_available,
    require_ray,
    training_envs,
    training_scenario,
    vector_kind,
)
from .logger import EVAL_MEAN_JCT_TAG, TENSORBOARD_KEEP
from .loop import TrainingInterrupted, TrainResult, build_algorithm, make_collectors, run_training
from .monitor import SystemMonitor
from .rng import rng_state, seed_everything, set_rng_state
from .run_spec import (
    CONFIG_FILE,
    RunSpec,
    check_environment,
    config_yaml,
    check_scenario,
    configure_process,
    default_run_name,
    policy_config_from,
    prepare_run,
    read_scenario_file,
    resolve_device,
    resolved_config,
    write_config,
)
from .stats import SchedulingCollectStats, evaluation_score
from .warmstart import log_warm_start, warm_start

#: ring size per env of the evaluation collector's buffer (evaluation keeps no data); read by
#: :func:`make_collectors` from this package at call time (so it may be patched here)
EVAL_BUFFER_PER_ENV = 256

__all__ = [
    "BEST",
    "CKPT_KEYS",
    "CONFIG_FILE",
    "EVAL_BUFFER_PER_ENV",
    "EVAL_MEAN_JCT_TAG",
    "LAST",
    "TENSORBOARD_KEEP",
    "RunSpec",
    "SchedulingCollectStats",
    "SeedSchedule",
    "SystemMonitor",
    "TrainResult",
    "TrainingEnv",
    "TrainingInterrupted",
    "batched_vector_env",
    "build_algorithm",
    "build_vector_env",
    "check_environment",
    "check_scenario",
    "config_yaml",
    "configure_process",
    "default_run_name",
    "evaluation_envs",
    "evaluation_scenario",
    "evaluation_score",
    "load_checkpoint",
    "log_warm_start",
    "make_collectors",
    "make_env",
    "policy_config_from",
    "prepare_run",
    "ray_available",
    "read_scenario_file",
    "require_ray",
    "resolved_config",
    "resolve_device",
    "rng_state",
    "run_training",
    "save_checkpoint",
    "seed_everything",
    "set_rng_state",
    "training_envs",
    "training_scenario",
    "vector_kind",
    "warm_start",
    "WorkerDied",
    "write_config",
]
