"""Training runs: resolved configs, envs, tianshou trainer, logging, checkpoints, resume.

:func:`prepare_run` turns a scenario, ``key=value`` overrides and CLI flags into a
:class:`RunSpec` (scenario + policy + train config, run directory, optional checkpoint to
resume); :func:`run_training` trains it with tianshou 2.0's on-policy trainer:

* training envs (``train.vector``): ``batch`` (default) -- :mod:`envs.batched` behind
  :class:`~agents.vector_env.BatchVectorEnv`, in process or split over ``train.workers``
  processes; ``ray`` -- the same split over Ray actors; ``dummy``/``subproc`` -- one
  ``envs.gym_env.EdgeClustersEnv`` per env wrapped by :class:`TrainingEnv`. Every kind gives
  env ``i`` the workload seeds of :class:`~agents.vector_env.SeedSchedule` key
  ``(seed, restart, i)``, drawn from ``[TRAIN_SEED_MIN, 2**62)``, and the same ``info`` schema;
* evaluation: tianshou's test step on held-out workload seeds ``eval_seed + j`` (one batched
  env per episode), the deterministic policy, score = ``-mean JCT``;
  ``best.pt`` is saved whenever the evaluation mean JCT improves on the best of the run;
* one tianshou *epoch* = one evaluation interval (:meth:`TrainConfig.epoch_plan`; the
  rounding of ``--steps`` is :meth:`TrainConfig.planned_env_steps`); ``last.pt`` is written at
  the end of every epoch (tianshou's ``save_checkpoint_fn``), every ``save_every`` env steps,
  at the end of the run and on Ctrl-C; every evaluation prints one line
  ``step X: eval mean JCT Y (best Z at step S)`` (tianshou's own ``test_reward`` line is off);
* TensorBoard scalars through a subclass of tianshou's ``TensorboardLogger`` that keeps only
  :data:`TENSORBOARD_KEEP` (``training/``, ``update/``, ``test/``) plus ``system/``
  (throughput, CPU/GPU utilisation of the machine, :class:`SystemMonitor`).

The scenario is checked (:func:`check_scenario`: progress functions, trace files) by
:func:`prepare_run`, before any worker process or run directory exists.

Checkpoints are written with :func:`agents.checkpoint.save_policy_checkpoint` (keys ``model``,
``policy_config``, ``scenario``, ``obs_spec``) plus ``optimizer``, ``counters``, ``rng``,
``train_config`` and ``return_scaler``; every value is a tensor or a plain Python value, and
every read goes through :func:`agents.checkpoint.read_checkpoint` (``weights_only=True``).
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import math
import random
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
import torch
import yaml
from tianshou.data import CollectStats

from envs.config import ConfigError, ScenarioConfig, apply_overrides, from_dict, read_scenario_yaml, to_dict

from envs.batched import EPISODE_INFO, STEP_INFO

from .vector_env import SeedSchedule
from .train_config import TRAIN_SEED_MIN, SplitOverrides, TrainConfig, apply_train_values, split_overrides

LAST = "last.pt"
BEST = "best.pt"
CONFIG_FILE = "config.yaml"
EVAL_BUFFER_PER_ENV = 256
#: keys this module adds to the policy checkpoint
CKPT_KEYS = ("optimizer", "counters", "rng", "train_config", "return_scaler")


# =======================================================================================
# environments
# =======================================================================================
class TrainingEnv(gym.Wrapper):
    """Seeds every episode from a :class:`SeedSchedule` and gives ``info`` a fixed schema.

    tianshou stores ``info`` in its buffer, so every step (and reset) reports the same keys:
    ``agent_rewards`` (N,), ``placed``/``void``/``invalid``/``conflicts``, ``advanced``,
    ``workload_seed``, ``episode_end``, ``ep_<metric>`` (the env's ``episode_metrics`` at the
    last step of an episode, 0 before; a NaN mean JCT becomes 0) and ``ep_length`` (logical
    steps of the episode, at its last step).
    """

    def __init__(self, env: gym.Env, seeds: SeedSchedule) -> None:
        super().__init__(env)
        self.seeds = seeds
        self._n = int(env.unwrapped.cfg.num_clusters)
        self._seed = -1
        self._length = 0

    def _info(self, raw: Mapping[str, Any] | None) -> dict[str, Any]:
        raw = raw or {}
        out: dict[str, Any] = {
            "agent_rewards": np.asarray(raw.get("agent_rewards", np.zeros(self._n)), dtype=np.float64),
            "advanced": bool(raw.get("advanced", False)),
            "workload_seed": self._seed,
        }
        for key in STEP_INFO:
            out[key] = int(raw.get(key, 0))
        metrics = raw.get("episode_metrics")
        out["episode_end"] = metrics is not None
        for key in EPISODE_INFO[:-1]:
            value = float(metrics.get(key, 0.0)) if metrics is not None else 0.0
            out[f"ep_{key}"] = value if math.isfinite(value) else 0.0
        out["ep_length"] = float(self._length) if metrics is not None else 0.0
        return out

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self._seed = self.seeds.next() if seed is None else int(seed)
        self._length = 0
        obs, _ = self.env.reset(seed=self._seed, options=options)
        return obs, self._info(None)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._length += 1
        return obs, float(reward), bool(terminated), bool(truncated), self._info(info)


def make_env(scenario: Mapping[str, Any], seed_key: Sequence[int] = (0,), fixed_seed: int | None = None) -> TrainingEnv:
    """Build one wrapped env from a scenario dict (picklable through ``functools.partial``)."""
    from envs.gym_env import EdgeClustersEnv

    return TrainingEnv(EdgeClustersEnv(from_dict(scenario)), SeedSchedule(seed_key, fixed_seed))


def vector_kind(train: TrainConfig) -> str:
    """``batch`` (the batched simulator) unless ``train.vector`` names another kind."""
    return "batch" if train.vector == "auto" else train.vector


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def require_ray() -> None:
    """ConfigError unless the optional Ray extra is installed (``--vector ray``)."""
    if not ray_available():
        raise ConfigError(
            "--vector ray needs the optional 'ray' extra: pip install '.[ray]' (or pip install 'ray[default]')"
        )


def build_vector_env(kind: str, env_fns: list[Callable[[], gym.Env]]) -> Any:
    """tianshou's own vector env of one ``EdgeClustersEnv`` per env: ``dummy`` or ``subproc``."""
    from tianshou.env import DummyVectorEnv, SubprocVectorEnv

    if kind == "dummy":
        return DummyVectorEnv(env_fns)
    if kind == "subproc":
        return SubprocVectorEnv(env_fns)
    raise ConfigError(f"unknown vector env kind {kind!r}")


