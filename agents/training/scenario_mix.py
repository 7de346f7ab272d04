"""Training on a set of scenarios (``train.scenarios``): which scenario each collection comes from.

A run validates (and picks ``best.pt``) on its own scenario, the *target*; by default it also trains
there. ``train.scenarios`` names the scenarios it trains on instead: ``configs/<name>.yaml`` names or
YAML paths (only their scenario part is read; their ``train:``/``policy:`` sections are not), the
target by its own name. ``train.scenario_shares`` gives each its share of the run's env steps
(equal shares by default), and ``train.scenario_order`` how they are laid out:

* ``curriculum``: in the listed order, each for its share of ``train.steps`` (e.g. three clusters
  for the first half, then the six-cluster target);
* ``mixture``: every collection is drawn from one scenario, with probability equal to its share,
  by a generator keyed by the run seed and the collection's index.

Both are functions of the env step alone (:meth:`ScenarioSchedule.index_at`), so a resumed run
carries on where it stopped. One collection never mixes scenarios: every PPO batch holds one
cluster count, so no padding is needed. The training scenarios must be of the target's task family:
the same task types, pending slots and allocation grid (the shared policy reads any cluster count).
They must share the target's mode (``single``/``multi``, whose step semantics differ) unless the
policy reads the observation's ``multi_mode`` flag (``policy.observe_mode``); scenarios of both
modes also need an explicit ``train.gamma`` (the modes' default discounts differ).
``train.scenario_reward`` sets the reward of every training scenario other than the target (each
scenario's own ``reward`` otherwise; the target always trains with its own).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from envs.config import ConfigError, ScenarioConfig, split_scenario_yaml

from .config import CURRICULUM, MIXTURE, SCENARIO_ORDERS, TrainConfig

__all__ = ["CURRICULUM", "MIXTURE", "SCENARIO_ORDERS", "ScenarioSchedule", "TrainingMix",
           "check_family", "check_shared_policy", "resolve_training_scenarios"]
#: the last key of a mixture draw's generator (the run seed and the collection index come first)
MIXTURE_STREAM = 0x5CE7


def resolve_training_scenarios(target: ScenarioConfig, names: Sequence[str] | None, both_modes: bool = False,
                               reward: str | None = None, key: str = "train.scenarios") -> tuple[ScenarioConfig, ...]:
    """The scenarios a run trains on: ``(target,)`` without ``train.scenarios``; else each name's
    scenario (the target's own name gives the target itself, with its overrides), checked against the
    target (:func:`check_family`; ``both_modes``: the policy sees the mode, ``policy.observe_mode``),
    each other than the target with ``reward`` when given (``train.scenario_reward``).
    ConfigError (one line, naming the config ``key`` that lists them) for an unknown name or a misfit."""
    if not names:
        return (target,)
    out = []
    for name in names:
        if name == target.name:
            out.append(target)
            continue
        _, raw, _ = split_scenario_yaml(name)
        scenario = ScenarioConfig.from_dict(raw)
        if reward is not None:
            scenario = dataclasses.replace(scenario, reward=reward)
        check_family(target, scenario, name, both_modes, key)
        out.append(scenario)
    return tuple(out)


def check_family(target: ScenarioConfig, other: ScenarioConfig, label: str, both_modes: bool = False,
                 key: str = "train.scenarios") -> None:
    """ConfigError unless the shared policy built for ``target`` can train on ``other``: the same task
    types, pending slots and allocation grid (cluster counts and capacities may differ), and the same
    mode unless the policy sees the mode (``both_modes``)."""
    from envs.observation import ObservationSpec

    if other.mode != target.mode and not both_modes:
        raise ConfigError(f"{key}: {label!r} runs in {other.mode} mode, the run's scenario "
                          f"{target.name!r} in {target.mode} mode; train on scenarios of one mode, or set "
                          f"policy.observe_mode=true and train.gamma")
    have, want = ObservationSpec.from_config(other), ObservationSpec.from_config(target)
    checks = (("task types", [t.name for t in other.task_types], [t.name for t in target.task_types]),
              ("pending slots", have.P, want.P), ("allocation grid", tuple(have.alloc_dims), tuple(want.alloc_dims)))
    for what, a, b in checks:
        if a != b:
            raise ConfigError(f"{key}: {label!r} has {what} {a}, the run's scenario {target.name!r} "
                              f"{b}; a policy trains only on scenarios of its task family")


def check_shared_policy(tied_to_n: bool, scenarios: Sequence[ScenarioConfig], target: ScenarioConfig,
                        key: str = "train.scenarios") -> None:
    """ConfigError when a policy with per-agent parameters (``tied_to_n``) would act on another cluster count."""
    counts = sorted({s.num_clusters for s in scenarios} - {target.num_clusters})
    if tied_to_n and counts:
        raise ConfigError(f"{key} names {counts} clusters but the policy has per-agent parameters for "
                          f"{target.num_clusters}: set policy.shared_actors=true and policy.agent_id=false")


@dataclass(frozen=True)
class ScenarioSchedule:
    """Which training scenario each collection uses (module docstring)."""

    shares: tuple[float, ...]  # normalised to sum 1
    order: str = CURRICULUM
    steps: int = 1  # the run's step budget (train.steps): a curriculum's stages are its shares of it
    seed: int = 0  # the run seed (a mixture's draws)
    batch: int | None = None  # env steps per collection (None: a mixture draws per env step)

    @classmethod
    def from_train(cls, train: TrainConfig) -> ScenarioSchedule:
        count = len(train.scenarios or ()) or 1
        raw = train.scenario_shares or (1.0,) * count
        total = float(sum(raw))
        return cls(tuple(float(s) / total for s in raw), train.scenario_order, train.steps, train.seed,
                   train.collection_batch())

    def index_at(self, env_step: int) -> int:
        """The scenario of the collection that starts at ``env_step``."""
        if len(self.shares) == 1:
            return 0
        if self.order == CURRICULUM:
            ends = [self.steps * c for c in itertools.accumulate(self.shares)]
            return next((k for k, end in enumerate(ends) if env_step < end - 1e-9), len(ends) - 1)
        collection = env_step // self.batch if self.batch else env_step
        rng = np.random.default_rng((self.seed, int(collection), MIXTURE_STREAM))
        return int(rng.choice(len(self.shares), p=np.asarray(self.shares)))


class TrainingMix:
    """The training collectors of a run's scenarios (one per scenario, each over its own vector env) and
    the switch between them: :meth:`select` puts the collector of the collection about to start into the
    trainer's settings (tianshou's on-policy trainer collects from, and updates on the buffer of,
    ``params.training_collector``)."""

    def __init__(self, schedule: ScenarioSchedule, collectors: Sequence[Any], envs: Sequence[Any]) -> None:
        if not len(collectors) == len(envs) == len(schedule.shares):
            raise ValueError("one collector and one vector env per training scenario")
        self.schedule = schedule
        self.collectors = list(collectors)
        self.envs = list(envs)
        self.current = 0

    def select(self, params: Any, env_step: int) -> int:
        """Point ``params.training_collector`` at the scenario of the collection starting at ``env_step``."""
        self.current = self.schedule.index_at(env_step)
        params.training_collector = self.collectors[self.current]
        return self.current

    @property
    def current_envs(self) -> Any:
        """The vector env of the scenario selected last."""
        return self.envs[self.current]
