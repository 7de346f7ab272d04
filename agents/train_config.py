"""Training configuration: the :class:`TrainConfig` dataclass and the override rules.

A training run is described by three sections, all saved (resolved) with every run:

* ``scenario`` -- the :class:`~envs.config.ScenarioConfig` (``configs/<name>.yaml``);
* ``policy``   -- the :class:`~agents.policy.PolicyConfig` of the network;
* ``train``    -- this module's :class:`TrainConfig` (PPO and run hyper-parameters).

A scenario YAML may carry optional ``train:`` and ``policy:`` sections. Command-line
``key=value`` overrides are routed by their first dotted component:

* ``train.<field>=v``  -> :class:`TrainConfig` (e.g. ``train.lr=3e-4``);
* ``policy.<field>=v`` -> the policy config (e.g. ``policy.hidden=64``);
* ``scenario.<key>=v`` or any other ``<key>=v`` -> the scenario (dotted keys reach nested
  fields, e.g. ``num_tasks=50``, ``scenario.connectivity.model=random_subset``).

Values are parsed as YAML (``true``, ``[16, 8]``); number fields also accept numeric
text such as ``3e-4`` (which YAML 1.1 reads as a string). Precedence, lowest first:
dataclass defaults, the YAML sections, the explicit CLI flags (``--steps``...), then the
``key=value`` overrides. Unknown keys and ill-typed values raise
:class:`~envs.config.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from envs.config import ConfigError, parse_override

VECTOR_KINDS = ("auto", "batch", "dummy", "subproc", "ray")
DEVICES = ("auto", "cpu", "cuda")
EVAL_SCENARIOS = ("train", "eval")
#: evaluation workload seeds start here; training seeds are drawn from [TRAIN_SEED_MIN, 2**62)
EVAL_SEED_DEFAULT = 10_000
TRAIN_SEED_MIN = 1_000_000


@dataclass
class TrainConfig:
    """PPO and run hyper-parameters (defaults follow reference-tapfinger.md §4).

    Deviations from the reference: ``gamma`` is 1 in ``multi`` mode (as the reference) and
    0.99 in ``single`` mode when left at ``None`` (the reference does not record it;
    0.99 is tianshou's default used by its single-task ablation script); gradients are
    clipped at norm 0.5 (the reference does not clip); returns are scaled by their running
    standard deviation (``return_scaling``) because team returns reach the thousands.
    """

    # -- budget and parallelism
    steps: int = 2_000_000  # total env (logical) steps; rounding: planned_env_steps()
    envs: int = 32  # training envs
    vector: str = "auto"  # auto = batch (the batched simulator); or dummy|subproc (one env each) | ray
    workers: int | None = None  # batch: worker processes sharing the envs (None: 1, in process); ray: actors
    ray_address: str | None = None  # --vector ray: an existing Ray cluster (None: $RAY_ADDRESS or a local Ray)
    seed: int = 0
    device: str = "auto"
    torch_threads: int | None = None  # torch intra-op threads in the learner (None: torch default)
    # -- PPO (tianshou PPO arguments)
    lr: float = 1e-4
    eps_clip: float = 0.2
    gae_lambda: float = 0.95
    gamma: float | None = None  # None: 1.0 in multi mode, 0.99 in single mode
    batch_size: int = 256  # minibatch size (transitions)
    repeat: int = 2  # passes over each collected batch
    vf_coef: float = 0.5
    ent_coef: float = 0.01
    max_grad_norm: float | None = 0.5
    advantage_normalization: bool = True
    value_clip: bool = False
    return_scaling: bool = True  # divide returns by their running std (tianshou's rule)
    max_batchsize: int = 1024  # chunk size for values / old log-probs without gradients
    # -- collection
    collect_steps: int | None = None  # env steps per update; None: 128 x envs
    collect_episodes: int | None = None  # or whole episodes per update (reference: = envs)
    buffer_per_env: int | None = None  # buffer slots per env in episode mode (None: estimate)
    # -- evaluation, checkpoints, logging
    eval_every: int = 20_000  # env steps between evaluations (= one tianshou epoch)
    eval_episodes: int = 8  # held-out workloads per evaluation (one eval env each)
    eval_seed: int = EVAL_SEED_DEFAULT  # evaluation workload seeds: eval_seed + 0..eval_episodes-1
    eval_scenario: str = "train"  # "train": the training scenario; "eval": its eval_overrides variant
    save_every: int | None = None  # env steps between last.pt saves (None: every evaluation)
    logdir: str = "runs"
    run_name: str | None = None  # None: <scenario>-<variant>-s<seed>-<timestamp>
    progress: bool = True  # tqdm progress bars

    # ------------------------------------------------------------------ derived values
    def resolved_gamma(self, mode: str) -> float:
        """The discount actually used: ``gamma`` or the mode's default."""
        if self.gamma is not None:
            return float(self.gamma)
        return 1.0 if mode == "multi" else 0.99

    def resolved_collect_steps(self) -> int | None:
        """Env steps per collection (None in episode mode)."""
        if self.collect_episodes is not None:
            return None
        if self.collect_steps is not None:
            return self.collect_steps
        return 128 * self.envs

    def collection_batch(self) -> int | None:
        """Env steps one collection really gathers: ``collect_steps`` rounded up to whole ``envs``."""
        n = self.resolved_collect_steps()
        return None if n is None else math.ceil(n / self.envs) * self.envs

    def epoch_plan(self, done: int = 0) -> tuple[int, int]:
        """``(env steps per evaluation interval, number of intervals)`` for the steps left after ``done``.

        An interval is ``eval_every`` env steps, or all the steps left when fewer remain; the
        budget is rounded up to whole intervals.
        """
        remaining = max(1, self.steps - done)
        epoch_len = min(self.eval_every, remaining)
        return epoch_len, math.ceil(remaining / epoch_len)

    def planned_env_steps(self, done: int = 0) -> int | None:
        """Env steps a run from ``done`` ends at (None in episode mode, where it depends on episode lengths).

        The rounding rule of ``--steps``: the steps left are split into evaluation intervals
        (:meth:`epoch_plan`), and every interval into whole collection batches
        (:meth:`collection_batch`, ``collect_steps`` = 128 x envs by default): each interval
        runs ``ceil(interval / batch) * batch`` env steps. E.g. ``--steps 3000`` with 8 envs
        (batch 1024) runs 3072; ``--steps 250000 train.eval_every=16384
        train.collect_steps=2048`` runs 16 x 16384 = 262144.
        """
        batch = self.collection_batch()
        if batch is None:
            return None
        epoch_len, epochs = self.epoch_plan(done)
        return done + epochs * math.ceil(epoch_len / batch) * batch

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "TrainConfig":
        """Build and validate from a mapping (unknown keys are an error)."""
        cfg = cls()
        apply_train_values(cfg, raw)
        return cfg

    # ------------------------------------------------------------------ validation
    def validate(self) -> "TrainConfig":
        """Check ranges and combinations; raises :class:`ConfigError`."""

        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"train.{msg}")

        need(self.steps >= 1, f"steps must be >= 1, got {self.steps}")
        need(self.envs >= 1, f"envs must be >= 1, got {self.envs}")
        need(self.vector in VECTOR_KINDS, f"vector must be one of {list(VECTOR_KINDS)}, got {self.vector!r}")
        need(self.workers is None or 1 <= self.workers <= self.envs,
             f"workers must be between 1 and envs ({self.envs}), got {self.workers}")
        need(self.device in DEVICES, f"device must be one of {list(DEVICES)}, got {self.device!r}")
        need(self.seed >= 0, f"seed must be >= 0, got {self.seed}")
        need(self.torch_threads is None or self.torch_threads >= 1, "torch_threads must be >= 1")
        need(self.lr > 0 and math.isfinite(self.lr), f"lr must be > 0, got {self.lr}")
        need(0 < self.eps_clip < 1, f"eps_clip must be in (0, 1), got {self.eps_clip}")
        need(0 <= self.gae_lambda <= 1, f"gae_lambda must be in [0, 1], got {self.gae_lambda}")
        need(self.gamma is None or 0 <= self.gamma <= 1, f"gamma must be in [0, 1], got {self.gamma}")
        need(self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}")
        need(self.repeat >= 1, f"repeat must be >= 1, got {self.repeat}")
        need(self.vf_coef >= 0, f"vf_coef must be >= 0, got {self.vf_coef}")
        need(self.ent_coef >= 0, f"ent_coef must be >= 0, got {self.ent_coef}")
        need(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm must be > 0 or null")
        need(self.max_batchsize >= 1, f"max_batchsize must be >= 1, got {self.max_batchsize}")
        need(
            self.collect_steps is None or self.collect_episodes is None,
            "collect_steps and collect_episodes are exclusive: set one of them",
        )
        need(self.collect_steps is None or self.collect_steps >= 1, "collect_steps must be >= 1")
        need(self.collect_episodes is None or self.collect_episodes >= 1, "collect_episodes must be >= 1")
        need(self.buffer_per_env is None or self.buffer_per_env >= 1, "buffer_per_env must be >= 1")
        need(self.eval_every >= 1, f"eval_every must be >= 1, got {self.eval_every}")
        need(self.eval_episodes >= 1, f"eval_episodes must be >= 1, got {self.eval_episodes}")
        need(
            0 <= self.eval_seed and self.eval_seed + self.eval_episodes <= TRAIN_SEED_MIN,
            f"eval_seed must keep evaluation seeds below {TRAIN_SEED_MIN} (training seeds start there)",
        )
        need(self.eval_scenario in EVAL_SCENARIOS, f"eval_scenario must be one of {list(EVAL_SCENARIOS)}")
        need(self.save_every is None or self.save_every >= 1, "save_every must be >= 1 or null")
        need(bool(self.logdir), "logdir must not be empty")
        return self


# ---------------------------------------------------------------------------------------
# typed assignment
# ---------------------------------------------------------------------------------------
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(section: str, name: str, value: Any, annotation: Any) -> Any:
    """Check/convert ``value`` to the dataclass field type ``annotation`` (int, float, bool, str, X | None)."""
    options = typing.get_args(annotation) if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union else (annotation,)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{section}.{name} must not be null")
    if isinstance(value, str) and (int in options or float in options):
        # YAML 1.1 reads "3e-4" (no dot) as a string: accept numeric text for number fields
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None and math.isfinite(number):
            value = int(number) if int in options and float not in options and number.is_integer() else number
    for opt in options:
        if opt is type(None):
            continue
        if opt is bool:
            if isinstance(value, bool):
                return value
        elif opt is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif opt is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif opt is str:
            if isinstance(value, str):
                return value
        else:  # pragma: no cover - no other field types are used
            return value
    names = " or ".join("null" if o is type(None) else o.__name__ for o in options)
    raise ConfigError(f"{section}.{name} must be {names}, got {value!r}")


def apply_values(obj: Any, section: str, values: Mapping[str, Any]) -> None:
    """Set dataclass fields of ``obj`` from a mapping, type-checked; unknown keys raise."""
    hints = _field_types(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"unknown {section} key {key!r}; valid keys: {', '.join(sorted(names))}")
        setattr(obj, key, coerce(section, key, value, hints[key]))


def apply_train_values(cfg: TrainConfig, values: Mapping[str, Any]) -> TrainConfig:
    apply_values(cfg, "train", values)
    return cfg


# ---------------------------------------------------------------------------------------
# override routing
# ---------------------------------------------------------------------------------------
@dataclass
class SplitOverrides:
    """``key=value`` overrides sorted by the section they reach."""

    scenario: dict[str, Any]
    policy: dict[str, Any]
    train: dict[str, Any]


def split_overrides(items: Iterable[str]) -> SplitOverrides:
    """Route ``key=value`` strings to the scenario, policy or train section (module docstring)."""
    out = SplitOverrides({}, {}, {})
    for text in items:
        key, value = parse_override(text)
        head, _, rest = key.partition(".")
        if head in ("train", "policy"):
            if not rest or "." in rest:
                raise ConfigError(f"override {text!r}: expected {head}.<field>=<value>")
            getattr(out, head)[rest] = value
        elif head == "scenario":
            if not rest:
                raise ConfigError(f"override {text!r}: expected scenario.<key>=<value>")
            out.scenario[rest] = value
        else:
            out.scenario[key] = value
    return out