def training_envs(scenario: ScenarioConfig, train: TrainConfig, restart: int) -> Any:
    """The training vector env; env ``i`` draws its workload seeds from key ``(seed, restart, i)``
    whatever the kind, so every kind trains on the same workloads."""
    kind = vector_kind(train)
    keys = [(train.seed, restart, i) for i in range(train.envs)]
    if kind in ("batch", "ray"):
        return batched_vector_env(kind, scenario, train.envs, train.workers, train.ray_address, seed_keys=keys)
    raw = to_dict(scenario)
    return build_vector_env(kind, [functools.partial(make_env, raw, key) for key in keys])


def batched_vector_env(
    kind: str,
    scenario: ScenarioConfig,
    num_envs: int,
    workers: int | None = None,
    ray_address: str | None = None,
    **seeds: Any,
) -> Any:
    """``batch``: one batched simulator in this process (``workers`` in (None, 1)) or split over
    ``workers`` processes; ``ray``: split over Ray actors (``workers``, default one per CPU, at
    most one per env), at ``ray_address`` / ``$RAY_ADDRESS`` or a local Ray."""
    from .vector_env import BatchVectorEnv, ShardedBatchVectorEnv

    if kind == "ray":
        require_ray()
        import os

        actors = workers or min(num_envs, os.cpu_count() or 1)
        address = ray_address or os.environ.get("RAY_ADDRESS") or None
        return ShardedBatchVectorEnv(scenario, num_envs, actors, "ray", ray_address=address, **seeds)
    if workers is None or workers == 1:
        return BatchVectorEnv(scenario, num_envs, **seeds)
    return ShardedBatchVectorEnv(scenario, num_envs, workers, "process", **seeds)


def evaluation_scenario(scenario: ScenarioConfig, train: TrainConfig) -> ScenarioConfig:
    return scenario.for_evaluation() if train.eval_scenario == "eval" else scenario


def evaluation_envs(scenario: ScenarioConfig, train: TrainConfig) -> Any:
    """One in-process batched env per held-out workload ``eval_seed + j`` (replayed at every evaluation)."""
    seeds = [train.eval_seed + j for j in range(train.eval_episodes)]
    return batched_vector_env("batch", evaluation_scenario(scenario, train), len(seeds), fixed_seeds=seeds)


