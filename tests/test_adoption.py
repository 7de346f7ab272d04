"""Adopting a tuning candidate: the YAML edited in place, the runs moved, everything checked first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agents.evaluation.adoption import apply_adoption, plan_adoption
from agents.evaluation.seed_runs import CONFIG_FILE, RESULT_FILE, SeedRun, recipe_differences
from agents.evaluation.tuning import Candidate, parse_candidate
from agents.training.prepare import prepare_run, resolved_config
from agents.training.recipe_file import set_recipe_values
from envs.config import ConfigError
from test_recipes import TINY_SCENARIO  # tests/ is on sys.path (pytest rootdir insertion)

RECIPE = "# a small scenario" + TINY_SCENARIO + """
# the recipe
policy:
  hidden: 16
train:
  steps: 128            # two evaluation intervals
  envs: 2
  lr: 3.0e-4            # the old rate

# a closing comment
"""


def test_a_value_is_replaced_in_place_and_every_other_line_kept():
    text, dropped = set_recipe_values(RECIPE, {("train", "lr"): 0.0006})
    old, new = RECIPE.splitlines(), text.splitlines()
    assert [i for i, (a, b) in enumerate(zip(old, new)) if a != b] == [old.index("  lr: 3.0e-4            # the old rate")]
    assert "  lr: 0.0006" in new and len(old) == len(new)
    assert dropped == ["train.lr: the old rate"]


def test_a_missing_key_goes_to_the_end_of_its_section_and_a_missing_section_is_added():
    text, dropped = set_recipe_values(RECIPE.replace("policy:\n  hidden: 16\n", ""),
                                      {("train", "ent_coef"): 0.01, ("policy", "shared_actors"): False})
    lines = text.splitlines()
    assert lines[lines.index("  lr: 3.0e-4            # the old rate") + 1] == "  ent_coef: 0.01"
    assert lines[-2:] == ["policy:", "  shared_actors: false"] and dropped == []
    doc = yaml.safe_load(text)
    assert doc["train"]["ent_coef"] == 0.01 and doc["policy"] == {"shared_actors": False}


def test_a_flow_style_section_or_a_scenario_key_is_refused():
    with pytest.raises(ConfigError, match="flow style"):
        set_recipe_values("train: {steps: 128}\n", {("train", "lr"): 0.1})
    with pytest.raises(ConfigError, match="only the policy and train sections"):
        set_recipe_values(RECIPE, {("scenario", "arrival_rate"): 3})


def test_a_learning_key_of_the_scenario_is_a_top_level_line_added_before_the_recipe_or_replaced():
    text, dropped = set_recipe_values(RECIPE, {("scenario", "reward"): "per_cluster"})
    old, new = RECIPE.splitlines(), text.splitlines()
    at = new.index("reward: per_cluster")
    assert new[:at] + new[at + 1:] == old and dropped == []
    assert new[at - 1].startswith("  - {name: lm") and new[at + 1:at + 3] == ["", "# the recipe"]
    assert yaml.safe_load(text)["reward"] == "per_cluster"
    assert prepare_run_text(text).scenario.reward == "per_cluster"
    again, dropped = set_recipe_values(text.replace("reward: per_cluster", "reward: per_cluster   # the paper's"),
                                       {("scenario", "reward"): "team"})
    assert again.splitlines() == [("reward: team" if i == at else line) for i, line in enumerate(new)]
    assert dropped == ["scenario.reward: the paper's"]
    with pytest.raises(ConfigError, match="written 2 times"):
        set_recipe_values(text + "reward: team\n", {("scenario", "reward"): "team"})


def prepare_run_text(text: str):
    """The run spec of a scenario YAML given as text."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe-3.yaml"
        path.write_text(text)
        return prepare_run(str(path))


def _run(root: Path, config: Path, overrides: tuple[str, ...], seed: int, done: bool = True) -> Path:
    """A run directory as train.py leaves it: its resolved config.yaml, its result.json, a log beside it."""
    spec = prepare_run(str(config), list(overrides), flags={"seed": seed})
    root.mkdir(parents=True)
    (root / CONFIG_FILE).write_text(yaml.safe_dump(resolved_config(spec), sort_keys=False))
    (root / RESULT_FILE).write_text(json.dumps({"finished": done}))
    root.with_name(root.name + ".log").write_text("trained\n")
    return root


@pytest.fixture
def tuned(tmp_path):
    config = tmp_path / "tiny-3.yaml"
    config.write_text(RECIPE)
    runs, recipe_runs = tmp_path / "tuning", tmp_path / "reproduce"
    cand = parse_candidate("fast:train.lr=0.0006,policy.shared_actors=false")
    for seed in (0, 1):
        _run(recipe_runs / "tiny-3" / f"s{seed}", config, (), seed)
        _run(runs / "tiny-3" / "fast" / f"s{seed}", config, cand.overrides, seed)
    return config, cand, runs, recipe_runs


