"""Training configuration: the :class:`TrainConfig` dataclass and the override rules.

A training run is described by three sections, all saved (resolved) with every run:

* ``scenario`` -- the :class:`~envs.config.ScenarioConfig` (``configs/<name>.yaml``);
* ``policy``   -- the :class:`~agents.policy.config.PolicyConfig` of the network;
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

:class:`TrainConfig` and ``PolicyConfig`` are both :class:`~envs.config_section.ConfigSection`
dataclasses: the same typed assignment (``from_dict``, ``apply``) and declarative ``CHECKS``
(``validate``). The CLI choices of ``train.py`` (``--vector``, ``--device``) are read from
:data:`VECTOR_KINDS` and :data:`DEVICES` here.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, fields
from typing import Any, Iterable, Mapping

from envs.config import REWARDS, ConfigError, ScenarioConfig, parse_override
from envs.config_section import (
    ConfigSection,
    at_least,
    between,
    greater_than,
    one_of,
    rule,
)

from agents.limits import MAX_ENVS, MAX_STEPS
from agents.policy.modes import (
    ACTION_WORDS, ARGMAX, COMPILE_MODES, CONFLICT_MODES, CONFLICT_WORDS, EVAL_ACTIONS, PAPER_ACTIONS,
)

from .malloc import MALLOC_MODES
from .precision import FLOAT32, PRECISIONS

#: ``train.scenario_order`` (agents/training/scenario_mix.py), and how a page names each
SCENARIO_ORDER_WORDS = {"curriculum": "in that order, each for its share of the steps",
                        "mixture": "a scenario drawn per collection by its share"}
SCENARIO_ORDERS = tuple(SCENARIO_ORDER_WORDS)
CURRICULUM, MIXTURE = SCENARIO_ORDERS

#: training vector env kinds (``train.vector``, ``train.py --vector``) and what each runs
VECTOR_KIND_HELP = {
    "auto": "batch",
    "batch": "all envs in one batched simulator (envs/batched.py), in process or split over "
             "train.workers processes",
    "dummy": "one EdgeClustersEnv per env, in process (tianshou DummyVectorEnv)",
    "subproc": "one EdgeClustersEnv per env, one process each (tianshou SubprocVectorEnv)",
    "ray": "the batched simulator split over Ray actors (needs the optional ray extra)",
}
VECTOR_KINDS = tuple(VECTOR_KIND_HELP)
#: devices of the learner (``train.device``, ``train.py --device``; ``evaluate.py --device`` too)
DEVICE_HELP = {
    "auto": "CUDA when available, else CPU",
    "cpu": "the CPU",
    "cuda": "the CUDA device (an error when there is none)",
}
DEVICES = tuple(DEVICE_HELP)
#: the two variants of a scenario (``train.train_scenario``, ``train.eval_scenario``): the YAML's
#: own settings, or those with its ``eval_overrides`` applied (test-bed: larger clusters, lower load)
EVAL_SCENARIOS = ("train", "eval")
#: learning-rate schedules of ``train.lr_schedule`` (:meth:`TrainConfig.lr_at`): ``constant``
#: keeps ``lr``; ``linear`` anneals it from ``lr`` at env step 0 to 0 at ``steps``
LR_SCHEDULES = ("constant", "linear")
CONSTANT_LR, LINEAR_LR = LR_SCHEDULES
#: where the PPO update takes each transition's old log-probs, skip flags and critic value
#: (``train.old_stats``): ``recompute`` -- one pass of the current network over the collected batch
#: before the first gradient step (tianshou's rule); ``behaviour`` -- the collection step's own
#: (CleanRL's rule: no extra pass; the acting pass also computes the critic)
OLD_STATS = ("recompute", "behaviour")
RECOMPUTE, BEHAVIOUR = OLD_STATS
#: evaluation workload seeds start here; training seeds are drawn from [TRAIN_SEED_MIN, 2**62)
EVAL_SEED_DEFAULT = 10_000
#: the largest run seed (``train.seed``, ``--seed``): what every RNG the run seeds accepts
MAX_SEED = 2**32 - 1
TRAIN_SEED_MIN = 1_000_000


#: the recipe values that are the paper's method, ``"section.key" -> (the paper's value, or a frozenset
#: of its values, the option otherwise)``: a recipe whose value differs uses an option beyond the paper,
#: and its results page names it (:func:`options_beyond_the_paper`)
PAPER_METHOD: dict[str, tuple[Any, str]] = {
    "policy.shared_actors": (False, "one set of actor weights shared by every agent (the paper trains one actor per agent)"),
    "policy.agent_id": (False, "a learned embedding of each agent's index"),
    "policy.observe_mode": (False, "the scenario's mode (single or multi) read by the policy as a cluster feature"),
    "policy.conflicts": ("bayes", "conflicts resolved by `{value}` ({conflict_words}) instead of the paper's Bayes rule"),
    "train.eval_conflicts": (None, "agents that act outside training (validation, evaluation) with conflicts resolved by "
                                   "`{value}` ({conflict_words}) instead of as they trained"),
    "train.stagger_start": (False, "staggered starts of the training envs"),
    "train.lost_claim_penalty": (0.0, "a penalty of {value} on each lost claim in the rewards PPO learns from"),
    "train.imitate": (None, "a warm start imitating `{value}`"),
    "train.scenarios": (None, "trained on other cluster counts: on {value} ({order}), validated on this scenario"),
    "train.also_validate_on": (None, "best.pt chosen on validation on {value} too, each scenario's JCT relative to its "
                                     "best validation baseline"),
    "scenario.reward": ("per_cluster", "agents that learn from the `{value}` reward (the paper's `per_cluster` rewards each "
                                       "agent by the tasks at its own cluster; `team` by every task alive)"),
    "train.eval_action": (PAPER_ACTIONS, "agents that act outside training (validation, evaluation) by `{value}` "
                                         "({action_words})"),
}


def options_beyond_the_paper(recipe: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What a resolved recipe (``{"train": {...}, "policy": {...}, "scenario": {"reward": ...}}``, the
    reward the agents learn from: :attr:`~agents.training.run_spec.RunSpec.learned_reward`) does beyond
    the paper's method (:data:`PAPER_METHOD`), in words; a key the recipe does not hold counts as the default."""
    out = []
    for dotted, (paper, words) in PAPER_METHOD.items():
        section, key = dotted.split(".")
        default = getattr(_section_defaults(section), key)
        value = recipe.get(section, {}).get(key, default)
        if not (value in paper if isinstance(paper, frozenset) else value == paper):
            shown = ", ".join(f"`{v}`" for v in value) if isinstance(value, (list, tuple)) else value
            order = recipe.get("train", {}).get("scenario_order", TrainConfig.scenario_order)
            named = value if isinstance(value, str) else ""
            out.append(words.format(value=shown, conflict_words=CONFLICT_WORDS.get(named, ""),
                                    action_words=ACTION_WORDS.get(named, ""), order=SCENARIO_ORDER_WORDS.get(order, order)))
    return out