# =======================================================================================
# statistics
# =======================================================================================
@dataclass(kw_only=True)
class SchedulingCollectStats(CollectStats):
    """tianshou collect stats plus scheduling metrics (logged as ``training/*`` and ``test/*``).

    Rates are fractions of agent decisions (steps x agents): ``conflict_rate`` (lost a
    conflict), ``void_rate`` (placed nothing, skipped agents included) and ``invalid_rate``
    (an action the env refused). Episode metrics average the episodes that ended in this
    collection; ``episode_length`` counts logical steps (tianshou's ``lens_stat`` is wrong for
    episodes that span collections) and ``real_steps`` real time steps.
    """

    mean_jct: float | None = None
    episode_length: float | None = None
    real_steps: float | None = None
    cpu_util: float | None = None
    gpu_util: float | None = None
    conflict_rate: float | None = None
    void_rate: float | None = None
    invalid_rate: float | None = None
    placed_per_step: float | None = None
    truncated_episodes: int = 0
    episode_metrics: list = field(default_factory=list)  # per-episode dicts (lists are not logged)
    decision_counts: list = field(default_factory=lambda: [0, 0, 0, 0, 0])  # decisions + STEP_INFO sums

    def update_at_step_batch(self, step_batch: Any, refresh_sequence_stats: bool = False) -> None:
        super().update_at_step_batch(step_batch, refresh_sequence_stats)
        info = step_batch.info
        if "placed" not in info:
            return
        rewards = np.asarray(info.agent_rewards)
        agents = rewards.shape[1] if rewards.ndim == 2 else 1
        c = self.decision_counts
        c[0] += len(step_batch) * agents
        for k, key in enumerate(STEP_INFO, start=1):
            c[k] += int(np.sum(info[key]))
        # episode metrics come with the last step of each episode (read here, not from the
        # buffer, which may no longer hold the whole episode)
        ended = np.flatnonzero(np.asarray(info.episode_end, dtype=bool))
        truncated = np.asarray(step_batch.truncated, dtype=bool)
        for row in ended:
            metrics = {key: float(np.asarray(info[f"ep_{key}"])[row]) for key in EPISODE_INFO}
            metrics["truncated"] = bool(truncated[row])
            self.episode_metrics.append(metrics)

    def refresh_all_sequence_stats(self) -> None:
        super().refresh_all_sequence_stats()
        decisions, placed, void, invalid, conflicts = self.decision_counts
        if decisions:
            self.conflict_rate = conflicts / decisions
            self.void_rate = void / decisions
            self.invalid_rate = invalid / decisions
        if self.n_collected_steps:
            self.placed_per_step = placed / self.n_collected_steps
        eps = self.episode_metrics
        if eps:
            self.mean_jct = float(np.mean([e["mean_jct"] for e in eps]))
            self.episode_length = float(np.mean([e["length"] for e in eps]))
            self.real_steps = float(np.mean([e["steps"] for e in eps]))
            self.cpu_util = float(np.mean([e["cpu_util"] for e in eps]))
            self.gpu_util = float(np.mean([e["gpu_util"] for e in eps]))
            self.truncated_episodes = int(sum(e["truncated"] for e in eps))


def evaluation_score(stats: Any) -> float:
    """Score maximised by best-model selection: ``-mean JCT``; truncated episodes rank last."""
    if stats.mean_jct is None:
        return -float("inf")
    penalty = 1e9 if stats.truncated_episodes else 0.0
    return -float(stats.mean_jct) - penalty


class SystemMonitor:
    """Machine utilisation for ``system/*`` scalars (best effort, never raises).

    One per run (:class:`_Session`); CPU percentages cover the time since the previous
    :meth:`sample` (machine-wide and this process, the latter can exceed 100 with several threads).
    """

    def __init__(self) -> None:
        self._process: Any = None

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        try:
            import psutil

            if self._process is None:
                self._process = psutil.Process()
                self._process.cpu_percent(interval=None)
            out["cpu_percent"] = float(psutil.cpu_percent(interval=None))
            out["process_cpu_percent"] = float(self._process.cpu_percent(interval=None))
        except Exception:  # pragma: no cover - psutil is a torch-geometric dependency
            pass
        if torch.cuda.is_available():
            try:
                out["gpu_memory_gb"] = torch.cuda.max_memory_allocated() / 2**30
                out["gpu_util_percent"] = float(torch.cuda.utilization())
            except Exception:  # nvml missing: memory only
                pass
        return out


# =======================================================================================
# configuration and run directory
# =======================================================================================
@dataclass
class RunSpec:
    """Everything :func:`run_training` needs (see :func:`prepare_run`)."""

    scenario: ScenarioConfig
    policy: Any  # agents.policy.PolicyConfig
    train: TrainConfig
    run_dir: Path
    resume: dict[str, Any] | None = None  # the loaded checkpoint when resuming
    #: seconds between plain "step X/Y" status lines on stdout (None: none; used when the
    #: progress bars are off because stdout/stderr is not a terminal)
    status_every_s: float | None = None
    #: print the one-line summary of every evaluation ("step X: eval mean JCT ..."; train.py sets it)
    eval_lines: bool = False


def _policy_module() -> Any:
    import agents.policy as policy_module

    return policy_module


def policy_config_from(base: Mapping[str, Any] | None, values: Mapping[str, Any]) -> Any:
    """A validated ``PolicyConfig``: the defaults, then ``base`` (a checkpoint's ``policy_config``),
    then ``values``, assigned typed by :meth:`~agents.config_section.ConfigSection.from_dict`;
    unknown keys, ill-typed values and failed checks raise :class:`ConfigError`."""
    return _policy_module().PolicyConfig.from_dict(base if base is not None else {}, values)


