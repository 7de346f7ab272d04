"""Run resolution: scenario + ``key=value`` overrides + CLI flags (+ checkpoint) -> :class:`RunSpec`.

The scenario is checked here (:func:`check_scenario`: progress functions, trace files), before
any worker process or run directory exists; :func:`write_config` writes the resolved
``config.yaml`` once the run starts.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import yaml

from agents.output_dirs import OutputWriteError
from agents.policy.config import PolicyConfig
from envs.config import ConfigError, ScenarioConfig, apply_overrides, split_scenario_yaml

from . import rundir
from .checkpoints import LAST, final_evaluation_pending, load_checkpoint
from .config import SplitOverrides, TrainConfig, split_overrides
from .envs import evaluation_scenario, require_ray, training_scenario, vector_kind
from .malloc import configure_allocator
from .run_spec import RunSpec
from .rundir import CONFIG_FILE


def config_differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys where two plain structures (resolved configs) differ."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += config_differences(a.get(key), b.get(key), f"{prefix}{key}.")
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += config_differences(x, y, f"{prefix}{i}.")
        return out
    return [] if a == b else [prefix.rstrip(".")]


def check_scenario(scenario: ScenarioConfig, train: TrainConfig) -> None:
    """Fail early (ConfigError) on a scenario whose progress functions cannot be built.

    Builds the progress functions of the training scenario and of the one evaluated during
    training (a test-bed trace file is read and fitted here), in this process, before any
    worker process or run directory exists.
    """
    from envs.progress import build_progress_functions
    from envs.trace_table import TraceError

    try:
        build_progress_functions(scenario)
        evaluation = evaluation_scenario(scenario, train)
        if evaluation is not scenario:
            build_progress_functions(evaluation)
    except TraceError as exc:
        raise ConfigError(str(exc)) from None


def training_scenarios(scenario: ScenarioConfig, policy: PolicyConfig, train: TrainConfig) -> tuple[ScenarioConfig, ...]:
    """The scenarios the run trains on (``train.scenarios``, :mod:`~agents.training.scenario_mix`), each
    checked against the run's own and built once (progress functions, trace files); ConfigError on a misfit."""
    from .scenario_mix import check_shared_policy, resolve_training_scenarios

    resolved = resolve_training_scenarios(scenario, train.scenarios, both_modes=policy.observe_mode,
                                          reward=train.scenario_reward)
    modes = sorted({s.mode for s in resolved})
    if len(modes) > 1 and train.gamma is None:
        raise ConfigError(f"train.scenarios mixes {' and '.join(modes)} mode, whose default discounts differ: "
                          f"set train.gamma")
    others = tuple(training_scenario(s, train) if s is not scenario else s for s in resolved)
    check_shared_policy(policy.tied_to_n, others, scenario)
    for other in others:
        if other is not scenario:
            check_scenario(other, train)
    return others


def other_validation_scenarios(scenario: ScenarioConfig, policy: PolicyConfig,
                               train: TrainConfig) -> tuple[ScenarioConfig, ...]:
    """The other scenarios the run validates on (``train.also_validate_on``,
    :mod:`~agents.training.validation_set`), checked as training scenarios are and built once;
    ConfigError (one line) on a misfit, the run's own scenario, or two of one name."""
    from .scenario_mix import check_shared_policy, resolve_training_scenarios

    if not train.also_validate_on:
        return ()
    key = "train.also_validate_on"
    resolved = resolve_training_scenarios(scenario, train.also_validate_on, both_modes=policy.observe_mode, key=key)
    names = [s.name for s in resolved]
    if scenario.name in names:
        raise ConfigError(f"{key}: {scenario.name!r} is the run's own scenario, validated on already")
    if len(set(names)) < len(names):
        raise ConfigError(f"{key} names two scenarios of one name: {names}")
    check_shared_policy(policy.tied_to_n, resolved, scenario, key)
    for other in resolved:
        check_scenario(other, train)
    return resolved


def acting_rule(scenario: str) -> tuple[str, str]:
    """How the scenario's own recipe (``configs/<name>.yaml`` or a YAML path) acts outside training:
    ``(train.eval_action, conflict rule)``, the rule its ``train.eval_conflicts`` or else ``policy.conflicts`` names."""
    spec = prepare_run(scenario)
    return spec.train.eval_action, spec.train.eval_conflicts or spec.policy.conflicts