def _section_defaults(section: str) -> Any:
    """The default values of a recipe section (``train``, ``policy`` or ``scenario``)."""
    if section == "train":
        return TrainConfig()
    if section == "scenario":
        return ScenarioConfig
    from agents.policy.config import PolicyConfig

    return PolicyConfig()  # imported here: the policy's config pulls in torch, this module does not


@dataclass
class TrainConfig(ConfigSection):
    """PPO and run hyper-parameters (defaults follow the authors' published code).

    Deviations from that code: ``gamma`` is 1 in ``multi`` mode (as there) and
    0.99 in ``single`` mode when left at ``None`` (that code does not record it;
    0.99 is tianshou's default, used by its single-task ablation script); gradients are
    clipped at norm 0.5 (that code does not clip); returns are scaled by their running
    standard deviation (``return_scaling``) because team returns reach the thousands.
    """

    # -- budget and parallelism
    steps: int = 2_000_000  # total env (logical) steps; rounding: planned_env_steps()
    envs: int = 32  # training envs
    vector: str = "auto"  # auto = batch (the batched simulator); or dummy|subproc (one env each) | ray
    workers: int | None = None  # batch: worker processes sharing the envs (None: 1, in process); ray: actors
    ray_address: str | None = None  # --vector ray: an existing Ray cluster (None: $RAY_ADDRESS or a local Ray)
    seed: int = 0  # the run seed: every random choice of the run flows from it
    device: str = "auto"  # the learner's device: auto (CUDA when available), cpu or cuda
    torch_threads: int | None = None  # torch intra-op threads in the learner (None: torch default)
    shards: int = 1  # CPU: row shards of each PPO minibatch's pass, run in parallel threads (1 intra-op thread each)
    malloc: str = "keep"  # MALLOC_MODES (agents/training/malloc.py): keep freed memory in the process (glibc) or the system's
    compile: str | None = None  # torch.compile mode of the policy's tensor passes (None: eager); COMPILE_MODES
    precision: str = FLOAT32  # network passes of collection and update: PRECISIONS (agents/training/precision.py)
    # -- PPO (tianshou PPO arguments)
    lr: float = 1e-4  # Adam learning rate
    lr_schedule: str = CONSTANT_LR  # LR_SCHEDULES; linear: lr x (1 - env_step / steps), a function of the step only
    eps_clip: float = 0.2  # PPO ratio clip
    gae_lambda: float = 0.95  # GAE lambda
    gamma: float | None = None  # None: 1.0 in multi mode, 0.99 in single mode
    batch_size: int = 256  # minibatch size (transitions)
    repeat: int = 2  # passes over each collected batch
    vf_coef: float = 0.5  # value loss weight
    ent_coef: float = 0.01  # entropy bonus weight
    max_grad_norm: float | None = 0.5  # gradient norm clip (null: none)
    advantage_normalization: bool = True  # normalise advantages per minibatch (over non-skipped entries)
    value_clip: bool = False  # clip the value loss like the ratio
    return_scaling: bool = True  # divide returns by their running std (tianshou's rule)
    return_scaling_window: int | None = 65536  # env steps the running return statistics remember (K: the running count is capped at K steps' returns, so they follow the current policy; None: every return since the start)
    max_batchsize: int = 1024  # chunk size for values / old log-probs without gradients
    old_stats: str = RECOMPUTE  # OLD_STATS: recompute (an extra pass before the update) or behaviour (from collection)
    lost_claim_penalty: float = 0.0  # learned reward only: subtracted from an agent's reward at each step its claim lost a Bayes conflict (0: the env's reward)
    # -- warm start by imitation (agents/training/imitation.py), before the first PPO update of a new run
    imitate: str | None = None  # teacher scheduler spec, e.g. "optimus:preemptive=false" (None: no warm start)
    imitate_episodes: int = 64  # episodes (training workloads) recorded per imitation round
    imitate_rounds: int = 0  # DAgger rounds after the teacher's own episodes (0: plain behaviour cloning)
    imitate_epochs: int = 30  # passes of behaviour cloning over the recorded decisions, per round
    imitate_lr: float = 1e-3  # Adam learning rate of behaviour cloning
    # -- what trains
    train_scenario: str = "train"  # "train": the YAML's own settings; "eval": its eval_overrides variant
    scenarios: tuple[str, ...] | None = None  # train on these scenarios (agents/training/scenario_mix.py): names or YAML paths, the run's own by its name; None: the run's scenario only. Validation stays on the run's scenario
    scenario_shares: tuple[float, ...] | None = None  # each training scenario's share of the env steps (None: equal shares)
    scenario_order: str = CURRICULUM  # SCENARIO_ORDERS: curriculum (in the listed order) or mixture (a scenario drawn per collection)
    scenario_reward: str | None = None  # the reward (envs.config.REWARDS) on the scenarios of `scenarios` other than the run's own; None: each scenario's own
    # -- collection
    collect_steps: int | None = None  # env steps per update; None: 128 x envs
    stagger_start: bool = False  # fast-forward each training env's first episode to a random point of it (agents/training/stagger.py), so collections mix episode phases
    # -- evaluation, checkpoints, logging
    eval_every: int = 20_000  # env steps between evaluations (= one tianshou epoch)
    eval_episodes: int = 8  # held-out workloads per evaluation (one eval env each)
    eval_seed: int = EVAL_SEED_DEFAULT  # evaluation workload seeds: eval_seed + 0..eval_episodes-1
    eval_scenario: str = "train"  # "train": the training scenario; "eval": its eval_overrides variant
    eval_action: str = ARGMAX  # validation (and the checkpoint's default evaluation): EVAL_ACTIONS
    #: how agents resolve conflicts at validation (and the checkpoint's default evaluation):
    #: CONFLICT_MODES, or null: as policy.conflicts, by which training always acts
    eval_conflicts: str | None = None
    save_every: int | None = None  # env steps between last.pt saves (None: every evaluation)
    logdir: str = "runs"  # parent directory of the run directories
    run_name: str | None = None  # None: <scenario>-<variant>-s<seed>-<timestamp>
    progress: bool = True  # a tqdm bar over the run's env steps (on a terminal; else a plain status line)
    also_validate_on: tuple[str, ...] | None = None  # validate on these scenarios of the run's task family too (names or YAML paths; agents/training/validation_set.py), acting as each one's own recipe acts: best.pt is then chosen on the mean over all validation scenarios of the validation mean JCT relative to each one's best validation baseline. None: the run's scenario alone
    validation_baselines: bool = True  # run the validation baselines once at a run's start on its validation workloads (agents/training/validation_baselines.py): TensorBoard's baselines/* lines and the rival in the progress bar / status line (false: skip)

    # declared once (envs/config_section.py): built in layers (defaults, the YAML's train:
    # section, CLI flags, key=value overrides) with typed assignment, then validated once:
    # field types, then these checks in order
    SECTION = "train"
    VALIDATE_ON_INIT = False
    #: options removed because no recipe, benchmark or documented result used them, with their old
    #: defaults: a checkpoint's train_config holding one at that value still reads (envs/config_section.py)
    REMOVED = {"init_from": None, "collect_episodes": None, "buffer_per_env": None}
    CHECKS = (
        at_least("steps", 1),
        rule(lambda c: c.steps <= MAX_STEPS, f"steps must be <= {MAX_STEPS} (env steps of one run), got {{steps}}"),
        at_least("envs", 1),
        rule(lambda c: c.envs <= MAX_ENVS, f"envs must be <= {MAX_ENVS} (training envs), got {{envs}}"),
        one_of("vector", VECTOR_KINDS),
        rule(lambda c: c.workers is None or 1 <= c.workers <= c.envs,
             "workers must be between 1 and envs ({envs}), got {workers}"),
        one_of("device", DEVICES),
        rule(lambda c: 0 <= c.seed <= MAX_SEED, f"seed must be between 0 and {MAX_SEED}, got {{seed}}"),
        at_least("torch_threads", 1, nullable=True),
        at_least("shards", 1),
        one_of("malloc", MALLOC_MODES),
        rule(lambda c: c.compile is None or c.compile in COMPILE_MODES,
             f"compile must be null or one of {list(COMPILE_MODES)}, got {{compile!r}}"),
        one_of("precision", PRECISIONS),
        greater_than("lr", 0, finite=True),
        one_of("lr_schedule", LR_SCHEDULES),
        one_of("old_stats", OLD_STATS),
        between("eps_clip", 0, 1, open=True),
        between("gae_lambda", 0, 1),
        between("gamma", 0, 1, nullable=True),
        at_least("batch_size", 1),
        at_least("repeat", 1),
        at_least("vf_coef", 0),
        at_least("ent_coef", 0),
        greater_than("max_grad_norm", 0, nullable=True),
        at_least("return_scaling_window", 1, nullable=True),
        at_least("lost_claim_penalty", 0, finite=True),
        at_least("max_batchsize", 1),
        at_least("collect_steps", 1, nullable=True),
        at_least("eval_every", 1),
        at_least("eval_episodes", 1),
        rule(lambda c: 0 <= c.eval_seed and c.eval_seed + c.eval_episodes <= TRAIN_SEED_MIN,
             f"eval_seed must keep evaluation seeds below {TRAIN_SEED_MIN} (training seeds start there), "
             "got eval_seed {eval_seed} with eval_episodes {eval_episodes}"),
        one_of("eval_scenario", EVAL_SCENARIOS),
        one_of("train_scenario", EVAL_SCENARIOS),
        rule(lambda c: c.scenarios is None or len(c.scenarios) >= 1, "scenarios must name at least one scenario, or be null"),
        rule(lambda c: c.scenarios is None or len(set(c.scenarios)) == len(c.scenarios),
             "scenarios names a scenario twice: {scenarios}"),
        rule(lambda c: c.scenario_shares is None or (c.scenarios is not None and len(c.scenario_shares) == len(c.scenarios)),
             "scenario_shares needs one share per entry of scenarios, got {scenario_shares} for {scenarios}"),
        greater_than("scenario_shares", 0, finite=True, nullable=True),
        one_of("scenario_order", SCENARIO_ORDERS),
        one_of("scenario_reward", (None, *REWARDS)),
        rule(lambda c: c.also_validate_on is None or len(c.also_validate_on) >= 1,
             "also_validate_on must name at least one scenario, or be null"),
        rule(lambda c: c.also_validate_on is None or len(set(c.also_validate_on)) == len(c.also_validate_on),
             "also_validate_on names a scenario twice: {also_validate_on}"),
        rule(lambda c: c.also_validate_on is None or c.validation_baselines,
             "also_validate_on scores each validation scenario against its best validation baseline: "
             "set validation_baselines=true"),
        rule(lambda c: c.scenario_reward is None or c.scenarios is not None,
             "scenario_reward sets the reward of the scenarios in scenarios: set scenarios too"),
        one_of("eval_action", EVAL_ACTIONS),
        one_of("eval_conflicts", (None, *CONFLICT_MODES)),
        rule(lambda c: c.imitate is None or bool(c.imitate.strip()), "imitate must be a scheduler spec or null"),
        at_least("imitate_episodes", 1),
        at_least("imitate_rounds", 0),
        at_least("imitate_epochs", 0),
        greater_than("imitate_lr", 0, finite=True),
        at_least("save_every", 1, nullable=True),
        rule(lambda c: bool(c.logdir), "logdir must not be empty"),
    )

    # ------------------------------------------------------------------ derived values
    def resolved_gamma(self, mode: str) -> float:
        """The discount actually used: ``gamma`` or the mode's default."""
        if self.gamma is not None:
            return float(self.gamma)
        return 1.0 if mode == "multi" else 0.99

    def lr_at(self, env_step: int) -> float:
        """The learning rate of the update that follows ``env_step`` env steps (``lr_schedule``).

        A function of the env step alone, so a resumed run continues the schedule where it
        stopped (a resume with a larger ``--steps`` stretches the rest of a linear schedule).
        """
        if self.lr_schedule == LINEAR_LR:
            return self.lr * max(0.0, 1.0 - env_step / self.steps)
        return self.lr

    def resolved_collect_steps(self) -> int:
        """Env steps per collection: ``collect_steps``, or 128 x ``envs``."""
        if self.collect_steps is not None:
            return self.collect_steps
        return 128 * self.envs

    def collection_batch(self) -> int:
        """Env steps one collection really gathers: ``collect_steps`` rounded up to whole ``envs``."""
        return math.ceil(self.resolved_collect_steps() / self.envs) * self.envs

    def epoch_plan(self, done: int = 0) -> tuple[int, int]:
        """``(env steps per evaluation interval, number of intervals)`` for the steps left after ``done``.

        An interval is ``eval_every`` env steps, or all the steps left when fewer remain; the
        budget is rounded up to whole intervals.
        """
        remaining = max(1, self.steps - done)
        epoch_len = min(self.eval_every, remaining)
        return epoch_len, math.ceil(remaining / epoch_len)

    def interval_plan(self, done: int = 0) -> tuple[int, int, int]:
        """``(first, length, count)``: the tianshou epochs left for a run at ``done`` env steps.

        ``count`` evaluation intervals remain; the first asks for ``first`` env steps and every
        other for ``length`` (:meth:`epoch_plan`). The intervals stay on a fresh run's grid: a run
        stopped inside an interval (Ctrl-C, SIGTERM, a periodic ``last.pt``) first finishes that
        interval's remaining steps, so a resumed run evaluates at the env steps an uninterrupted
        one does and ends at the same :meth:`planned_env_steps`. Off the grid (a collection batch
        that no longer divides ``done``, or a run at or past its planned end) the steps left are
        planned afresh by :meth:`epoch_plan`.
        """
        length, count = self.epoch_plan(0)
        batch = self.collection_batch()
        if done % batch == 0:
            interval = math.ceil(length / batch) * batch  # env steps one interval runs
            left = count * interval - done
            if left > 0:
                into = done % interval
                first = length if into == 0 else interval - into
                return first, length, 1 + (left - (interval - into)) // interval
        length, count = self.epoch_plan(done)
        return length, length, count

    def planned_env_steps(self, done: int = 0) -> int:
        """Env steps a run from ``done`` ends at.

        The rounding rule of ``--steps``: the steps left are split into evaluation intervals
        (:meth:`epoch_plan`), and every interval into whole collection batches
        (:meth:`collection_batch`, ``collect_steps`` = 128 x envs by default): each interval
        runs ``ceil(interval / batch) * batch`` env steps. E.g. ``--steps 3000`` with 8 envs
        (batch 1024) runs 3072; ``--steps 250000 train.eval_every=16384
        train.collect_steps=2048`` runs 16 x 16384 = 262144.
        """
        batch = self.collection_batch()
        first, length, count = self.interval_plan(done)
        return done + math.ceil(first / batch) * batch + (count - 1) * math.ceil(length / batch) * batch


