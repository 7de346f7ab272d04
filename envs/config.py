"""Scenario configuration: a validated dataclass loaded from ``configs/<name>.yaml``.

Every field can be overridden with ``key=value`` strings (dotted keys reach nested
fields, values are parsed as YAML). Unknown keys and invalid values raise
:class:`ConfigError` with a message that names the offending field.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from .progress_registry import PROGRESS_KINDS, TRACE_MODES

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
MODES = ("single", "multi")
REWARDS = ("team", "per_cluster")
CONNECTIVITY_MODELS = ("bandwidth", "random_subset")


class ConfigError(ValueError):
    """A scenario configuration is malformed; the message says which field and why."""


@dataclass(frozen=True)
class TaskType:
    """One kind of ML task: arrival probability, minimum (CPU, GPU), progress function."""

    name: str
    prob: float
    min_req: tuple[int, int]
    progress: Mapping[str, Any]


@dataclass(frozen=True)
class Connectivity:
    """Which clusters a task can reach.

    ``bandwidth``: each device-cluster link draws a bandwidth uniformly from
    ``bandwidth_range`` (Mbps); a link is usable at ``>= threshold``. A task with no
    usable link keeps its best one, so every task reaches at least one cluster.
    ``random_subset``: the reference code's rule, a uniformly sized random subset.
    Only clusters that can host the task type at its minimum requirement are reachable.
    """

    model: str = "bandwidth"
    bandwidth_range: tuple[float, float] = (1.0, 13.0)
    threshold: float = 5.0


@dataclass(frozen=True)
class TraceSource:
    """Where test-bed progress parameters come from and how they are turned into progress."""

    params: str = ""  # path of a fitted parameter JSON; "" = the table shipped in envs/data
    mode: str = TRACE_MODES[0]


@dataclass(frozen=True)
class ScenarioConfig:
    """A complete, validated scenario. See ``configs/*.yaml`` for the shipped ones."""

    name: str
    mode: str
    num_clusters: int
    capacities: tuple[tuple[int, int], ...]
    per_task_max: tuple[int, int]
    arrival_rate: float
    num_tasks: int
    task_types: tuple[TaskType, ...]
    switch_overhead: float = 1.0  # progress factor on the step after a reallocation; 1 = none
    pending_slots: int = 10
    connectivity: Connectivity = field(default_factory=Connectivity)
    trace: TraceSource = field(default_factory=TraceSource)
    progress_noise: float = 0.0
    reward: str = "team"
    max_steps: int = 20000  # real-step cap: the episode is truncated there
    eval_overrides: Mapping[str, Any] = field(default_factory=dict)

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
        raw = to_dict(self)
        raw.pop("eval_overrides")
        for key, value in self.eval_overrides.items():
            _set_dotted(raw, key, value)
        raw["eval_overrides"] = {}
        return from_dict(raw)

    def to_yaml(self) -> str:
        return yaml.safe_dump(to_dict(self), sort_keys=False)


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------
def available_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``configs/``."""
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if not p.stem.startswith("_"))


def load_scenario(name_or_path: str | Path, overrides: Iterable[str] | Mapping[str, Any] = ()) -> ScenarioConfig:
    """Load a scenario by name (``synthetic-3``) or YAML path, then apply overrides."""
    path, raw = read_scenario_yaml(name_or_path)
    raw.setdefault("name", path.stem)
    apply_overrides(raw, overrides)
    return from_dict(raw)


def read_scenario_yaml(name_or_path: str | Path) -> tuple[Path, dict]:
    """The path and raw mapping of a scenario given by name (``configs/<name>.yaml``) or path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = CONFIG_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown scenario {str(name_or_path)!r}; available: {', '.join(available_scenarios())}"
        )
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_message(path, exc)) from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return path, raw


def yaml_error_message(path: str | Path, exc: yaml.YAMLError) -> str:
    """One line for a YAML parse error: ``file:line:column: not valid YAML: <problem>``."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or type(exc).__name__
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context and context != problem else str(problem)
    return f"{where}: not valid YAML: {' '.join(detail.split())}"


def parse_override(text: str) -> tuple[str, Any]:
    """Split ``key=value``; the value is parsed as YAML (numbers, lists, booleans)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r} is not of the form key=value")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {text!r} has an empty key")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
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


def to_dict(cfg: ScenarioConfig) -> dict:
    """A plain, YAML-serialisable dict of a config (tuples become lists)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Mapping):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(cfg)


# ---------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------
def _check_keys(section: str, raw: Mapping, allowed: Iterable[str]) -> None:
    allowed = list(allowed)
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise ConfigError(f"{section}: unknown key(s) {unknown}; valid keys: {sorted(allowed)}")


def _int_pair(name: str, value: Any, minimum: int = 0) -> tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ConfigError(f"{name} must be a [cpu, gpu] pair of integers, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ConfigError(f"{name} must hold integers >= {minimum}, got {value!r}")
        out.append(int(v))
    return out[0], out[1]


def _number(name: str, value: Any, lo: float | None = None, hi: float | None = None, integer: bool = False) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if integer and not (isinstance(value, int) or float(value).is_integer()):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if lo is not None and value < lo:
        raise ConfigError(f"{name} must be >= {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ConfigError(f"{name} must be <= {hi}, got {value!r}")
    return int(value) if integer else float(value)


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def _progress_spec(name: str, spec: Any) -> dict:
    """A task type's progress spec checked against its registered kind (defaults filled in)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{name} must be a mapping with a 'kind', got {spec!r}")
    kind = PROGRESS_KINDS[_choice(f"{name}.kind", spec.get("kind"), tuple(PROGRESS_KINDS))]
    _check_keys(name, spec, ("kind", *kind.params))
    out = dict(spec)
    for key, param in kind.params.items():
        value = spec.get(key) if param.required else spec.get(key, param.default)
        if param.type == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{name}.{key} {param.what}, got {value!r}")
        else:
            out[key] = _number(f"{name}.{key}", value, lo=param.lo, integer=param.type == "int")
    return out


def from_dict(raw: Mapping[str, Any]) -> ScenarioConfig:
    """Validate a raw mapping and build a :class:`ScenarioConfig`."""
    raw = copy.deepcopy(dict(raw))
    names = [f.name for f in dataclasses.fields(ScenarioConfig)]
    _check_keys("scenario", raw, names)
    for required in ("mode", "num_clusters", "capacities", "per_task_max", "arrival_rate", "num_tasks", "task_types"):
        if required not in raw:
            raise ConfigError(f"scenario: missing required key {required!r}")

    name = str(raw.get("name", "custom"))
    mode = _choice("mode", raw["mode"], MODES)
    n = _number("num_clusters", raw["num_clusters"], lo=1, hi=256, integer=True)
    caps_raw = raw["capacities"]
    if not isinstance(caps_raw, (list, tuple)) or not caps_raw:
        raise ConfigError("capacities must be a list of [cpu, gpu] pairs")
    if len(caps_raw) == 1:
        caps_raw = list(caps_raw) * n
    if len(caps_raw) != n:
        raise ConfigError(f"capacities has {len(caps_raw)} entries but num_clusters is {n} (give 1 or {n})")
    caps = tuple(_int_pair(f"capacities[{i}]", c, minimum=1) for i, c in enumerate(caps_raw))
    per_task_max = _int_pair("per_task_max", raw["per_task_max"], minimum=1)
    arrival_rate = _number("arrival_rate", raw["arrival_rate"], lo=1e-6, hi=1e4)
    num_tasks = _number("num_tasks", raw["num_tasks"], lo=1, hi=10_000_000, integer=True)
    switch = _number("switch_overhead", 1.0 if raw.get("switch_overhead") is None else raw["switch_overhead"], lo=0.0, hi=1.0)
    pending = _number("pending_slots", raw.get("pending_slots", 10), lo=1, hi=128, integer=True)
    noise = _number("progress_noise", raw.get("progress_noise", 0.0), lo=0.0, hi=10.0)
    reward = _choice("reward", raw.get("reward", "team"), REWARDS)
    max_steps = _number("max_steps", raw.get("max_steps", 20000), lo=1, integer=True)

    conn_raw = raw.get("connectivity") or {}
    if not isinstance(conn_raw, Mapping):
        raise ConfigError("connectivity must be a mapping")
    _check_keys("connectivity", conn_raw, [f.name for f in dataclasses.fields(Connectivity)])
    bw = conn_raw.get("bandwidth_range", Connectivity.bandwidth_range)
    if not isinstance(bw, (list, tuple)) or len(bw) != 2:
        raise ConfigError(f"connectivity.bandwidth_range must be [low, high], got {bw!r}")
    lo = _number("connectivity.bandwidth_range[0]", bw[0], lo=0.0)
    hi = _number("connectivity.bandwidth_range[1]", bw[1], lo=lo)
    conn = Connectivity(
        model=_choice("connectivity.model", conn_raw.get("model", "bandwidth"), CONNECTIVITY_MODELS),
        bandwidth_range=(lo, hi),
        threshold=_number("connectivity.threshold", conn_raw.get("threshold", 5.0), lo=0.0),
    )

    trace_raw = raw.get("trace") or {}
    if not isinstance(trace_raw, Mapping):
        raise ConfigError("trace must be a mapping")
    _check_keys("trace", trace_raw, [f.name for f in dataclasses.fields(TraceSource)])
    trace = TraceSource(
        params=str(trace_raw.get("params", "") or ""),
        mode=_choice("trace.mode", trace_raw.get("mode", TraceSource.mode), TRACE_MODES),
    )

    types_raw = raw["task_types"]
    if not isinstance(types_raw, (list, tuple)) or not types_raw:
        raise ConfigError("task_types must be a non-empty list")
    types = []
    for k, t in enumerate(types_raw):
        label = f"task_types[{k}]"
        if not isinstance(t, Mapping):
            raise ConfigError(f"{label} must be a mapping")
        _check_keys(label, t, [f.name for f in dataclasses.fields(TaskType)])
        for req in ("name", "prob", "min_req", "progress"):
            if req not in t:
                raise ConfigError(f"{label}: missing key {req!r}")
        types.append(
            TaskType(
                name=str(t["name"]),
                prob=_number(f"{label}.prob", t["prob"], lo=0.0, hi=1.0),
                min_req=_int_pair(f"{label}.min_req", t["min_req"], minimum=0),
                progress=_progress_spec(f"{label}.progress", t["progress"]),
            )
        )
    total = sum(t.prob for t in types)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"task_types probabilities must sum to 1, got {total:.6g}")
    if len({t.name for t in types}) != len(types):
        raise ConfigError("task_types names must be unique")
    for t in types:
        if t.min_req == (0, 0):
            raise ConfigError(f"task type {t.name!r}: min_req (0, 0) would make the void action a placement")
        if PROGRESS_KINDS[t.progress["kind"]].needs_gpu and t.min_req[1] < 1:
            raise ConfigError(
                f"task type {t.name!r}: {t.progress['kind']} progress gains nothing without a GPU; "
                f"min_req GPU must be >= 1, got {list(t.min_req)}"
            )
        fits = [
            i for i, cap in enumerate(caps)
            if all(t.min_req[r] <= min(cap[r], per_task_max[r]) for r in range(2))
        ]
        if t.prob > 0 and not fits:
            raise ConfigError(
                f"task type {t.name!r} with min_req {list(t.min_req)} fits no cluster "
                f"(capacities {[list(c) for c in caps]}, per_task_max {list(per_task_max)})"
            )

    eval_overrides = raw.get("eval_overrides") or {}
    if not isinstance(eval_overrides, Mapping):
        raise ConfigError("eval_overrides must be a mapping of dotted keys to values")

    cfg = ScenarioConfig(
        name=name, mode=mode, num_clusters=n, capacities=caps, per_task_max=per_task_max,
        arrival_rate=arrival_rate, num_tasks=num_tasks, task_types=tuple(types),
        switch_overhead=switch, pending_slots=pending, connectivity=conn, trace=trace,
        progress_noise=noise, reward=reward, max_steps=max_steps, eval_overrides=dict(eval_overrides),
    )
    if eval_overrides:
        cfg.for_evaluation()  # validate the evaluation variant eagerly
    return cfg