def read_scenario_file(path_or_name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A scenario YAML (path or name in ``configs/``) split into (scenario, policy, train) dicts."""
    path, raw = read_scenario_yaml(path_or_name)
    policy = raw.pop("policy", None) or {}
    train = raw.pop("train", None) or {}
    if not isinstance(policy, dict) or not isinstance(train, dict):
        raise ConfigError(f"{path}: 'policy' and 'train' sections must be mappings")
    raw.setdefault("name", path.stem)
    return raw, policy, train


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys where two plain structures differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += _diff(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += _diff(x, y, f"{prefix}{i}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def default_run_name(scenario: ScenarioConfig, policy: Any, train: TrainConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{scenario.name}-{policy.variant}-s{train.seed}-{stamp}"


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a training checkpoint (a file, or a run directory holding ``last.pt``).

    Reads with :func:`agents.checkpoint.read_checkpoint` (safe loading: tensors and plain
    values only); every problem raises :class:`~agents.checkpoint.CheckpointError` (a
    :class:`ConfigError`).
    """
    from .checkpoint import POLICY_KEYS, CheckpointError, read_checkpoint

    path = Path(path)
    if path.is_dir():
        path = path / LAST
    ckpt = read_checkpoint(path, map_location, required=())
    missing = [k for k in (*POLICY_KEYS, *CKPT_KEYS) if k not in ckpt]
    if missing:
        raise CheckpointError(
            f"{path} is not a training checkpoint (missing {missing}); resume needs a last.pt written by train.py"
        )
    ckpt["_path"] = str(path)
    return ckpt


def check_scenario(scenario: ScenarioConfig, train: TrainConfig) -> None:
    """Fail early (ConfigError) on a scenario whose progress functions cannot be built.

    Builds the progress functions of the training scenario and of the one evaluated during
    training (a test-bed trace file is read and fitted here), in this process, before any
    worker process or run directory exists.
    """
    from envs.progress import build_progress_functions
    from envs.trace_fit import TraceError

    try:
        build_progress_functions(scenario)
        evaluation = evaluation_scenario(scenario, train)
        if evaluation is not scenario:
            build_progress_functions(evaluation)
    except TraceError as exc:
        raise ConfigError(str(exc)) from None


def prepare_run(
    config: str | None,
    overrides: Sequence[str] = (),
    *,
    flags: Mapping[str, Any] | None = None,
    variant: str | None = None,
    resume: str | None = None,
) -> RunSpec:
    """Resolve the scenario, policy and train configs, and the run directory.

    ``flags`` are explicit CLI values for :class:`TrainConfig` fields (``steps``, ``envs``,
    ``seed``, ``device``, ``logdir``, ``vector``); ``None`` values are ignored. With
    ``resume`` the checkpoint's configs are the base; a scenario or policy that differs from
    the checkpoint's is refused (:class:`ConfigError`), train settings may change.
    """
    split: SplitOverrides = split_overrides(overrides)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    ckpt = load_checkpoint(resume) if resume else None

    if config is not None:
        scen_raw, pol_yaml, train_yaml = read_scenario_file(config)
    elif ckpt is not None:
        scen_raw, pol_yaml, train_yaml = copy.deepcopy(dict(ckpt["scenario"])), {}, {}
    else:
        raise ConfigError("--config is required (a scenario name or YAML path) unless --resume is given")
    apply_overrides(scen_raw, split.scenario)
    scenario = from_dict(scen_raw)

    pol_values = {**pol_yaml, **split.policy}
    if variant is not None:
        pol_values["variant"] = variant
    # resuming: the checkpoint's architecture is the base for every key the user did not set
    policy = policy_config_from(ckpt["policy_config"] if ckpt is not None else None, pol_values)

    train = TrainConfig.from_dict(ckpt["train_config"]) if ckpt is not None else TrainConfig()
    apply_train_values(train, train_yaml)
    apply_train_values(train, flags)
    apply_train_values(train, split.train)
    train.validate()
    check_scenario(scenario, train)

    if ckpt is not None:
        problems = [f"scenario.{k}" for k in _diff(to_dict(scenario), ckpt["scenario"])]
        problems += [f"policy.{k}" for k in _diff(policy.to_dict(), ckpt["policy_config"])]
        if problems:
            raise ConfigError(
                f"cannot resume {ckpt['_path']}: the checkpoint was trained with a different "
                f"scenario/architecture ({', '.join(problems[:8])}{' ...' if len(problems) > 8 else ''})"
            )
        done = int(ckpt["counters"]["env_step"])
        if train.steps <= done:
            raise ConfigError(
                f"nothing to do: {ckpt['_path']} already has {done} env steps and the step budget is "
                f"{train.steps} (pass a larger --steps)"
            )
        run_dir = Path(ckpt["_path"]).parent
    else:
        run_dir = Path(train.logdir) / (train.run_name or default_run_name(scenario, policy, train))
    return RunSpec(scenario=scenario, policy=policy, train=train, run_dir=run_dir, resume=ckpt)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda`` without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda requested but CUDA is not available (use --device cpu or auto)")
    return torch.device(name)


def check_environment(spec: RunSpec) -> torch.device:
    """Fail early (ConfigError) on a device or vector backend this machine lacks."""
    device = resolve_device(spec.train.device)
    if vector_kind(spec.train) == "ray":
        require_ray()
    return device


def write_config(spec: RunSpec, extra: Mapping[str, Any] | None = None) -> Path:
    """Write the resolved ``config.yaml`` of the run (scenario, policy, train)."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "scenario": to_dict(spec.scenario),
        "policy": spec.policy.to_dict(),
        "train": spec.train.to_dict(),
        "meta": {
            "gamma": spec.train.resolved_gamma(spec.scenario.mode),
            "vector": vector_kind(spec.train),
            "torch": str(torch.__version__),
            "python": sys.version.split()[0],
            **dict(extra or {}),
        },
    }
    path = spec.run_dir / CONFIG_FILE
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# =======================================================================================
# RNG state
# =======================================================================================
def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch (and CUDA) RNG states as tensors / plain values."""
    np_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": list(random.getstate()[1]),
        "python_version": random.getstate()[0],
        "python_gauss": random.getstate()[2],
        "numpy": {
            "key": torch.from_numpy(np.asarray(np_state["state"]["key"], dtype=np.int64)),
            "pos": int(np_state["state"]["pos"]),
            "has_gauss": int(np_state["has_gauss"]),
            "gauss": float(np_state["gauss"]),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate((state["python_version"], tuple(int(x) for x in state["python"]), state["python_gauss"]))
    npst = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": npst["key"].numpy().astype(np.uint32), "pos": int(npst["pos"])},
            "has_gauss": int(npst["has_gauss"]),
            "gauss": float(npst["gauss"]),
        }
    )
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        cuda = state["cuda"]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all([s.cpu() for s in cuda])


