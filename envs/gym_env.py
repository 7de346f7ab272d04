"""Gymnasium environment ``TapFinger/EdgeClusters-v0``: a joint view of all cluster agents.

One logical step applies a joint action of every agent (see :mod:`envs.joint_action`),
then advances real time when due (``single``: every step; ``multi``: once no agent placed
anything). Observation and action layout: ``docs/observation.md``.

The workload of an episode is chosen by the reset seed: ``reset(seed=s)`` plays exactly
the workload :class:`~envs.core.Simulator` builds for seed ``s`` (so evaluation seeds match
the baselines' one to one); ``reset(options={"workload_seed": k})`` picks it explicitly;
with neither, a seed is drawn from ``self.np_random``.
"""

from __future__ import annotations

import warnings
from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np
from gymnasium import spaces

from .config import ConfigError, ScenarioConfig, apply_overrides, load_scenario
from .core import Simulator
from .joint_action import StepReport, apply_joint_action, needs_advance
from .metrics import episode_info, episode_metrics
from .observation import KEYS, ObservationBuilder, ObservationSpec
from .progress import build_progress_functions


def resolve_scenario(
    scenario: str | ScenarioConfig,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    evaluation: bool = False,
) -> ScenarioConfig:
    """A scenario name, YAML path or config, with overrides (and the evaluation variant) applied."""
    if isinstance(scenario, ScenarioConfig):
        cfg = scenario
        if overrides:
            cfg = ScenarioConfig.from_dict(apply_overrides(cfg.to_dict(), overrides))
    elif isinstance(scenario, str):
        cfg = load_scenario(scenario, overrides)
    else:
        raise ConfigError(f"scenario must be a name, a YAML path or a ScenarioConfig, got {type(scenario).__name__}")
    return cfg.for_evaluation() if evaluation else cfg


def observation_space(spec: ObservationSpec) -> spaces.Dict:
    """The Dict of Box spaces matching :class:`~envs.observation.ObservationBuilder` output."""
    bounds = spec.bounds()
    shapes = spec.shapes()
    boxes = {}
    for key in KEYS:
        (low, high), (shape, dtype) = bounds[key], shapes[key]
        boxes[key] = spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
    return spaces.Dict(boxes)


def action_space(spec: ObservationSpec) -> spaces.MultiDiscrete:
    """``MultiDiscrete`` of shape ``(N, 3)``: per agent ``[slot, allocation, lost flag]``."""
    return spaces.MultiDiscrete(np.tile(np.array([spec.P, spec.A, 2], dtype=np.int64), (spec.N, 1)))


def check_render_mode(render_mode: Any) -> None:
    """Nothing is rendered: None passes, a mode name is ignored with a warning, anything else
    is a :class:`ConfigError`."""
    if render_mode is None:
        return
    if not isinstance(render_mode, str):
        raise ConfigError(f"render_mode must be None or a render mode name, got {render_mode!r}")
    warnings.warn(f"render_mode {render_mode!r} ignored: TapFinger/EdgeClusters renders nothing", stacklevel=3)


