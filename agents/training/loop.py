"""The training loop: :func:`run_training` and the pieces it assembles.

One tianshou *epoch* = one evaluation interval (:meth:`TrainConfig.epoch_plan`; the rounding
of ``--steps`` is :meth:`TrainConfig.planned_env_steps`; a resumed run keeps a fresh run's
intervals, :meth:`TrainConfig.interval_plan`). Evaluation is tianshou's test step on
held-out workload seeds ``eval_seed + j`` (one batched env per episode), the policy acting by
``train.eval_action`` (argmax or a seeded sample), score = ``-mean JCT`` (:func:`~agents.training.stats.evaluation_score`).
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
from tianshou.algorithm.optim import TorchOptimizerFactory
from tianshou.trainer import OnPolicyTrainer, OnPolicyTrainerParams

from agents.policy.modes import acting_flags
from envs.observation import ObservationSpec

from . import rundir
from .callbacks import TrainerCallbacks, earlier_devices
from .checkpoints import BEST, LAST, RESULT_FILE, restore
from .envs import evaluation_envs, evaluation_scenario, training_envs
from .logger import BaselineScalars, RunLogger, RunWriter, custom_layout
from .optimizer import adam
from .prepare import check_environment, configure_process, write_config
from .rng import seed_everything, set_rng_state
from .run_spec import RunSpec
from .scenario_mix import ScenarioSchedule, TrainingMix
from .stats import SchedulingCollectStats
from .tianshou_glue.collector import BatchCollector, BatchedReplayBuffer
from .tianshou_glue.trainer import ResumableOnPolicyTrainer
from .validation_baselines import figures_text, run_validation_baselines
from .validation_set import OtherValidation, evaluation_collector
from .vector_env import WorkerDied
from .warmstart import log_warm_start, warm_start

if TYPE_CHECKING:
    from agents.policy.network import TapFingerPolicy

    from .envs import VectorEnv
    from .tianshou_glue.algorithm import MultiAgentPPO


@dataclass
class TrainResult:
    """Summary of a finished (or interrupted) run."""

    run_dir: Path
    env_steps: int
    gradient_steps: int
    update_steps: int
    epochs: int
    best_mean_jct: float | None
    last_path: Path
    best_path: Path | None
    interrupted: bool
    wall_s: float
    best_env_step: int | None = None  # env step of the evaluation that gave best.pt (0: the untrained model)
    total_wall_s: float | None = None  # wall time over every process of the run (resumes added up)
    device: str = "cpu"  # device types the run trained on, joined by "+" when a resume moved it ("cuda+cpu")
    critic: dict[str, float] | None = None  # the critic's health over the last updates (MultiAgentPPO.critic_health)


class TrainingInterrupted(Exception):
    """Ctrl-C during training; ``last.pt`` was saved. Carries the :class:`TrainResult`."""

    def __init__(self, result: TrainResult) -> None:
        super().__init__(f"interrupted; saved {result.last_path}")
        self.result = result


def run_training(spec: RunSpec, device: torch.device | None = None,
                 on_start: Callable[[Path], None] | None = None) -> TrainResult:
    """Train (or resume) one run; see the package docstring.

    The run directory is taken first (:func:`agents.training.rundir.claim`), then ``on_start(run_dir)``
    is called. Raises :class:`TrainingInterrupted` on Ctrl-C (or SIGTERM turned into one), and
    :class:`~agents.training.vector_env.WorkerDied` when a vector env worker process or Ray actor died; both
    after saving ``last.pt``. A new run that fails or is stopped before its first ``last.pt``
    removes its directory (:func:`agents.training.rundir.remove_unstarted`): nothing in it could be resumed."""
    device = device or check_environment(spec)
    start = time.perf_counter()
    # the run directory first: a new run creates it exclusively, a resumed one locks its own
    retry = (lambda: rundir.default_run_name(spec.scenario.name, spec.policy.variant, spec.train.seed))
    spec.run_dir, lock = rundir.claim(spec.run_dir, spec.fresh_dir, spec.default_name, retry)
    try:
        return _train_in_run_dir(spec, device, lock, start, on_start)
    except BaseException:
        lock.release()
        if spec.fresh_dir:
            rundir.remove_unstarted(spec.run_dir)
        raise


def _train_in_run_dir(spec: RunSpec, device: torch.device, lock: rundir.RunLock, start: float,
                      on_start: Callable[[Path], None] | None) -> TrainResult:
    """:func:`run_training` once the run directory is taken (``lock`` held)."""
    t = spec.train
    if on_start is not None:
        on_start(spec.run_dir)
    configure_process(t)
    if spec.resume is None:
        seed_everything(t.seed)

    with ExitStack() as cleanup:
        cleanup.callback(lock.release)
        # environments: one training vector env per training scenario (train.scenarios), and validation
        mix_envs = [training_envs(s, t, spec.restarts, stream=k) for k, s in enumerate(spec.trained_on)]
        for venv in mix_envs:
            cleanup.callback(_close_quietly, venv)
        train_envs = mix_envs[0]
        test_envs = evaluation_envs(spec.scenario, t)
        cleanup.callback(_close_quietly, test_envs)

        # network and MAPPO: resumed from the checkpoint, or fresh with an optional warm start
        algorithm, net = build_algorithm(spec, train_envs, device)
        if spec.resume is not None:
            restore(spec, algorithm)
        warm = warm_start(spec, algorithm, net) if spec.resume is None and t.imitate else None

        # run directory, TensorBoard, the state shared by the trainer callbacks
        devices_before = earlier_devices(spec)  # before config.yaml is rewritten
        trained_on = {"training_scenarios": [s.to_dict() for s in spec.training_scenarios]} if spec.training_scenarios else {}
        write_config(spec, {"restarts": spec.restarts, "device": str(device), **trained_on})
        means = validation_baselines(spec)
        others = OtherValidation(spec, algorithm, means) if spec.validation_others else None
        if others is not None:
            cleanup.callback(others.close)
        writer = RunWriter(log_dir=str(spec.run_dir))
        cleanup.callback(writer.close)
        writer.add_custom_scalars(custom_layout(means))
        baselines = BaselineScalars(spec.run_dir, means)
        cleanup.callback(baselines.close)
        if warm is not None:
            log_warm_start(writer, warm)
        callbacks = TrainerCallbacks(spec, algorithm, net, writer, started=start, devices_before=devices_before,
                                     baselines=baselines, train_envs=train_envs, others=others)
        cleanup.callback(callbacks.progress.close)
        if spec.fresh_dir:  # a new run directory: its baselines' lines start where it starts
            callbacks.log_baselines(spec.done_env_steps)
        logger = RunLogger(writer, _restored_steps(spec))

        # collectors and trainer
        train_collector, test_collector = make_collectors(spec, algorithm, train_envs, test_envs)
        collectors = [train_collector] + [training_collector(spec, algorithm, venv, reset=True) for venv in mix_envs[1:]]
        for collector in collectors:
            collector.set_on_step_hook(callbacks.collect_step_fn)
        if len(collectors) > 1:
            callbacks.mix = TrainingMix(ScenarioSchedule.from_train(t), collectors, mix_envs)
        params = trainer_params(spec, callbacks, logger, train_collector, test_collector)
        trainer = ResumableOnPolicyTrainer(algorithm, params,
                                           first_epoch_steps=t.interval_plan(spec.done_env_steps)[0])
        callbacks.trainer = trainer
        if spec.resume is not None:
            set_rng_state(spec.resume["rng"])
        if not (spec.run_dir / LAST).is_file():  # a run always has something to resume from
            callbacks.save(LAST)

        # train (Ctrl-C and SIGTERM stop early), save last.pt, summarise
        callbacks.progress.start()
        try:
            interrupted = _run(trainer)
        except WorkerDied as exc:
            last = callbacks.save(LAST)
            raise WorkerDied(f"{exc}; saved {last} at env step {callbacks.env_step()} "
                             f"(resume with --resume {last})") from None
        result = _finish(spec, callbacks, start, interrupted)
    if interrupted:
        raise TrainingInterrupted(result)
    return result


def build_algorithm(spec: RunSpec, env: VectorEnv, device: torch.device) -> tuple[MultiAgentPPO, TapFingerPolicy]:
    """The network, the tianshou policy and :class:`~agents.training.tianshou_glue.algorithm.MultiAgentPPO`."""
    # imported on first use: the algorithm and agents.policy load the graph networks (torch-geometric)
    from agents.policy.network import TapFingerPolicy

    from .loss import LossSettings
    from .tianshou_glue.algorithm import MultiAgentPPO, TianshouJointPolicy

    net = TapFingerPolicy(ObservationSpec.from_config(spec.scenario), spec.policy).to(device)
    t = spec.train
    if t.compile:
        net.compile_passes(t.compile)
    acting = acting_flags(t.eval_action)
    policy = TianshouJointPolicy(net, action_space=env.action_space[0], observation_space=env.observation_space[0],
                                 deterministic_eval=acting.deterministic, precision=t.precision,
                                 argmax_allocation_eval=acting.argmax_allocation, keep_busy_eval=acting.keep_busy,
                                 eval_conflicts=t.eval_conflicts)
    algorithm = MultiAgentPPO(policy=policy, optim=TorchOptimizerFactory(adam, lr=t.lr),
                              settings=LossSettings.from_train(t, spec.scenario.mode))
    return algorithm, net


def training_collector(spec: RunSpec, algorithm: MultiAgentPPO, train_envs: VectorEnv,
                       reset: bool = False) -> BatchCollector:
    """A training collector over ``train_envs``, its buffer sized for one collection; ``reset``: reset
    now (the trainer resets only the collector it starts with)."""
    t = spec.train
    per_env = math.ceil(t.resolved_collect_steps() / t.envs)
    collector = BatchCollector(
        algorithm, train_envs, BatchedReplayBuffer(per_env * t.envs, t.envs), collect_stats_class=SchedulingCollectStats
    )
    if reset:
        collector.reset()
    return collector


def make_collectors(
    spec: RunSpec, algorithm: MultiAgentPPO, train_envs: VectorEnv, test_envs: VectorEnv | None,
) -> tuple[BatchCollector, BatchCollector | None]:
    """The training collector (:func:`training_collector`, over ``train_envs``) and the
    evaluation collector.

    Both are :class:`~agents.training.tianshou_glue.collector.BatchCollector` over a
    :class:`~agents.training.tianshou_glue.collector.BatchedReplayBuffer` (tianshou's classes with the per-env Python
    loops removed; with ``dummy``/``subproc``/... envs they behave as the stock ones).
    """
    t = spec.train
    train_collector = training_collector(spec, algorithm, train_envs)
    test_collector = None
    if test_envs is not None:
        test_collector = evaluation_collector(algorithm, test_envs, t.eval_episodes)
    return train_collector, test_collector


def trainer_params(
    spec: RunSpec,
    callbacks: TrainerCallbacks,
    logger: RunLogger,
    train_collector: BatchCollector,
    test_collector: BatchCollector | None,
) -> OnPolicyTrainerParams:
    """tianshou's on-policy trainer settings: one epoch per evaluation interval, the callbacks of
    :class:`~agents.training.callbacks.TrainerCallbacks`."""
    t = spec.train
    n_steps = t.resolved_collect_steps()
    _, epoch_len, epochs = t.interval_plan(spec.done_env_steps)
    return OnPolicyTrainerParams(
        training_collector=train_collector,
        test_collector=test_collector,
        max_epochs=callbacks.completed_epochs + (0 if callbacks.final_evaluation_only else epochs),
        epoch_num_steps=epoch_len,
        collection_step_num_env_steps=n_steps,
        update_step_num_repetitions=t.repeat,
        batch_size=t.batch_size,
        test_step_num_episodes=t.eval_episodes,
        training_fn=callbacks.training_fn,
        test_fn=callbacks.test_fn,
        compute_score_fn=callbacks.compute_score_fn,
        save_best_fn=callbacks.save_best_fn,
        save_checkpoint_fn=callbacks.save_checkpoint_fn,
        resume_from_log=spec.resume is not None,
        logger=logger,
        verbose=False,  # tianshou's "test_reward: ..." line; compute_score_fn prints ours
        show_progress=False,  # its per-epoch bars; the callbacks' RunProgress draws one bar over the run
    )


def validation_baselines(spec: RunSpec) -> dict[str, float | None]:
    """The validation baselines' mean JCTs of the run (:mod:`~agents.training.validation_baselines`; read back
    in a resumed run's own directory); empty when ``train.validation_baselines`` is off. Printed as one line
    when the run prints its evaluations."""
    if not spec.train.validation_baselines:
        return {}
    means = run_validation_baselines(spec.run_dir, evaluation_scenario(spec.scenario, spec.train), spec.train)
    if spec.eval_lines:
        shown = figures_text(means)
        print(f"validation baselines (mean JCT on the validation workloads): {shown}", flush=True)
    return means


def _restored_steps(spec: RunSpec) -> tuple[int, int, int] | None:
    """``(epoch, env_step, update_step)`` of the resumed checkpoint for the logger, None for a fresh run."""
    if spec.resume is None:
        return None
    counters = spec.resumed_counters
    return int(counters["epoch"]), int(counters["env_step"]), int(counters["update_step"])


def _run(trainer: OnPolicyTrainer) -> bool:
    """Run the trainer; True when Ctrl-C stopped it."""
    try:
        trainer.run()
    except KeyboardInterrupt:
        return True
    return False


def _finish(spec: RunSpec, callbacks: TrainerCallbacks, start: float, interrupted: bool) -> TrainResult:
    """Save ``last.pt`` and summarise the run."""
    last = callbacks.save(LAST)
    best = spec.run_dir / BEST
    result = TrainResult(
        run_dir=spec.run_dir,
        env_steps=callbacks.env_step(),
        gradient_steps=int(callbacks.algorithm.gradient_steps),
        update_steps=int(callbacks.algorithm.update_count),
        epochs=callbacks.completed_epochs,
        best_mean_jct=callbacks.best_mean_jct,
        last_path=last,
        best_path=best if best.is_file() else None,
        interrupted=interrupted,
        wall_s=time.perf_counter() - start,
        best_env_step=callbacks.best_env_step,
        total_wall_s=callbacks.wall_s(),
        device="+".join(callbacks.devices),
        critic=callbacks.algorithm.critic_health(),
    )
    write_result(spec, result)
    return result


def write_result(spec: RunSpec, result: TrainResult) -> Path:
    """``result.json`` in the run directory: what the run did so far (rewritten by every process
    of the run; ``finished`` once the planned env steps are done)."""
    from agents.json_files import write_json

    planned = spec.train.planned_env_steps()
    wall = result.total_wall_s or result.wall_s
    doc = {
        "scenario": spec.scenario.name,
        "seed": spec.train.seed,
        "device": result.device,
        "env_steps": result.env_steps,
        "planned_env_steps": planned,
        "finished": bool(not result.interrupted and result.env_steps >= planned),
        "wall_s": round(wall, 1),
        "env_steps_per_s": round(result.env_steps / wall, 1) if wall > 0 else None,
        "gradient_steps": result.gradient_steps,
        "best_mean_jct": result.best_mean_jct,
        "best_env_step": result.best_env_step,
        "restarts": spec.restarts,
        "critic": result.critic,
        "torch": str(torch.__version__),
    }
    return write_json(spec.run_dir / RESULT_FILE, doc)


def _close_quietly(venv: VectorEnv) -> None:
    try:
        venv.close()
    except Exception:
        pass