# =======================================================================================
# training
# =======================================================================================
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


class TrainingInterrupted(Exception):
    """Ctrl-C during training; ``last.pt`` was saved. Carries the :class:`TrainResult`."""

    def __init__(self, result: TrainResult) -> None:
        super().__init__(f"interrupted; saved {result.last_path}")
        self.result = result


#: the TensorBoard scalars tianshou's logger may write, per scope (everything else it logs --
#: ``save/*``, ``info/*``, ``update/smoothed_loss/*`` copies, step counters, min/max/std
#: statistics -- is dropped); ``system/*`` and ``test/best_mean_jct`` are written directly
TENSORBOARD_KEEP: dict[str, tuple[str, ...]] = {
    "training": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "placed_per_step", "truncated_episodes", "collect_speed", "n_collected_episodes",
    ),
    "test": (
        "returns_stat/mean", "mean_jct", "episode_length", "cpu_util", "gpu_util", "conflict_rate", "void_rate",
        "invalid_rate", "truncated_episodes",
    ),
    "update": (
        "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "explained_variance",
        "grad_norm", "logp_mismatch", "active_fraction",
    ),
}


def _make_logger(writer: Any, restored: tuple[int, int, int] | None) -> Any:
    from tianshou.utils import TensorboardLogger

    class RunLogger(TensorboardLogger):
        """tianshou's TensorBoard logger: resume counters from the checkpoint, only the
        scalars of :data:`TENSORBOARD_KEEP`."""

        def restore_data(self) -> tuple[int, int, int]:
            if restored is None:
                return 0, 0, 0
            epoch, env_step, update_step = restored
            self.last_save_step = epoch
            return epoch, env_step, update_step

        def write(self, step_type: str, step: int, data: dict[str, Any]) -> None:
            keep = TENSORBOARD_KEEP.get(step_type.split("/")[0], ())
            scope = step_type.split("/")[0]
            for key in keep:
                value = data.get(key)
                if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                    self.writer.add_scalar(f"{scope}/{key}", value, global_step=step)
            if self.write_flush:
                self.writer.flush()

    return RunLogger(writer, training_interval=1, test_interval=1, update_interval=1, info_interval=1, save_interval=1)