def test_adopting_moves_the_runs_and_the_file_resolves_to_the_candidate(tuned):
    config, cand, runs, recipe_runs = tuned
    recipe_config = (recipe_runs / "tiny-3" / "s0" / CONFIG_FILE).read_text()
    cand_config = (runs / "tiny-3" / "fast" / "s1" / CONFIG_FILE).read_text()
    plan = plan_adoption(str(config), cand, "slow", runs, recipe_runs)
    assert config.read_text() == RECIPE  # planning changes nothing
    assert plan.restore == Candidate("slow", ("policy.shared_actors=true", "train.lr=0.0003"))
    assert apply_adoption(plan) == []
    # the candidate's seeds are the recipe's now, the old recipe's are kept as the candidate "slow"
    assert (recipe_runs / "tiny-3" / "s1" / CONFIG_FILE).read_text() == cand_config
    assert (runs / "tiny-3" / "slow" / "s0" / CONFIG_FILE).read_text() == recipe_config
    assert (runs / "tiny-3" / "slow" / "s0.log").is_file() and (recipe_runs / "tiny-3" / "s0.log").is_file()
    assert not (runs / "tiny-3" / "fast").exists() or not any((runs / "tiny-3" / "fast").iterdir())
    for seed in (0, 1):
        assert recipe_differences(SeedRun("", str(config), seed, recipe_runs / "tiny-3" / f"s{seed}")) == []
        kept = runs / "tiny-3" / "slow" / f"s{seed}"
        assert recipe_differences(SeedRun("", str(config), seed, kept, plan.restore.overrides)) == []
        assert recipe_differences(SeedRun("", str(config), seed, kept))  # the old recipe is another recipe now
    doc = yaml.safe_load(config.read_text())
    assert doc["train"]["lr"] == 0.0006 and doc["policy"]["shared_actors"] is False
    assert "# a closing comment" in config.read_text()


def test_a_reward_candidate_is_adopted_and_its_restore_brings_the_team_reward_back(tuned):
    config, _, runs, recipe_runs = tuned
    cand = parse_candidate("percluster:reward=per_cluster,train.lr=0.0006")
    for seed in (0, 1):
        _run(runs / "tiny-3" / "percluster" / f"s{seed}", config, cand.overrides, seed)
    plan = plan_adoption(str(config), cand, "team", runs, recipe_runs)
    assert plan.values == {"scenario.reward": "per_cluster", "train.lr": 0.0006}
    assert plan.restore == Candidate("team", ("scenario.reward=team", "train.lr=0.0003"))
    assert apply_adoption(plan) == []
    assert prepare_run(str(config)).scenario.reward == "per_cluster"
    for seed in (0, 1):
        assert recipe_differences(SeedRun("", str(config), seed, recipe_runs / "tiny-3" / f"s{seed}")) == []
        kept = runs / "tiny-3" / "team" / f"s{seed}"
        assert recipe_differences(SeedRun("", str(config), seed, kept, plan.restore.overrides)) == []
        assert "scenario.reward: run 'team', recipe 'per_cluster'" in recipe_differences(
            SeedRun("", str(config), seed, kept))


@pytest.mark.parametrize("why", ["unfinished", "old name taken", "scenario change", "no change", "no runs"])
def test_a_candidate_that_cannot_be_adopted_is_refused_before_anything_changes(tuned, why):
    config, cand, runs, recipe_runs = tuned
    old = "slow"
    if why == "unfinished":
        (runs / "tiny-3" / "fast" / "s1" / RESULT_FILE).write_text(json.dumps({"finished": False}))
        match = "s1 has not finished"
    elif why == "old name taken":
        (runs / "tiny-3" / "slow").mkdir()
        match = "exists; choose another name"
    elif why == "scenario change":
        cand = parse_candidate("busy:arrival_rate=3,reward=per_cluster")
        match = r"changes the scenario \(arrival_rate\)"
    elif why == "no change":
        cand = parse_candidate("same:train.lr=0.0003")
        match = "already has that value"
    else:
        cand = parse_candidate("other:train.lr=0.001")
        match = "no seeds in"
    before = sorted(str(p) for p in config.parent.rglob("*"))
    with pytest.raises(ConfigError, match=match):
        plan_adoption(str(config), cand, old, runs, recipe_runs)
    assert config.read_text() == RECIPE and sorted(str(p) for p in config.parent.rglob("*")) == before


def test_the_command_line_dry_run_prints_the_plan_and_changes_nothing(tuned, capsys):
    import importlib.util

    config, _, runs, recipe_runs = tuned
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "adopt.py"
    module_spec = importlib.util.spec_from_file_location("adopt_cli", path)
    adopt = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(adopt)
    argv = ["--config", str(config), "--candidate", "fast:train.lr=0.0006,policy.shared_actors=false",
            "--old-name", "slow", "--runs", str(runs), "--recipe-runs", str(recipe_runs)]
    assert adopt.main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing changed" in out and f"move {runs / 'tiny-3' / 'fast' / 's0'}" in out
    assert "--candidate slow:policy.shared_actors=true,train.lr=0.0003 --seeds 2 --restart" in out
    assert f"python benchmarks/reproduce.py --config {config} --seeds 2 --restart" in out
    assert config.read_text() == RECIPE and (runs / "tiny-3" / "fast" / "s0").is_dir()
    assert adopt.main(argv) == 0 and "adopted; now run:" in capsys.readouterr().out
    assert adopt.main(argv) == 2  # done once: the candidate's runs have moved


def test_a_family_recipe_file_is_finished_by_its_family_page(tmp_path):
    from agents.evaluation.adoption import AdoptionPlan

    recipe = tmp_path / "family.yaml"
    recipe.write_text("base: tiny-3\ntrain:\n  lr: 3.0e-4\n")
    plan = AdoptionPlan(config=str(recipe), yaml_path=recipe, new_text="", dropped_comments=[], values={},
                        restore=Candidate("old", ("train.scenario_reward=null",)), seeds=[0])
    tune, page = plan.follow_up()
    assert tune.endswith("--candidate old:train.scenario_reward=null --seeds 1 --restart")
    assert page == f"python benchmarks/generalist.py --config {recipe} --seeds 1 --restart"