def other_validation_rules(spec: RunSpec) -> list[tuple[ScenarioConfig, tuple[str, str]]]:
    """Each other validation scenario of ``spec`` (:attr:`~.run_spec.RunSpec.validation_others`) with how the
    policy acts there: its own recipe's rule (:func:`acting_rule` of its ``train.also_validate_on`` entry)."""
    entries = spec.train.also_validate_on or ()
    return [(scenario, acting_rule(entry)) for entry, scenario in zip(entries, spec.validation_others, strict=True)]


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
    the checkpoint's is refused (:class:`ConfigError`), train settings may change. The run goes
    on in the checkpoint's own run directory, or in a new one under ``--logdir`` when the file is
    not in its run's directory (:mod:`agents.training.rundir`); in its own directory only the
    run's ``last.pt`` continues it (:func:`check_no_rewind`). A checkpoint with the step budget
    done is refused ("nothing to do") unless it lacks its final evaluation
    (:func:`~agents.training.checkpoints.final_evaluation_pending`). Nothing is created here.
    """
    split: SplitOverrides = split_overrides(overrides)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    ckpt = load_checkpoint(resume) if resume else None

    if config is not None:
        _, scen_raw, sections = split_scenario_yaml(config)
        pol_yaml, train_yaml = sections["policy"], sections["train"]
    elif ckpt is not None:
        scen_raw, pol_yaml, train_yaml = copy.deepcopy(dict(ckpt["scenario"])), {}, {}
    else:
        raise ConfigError("--config is required (a scenario name or YAML path) unless --resume is given")
    apply_overrides(scen_raw, split.scenario)

    pol_values = {**pol_yaml, **split.policy}
    if variant is not None:
        pol_values["variant"] = variant
    # resuming: the checkpoint's architecture is the base for every key the user did not set
    policy = PolicyConfig.from_dict(ckpt["policy_config"] if ckpt is not None else {}, pol_values)

    train = TrainConfig.from_dict(ckpt["train_config"]) if ckpt is not None else TrainConfig()
    train.apply(train_yaml)
    train.apply(flags)
    train.apply(split.train)
    train.validate()
    scenario = training_scenario(ScenarioConfig.from_dict(scen_raw), train)
    check_scenario(scenario, train)
    trained_on = training_scenarios(scenario, policy, train)
    validated_also = other_validation_scenarios(scenario, policy, train)

    if ckpt is not None:
        # the checkpoint's configs with today's defaults for fields it predates (e.g. a file from
        # before ``policy.conflicts`` existed resumes as ``bayes``, the behaviour it was trained with)
        saved_scenario = ScenarioConfig.from_dict(copy.deepcopy(dict(ckpt["scenario"]))).to_dict()
        saved_policy = PolicyConfig.from_dict(ckpt["policy_config"]).to_dict()
        problems = [f"scenario.{k}" for k in config_differences(scenario.to_dict(), saved_scenario)]
        problems += [f"policy.{k}" for k in config_differences(policy.to_dict(), saved_policy)]
        if problems:
            raise ConfigError(
                f"cannot resume {ckpt['_path']}: the checkpoint was trained with a different "
                f"scenario/architecture ({', '.join(problems[:8])}{' ...' if len(problems) > 8 else ''})"
            )
        done = int(ckpt["counters"]["env_step"])
        if train.steps <= done and not final_evaluation_pending(ckpt, train):
            raise ConfigError(
                f"nothing to do: {ckpt['_path']} already has {done} env steps and the step budget is "
                f"{train.steps} (pass a larger --steps)"
            )
    rundir.check_run_name(train.run_name)
    own_dir = Path(ckpt["_path"]).parent if ckpt is not None else None
    if own_dir is not None and rundir.owns(ckpt, own_dir):
        # the checkpoint sits in its own run directory: the run goes on there, with its id
        check_no_rewind(ckpt, own_dir)
        return RunSpec(scenario=scenario, policy=policy, train=train, run_dir=own_dir, resume=ckpt,
                       run_id=rundir.checkpoint_run_id(ckpt), fresh_dir=False, default_name=False,
                       training_scenarios=trained_on, validation_others=validated_also)
    # a new run, or a shipped / copied checkpoint continued as a new run (its history carried on;
    # the name it was saved under is its old run's, so only a name given now is used)
    if ckpt is not None and "run_name" not in {**train_yaml, **flags, **split.train}:
        train.run_name = None
    name = train.run_name or rundir.default_run_name(scenario.name, policy.variant, train.seed)
    return RunSpec(scenario=scenario, policy=policy, train=train, run_dir=Path(train.logdir) / name, resume=ckpt,
                   run_id=rundir.new_run_id(), fresh_dir=True, default_name=train.run_name is None,
                   training_scenarios=trained_on, validation_others=validated_also)


def check_no_rewind(ckpt: Mapping[str, Any], run_dir: Path) -> None:
    """ConfigError unless ``ckpt`` is its run's ``last.pt`` (or the run has no ``last.pt`` any more):
    going on from an older file of the run (``best.pt``) would replace the newer ``last.pt``,
    ``best.pt`` and ``result.json`` with a branch from an earlier step."""
    path = Path(ckpt["_path"])
    last = run_dir / LAST
    if path.name == LAST or not last.is_file():
        return
    here, newest = int(ckpt["counters"]["env_step"]), int(load_checkpoint(last)["counters"]["env_step"])
    age = (f"is older than this run's {LAST} (step {here} < {newest})" if here < newest
           else f"is not this run's {LAST} (both at step {newest})")
    raise ConfigError(f"cannot resume from {path}: it {age}: resume from {last}, or copy the file elsewhere "
                      "to start a new run from it (a copied checkpoint continues as a new run under --logdir)")


def check_resume_weights(spec: RunSpec) -> None:
    """ConfigError (one line) unless the resumed checkpoint's weights and optimizer fit the network
    its configs build (checked on a freshly built model, before the run directory is taken)."""
    if spec.resume is None:
        return
    from agents.policy.checkpoint import shape_problems
    from agents.policy.network import TapFingerPolicy
    from envs.observation import ObservationSpec

    model = TapFingerPolicy(ObservationSpec.from_config(spec.scenario), spec.policy)
    path = spec.resume["_path"]
    problems = shape_problems(model, spec.resume["model"])
    if problems:
        raise ConfigError(f"cannot resume {path}: its weights do not fit the architecture of its policy config: "
                          + "; ".join(problems[:3]) + (f"; {len(problems) - 3} more" if len(problems) > 3 else ""))
    groups = spec.resume["optimizer"]["param_groups"]
    have = sum(len(g.get("params", ())) for g in groups)
    want = sum(1 for p in model.parameters() if p.requires_grad)
    if have != want:
        raise ConfigError(f"cannot resume {path}: its optimizer state holds {have} parameter(s), "
                          f"the network has {want}")


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; ``cuda`` without CUDA is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda requested but CUDA is not available (use --device cpu or auto)")
    return torch.device(name)


def configure_process(train: TrainConfig, threads: int | None = None) -> None:
    """The learner process's settings, process-wide: torch intra-op threads (``threads``, else
    ``train.torch_threads``; left as they are when neither is set) and the allocator (``train.malloc``)."""
    threads = threads or train.torch_threads
    if threads:
        torch.set_num_threads(threads)
    configure_allocator(train.malloc)


def check_environment(spec: RunSpec) -> torch.device:
    """Fail early (ConfigError) on a plan beyond ``--steps`` or the machine's memory
    (:func:`~agents.training.budget.check_plan`), resumed weights that do not fit the network
    (:func:`check_resume_weights`, once the plan's size is known to fit), or a device or vector
    backend this machine lacks."""
    from .budget import check_plan

    check_plan(spec)
    check_resume_weights(spec)
    device = resolve_device(spec.train.device)
    if spec.train.shards > 1 and device.type != "cpu":
        raise ConfigError(f"train.shards={spec.train.shards} splits network passes over CPU threads; "
                          f"on {device.type} use train.shards=1")
    if vector_kind(spec.train) == "ray":
        require_ray()
    return device


def resolved_config(spec: RunSpec) -> dict[str, Any]:
    """The run's resolved ``scenario``, ``policy`` and ``train`` sections as plain values (what
    ``config.yaml`` and every checkpoint hold, and ``train.py --print-config`` prints)."""
    return {"scenario": spec.scenario.to_dict(), "policy": spec.policy.to_dict(), "train": spec.train.to_dict()}


def config_yaml(spec: RunSpec) -> str:
    """:func:`resolved_config` as YAML."""
    return yaml.safe_dump(resolved_config(spec), sort_keys=False)


def write_config(spec: RunSpec, extra: Mapping[str, Any] | None = None) -> Path:
    """Write the resolved ``config.yaml`` of the run (scenario, policy, train, and a ``meta`` section)."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        **resolved_config(spec),
        "meta": {
            rundir.RUN_ID: spec.run_id,
            "gamma": spec.train.resolved_gamma(spec.scenario.mode),
            "vector": vector_kind(spec.train),
            "torch": str(torch.__version__),
            "python": sys.version.split()[0],
            **dict(extra or {}),
        },
    }
    path = spec.run_dir / CONFIG_FILE
    try:
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