class EdgeClustersEnv(gymnasium.Env):
    """Multi-cluster scheduling as one Gymnasium env with a joint (all agents) view.

    ## Description
    ``N`` edge clusters with integer (CPU, GPU) capacities receive ML tasks online (Poisson
    arrivals, ``num_tasks`` per episode); each task waits in the pending sets of the clusters
    it can reach, runs on exactly one of them, non-preemptively, at the speed its progress
    function gives for the (CPU, GPU) it was started with. One agent per cluster decides,
    each logical step, which pending task to start and with how many CPUs and GPUs.

    ## Action space
    ``MultiDiscrete`` of shape ``(N, 3)`` (:func:`action_space`): agent ``i``'s row is
    ``[slot, allocation, lost]``: a pending slot ``0..P-1``, the joint allocation index
    ``cpu * G1 + gpu`` (0 = void, schedule nothing) and the lost-conflict flag. The rules
    (validity, conflicts between agents picking the same task) are
    :func:`envs.joint_action.apply_joint_action`'s; ``docs/observation.md`` spells them out.

    ## Observation space
    ``Dict`` of fixed-shape arrays (:func:`observation_space`, keys :data:`~envs.observation.KEYS`):
    pending slots ``(N, P, ...)`` (features, mask, where the same task is pending elsewhere,
    minimum requirement, feasibility), the largest allocation each cluster can give
    ``alloc_high (N, 2)``, running slots ``(N, M, ...)`` and cluster features ``(N, 6)``;
    layout and bounds in ``docs/observation.md``.

    ## Rewards
    ``team`` (default): ``-(tasks alive)`` on steps that advance real time and 0 otherwise,
    so an episode's return is minus the total completion time of its tasks; ``per_cluster``:
    the sum of the per-cluster rewards. ``info["agent_rewards"]`` holds the per-agent rewards.

    ## Starting state
    The workload of the reset seed (see the module docstring) at real time 0: every cluster idle,
    the tasks that arrive at time 0 already pending.

    ## Episode end
    ``terminated``: every task of the episode arrived and completed. ``truncated``: real time
    reached the scenario's ``max_steps`` first, or (made through ``gymnasium.make``) the
    registration's ``max_episode_steps`` logical steps passed (Gymnasium's ``TimeLimit``;
    :data:`envs.registration.MAX_EPISODE_STEPS`). Either way ``info["episode_metrics"]`` summarises
    the episode and ``info["mean_jct"]`` repeats its mean JCT (:mod:`envs.metrics`: a cut-off
    episode counts its unfinished tasks at their time in system so far and says ``truncated``).

    ## Arguments
        scenario: a scenario name from ``configs/`` (e.g. ``"synthetic-3"``), a YAML path or a
            :class:`~envs.config.ScenarioConfig`.
        overrides: ``key=value`` strings or a mapping of dotted keys applied to the scenario.
        evaluation: use the scenario's evaluation variant (``cfg.for_evaluation()``).
        render_mode: the env renders nothing (``metadata["render_modes"]`` is empty); a mode
            name (e.g. the ``"rgb_array"`` Stable-Baselines3's ``make_vec_env`` passes) is
            accepted with a warning and ignored (``self.render_mode`` stays None); anything but
            a string or None is a :class:`~envs.config.ConfigError`.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str | ScenarioConfig = "synthetic-3",
        overrides: Sequence[str] | Mapping[str, Any] = (),
        evaluation: bool = False,
        render_mode: str | None = None,
    ) -> None:
        check_render_mode(render_mode)
        self.render_mode = None
        self.cfg = resolve_scenario(scenario, overrides, evaluation)
        self.obs_spec = ObservationSpec.from_config(self.cfg)
        self.observation_space = observation_space(self.obs_spec)
        self.action_space = action_space(self.obs_spec)
        self._functions = build_progress_functions(self.cfg)
        self._builder = ObservationBuilder(self.obs_spec)
        self._team = self.cfg.reward == "team"
        self._zeros = np.zeros(self.cfg.num_clusters, dtype=np.float64)
        self.sim: Simulator | None = None
        self._over = True
        self.logical_steps = 0

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        workload_seed = None
        if options and options.get("workload_seed") is not None:
            workload_seed = options["workload_seed"]
            if isinstance(workload_seed, bool) or not isinstance(workload_seed, (int, np.integer)) or workload_seed < 0:
                raise ConfigError(f"options['workload_seed'] must be an integer >= 0, got {workload_seed!r}")
        elif seed is not None:
            workload_seed = seed
        else:
            workload_seed = int(self.np_random.integers(2**31 - 1))
        self.sim = Simulator(self.cfg, int(workload_seed), progress_functions=self._functions)
        self._over = False
        self.logical_steps = 0
        return self._builder(self.sim), {"workload_seed": int(workload_seed)}

    def step(self, action: Any) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        sim = self.sim
        if sim is None or self._over:
            raise RuntimeError("the episode is over (or never started): call reset() first")
        report: StepReport = apply_joint_action(sim, action)
        advanced = needs_advance(sim, report)
        if advanced:
            team = sim.advance()
            if self._team:
                reward = team
                agent_rewards = np.full(sim.num_clusters, team)
            else:
                agent_rewards = sim.last_cluster_rewards.copy()
                reward = float(agent_rewards.sum())
        else:
            reward = 0.0
            agent_rewards = self._zeros.copy()
        self.logical_steps += 1
        terminated = sim.done
        truncated = (not terminated) and sim.truncated
        info: dict[str, Any] = {
            "agent_rewards": agent_rewards,
            "placed": report.placed,
            "void": report.void,
            "invalid": report.invalid,
            "conflicts": report.conflicts,
            "advanced": advanced,
        }
        if terminated or truncated:
            self._over = True
            info.update(episode_info(sim))
        return self._builder(sim), reward, terminated, truncated, info

    @property
    def running_mean_jct(self) -> float:
        """The current episode's mean JCT so far: finished tasks' JCT and the time arrived unfinished
        ones have spent until now (:func:`envs.metrics.episode_metrics`); NaN before the episode's first
        real step (or the first reset)."""
        if self.sim is None or self.sim.t == 0:
            return float("nan")
        return float(episode_metrics(self.sim)["mean_jct"])

    def render(self) -> None:  # no render modes
        return None

    # ------------------------------------------------------------------ helpers
    def observe(self) -> dict[str, np.ndarray]:
        """The current observation again (fresh arrays), e.g. after an external change."""
        if self.sim is None:
            raise RuntimeError("call reset() first")
        return self._builder(self.sim)