class _Session:
    """State shared by the trainer callbacks of one run."""

    def __init__(self, spec: RunSpec, algorithm: Any, net: torch.nn.Module, writer: Any) -> None:
        self.spec = spec
        self.algorithm = algorithm
        self.net = net
        self.writer = writer
        self.trainer: Any = None
        counters = (spec.resume or {}).get("counters", {})
        self.completed_epochs = int(counters.get("epoch", 0))
        self.restarts = int(counters.get("restarts", -1)) + 1
        self.best_score = float(counters.get("best_score", -math.inf))
        self.best_mean_jct: float | None = counters.get("best_mean_jct")
        self.best_env_step: int | None = counters.get("best_env_step")
        self.last_score = -math.inf
        self.last_mean_jct: float | None = None
        self.last_save_env_step = int(counters.get("env_step", 0))
        self._tick: tuple[float, int] | None = None
        self._status_at = time.perf_counter()
        self.last_rate: float | None = None
        self.monitor = SystemMonitor()
        best = spec.run_dir / BEST
        if spec.resume is not None and best.is_file():  # best.pt may be newer than last.pt
            try:
                bc = load_checkpoint(best).get("counters", {})
                if float(bc.get("best_score", -math.inf)) > self.best_score:
                    self.best_score = float(bc["best_score"])
                    self.best_mean_jct = bc.get("best_mean_jct")
                    self.best_env_step = bc.get("best_env_step", bc.get("env_step"))
            except ConfigError:  # an unreadable best.pt is replaced by the next best
                pass

    # ------------------------------------------------------------------ counters / saving
    def env_step(self) -> int:
        trainer = self.trainer
        if trainer is not None and hasattr(trainer, "_env_step"):
            return int(trainer._env_step)
        return self.last_save_env_step

    def counters(self, env_step: int | None = None, epoch: int | None = None) -> dict[str, Any]:
        return {
            "env_step": int(self.env_step() if env_step is None else env_step),
            "gradient_steps": int(self.algorithm.gradient_steps),
            "update_step": int(self.algorithm.update_count),
            "epoch": int(self.completed_epochs if epoch is None else epoch),
            "restarts": int(self.restarts),
            "best_score": float(self.best_score),
            "best_mean_jct": None if self.best_mean_jct is None else float(self.best_mean_jct),
            "best_env_step": None if self.best_env_step is None else int(self.best_env_step),
        }

    def save(self, name: str, env_step: int | None = None, epoch: int | None = None) -> Path:
        path = self.spec.run_dir / name
        extra = {
            "optimizer": self.algorithm.optim.state_dict(),
            "counters": self.counters(env_step, epoch),
            "rng": rng_state(),
            "train_config": self.spec.train.to_dict(),
            "return_scaler": self.algorithm.return_scaler_state(),
        }
        save_checkpoint(path, self.net, self.spec.scenario, extra)
        if name == LAST:
            self.last_save_env_step = extra["counters"]["env_step"]
        return path

    # ------------------------------------------------------------------ tianshou callbacks
    def save_checkpoint_fn(self, epoch: int, env_step: int, gradient_step: int) -> str:
        """End of an epoch (before its evaluation): ``last.pt``."""
        self.completed_epochs = int(epoch)
        return str(self.save(LAST, env_step=env_step, epoch=epoch))

    def training_fn(self, epoch: int, env_step: int) -> None:
        """Start of each training step: throughput / machine scalars, periodic ``last.pt``."""
        now = time.perf_counter()
        if self._tick is not None:
            t0, s0 = self._tick
            if now > t0 and env_step > s0:
                self.last_rate = (env_step - s0) / (now - t0)
                self.writer.add_scalar("system/env_steps_per_s", self.last_rate, env_step)
        self._tick = (now, env_step)
        for key, value in self.monitor.sample().items():
            self.writer.add_scalar(f"system/{key}", value, env_step)
        self._status_line(env_step, now)
        every = self.spec.train.save_every
        if every is not None and env_step - self.last_save_env_step >= every:
            self.save(LAST, env_step=env_step, epoch=epoch - 1)

    def _status_line(self, env_step: int, now: float) -> None:
        """A plain progress line every ``status_every_s`` seconds (progress bars off)."""
        every = self.spec.status_every_s
        if every is None or now - self._status_at < every:
            return
        self._status_at = now
        total = self.spec.train.planned_env_steps()
        of = f"/{total}" if total else ""
        pct = f" ({100 * env_step / total:.0f}%)" if total else ""
        rate = f", {self.last_rate:.0f} env steps/s" if self.last_rate is not None else ""
        print(f"step {env_step}{of}{pct}{rate}", flush=True)

    def compute_score_fn(self, stats: Any) -> float:
        """tianshou's score of an evaluation; prints our one-line evaluation summary."""
        self.last_score = evaluation_score(stats)
        self.last_mean_jct = stats.mean_jct
        if self.spec.eval_lines:
            step = self.env_step()
            if self.last_score > self.best_score:
                best_jct, best_step = self.last_mean_jct, step
            else:
                best_jct, best_step = self.best_mean_jct, self.best_env_step
            jct = "n/a" if stats.mean_jct is None else f"{stats.mean_jct:.3f}"
            trunc = f", {stats.truncated_episodes} episode(s) truncated" if stats.truncated_episodes else ""
            best = "n/a" if best_jct is None else f"{best_jct:.3f}"
            at = "" if best_step is None else f" at step {best_step}"
            line = f"step {step}: eval mean JCT {jct}{trunc} (best {best}{at})"
            from tqdm import tqdm

            tqdm.write(line, file=sys.stdout)
            sys.stdout.flush()
        return self.last_score

    def save_best_fn(self, algorithm: Any) -> None:
        """Called by tianshou on a new best test score; keeps the best over resumes too."""
        if self.last_score > self.best_score:
            self.best_score = self.last_score
            self.best_mean_jct = self.last_mean_jct
            self.best_env_step = self.env_step()
            self.save(BEST)
        if self.best_mean_jct is not None:
            self.writer.add_scalar("test/best_mean_jct", self.best_mean_jct, self.env_step())


