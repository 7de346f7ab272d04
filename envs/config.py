"""Scenario configuration: a validated dataclass loaded from ``configs/<name>.yaml``.

Every field can be overridden with ``key=value`` strings (dotted keys reach nested
fields, values are parsed as YAML). Unknown keys and invalid values raise
:class:`ConfigError` with a message that names the offending field (``scenario.<field>``).

The scenario is a config section like ``policy`` and ``train`` (:mod:`envs.config_section`):
:class:`ScenarioConfig`, :class:`Connectivity`, :class:`TraceSource` and :class:`TaskType`
declare their fields, defaults and ``CHECKS`` next to the dataclass; :meth:`ScenarioConfig.from_dict`
adds the structure a flat check cannot express (capacities broadcast to every cluster, the task-type
list, progress specs, probabilities summing to 1, every type fitting some cluster).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .config_section import (
    ConfigError,
    ConfigSection,
    at_least,
    between,
    check_keys,
    coerce,
    one_of,
    rule,
    run_checks,
)
from .config_yaml import DuplicateKeyError, dump_config, load_config_text, read_config_file
from .config_yaml import yaml_error_message  # noqa: F401 - re-exported: one line for a YAML error
from .progress_registry import PROGRESS_KINDS, TRACE_MODES

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
MODES = ("single", "multi")
REWARDS = ("team", "per_cluster")
CONNECTIVITY_MODELS = ("bandwidth", "random_subset")


@dataclass(frozen=True)
class TaskType(ConfigSection):
    """One kind of ML task: arrival probability, minimum (CPU, GPU), progress function."""

    name: str  # the type's label (task type one-hot order follows the list)
    prob: float  # probability that an arriving task is of this type (the list's probabilities sum to 1)
    min_req: tuple[int, int]  # minimum (CPU, GPU) the task needs to make progress
    progress: Mapping[str, Any]  # {"kind": <registered kind>, its parameters}: checked by from_dict

    # declared once (envs/config_section.py); from_dict names each entry scenario.task_types[k]
    SECTION = "scenario.task_types"
    CHECKS = (
        between("prob", 0.0, 1.0),
        at_least("min_req", 0),
        rule(lambda t: t.min_req != (0, 0),
             "min_req of task type {name!r} must not be (0, 0): the void action would be a placement"),
        rule(lambda t: t.min_req[1] >= 1 or not PROGRESS_KINDS[t.progress["kind"]].needs_gpu,
             "min_req of task type {name!r}: {progress[kind]} progress gains nothing without a GPU; "
             "min_req GPU must be >= 1, got {min_req!r}"),
    )


@dataclass(frozen=True)
class Connectivity(ConfigSection):
    """Which clusters a task can reach.

    ``bandwidth``: each device-cluster link draws a bandwidth uniformly from
    ``bandwidth_range`` (Mbps); a link is usable at ``>= threshold``. A task with no
    usable link keeps its best one, so every task reaches at least one cluster.
    ``random_subset``: the reference code's rule, a uniformly sized random subset.
    Only clusters that can host the task type at its minimum requirement are reachable.
    """

    model: str = "bandwidth"  # bandwidth (links drawn per device and cluster) or random_subset (the reference code's)
    bandwidth_range: tuple[float, float] = (1.0, 13.0)  # uniform range of a link's bandwidth (Mbps)
    threshold: float = 5.0  # a link is usable at this bandwidth or more (Mbps)

    SECTION = "scenario.connectivity"
    CHECKS = (
        one_of("model", CONNECTIVITY_MODELS),
        at_least("bandwidth_range", 0.0, finite=True),
        rule(lambda c: c.bandwidth_range[0] <= c.bandwidth_range[1],
             "bandwidth_range must be [low, high] with low <= high, got {bandwidth_range!r}"),
        at_least("threshold", 0.0, finite=True),
    )


@dataclass(frozen=True)
class TraceSource(ConfigSection):
    """Where test-bed progress parameters come from and how they are turned into progress."""

    params: str = ""  # path of a fitted parameter JSON; "" = the table shipped in envs/data
    mode: str = TRACE_MODES[0]  # powerlaw (the correct per-step difference) or legacy (the reference code's bug)

    SECTION = "scenario.trace"
    CHECKS = (one_of("mode", TRACE_MODES),)
    NULL_IS_DEFAULT = frozenset({"params"})


@dataclass(frozen=True)
class ScenarioConfig(ConfigSection):
    """A complete, validated scenario. See ``configs/*.yaml`` for the shipped ones."""

    name: str = field(default="custom", kw_only=True)  # the scenario's name (a YAML's file stem by default)
    mode: str  # single (one placement per cluster per real step) or multi (several logical rounds per real step)
    num_clusters: int  # N, one agent each
    capacities: tuple[tuple[int, int], ...]  # one entry is broadcast to every cluster by from_dict
    per_task_max: tuple[int, int]  # the most (CPU, GPU) one task may be given
    arrival_rate: float  # Poisson arrivals per real step (lambda)
    num_tasks: int  # tasks per episode (workload)
    task_types: tuple[TaskType, ...]  # the task types (see "task types" below)
    switch_overhead: float = 1.0  # progress factor on the step after a reallocation; 1 = none
    pending_slots: int = 10  # P: the earliest waiting tasks each cluster's agent sees
    connectivity: Connectivity = field(default_factory=Connectivity)  # which clusters a task can reach
    trace: TraceSource = field(default_factory=TraceSource)  # test-bed progress parameters
    progress_noise: float = 0.0  # uniform noise on every step's progress, from its own RNG stream
    reward: str = "team"  # team: -(tasks alive) per real step; per_cluster: the paper's per-agent reward
    max_steps: int = 20000  # real-step cap: the episode is truncated there
    #: the start floor's factor (envs/durations.py), which shapes only the agents' action mask
    #: (observation ``feasible``): a pending task is feasible for a cluster's agent only if, given all
    #: the cluster's free resources (up to ``per_task_max``), it would finish within this many times
    #: its fastest duration there; 0 = no start floor (paper)
    max_start_slowdown: float = 0.0
    eval_overrides: Mapping[str, Any] = field(default_factory=dict)  # scenario keys of the evaluation variant

    # declared once (envs/config_section.py): fields without a default are required; from_dict
    # types and checks these before it builds the structure (capacities, task types, sub-sections)
    SECTION = "scenario"
    CHECKS = (
        one_of("mode", MODES),
        between("num_clusters", 1, 256),
        at_least("capacities", 1),
        at_least("per_task_max", 1),
        between("arrival_rate", 1e-6, 1e4),
        between("num_tasks", 1, 10_000_000),
        between("switch_overhead", 0.0, 1.0),
        between("pending_slots", 1, 128),
        between("progress_noise", 0.0, 10.0),
        one_of("reward", REWARDS),
        at_least("max_steps", 1),
        rule(lambda c: c.max_start_slowdown == 0 or 1 <= c.max_start_slowdown <= 1e6,
             "max_start_slowdown must be 0 (no limit) or in [1, 1e6], got {max_start_slowdown!r}"),
    )
    NULL_IS_DEFAULT = frozenset({"switch_overhead", "connectivity", "trace", "eval_overrides"})

    # -- derived ------------------------------------------------------------------------
    @property
    def num_types(self) -> int:
        return len(self.task_types)

    @property
    def alloc_dims(self) -> tuple[int, int]:
        """Sizes of the CPU and GPU axes of the joint allocation index (0..max each)."""
        return self.per_task_max[0] + 1, self.per_task_max[1] + 1

    @property
    def num_allocations(self) -> int:
        c, g = self.alloc_dims
        return c * g

    def for_evaluation(self) -> "ScenarioConfig":
        """The scenario with its ``eval_overrides`` applied (test-bed: larger clusters, lower λ)."""
        if not self.eval_overrides:
            return self
        raw = self.to_dict()
        raw.pop("eval_overrides")
        for key, value in self.eval_overrides.items():
            _set_dotted(raw, key, value)
        raw["eval_overrides"] = {}
        return self.from_dict(raw)

    def to_yaml(self) -> str:
        return dump_config(self.to_dict(), sort_keys=False)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *more: Mapping[str, Any]) -> "ScenarioConfig":
        """Validate ``raw`` updated with every mapping of ``more`` (top-level keys) and build the config.

        The fields are typed and checked as the class declares them (defaults from the dataclass);
        then the structure: capacities (one entry broadcast to every cluster), the sub-sections,
        the task types (each checked as :class:`TaskType` declares, probabilities summing to 1,
        unique names, each that can arrive fitting some cluster) and ``eval_overrides`` (whose
        evaluation variant is validated too).
        """
        merged = dict(raw)
        for layer in more:
            merged.update(layer)
        section = cls.SECTION
        values = cls.typed(copy.deepcopy(merged))
        cls.check_values(values)

        n = values["num_clusters"]
        caps = values["capacities"]
        if not caps:
            raise ConfigError(f"{section}.capacities must be a non-empty list of [cpu, gpu] pairs, got []")
        if len(caps) == 1:
            caps = caps * n
        if len(caps) != n:
            raise ConfigError(f"{section}.capacities has {len(caps)} entries but num_clusters is {n} (give 1 or {n})")
        values["capacities"] = caps
        if "connectivity" in values:
            values["connectivity"] = Connectivity.from_dict(values["connectivity"])
        if "trace" in values:
            values["trace"] = TraceSource.from_dict(values["trace"])

        types_raw = values["task_types"]
        if not isinstance(types_raw, (list, tuple)) or not types_raw:
            raise ConfigError(f"{section}.task_types must be a non-empty list, got {types_raw!r}")
        types = tuple(_task_type(f"{section}.task_types[{k}]", t) for k, t in enumerate(types_raw))
        total = sum(t.prob for t in types)
        if abs(total - 1.0) > 1e-6:
            raise ConfigError(f"{section}.task_types probabilities must sum to 1, got {total:.6g}")
        if len({t.name for t in types}) != len(types):
            raise ConfigError(f"{section}.task_types names must be unique, got {[t.name for t in types]}")
        per_task_max = values["per_task_max"]
        for k, t in enumerate(types):
            fits = [cap for cap in caps if all(t.min_req[r] <= min(cap[r], per_task_max[r]) for r in range(2))]
            if t.prob > 0 and not fits:
                raise ConfigError(
                    f"{section}.task_types[{k}]: task type {t.name!r} with min_req {list(t.min_req)} fits no "
                    f"cluster (capacities {[list(c) for c in caps]}, per_task_max {list(per_task_max)})"
                )
        values["task_types"] = types

        if "eval_overrides" in values:
            if not isinstance(values["eval_overrides"], Mapping):
                raise ConfigError(f"{section}.eval_overrides must be a mapping of dotted keys to values, "
                                  f"got {values['eval_overrides']!r}")
            values["eval_overrides"] = dict(values["eval_overrides"])

        cfg = cls(**values)
        if cfg.eval_overrides:
            cfg.for_evaluation()  # validate the evaluation variant eagerly
        return cfg

    def to_dict(self) -> dict[str, Any]:
        """A plain, YAML-serialisable dict of the config (tuples become lists)."""

        def plain(v: Any) -> Any:
            if dataclasses.is_dataclass(v):
                return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
            if isinstance(v, (list, tuple)):
                return [plain(x) for x in v]
            if isinstance(v, Mapping):
                return {k: plain(x) for k, x in v.items()}
            return v

        return plain(self)


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------
def available_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``configs/`` (a recipe file, one with a :data:`BASE_KEY`, trains
    on another file's scenario and is not one of them)."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if not p.stem.startswith("_") and not is_recipe_file(p))


#: the top-level key of a recipe file: the scenario (a name or YAML path) whose scenario part it reads,
#: its own top-level keys laid over that scenario's (e.g. ``configs/generalist-synthetic.yaml``)
BASE_KEY = "base"


def validated_scenario(name_or_path: str | Path) -> str:
    """The scenario a recipe validates on: a recipe file's :data:`BASE_KEY`, else the scenario's own name."""
    path, raw = read_scenario_yaml(name_or_path)
    return str(raw.get(BASE_KEY) or raw.get("name") or path.stem)


def is_recipe_file(path: Path) -> bool:
    """Whether the YAML at ``path`` names a :data:`BASE_KEY` at its top level."""
    return re.search(rf"^{BASE_KEY}:", path.read_text(encoding="utf-8", errors="replace"), re.MULTILINE) is not None


#: sections of a scenario YAML that are not the scenario: the training recipe (``train:``, read by
#: :class:`agents.training.config.TrainConfig`) and the network (``policy:``, ``agents.policy.PolicyConfig``)
RECIPE_SECTIONS = ("policy", "train")

#: the optional section of a scenario YAML that holds the quick recipe (``train.py --quick``): its own
#: ``policy:`` and ``train:`` mappings, laid over the full recipe's (a first run in minutes on a CPU)
QUICK_SECTION = "quick"

#: scenario keys that are learning choices, not the workload: they change what the agents learn
#: from, never the tasks, the clusters or how a schedule is scored, so a tuning candidate may change
#: them and ``benchmarks/adopt.py`` writes them into the recipe like a ``train.``/``policy.`` value
LEARNING_KEYS = ("reward",)


def split_scenario_yaml(name_or_path: str | Path) -> tuple[Path, dict[str, Any], dict[str, dict[str, Any]]]:
    """A scenario YAML's path, its scenario mapping (``name`` defaulting to the file's stem) and its
    :data:`RECIPE_SECTIONS` (each a mapping, empty when absent); its :data:`QUICK_SECTION` is checked
    and set aside (:func:`quick_recipe` reads it)."""
    path, raw = read_scenario_yaml(name_or_path)
    sections = _pop_sections(path, raw, "")
    _quick_sections(path, raw.pop(QUICK_SECTION, None))  # not the scenario: checked, set aside
    if BASE_KEY in raw:
        raw = {**_base_scenario(path, raw.pop(BASE_KEY)), **raw}
    raw.setdefault("name", path.stem)
    return path, raw, sections


def _base_scenario(path: Path, base: Any) -> dict[str, Any]:
    """The scenario part of a recipe file's :data:`BASE_KEY` (its name left out: the recipe file names
    the scenario it defines); ConfigError for a base that is not a scenario file or is a recipe file."""
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: '{BASE_KEY}' must name a scenario (configs/<name>.yaml or a YAML path)")
    base_path, raw = read_scenario_yaml(base)
    if base_path.resolve() == path.resolve() or BASE_KEY in raw:
        raise ConfigError(f"{path}: '{BASE_KEY}: {base}' must name a scenario file, not a recipe file "
                          f"with its own '{BASE_KEY}'")
    _pop_sections(base_path, raw, "")
    raw.pop(QUICK_SECTION, None)
    raw.pop("name", None)
    return raw


def _pop_sections(path: Path, raw: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """The :data:`RECIPE_SECTIONS` popped from ``raw`` (each a mapping, empty when absent);
    ``where``: the enclosing section's name and a dot, for messages (``quick.``)."""
    sections = {}
    for key in RECIPE_SECTIONS:
        section = raw.pop(key, None) or {}
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: the '{where}{key}' section must be a mapping")
        sections[key] = section
    return sections


def _quick_sections(path: Path, quick: Any) -> dict[str, dict[str, Any]] | None:
    """The :data:`QUICK_SECTION`'s recipe sections (None when the YAML has none); anything else in it raises."""
    if quick is None:
        return None
    if not isinstance(quick, dict):
        raise ConfigError(f"{path}: the '{QUICK_SECTION}' section must be a mapping of "
                          f"{' and '.join(RECIPE_SECTIONS)} sections")
    quick = dict(quick)
    sections = _pop_sections(path, quick, f"{QUICK_SECTION}.")
    if quick:
        raise ConfigError(f"{path}: unknown {QUICK_SECTION} section(s) {', '.join(map(repr, quick))}; "
                          f"valid: {', '.join(RECIPE_SECTIONS)}")
    return sections


def quick_recipe(name_or_path: str | Path) -> dict[str, dict[str, Any]]:
    """The scenario YAML's quick recipe: its :data:`QUICK_SECTION`'s ``policy`` and ``train`` values,
    which ``train.py --quick`` lays over the full recipe; ConfigError when the YAML has none."""
    path, raw = read_scenario_yaml(name_or_path)
    sections = _quick_sections(path, raw.get(QUICK_SECTION))
    if sections is None:
        raise ConfigError(f"{path} has no quick recipe (a '{QUICK_SECTION}:' section with train: and policy: "
                          "values); train its full recipe without --quick")
    return sections


def load_scenario(name_or_path: str | Path, overrides: Iterable[str] | Mapping[str, Any] = ()) -> ScenarioConfig:
    """Load a scenario by name (``synthetic-3``) or YAML path (its recipe sections set aside), then apply overrides."""
    _, raw, _ = split_scenario_yaml(name_or_path)
    apply_overrides(raw, overrides)
    return ScenarioConfig.from_dict(raw)


def read_scenario_yaml(name_or_path: str | Path) -> tuple[Path, dict]:
    """The path and raw mapping of a scenario given by name (``configs/<name>.yaml``) or path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        available = ", ".join(available_scenarios())
        if path != CONFIG_DIR / f"{name_or_path}.yaml":  # given as a file: say the file is missing
            raise ConfigError(f"scenario file {str(name_or_path)!r} does not exist; the shipped scenarios "
                              f"(by name, or configs/<name>.yaml): {available}")
        raise ConfigError(f"unknown scenario {str(name_or_path)!r}; available: {available}")
    raw = read_config_file(path)  # UTF-8, unique keys, numbers as numbers (envs/config_yaml.py)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return path, raw


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``key=value``; the value is parsed as YAML by the config files' loader (numbers, ``3e-4``
    included, lists, booleans; :mod:`envs.config_yaml`), a value that is not valid YAML kept as text."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        parsed = load_config_text(value) if value.strip() else ""
    except DuplicateKeyError as exc:
        raise ConfigError(f"override {text!r}: {exc.problem}") from None
    except yaml.YAMLError:
        parsed = value
    return key, parsed


def apply_overrides(raw: dict, overrides: Iterable[str] | Mapping[str, Any]) -> dict:
    """Apply ``key=value`` strings or a mapping of dotted keys to a raw config dict in place."""
    items = overrides.items() if isinstance(overrides, Mapping) else (parse_override(o) for o in overrides)
    for key, value in items:
        _set_dotted(raw, key, value)
    return raw


def _set_dotted(raw: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(f"override {key!r}: bad list index {part!r}")
            node = node[int(part)]
            if not isinstance(node, (dict, list)):
                raise ConfigError(f"override {key!r}: {part!r} is not a nested section")
            continue
        if part not in node or node[part] is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, (dict, list)):
            raise ConfigError(f"override {key!r}: {part!r} is not a nested section")
    last = parts[-1]
    if isinstance(node, list):
        if not last.isdigit() or int(last) >= len(node):
            raise ConfigError(f"override {key!r}: bad list index {last!r}")
        node[int(last)] = value
    else:
        node[last] = value


# ---------------------------------------------------------------------------------------
# Validation: the declared sections, then the structure a flat check cannot express
# ---------------------------------------------------------------------------------------
def _progress_spec(section: str, spec: Any) -> dict:
    """A task type's progress spec checked against its registered kind (defaults filled in)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{section} must be a mapping with a 'kind', got {spec!r}")
    run_checks(section, (one_of("kind", tuple(PROGRESS_KINDS)),), {"kind": spec.get("kind")})
    kind = PROGRESS_KINDS[spec["kind"]]
    check_keys(section, spec, ("kind", *kind.params))
    out = dict(spec)
    for key, param in kind.params.items():
        if key not in spec and param.required:
            raise ConfigError(f"missing required {section} key {key!r}")
        value = spec.get(key, param.default)
        if param.type == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{section}.{key} {param.what}, got {value!r}")
        else:
            out[key] = coerce(section, key, value, int if param.type == "int" else float)
            low = -math.inf if param.lo is None else param.lo
            run_checks(section, (at_least(key, low, finite=True),), {key: out[key]})
    return out


def _task_type(section: str, raw: Any) -> TaskType:
    """One entry of ``task_types``, named ``section`` (``scenario.task_types[k]``) in messages."""
    values = TaskType.typed(raw, section)
    if "progress" in values:
        values["progress"] = _progress_spec(f"{section}.progress", values["progress"])
    TaskType.check_values(values, section)
    return TaskType(**values)