# ---------------------------------------------------------------------------------------
# override routing
# ---------------------------------------------------------------------------------------
@dataclass
class SplitOverrides:
    """``key=value`` overrides sorted by the section they reach."""

    scenario: dict[str, Any]
    policy: dict[str, Any]
    train: dict[str, Any]


#: difflib's similarity ratio from which a mistyped override key is answered with the field it nearly names
NEAR_MISS_RATIO = 0.75


def override_fields() -> dict[str, list[str]]:
    """The field names each override section takes: ``scenario`` (its top-level keys), ``train``, ``policy``."""
    from agents.policy.config import PolicyConfig  # imported on first use: it imports torch (networks.heads)

    return {section: [f.name for f in fields(cls)]
            for section, cls in (("train", TrainConfig), ("policy", PolicyConfig), ("scenario", ScenarioConfig))}


def key_hint(key: str, names: Mapping[str, Iterable[str]]) -> str | None:
    """The override a mistyped ``key`` most likely meant, as written on the command line (``train.lr``,
    ``policy.hidden``, ``num_tasks``): a field of that name in some section (``names``:
    :func:`override_fields`), else the nearest field name of any section; None when none is near."""
    qualified = {}
    for section, section_names in names.items():
        for name in section_names:
            qualified.setdefault(name, name if section == "scenario" else f"{section}.{name}")
    if key in qualified:
        return qualified[key]
    near = difflib.get_close_matches(key, list(qualified), n=1, cutoff=NEAR_MISS_RATIO)
    return qualified[near[0]] if near else None


def _check_override_keys(out: SplitOverrides) -> None:
    """ConfigError for an override key that is no field of the section it reached but (nearly) names a
    field of some section: ``lr=1e-3`` -> did you mean train.lr? Other unknown keys are left to the
    section's own check, which lists its valid keys."""
    names = None
    for section in ("scenario", "train", "policy"):
        for key in getattr(out, section):
            head = key.split(".")[0]
            names = names or override_fields()
            if head in names[section]:
                continue
            hint = key_hint(head, names)
            if hint is not None:
                raise ConfigError(f"unknown {section} key {head!r}; did you mean {hint}?")


def split_overrides(items: Iterable[str]) -> SplitOverrides:
    """Route ``key=value`` strings to the scenario, policy or train section (module docstring); a key
    that no section has but that nearly names a field raises with the override it meant."""
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
    _check_override_keys(out)
    return out