def save_checkpoint(path: Path, net: torch.nn.Module, scenario: ScenarioConfig, extra: Mapping[str, Any]) -> None:
    """Write ``path`` (atomically) through the policy helper's ``save_policy_checkpoint``."""
    _policy_module().save_policy_checkpoint(path, net, scenario, extra=dict(extra))


def build_algorithm(spec: RunSpec, env: Any, device: torch.device) -> tuple[Any, torch.nn.Module]:
    """The network, the tianshou policy and :class:`~agents.ppo.MultiAgentPPO`."""
    from tianshou.algorithm.optim import AdamOptimizerFactory

    from envs.observation import ObservationSpec

    from .ppo import JointActorPolicy, MultiAgentPPO

    mod = _policy_module()
    net = mod.TapFingerPolicy(ObservationSpec.from_config(spec.scenario), spec.policy).to(device)
    t = spec.train
    policy = JointActorPolicy(net, action_space=env.action_space[0], observation_space=env.observation_space[0])
    algorithm = MultiAgentPPO(
        policy=policy,
        optim=AdamOptimizerFactory(lr=t.lr),
        eps_clip=t.eps_clip,
        value_clip=t.value_clip,
        advantage_normalization=t.advantage_normalization,
        vf_coef=t.vf_coef,
        ent_coef=t.ent_coef,
        max_grad_norm=t.max_grad_norm,
        gae_lambda=t.gae_lambda,
        max_batchsize=t.max_batchsize,
        gamma=t.resolved_gamma(spec.scenario.mode),
        return_scaling=t.return_scaling,
    )
    return algorithm, net


def warm_start(spec: RunSpec, algorithm: Any, net: torch.nn.Module) -> Any:
    """``train.imitate``: clone the teacher scheduler into ``net`` (behaviour cloning and DAgger,
    :mod:`agents.imitation`) and start PPO's return scaling from the returns it saw."""
    from .imitation import warm_start as clone_teacher

    t = spec.train
    result = clone_teacher(
        net, spec.scenario, str(t.imitate), episodes=t.imitate_episodes, rounds=t.imitate_rounds,
        epochs=t.imitate_epochs, lr=t.imitate_lr, batch_size=t.batch_size,
        gamma=t.resolved_gamma(spec.scenario.mode), seed=t.seed, seed_low=TRAIN_SEED_MIN, vf_coef=t.vf_coef,
        log=lambda line: print(line, flush=True) if spec.eval_lines else None,
    )
    algorithm.load_return_scaler_state(result.clones[-1].return_scaler_state())
    return result


def log_warm_start(writer: Any, result: Any) -> None:
    """The warm start's per-round losses and JCTs as TensorBoard scalars (``imitation/...``)."""
    writer.add_scalar("imitation/teacher_mean_jct", result.teacher_mean_jct, 0)
    for i, (jct, fit) in enumerate(zip(result.played_mean_jct, result.clones)):
        writer.add_scalar("imitation/played_mean_jct", jct, i)
        if fit.actor_loss:
            writer.add_scalar("imitation/actor_loss", fit.actor_loss[-1], i)
            writer.add_scalar("imitation/critic_loss", fit.critic_loss[-1], i)


def _restore(spec: RunSpec, algorithm: Any, net: torch.nn.Module) -> None:
    ckpt = spec.resume
    assert ckpt is not None
    try:
        net.load_state_dict(ckpt["model"])
    except RuntimeError as exc:
        raise ConfigError(f"cannot resume {ckpt['_path']}: the model does not match the architecture: {exc}") from None
    algorithm.optim.load_state_dict(ckpt["optimizer"])
    algorithm.load_return_scaler_state(ckpt["return_scaler"])
    counters = ckpt["counters"]
    algorithm.gradient_steps = int(counters["gradient_steps"])
    algorithm.update_count = int(counters["update_step"])


def _episode_buffer_size(scenario: ScenarioConfig) -> int:
    """Generous per-episode length estimate (logical steps) for episode-mode buffers."""
    return 4 * scenario.num_tasks + 256


