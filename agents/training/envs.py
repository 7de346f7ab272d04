"""Training and evaluation environments: the per-env wrapper, its seeding, and the vector envs.

``train.vector`` picks the kind: ``batch`` (default) -- :mod:`envs.batched` behind
:class:`~agents.training.vector_env.BatchVectorEnv`, in process or split over ``train.workers``
processes; ``ray`` -- the same split over Ray actors; ``dummy``/``subproc`` -- one
``envs.gym_env.EdgeClustersEnv`` per env wrapped by :class:`TrainingEnv`. Every kind gives env
``i`` the workload seeds of :class:`~agents.training.vector_env.SeedSchedule` key ``(seed, restart, i)``,
drawn from ``[TRAIN_SEED_MIN, 2**62)``, and the same ``info`` schema.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import gymnasium as gym
import numpy as np
from tianshou.env import DummyVectorEnv, SubprocVectorEnv

from envs.batched import EPISODE_INFO, STEP_INFO
from envs.config import ConfigError, ScenarioConfig
from envs.gym_env import EdgeClustersEnv

from .config import TrainConfig
from .stagger import random_feasible_actions, stagger_rng, stagger_target
from .vector_env import BatchVectorEnv, SeedSchedule, ShardedBatchVectorEnv, WorkerDied, first_dead, worker_death

if TYPE_CHECKING:
    from typing import TypeAlias

    from tianshou.env import BaseVectorEnv

    #: what :func:`training_envs` / :func:`evaluation_envs` return (tianshou's interface)
    VectorEnv: TypeAlias = BaseVectorEnv | BatchVectorEnv | ShardedBatchVectorEnv


class TrainingEnv(gym.Wrapper):
    """Seeds every episode from a :class:`SeedSchedule` and gives ``info`` a fixed schema.

    tianshou stores ``info`` in its buffer, so every step (and reset) reports the same keys:
    ``agent_rewards`` (N,), ``placed``/``void``/``invalid``/``conflicts``, ``advanced``,
    ``workload_seed``, ``episode_end``, ``ep_<metric>`` (the env's ``episode_metrics`` at the
    last step of an episode, 0 before; a NaN mean JCT becomes 0) and ``ep_length`` (logical
    steps of the episode, at its last step).
    """

    def __init__(self, env: gym.Env, seeds: SeedSchedule, stagger: np.random.Generator | None = None) -> None:
        super().__init__(env)
        self.seeds = seeds
        #: the first episode is fast-forwarded by this generator (:mod:`agents.training.stagger`), then it is dropped
        self._stagger = stagger
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
        if self._stagger is not None:
            rng, self._stagger = self._stagger, None
            obs = self._fast_forward(obs, rng)
        return obs, self._info(None)

    def _fast_forward(self, obs: Mapping[str, np.ndarray], rng: np.random.Generator) -> Any:
        """Random feasible steps until the episode's real time reaches its stagger target (a new
        episode, unstaggered, if this one ends first); returns the observation reached."""
        env = self.env.unwrapped
        target = stagger_target(rng, env.cfg)
        while env.sim.t < target:
            action = random_feasible_actions({k: v[None] for k, v in obs.items()}, [rng], env.cfg)[0]
            obs, _, terminated, truncated, _ = self.env.step(action)
            self._length += 1
            if terminated or truncated:
                return self.reset()[0]
        return obs

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._length += 1
        return obs, float(reward), bool(terminated), bool(truncated), self._info(info)


def make_env(scenario: Mapping[str, Any], seed_key: Sequence[int] = (0,), fixed_seed: int | None = None,
             stagger: bool = False) -> TrainingEnv:
    """Build one wrapped env from a scenario dict (picklable through ``functools.partial``);
    ``stagger``: its first episode starts at a staggered point (:mod:`agents.training.stagger`)."""
    return TrainingEnv(EdgeClustersEnv(ScenarioConfig.from_dict(scenario)), SeedSchedule(seed_key, fixed_seed),
                       stagger_rng(seed_key) if stagger else None)


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


class WatchedSubprocVectorEnv(SubprocVectorEnv):
    """tianshou's ``SubprocVectorEnv`` whose dead worker process is a :class:`WorkerDied` (one line;
    the run saves ``last.pt`` and exits), as the batched kinds' workers are, not a broken pipe."""

    def _watched(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except (EOFError, ConnectionError) as exc:
            dead = first_dead([w.process for w in self.workers])
            if dead is None:
                raise
            raise WorkerDied(worker_death(dead, self.workers[dead].process)) from exc

    def reset(self, env_id: Any = None, **kwargs: Any) -> Any:
        return self._watched(lambda: super(WatchedSubprocVectorEnv, self).reset(env_id, **kwargs))

    def step(self, action: Any, id: Any = None) -> Any:  # noqa: A002
        return self._watched(lambda: super(WatchedSubprocVectorEnv, self).step(action, id))

    def get_env_attr(self, key: str, id: Any = None) -> list[Any]:  # noqa: A002
        return self._watched(lambda: super(WatchedSubprocVectorEnv, self).get_env_attr(key, id))


def build_vector_env(kind: str, env_fns: list[Callable[[], gym.Env]]) -> BaseVectorEnv:
    """tianshou's own vector env of one ``EdgeClustersEnv`` per env: ``dummy`` or ``subproc``
    (:class:`WatchedSubprocVectorEnv`)."""
    if kind == "dummy":
        return DummyVectorEnv(env_fns)
    if kind == "subproc":
        return WatchedSubprocVectorEnv(env_fns)
    raise ConfigError(f"unknown vector env kind {kind!r}")


def running_mean_jct(venv: VectorEnv) -> float | None:
    """The mean over a vector env's environments of their current episodes' mean JCT so far
    (``training/running_mean_jct``); None while no environment has run a real step. Every kind
    answers: the batched ones from their simulators, tianshou's through ``get_env_attr`` (the
    property :attr:`envs.gym_env.EdgeClustersEnv.running_mean_jct`)."""
    if isinstance(venv, (BatchVectorEnv, ShardedBatchVectorEnv)):
        values = venv.running_mean_jct()
    else:
        values = np.asarray(venv.get_env_attr("running_mean_jct"), dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else None


def training_envs(scenario: ScenarioConfig, train: TrainConfig, restart: int, stream: int = 0) -> VectorEnv:
    """The training vector env; env ``i`` draws its workload seeds from key ``(seed, restart, i)``
    whatever the kind, so every kind trains on the same workloads. ``stream`` k > 0 (the k-th scenario of
    ``train.scenarios``) keys them ``(seed, restart, i, k)``: each training scenario its own workloads."""
    kind = vector_kind(train)
    keys = [(train.seed, restart, i) + ((stream,) if stream else ()) for i in range(train.envs)]
    if kind in ("batch", "ray"):
        return batched_vector_env(kind, scenario, train.envs, train.workers, train.ray_address, seed_keys=keys,
                                  stagger=train.stagger_start)
    raw = scenario.to_dict()
    return build_vector_env(kind, [functools.partial(make_env, raw, key, stagger=train.stagger_start) for key in keys])


def batched_vector_env(
    kind: str,
    scenario: ScenarioConfig,
    num_envs: int,
    workers: int | None = None,
    ray_address: str | None = None,
    *,
    seed_keys: Sequence[Sequence[int]] | None = None,
    fixed_seeds: Sequence[int] | None = None,
    stagger: bool = False,
) -> BatchVectorEnv | ShardedBatchVectorEnv:
    """``batch``: one batched simulator in this process (``workers`` in (None, 1)) or split over
    ``workers`` processes; ``ray``: split over Ray actors (``workers``, default one per CPU, at
    most one per env), at ``ray_address`` / ``$RAY_ADDRESS`` or a local Ray. Give exactly one of
    ``seed_keys`` (training) and ``fixed_seeds`` (evaluation); ``stagger``: training envs' first
    episodes start at staggered points (:mod:`agents.training.stagger`)."""
    if kind == "ray":
        require_ray()
        actors = workers or min(num_envs, os.cpu_count() or 1)
        address = ray_address or os.environ.get("RAY_ADDRESS") or None
        return ShardedBatchVectorEnv(scenario, num_envs, actors, "ray", ray_address=address, seed_keys=seed_keys,
                                     fixed_seeds=fixed_seeds, stagger=stagger)
    if workers is None or workers == 1:
        return BatchVectorEnv(scenario, num_envs, seed_keys=seed_keys, fixed_seeds=fixed_seeds, stagger=stagger)
    return ShardedBatchVectorEnv(scenario, num_envs, workers, "process", seed_keys=seed_keys, fixed_seeds=fixed_seeds,
                                 stagger=stagger)


def training_scenario(scenario: ScenarioConfig, train: TrainConfig) -> ScenarioConfig:
    """The variant a run trains on (``train.train_scenario``): the YAML's own settings, or its
    ``eval_overrides`` applied (the result has none left, so applying it again changes nothing)."""
    return scenario.for_evaluation() if train.train_scenario == "eval" else scenario


def evaluation_scenario(scenario: ScenarioConfig, train: TrainConfig) -> ScenarioConfig:
    """The variant a run validates on (``train.eval_scenario``)."""
    return scenario.for_evaluation() if train.eval_scenario == "eval" else scenario


def evaluation_envs(scenario: ScenarioConfig, train: TrainConfig) -> BatchVectorEnv | ShardedBatchVectorEnv:
    """One in-process batched env per held-out workload ``eval_seed + j`` (replayed at every evaluation)."""
    seeds = [train.eval_seed + j for j in range(train.eval_episodes)]
    return batched_vector_env("batch", evaluation_scenario(scenario, train), len(seeds), fixed_seeds=seeds)
