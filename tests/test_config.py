"""Scenario configs: the shipped scenarios, overrides, and validation errors naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envs.config import (
    ConfigError,
    Connectivity,
    ScenarioConfig,
    TraceSource,
    apply_overrides,
    available_scenarios,
    load_scenario,
    parse_override,
    validated_scenario,
)

SCENARIOS = ["hetero-6", "multi-3", "sjf-3", "synthetic-3", "synthetic-6", "testbed-3", "testbed-6"]

# (name, mode, N, capacities, per_task_max, lambda, tasks, switch_overhead, min_req of every type)
EXPECTED = {
    "synthetic-3": ("single", 3, [(16, 16)] * 3, (16, 16), 2.0, 192, 0.5, (2, 1)),
    "synthetic-6": ("single", 6, [(16, 16)] * 6, (16, 16), 4.0, 384, 0.5, (2, 1)),
    "multi-3": ("multi", 3, [(16, 16)] * 3, (16, 16), 3.0, 192, 1.0, (2, 1)),
    "hetero-6": ("multi", 6, [(4, 4), (8, 8), (12, 12), (16, 16), (24, 24), (32, 32)], (16, 16), 6.0, 384, 1.0, (2, 1)),
    "testbed-3": ("single", 3, [(16, 8)] * 3, (16, 8), 4.0, 1000, 0.5, (2, 1)),
    "testbed-6": ("single", 6, [(16, 8)] * 6, (16, 8), 6.0, 2000, 0.5, (2, 1)),
    "sjf-3": ("multi", 3, [(16, 16)] * 3, (16, 16), 3.0, 192, 1.0, (3, 3)),
}
#: the scenarios whose recipe trains with the paper's per-cluster reward (the others: the team reward)
PER_CLUSTER_REWARD = {"synthetic-6", "testbed-6"}


def minimal(**changes) -> dict:
    """A small valid raw config; keyword arguments replace top-level keys."""
    raw = {
        "name": "tiny",
        "mode": "single",
        "num_clusters": 2,
        "capacities": [[4, 4]],
        "per_task_max": [4, 4],
        "arrival_rate": 1.0,
        "num_tasks": 10,
        "task_types": [
            {"name": "a", "prob": 0.5, "min_req": [2, 1], "progress": {"kind": "constant", "steps": 3}},
            {"name": "b", "prob": 0.5, "min_req": [1, 1], "progress": {"kind": "tanh", "scale": 16, "offset": 1.2}},
        ],
    }
    raw.update(changes)
    return raw


def error_of(fn, *args) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return str(info.value)


# ------------------------------------------------------------------ shipped scenarios
def test_all_seven_scenarios_are_listed():
    assert available_scenarios() == sorted(SCENARIOS)


def test_a_recipe_file_reads_its_base_scenario_and_lays_its_own_keys_over_it(tmp_path):
    from envs.config import split_scenario_yaml

    path = tmp_path / "family.yaml"
    path.write_text("base: hetero-6\nnum_tasks: 24\ntrain:\n  lr: 0.001\n")
    _, raw, sections = split_scenario_yaml(path)
    cfg = load_scenario(str(path))
    base = load_scenario("hetero-6")
    assert (cfg.name, cfg.num_tasks) == ("family", 24)
    assert (cfg.capacities, cfg.mode, cfg.arrival_rate) == (base.capacities, base.mode, base.arrival_rate)
    assert sections["train"] == {"lr": 0.001} and "base" not in raw
    # the shipped recipe file is a recipe on hetero-6, not a scenario of its own
    assert "generalist-synthetic" not in available_scenarios()
    assert load_scenario("generalist-synthetic").capacities == base.capacities
    # a recipe validates on its base scenario, a scenario's own file on itself
    assert validated_scenario(path) == validated_scenario("generalist-synthetic") == "hetero-6"
    assert validated_scenario("multi-3") == "multi-3"


@pytest.mark.parametrize("text, message", [
    ("base: 3\n", "must name a scenario"),
    ("base: no-such-scenario\n", "unknown scenario"),
    ("base: generalist-synthetic\n", "not a recipe file"),
])
def test_a_bad_base_is_refused_naming_it(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert message in error_of(load_scenario, str(path))


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_loads_with_the_documented_parameters(name):
    cfg = load_scenario(name)
    mode, n, caps, ptm, lam, tasks, switch, min_req = EXPECTED[name]
    assert isinstance(cfg, ScenarioConfig)
    assert cfg.name == name
    assert (cfg.mode, cfg.num_clusters, cfg.capacities, cfg.per_task_max) == (mode, n, tuple(caps), ptm)
    assert (cfg.arrival_rate, cfg.num_tasks, cfg.switch_overhead) == (lam, tasks, switch)
    assert all(t.min_req == min_req for t in cfg.task_types)
    assert sum(t.prob for t in cfg.task_types) == pytest.approx(1.0)
    assert cfg.pending_slots == 10 and cfg.progress_noise == 0.0
    assert cfg.reward == ("per_cluster" if name in PER_CLUSTER_REWARD else "team")


@pytest.mark.parametrize("name", ["synthetic-3", "synthetic-6", "multi-3", "hetero-6"])
def test_synthetic_task_types(name):
    kinds = [(t.name, t.progress["kind"]) for t in load_scenario(name).task_types]
    assert kinds == [("img", "constant"), ("lm", "tanh")]


def test_testbed_scenarios_use_the_three_trace_tasks():
    for name in ("testbed-3", "testbed-6"):
        cfg = load_scenario(name)
        assert [t.progress for t in cfg.task_types] == [
            {"kind": "trace", "task": "mnist"}, {"kind": "trace", "task": "lm"}, {"kind": "trace", "task": "audio"}
        ]
        assert cfg.trace.mode == "powerlaw"


def test_for_evaluation_of_testbed():
    cfg3 = load_scenario("testbed-3").for_evaluation()
    assert cfg3.capacities == ((32, 16),) * 3
    assert cfg3.arrival_rate == 1.5
    assert cfg3.per_task_max == (16, 8) and cfg3.num_tasks == 1000
    assert dict(cfg3.eval_overrides) == {}
    cfg6 = load_scenario("testbed-6").for_evaluation()
    assert cfg6.capacities == ((32, 16),) * 6 and cfg6.arrival_rate == 3.0


def test_for_evaluation_without_overrides_is_identity():
    cfg = load_scenario("synthetic-3")
    assert cfg.for_evaluation() is cfg


@pytest.mark.parametrize("name", SCENARIOS)
def test_yaml_round_trip(name):
    cfg = load_scenario(name)
    assert ScenarioConfig.from_dict(yaml.safe_load(cfg.to_yaml())) == cfg
    assert ScenarioConfig.from_dict(cfg.to_dict()) == cfg


def test_derived_allocation_dims():
    cfg = load_scenario("testbed-3")
    assert cfg.alloc_dims == (17, 9) and cfg.num_allocations == 153
    assert load_scenario("synthetic-3").num_allocations == 289


def test_load_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    raw = minimal()
    del raw["name"]
    path.write_text(yaml.safe_dump(raw))
    cfg = load_scenario(path)
    assert cfg.name == "mine" and cfg.capacities == ((4, 4), (4, 4))


# ------------------------------------------------------------------ overrides
def test_parse_override_parses_yaml_values():
    assert parse_override("num_tasks=50") == ("num_tasks", 50)
    assert parse_override("capacities=[[8, 8]]") == ("capacities", [[8, 8]])
    assert parse_override(" mode = multi") == ("mode", "multi")
    assert parse_override("connectivity.model=random_subset") == ("connectivity.model", "random_subset")
    assert parse_override("name=a=b") == ("name", "a=b")


def test_overrides_top_level_and_dotted():
    cfg = load_scenario(
        "synthetic-3",
        [
            "num_tasks=50",
            "capacities=[[8,8]]",
            "mode=multi",
            "connectivity.model=random_subset",
            "connectivity.threshold=3.5",
            "task_types.1.min_req=[3,2]",
            "task_types.0.progress.steps=6",
            "progress_noise=0.2",
        ],
    )
    assert cfg.num_tasks == 50 and cfg.mode == "multi"
    assert cfg.capacities == ((8, 8),) * 3
    assert cfg.connectivity.model == "random_subset" and cfg.connectivity.threshold == 3.5
    assert cfg.task_types[1].min_req == (3, 2)
    assert cfg.task_types[0].progress["steps"] == 6
    assert cfg.progress_noise == 0.2
    # the shipped file is untouched by an override
    assert load_scenario("synthetic-3").num_tasks == 192


def test_overrides_as_mapping():
    cfg = load_scenario("multi-3", {"arrival_rate": 1.25, "trace.mode": "legacy"})
    assert cfg.arrival_rate == 1.25 and cfg.trace.mode == "legacy"


def test_override_of_eval_overrides():
    cfg = load_scenario("testbed-3", ["eval_overrides.arrival_rate=2.5"])
    assert cfg.arrival_rate == 4.0
    assert cfg.for_evaluation().arrival_rate == 2.5
    assert cfg.for_evaluation().capacities == ((32, 16),) * 3


def test_apply_overrides_in_place():
    raw = minimal()
    apply_overrides(raw, ["connectivity.threshold=7", "num_tasks=3"])
    assert raw["connectivity"] == {"threshold": 7} and raw["num_tasks"] == 3


@pytest.mark.parametrize("text", ["num_tasks", "=5", "  =5"])
def test_malformed_override(text):
    assert "override" in error_of(parse_override, text)


# ------------------------------------------------------------------ validation errors
def test_unknown_scenario_lists_available():
    msg = error_of(load_scenario, "no-such-scenario")
    assert "no-such-scenario" in msg and "synthetic-3" in msg


@pytest.mark.parametrize(
    "override, field",
    [
        ("bogus=1", "bogus"),
        ("connectivity.bogus=1", "bogus"),
        ("trace.bogus=1", "bogus"),
        ("task_types.0.bogus=1", "bogus"),
        ("task_types.0.progress.bogus=1", "bogus"),
    ],
)
def test_unknown_keys_are_rejected(override, field):
    msg = error_of(load_scenario, "synthetic-3", [override])
    assert field in msg and "unknown" in msg


@pytest.mark.parametrize(
    "override, field",
    [
        ("mode=parallel", "mode"),
        ("num_clusters=0", "num_clusters"),
        ("num_clusters=2.5", "num_clusters"),
        ("capacities=[[16,16],[8,8]]", "capacities"),
        ("capacities=[[16]]", "capacities"),
        ("capacities=[[0,4]]", "capacities"),
        ("capacities=[[4.5,4]]", "capacities"),
        ("capacities=[]", "capacities"),
        ("per_task_max=[16]", "per_task_max"),
        ("per_task_max=[true,4]", "per_task_max"),
        ("arrival_rate=0", "arrival_rate"),
        ("arrival_rate=-1", "arrival_rate"),
        ("arrival_rate=fast", "arrival_rate"),
        ("num_tasks=0", "num_tasks"),
        ("num_tasks=1.5", "num_tasks"),
        ("switch_overhead=1.5", "switch_overhead"),
        ("switch_overhead=-0.1", "switch_overhead"),
        ("pending_slots=0", "pending_slots"),
        ("progress_noise=-1", "progress_noise"),
        ("reward=selfish", "reward"),
        ("max_steps=0", "max_steps"),
        ("connectivity.model=mesh", "connectivity.model"),
        ("connectivity.threshold=-1", "connectivity.threshold"),
        ("connectivity.bandwidth_range=[5]", "connectivity.bandwidth_range"),
        ("connectivity.bandwidth_range=[10,5]", "connectivity.bandwidth_range"),
        ("trace.mode=exact", "trace.mode"),
        ("task_types.0.prob=1.5", "task_types[0].prob"),
        ("task_types.0.min_req=[-1,1]", "task_types[0].min_req"),
        ("task_types.1.progress.kind=linear", "task_types[1].progress.kind"),
        ("task_types.0.progress.steps=0", "task_types[0].progress.steps"),
        ("task_types.1.progress.offset=1", "task_types[1].progress.offset"),
        ("task_types.1.progress.scale=0", "task_types[1].progress.scale"),
        ("task_types=[]", "task_types"),
    ],
)
def test_bad_values_name_the_field(override, field):
    msg = error_of(load_scenario, "synthetic-3", [override])
    assert field in msg


def test_capacity_count_must_match_num_clusters():
    # one entry broadcasts to every cluster
    assert load_scenario("synthetic-3", ["num_clusters=2"]).capacities == ((16, 16),) * 2
    msg = error_of(load_scenario, "hetero-6", ["num_clusters=3"])
    assert "capacities has 6 entries" in msg and "num_clusters is 3" in msg


@pytest.mark.parametrize("override", ["arrival_rate=.nan", "switch_overhead=.nan", "connectivity.threshold=.nan",
                                      "progress_noise=.nan"])
def test_nan_is_rejected(override):
    msg = error_of(load_scenario, "synthetic-3", [override])
    assert override.split("=")[0] in msg


def test_bad_override_paths_are_config_errors():
    assert "not a nested section" in error_of(load_scenario, "synthetic-3", ["name.x=1"])
    assert "bad list index" in error_of(load_scenario, "synthetic-3", ["task_types.foo=1"])
    assert "bad list index" in error_of(load_scenario, "synthetic-3", ["capacities.9=[1,1]"])


@pytest.mark.parametrize("override", ["task_types.5.prob=1", "task_types.foo.x=1", "capacities.0.0.1=3"])
def test_bad_list_paths_inside_a_dotted_key(override):
    assert override.split(".")[0] in error_of(load_scenario, "synthetic-3", [override])


def test_missing_required_key():
    raw = minimal()
    del raw["arrival_rate"]
    assert "arrival_rate" in error_of(ScenarioConfig.from_dict, raw)


def test_missing_task_type_key():
    raw = minimal()
    del raw["task_types"][0]["min_req"]
    assert "task_types[0]" in error_of(ScenarioConfig.from_dict, raw) and "min_req" in error_of(ScenarioConfig.from_dict, raw)


def test_probabilities_must_sum_to_one():
    msg = error_of(load_scenario, "synthetic-3", ["task_types.0.prob=0.4"])
    assert "probabilities" in msg and "0.9" in msg
    msg = error_of(load_scenario, "synthetic-3", ["task_types.0.prob=0.7"])
    assert "probabilities" in msg and "1.2" in msg


def test_duplicate_type_names():
    assert "unique" in error_of(load_scenario, "synthetic-3", ["task_types.1.name=img"])


def test_task_type_that_fits_no_cluster_names_the_type():
    msg = error_of(load_scenario, "synthetic-3", ["task_types.1.min_req=[17,1]"])
    assert "'lm'" in msg and "fits no cluster" in msg
    # fits the cluster but not the per-task maximum
    msg = error_of(load_scenario, "testbed-3", ["task_types.0.min_req=[2,9]", "capacities=[[32,16]]"])
    assert "'mnist'" in msg and "fits no cluster" in msg
    # heterogeneous: fits only the largest cluster -> valid
    cfg = load_scenario("hetero-6", ["task_types.0.min_req=[16,16]"])
    assert cfg.task_types[0].min_req == (16, 16)
    # a type that can never arrive (prob 0) need not fit
    cfg = load_scenario("synthetic-3", ["task_types.0.prob=0", "task_types.1.prob=1", "task_types.0.min_req=[99,99]"])
    assert cfg.task_types[0].min_req == (99, 99)


def test_min_req_zero_zero_is_rejected():
    msg = error_of(load_scenario, "synthetic-3", ["task_types.0.min_req=[0,0]"])
    assert "'img'" in msg and "min_req" in msg


def test_tanh_type_needs_a_gpu_at_its_minimum():
    msg = error_of(load_scenario, "synthetic-3", ["task_types.1.min_req=[2,0]"])
    assert "'lm'" in msg


def test_bad_eval_overrides_are_caught_at_load_time():
    msg = error_of(load_scenario, "testbed-3", ["eval_overrides.bogus=1"])
    assert "bogus" in msg
    msg = error_of(load_scenario, "testbed-3", ["eval_overrides.arrival_rate=-2"])
    assert "arrival_rate" in msg
    assert "eval_overrides" in error_of(load_scenario, "synthetic-3", ["eval_overrides=[1]"])


def test_not_a_mapping_sections():
    assert "connectivity" in error_of(load_scenario, "synthetic-3", ["connectivity=[1]"])
    assert "trace" in error_of(load_scenario, "synthetic-3", ["trace=3"])
    assert "task_types[0]" in error_of(load_scenario, "synthetic-3", ["task_types.0=5"])
    assert "task_types[0].progress" in error_of(load_scenario, "synthetic-3", ["task_types.0.progress=3"])


def test_bad_yaml_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("mode: [single\n")
    assert "not valid YAML" in error_of(load_scenario, path)
    path.write_text("- 1\n- 2\n")
    assert "mapping" in error_of(load_scenario, path)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ------------------------------------------------------------------ the scenario as a declared config section
# (envs/config_section.py: the same mechanism as PolicyConfig and TrainConfig)
@pytest.mark.parametrize(
    "field, bad, says",
    [
        ("mode", "parallel", "must be one of ['single', 'multi'], got 'parallel'"),
        ("mode", 1, "must be str, got 1"),
        ("num_clusters", 0, "must be in [1, 256], got 0"),
        ("num_clusters", 257, "must be in [1, 256], got 257"),
        ("num_clusters", 2.5, "must be int, got 2.5"),
        ("num_clusters", "three", "must be int, got 'three'"),
        ("arrival_rate", 0, "must be in [1e-06, 10000.0], got 0.0"),
        ("arrival_rate", 1e5, "must be in [1e-06, 10000.0], got 100000.0"),
        ("arrival_rate", float("nan"), "must be in [1e-06, 10000.0], got nan"),
        ("arrival_rate", "fast", "must be float, got 'fast'"),
        ("arrival_rate", True, "must be float, got True"),
        ("num_tasks", 0, "must be in [1, 10000000], got 0"),
        ("num_tasks", 1.5, "must be int, got 1.5"),
        ("switch_overhead", 1.5, "must be in [0.0, 1.0], got 1.5"),
        ("switch_overhead", -0.1, "must be in [0.0, 1.0], got -0.1"),
        ("switch_overhead", "none", "must be float, got 'none'"),
        ("pending_slots", 0, "must be in [1, 128], got 0"),
        ("pending_slots", 129, "must be in [1, 128], got 129"),
        ("pending_slots", [10], "must be int, got [10]"),
        ("progress_noise", -1, "must be in [0.0, 10.0], got -1.0"),
        ("progress_noise", 11, "must be in [0.0, 10.0], got 11.0"),
        ("reward", "selfish", "must be one of ['team', 'per_cluster'], got 'selfish'"),
        ("reward", None, "must not be null"),
        ("max_steps", 0, "must be >= 1, got 0"),
        ("max_steps", float("inf"), "must be int, got inf"),
        ("per_task_max", [0, 4], "must hold values >= 1, got (0, 4)"),
        ("per_task_max", [4], "must be [int, int], got [4]"),
        ("name", 7, "must be str, got 7"),
    ],
)
def test_scenario_scalar_fields_are_checked_as_declared(field, bad, says):
    assert error_of(ScenarioConfig.from_dict, minimal(**{field: bad})) == f"scenario.{field} {says}"


@pytest.mark.parametrize(
    "section, field, bad, wording",
    [
        ("connectivity", "model", "mesh", "must be one of ['bandwidth', 'random_subset']"),
        ("connectivity", "threshold", -1, "must be finite and >= 0.0"),
        ("connectivity", "threshold", float("inf"), "must be finite and >= 0.0"),
        ("connectivity", "threshold", "high", "must be float"),
        ("connectivity", "bandwidth_range", [5], "must be [float, float]"),
        ("connectivity", "bandwidth_range", [10, 5], "low <= high"),
        ("connectivity", "bandwidth_range", [-1, 5], "must hold values finite and >= 0.0"),
        ("trace", "mode", "exact", "must be one of"),
        ("trace", "params", 5, "must be str"),
    ],
)
def test_scenario_sub_sections_are_checked_as_declared(section, field, bad, wording):
    msg = error_of(ScenarioConfig.from_dict, minimal(**{section: {field: bad}}))
    assert msg.startswith(f"scenario.{section}.{field}") and wording in msg


@pytest.mark.parametrize("section", [None, "connectivity", "trace"])
def test_scenario_unknown_keys_name_the_section_and_the_valid_keys(section):
    raw = minimal(bogus=1) if section is None else minimal(**{section: {"bogus": 1}})
    msg = error_of(ScenarioConfig.from_dict, raw)
    prefix = "scenario" if section is None else f"scenario.{section}"
    assert msg.startswith(f"unknown {prefix} key 'bogus'; valid keys: ")


def test_task_type_entries_are_checked_as_declared_under_their_index():
    types = minimal()["task_types"]
    msg = error_of(ScenarioConfig.from_dict, minimal(task_types=[types[0], dict(types[1], prob="half")]))
    assert msg == "scenario.task_types[1].prob must be float, got 'half'"
    msg = error_of(ScenarioConfig.from_dict, minimal(task_types=[types[0], dict(types[1], min_req=[2, -1])]))
    assert msg == "scenario.task_types[1].min_req must hold values >= 0, got (2, -1)"
    no_name = dict(types[0])
    del no_name["name"]
    msg = error_of(ScenarioConfig.from_dict, minimal(task_types=[no_name, types[1]]))
    assert msg == "missing required scenario.task_types[0] key 'name'"


def test_scenario_defaults_come_from_the_dataclass():
    import dataclasses

    cfg = ScenarioConfig.from_dict(minimal())
    defaults = {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(ScenarioConfig)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    assert set(defaults) == {"name", "switch_overhead", "pending_slots", "connectivity", "trace", "progress_noise",
                             "reward", "max_steps", "max_start_slowdown", "eval_overrides"}
    raw = minimal()
    del raw["name"]
    cfg = ScenarioConfig.from_dict(raw)
    for name, default in defaults.items():
        assert getattr(cfg, name) == default, name
    assert cfg.pending_slots == ScenarioConfig.pending_slots and cfg.max_steps == ScenarioConfig.max_steps
    assert cfg.connectivity.threshold == Connectivity.threshold and cfg.trace == TraceSource()
    # a null section or switch_overhead (an empty YAML value) reads as "not given"
    nulls = ScenarioConfig.from_dict(minimal(connectivity=None, trace=None, switch_overhead=None, eval_overrides=None))
    assert nulls == ScenarioConfig.from_dict(minimal())
    assert ScenarioConfig.from_dict(minimal(trace={"params": None})).trace.params == TraceSource.params
    # every other field needs a value: null is no default there
    assert error_of(ScenarioConfig.from_dict, minimal(pending_slots=None)) == "scenario.pending_slots must not be null"


@pytest.mark.parametrize("key", ["mode", "num_clusters", "capacities", "per_task_max", "arrival_rate", "num_tasks",
                                 "task_types"])
def test_fields_without_a_default_are_required(key):
    raw = minimal()
    del raw[key]
    assert error_of(ScenarioConfig.from_dict, raw) == f"missing required scenario key {key!r}"


def test_scenario_values_are_typed_like_the_other_sections():
    cfg = ScenarioConfig.from_dict(minimal(num_clusters=2.0, arrival_rate=3e-1, pending_slots=12.0, capacities=[[4.0, 4]],
                            connectivity={"threshold": 7, "bandwidth_range": [2, 9]}))
    assert cfg.num_clusters == 2 and isinstance(cfg.num_clusters, int)
    assert cfg.arrival_rate == 0.3 and cfg.pending_slots == 12
    assert cfg.capacities == ((4, 4), (4, 4)) and all(type(v) is int for c in cfg.capacities for v in c)
    assert cfg.connectivity.threshold == 7.0 and isinstance(cfg.connectivity.threshold, float)
    assert cfg.connectivity.bandwidth_range == (2.0, 9.0)


def test_scalar_checks_run_before_the_structure_is_built():
    # a huge num_clusters is refused before one capacity entry would be broadcast to it
    assert error_of(ScenarioConfig.from_dict, minimal(num_clusters=10**12)).startswith("scenario.num_clusters must be in [1, 256]")
    assert error_of(ScenarioConfig.from_dict, minimal(num_clusters=0)).startswith("scenario.num_clusters must be in [1, 256]")


def test_scenario_is_a_config_section_validated_on_construction():
    from envs.config_section import ConfigSection

    assert issubclass(ScenarioConfig, ConfigSection) and ScenarioConfig.SECTION == "scenario"
    assert issubclass(Connectivity, ConfigSection) and issubclass(TraceSource, ConfigSection)
    cfg = load_scenario("synthetic-3")
    assert ScenarioConfig.from_dict(cfg.to_dict()) == cfg
    assert isinstance(cfg.to_dict()["capacities"], list)  # plain: tuples become lists, unlike the sections'
    fields = {**{f: getattr(cfg, f) for f in ("mode", "num_clusters", "capacities", "per_task_max", "num_tasks",
                                                "task_types")}, "arrival_rate": -1.0}
    with pytest.raises(ConfigError, match=r"scenario\.arrival_rate must be in"):
        ScenarioConfig(**fields)
    with pytest.raises(ConfigError, match=r"scenario\.connectivity\.model must be one of"):
        Connectivity(model="mesh")


def test_envs_config_modules_import_nothing_above_envs():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for rel in ("envs/config.py", "envs/config_section.py", "envs/config_yaml.py"):
        tree = ast.parse((root / rel).read_text())
        modules = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0]
        modules += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        assert not [m for m in modules if m.split(".")[0] in ("agents", "networks", "train", "evaluate")], rel
    assert not (root / "agents" / "config_section.py").exists()


# ------------------------------------------------------------------ reading a config file (F3, F4, F6)
SJF = Path(__file__).resolve().parents[1] / "configs" / "sjf-3.yaml"


def edited_sjf(tmp_path, old: str, new: str, name: str = "edited.yaml"):
    """configs/sjf-3.yaml with its first ``old`` replaced by ``new``, written to ``tmp_path/name``."""
    text = SJF.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def test_a_config_file_that_is_not_utf8_is_one_line_naming_the_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(SJF.read_text().replace("# Paper", "# Caf\u00e9 Paper").encode("latin-1"))
    msg = error_of(load_scenario, path)
    assert msg == f"{path}:1:6: not UTF-8 text (byte 0xe9); save the file as UTF-8"
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes(SJF.read_text().encode("utf-16"))  # with its byte-order mark
    assert "not UTF-8 text (byte 0xff)" in error_of(load_scenario, utf16)
    # UTF-8 with a byte-order mark, and UTF-8 beyond ASCII, are read
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + SJF.read_text().replace("# Paper", "# Caf\u00e9 Paper").encode("utf-8"))
    assert load_scenario(bom).num_tasks == 192


def test_a_control_character_is_placed_by_line_and_column(tmp_path):
    path = edited_sjf(tmp_path, "mode: multi", "mode: mul\x07ti")
    assert error_of(load_scenario, path) == (f"{path}:2:10: not valid YAML: unacceptable character #x0007 "
                                             "(special characters are not allowed)")


@pytest.mark.parametrize("old, new, line, says", [
    ("num_tasks: 192", "num_tasks: 192\nnum_tasks: 50", 8, "duplicate key 'num_tasks' at the top level (first at line 7, column 1)"),
    ("  lr: 3.0e-4", "  lr: 3.0e-4\n  lr: 1.0e-3", 32, "duplicate key 'lr' in the 'train' section (first at line 31, column 3)"),
    ("policy:\n  hidden: 64", "policy:\n  hidden: 64\n  hidden: 32", 25, "duplicate key 'hidden' in the 'policy' section"),
    ("    lr: 1.0e-3", "    lr: 1.0e-3\n    lr: 1.0e-2", 50, "duplicate key 'lr' in the 'quick.train' section"),
    ("{kind: constant, steps: 1}", "{kind: constant, steps: 1, steps: 2}", 13,
     "duplicate key 'steps' in the 'task_types[0].progress' section (first at line 13, column 32)"),
    ("  - name: long\n", "  - name: long\n    prob: 0.5\n", 16, "duplicate key 'prob' in the 'task_types[1]' section"),
    ("train:\n", "train:\n  steps: 1\ntrain:\n", 27, "duplicate key 'train' at the top level"),
])
def test_a_key_given_twice_is_refused_at_any_level(tmp_path, old, new, line, says):
    """PyYAML keeps the last value of a duplicated key silently; the config loader refuses it, naming
    the key, its section and both places."""
    path = edited_sjf(tmp_path, old, new)
    msg = error_of(load_scenario, path)
    assert msg.startswith(f"{path}:{line}:") and says in msg and msg.endswith("give each key once"), msg
    assert "\n" not in msg


def test_a_key_given_twice_in_an_override_value_is_refused():
    msg = error_of(parse_override, "eval_overrides={arrival_rate: 1, arrival_rate: 2}")
    assert msg.startswith("override 'eval_overrides={arrival_rate: 1, arrival_rate: 2}': duplicate key 'arrival_rate'")


def test_keys_merged_from_an_anchor_are_no_duplicates(tmp_path):
    from envs.config_yaml import load_config_text

    doc = load_config_text("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  x: 3\n")
    assert doc["other"] == {"x": 3, "y": 2}


def test_unquoted_exponents_are_numbers_and_quoted_numbers_are_strings():
    """YAML 1.1 (PyYAML) reads 3e-4 and 1.0e5 as text; the config loader reads them as YAML 1.2 does.
    A quoted scalar stays a string, in a file and in a key=value override alike."""
    from envs.config_yaml import load_config_text

    doc = load_config_text("a: 3e-4\nb: 1e5\nc: 1.0e5\nd: -2.5E+3\ne: .5e-3\nf: 3.0e-4\ng: '3e-4'\nh: \"16\"\n"
                           "i: 16\nj: e5\nk: 1e\nl: 3e-4x\n")
    assert doc == {"a": 3e-4, "b": 1e5, "c": 1e5, "d": -2500.0, "e": 5e-4, "f": 3e-4, "g": "3e-4", "h": "16",
                   "i": 16, "j": "e5", "k": "1e", "l": "3e-4x"}
    assert [type(doc[k]) for k in "abcdef"] == [float] * 6
    assert parse_override("train.lr=3e-4") == ("train.lr", 3e-4)
    assert parse_override("num_tasks=1e3") == ("num_tasks", 1000.0)
    assert parse_override('num_tasks="16"') == ("num_tasks", "16")
    assert load_scenario("sjf-3", ["num_tasks=1e3"]).num_tasks == 1000


@pytest.mark.parametrize("old, new, says", [
    ("capacities: [[16, 16]]", 'capacities: [["16", 16]]', "scenario.capacities[0][0] must be int, got '16'"),
    ("num_tasks: 192", 'num_tasks: "192"', "scenario.num_tasks must be int, got '192'"),
    ("arrival_rate: 3", "arrival_rate: '3e-1'", "scenario.arrival_rate must be float, got '3e-1'"),
    ("prob: 0.5", 'prob: "0.5"', "scenario.task_types[0].prob must be float, got '0.5'"),
    ("steps: 1}", 'steps: "1"}', "scenario.task_types[0].progress.steps must be int, got '1'"),
])
def test_a_quoted_number_in_a_config_file_is_refused(tmp_path, old, new, says):
    msg = error_of(load_scenario, edited_sjf(tmp_path, old, new))
    assert msg.startswith(says) and "a quoted string is not a number" in msg, msg


def test_a_quoted_number_is_refused_like_a_bool(tmp_path):
    """The rule: every number is the type its key declares; true is no int and "16" is no int."""
    assert "must be int, got True" in error_of(load_scenario, edited_sjf(tmp_path, "num_tasks: 192", "num_tasks: true"))
    assert "must be int, got '16'" in error_of(load_scenario, "sjf-3", ['num_tasks="16"'])
    assert error_of(ScenarioConfig.from_dict, minimal(pending_slots="12")).startswith(
        "scenario.pending_slots must be int, got '12': a quoted string is not a number")


def test_unquoted_exponents_in_a_config_file_are_numbers(tmp_path):
    from agents.training.prepare import prepare_run

    path = edited_sjf(tmp_path, "  lr: 3.0e-4", "  lr: 3e-4")
    path.write_text(path.read_text().replace("arrival_rate: 3", "arrival_rate: 3e0").replace("num_tasks: 192", "num_tasks: 1.92e2"))
    spec = prepare_run(str(path))
    assert spec.train.lr == 3e-4 and spec.scenario.arrival_rate == 3.0 and spec.scenario.num_tasks == 192
    quoted = edited_sjf(tmp_path, "  lr: 3.0e-4", "  lr: '3e-4'", "quoted.yaml")
    with pytest.raises(ConfigError, match=r"train\.lr must be float, got '3e-4': a quoted string is not a number"):
        prepare_run(str(quoted))


def test_a_dumped_scenario_reads_back_as_it_was(tmp_path):
    """A string that reads like a number (a task type named 1e5) is written in quotes."""
    raw = minimal()
    raw["task_types"][0]["name"] = "1e5"
    cfg = ScenarioConfig.from_dict(raw)
    path = tmp_path / "dumped.yaml"
    path.write_text(cfg.to_yaml())
    assert load_scenario(path) == cfg