def make_collectors(spec: RunSpec, algorithm: Any, train_envs: Any, test_envs: Any | None) -> tuple[Any, Any]:
    """The training collector (a buffer sized for one collection) and the evaluation collector.

    Both are :class:`~agents.vector_env.BatchCollector` over a
    :class:`~agents.vector_env.BatchedReplayBuffer` (tianshou's classes with the per-env Python
    loops removed; with ``dummy``/``subproc``/... envs they behave as the stock ones).
    """
    from .vector_env import BatchCollector, BatchedReplayBuffer

    t = spec.train
    n_steps = t.resolved_collect_steps()
    if n_steps is not None:
        per_env = math.ceil(n_steps / t.envs)
    else:
        per_env = t.buffer_per_env or math.ceil(t.collect_episodes / t.envs) * _episode_buffer_size(spec.scenario)
    stats_cls = SchedulingCollectStats
    train_collector = BatchCollector(
        algorithm, train_envs, BatchedReplayBuffer(per_env * t.envs, t.envs), collect_stats_class=stats_cls
    )
    test_collector = None
    if test_envs is not None:
        # evaluation keeps no data: a small ring per env is enough for tianshou's bookkeeping
        test_collector = BatchCollector(
            algorithm, test_envs, BatchedReplayBuffer(EVAL_BUFFER_PER_ENV * t.eval_episodes, t.eval_episodes),
            collect_stats_class=stats_cls,
        )
    return train_collector, test_collector


def run_training(spec: RunSpec, device: torch.device | None = None) -> TrainResult:
    """Train (or resume) one run; see the module docstring. Raises :class:`TrainingInterrupted` on Ctrl-C."""
    from tianshou.trainer import OnPolicyTrainerParams
    from torch.utils.tensorboard import SummaryWriter

    t = spec.train
    device = device or check_environment(spec)
    if t.torch_threads:
        torch.set_num_threads(t.torch_threads)
    if spec.resume is None:
        seed_everything(t.seed)
    start = time.perf_counter()  # the run directory is created by write_config, once the envs exist

    counters = (spec.resume or {}).get("counters", {})
    restarts = int(counters.get("restarts", -1)) + 1
    train_envs = training_envs(spec.scenario, t, restarts)
    test_envs = None
    writer = None
    try:
        test_envs = evaluation_envs(spec.scenario, t)
        algorithm, net = build_algorithm(spec, train_envs, device)
        if spec.resume is not None:
            _restore(spec, algorithm, net)
        warm = warm_start(spec, algorithm, net) if spec.resume is None and t.imitate else None
        write_config(spec, {"restarts": restarts, "device": str(device)})
        writer = SummaryWriter(log_dir=str(spec.run_dir))
        if warm is not None:
            log_warm_start(writer, warm)
        session = _Session(spec, algorithm, net, writer)
        restored = None
        if spec.resume is not None:
            restored = (int(counters["epoch"]), int(counters["env_step"]), int(counters["update_step"]))
        logger = _make_logger(writer, restored)

        n_steps = t.resolved_collect_steps()
        train_collector, test_collector = make_collectors(spec, algorithm, train_envs, test_envs)

        epoch_len, epochs = t.epoch_plan(int(counters.get("env_step", 0)))
        max_epochs = session.completed_epochs + epochs
        params = OnPolicyTrainerParams(
            training_collector=train_collector,
            test_collector=test_collector,
            max_epochs=max_epochs,
            epoch_num_steps=epoch_len,
            collection_step_num_env_steps=n_steps,
            collection_step_num_episodes=None if n_steps is not None else t.collect_episodes,
            update_step_num_repetitions=t.repeat,
            batch_size=t.batch_size,
            test_step_num_episodes=t.eval_episodes,
            training_fn=session.training_fn,
            test_fn=lambda epoch, env_step: algorithm.policy.reset_eval_generator(t.eval_seed),
            compute_score_fn=session.compute_score_fn,
            save_best_fn=session.save_best_fn,
            save_checkpoint_fn=session.save_checkpoint_fn,
            resume_from_log=spec.resume is not None,
            logger=logger,
            verbose=False,  # tianshou's "test_reward: ..." line; compute_score_fn prints ours
            show_progress=t.progress,
        )
        trainer = algorithm.create_trainer(params)
        session.trainer = trainer
        if spec.resume is not None:
            set_rng_state(spec.resume["rng"])
        interrupted = False
        try:
            trainer.run()
        except KeyboardInterrupt:
            interrupted = True
        last = session.save(LAST)
        best = spec.run_dir / BEST
        result = TrainResult(
            run_dir=spec.run_dir,
            env_steps=session.env_step(),
            gradient_steps=int(algorithm.gradient_steps),
            update_steps=int(algorithm.update_count),
            epochs=session.completed_epochs,
            best_mean_jct=session.best_mean_jct,
            last_path=last,
            best_path=best if best.is_file() else None,
            interrupted=interrupted,
            wall_s=time.perf_counter() - start,
            best_env_step=session.best_env_step,
        )
        if interrupted:
            raise TrainingInterrupted(result)
        return result
    finally:
        if writer is not None:
            writer.close()
        for venv in (train_envs, test_envs):
            if venv is not None:
                try:
                    venv.close()
                except Exception:
                    pass
