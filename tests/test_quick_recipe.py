"""A first run a new user can watch (issue 58): every scenario YAML carries a quick recipe (its ``quick:``
section, laid over the full recipe by ``train.py --quick``) sized to train in minutes on a laptop CPU and
to validate several times on the way; ``--print-config --quick`` shows it resolved."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import train as train_cli
from agents.training.prepare import prepare_run, resolved_config
from agents.training.recipe_file import quick_arguments
from envs.config import QUICK_SECTION, ConfigError, available_scenarios, load_scenario, quick_recipe

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = available_scenarios()
#: the quick recipe's size, what keeps it within minutes on 2 CPU cores: env steps, training envs,
#: validation workloads, torch threads (the timing itself is measured by hand, not tested)
MAX_STEPS = 98_304
MAX_ENVS = 16
MAX_EVAL_EPISODES = 8
#: validations a quick run makes at least (tianshou validates once before training, then after each interval)
MIN_VALIDATIONS = 4


def quick_spec(name: str, overrides=(), flags=None):
    """The resolved run of ``train.py --config <name> --quick`` (with ``flags`` and ``overrides``)."""
    flags, overrides = quick_arguments(name, flags or {}, overrides)
    return prepare_run(name, overrides, flags=flags)


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_has_a_quick_recipe_of_a_few_minutes_that_validates_often(name):
    quick = quick_recipe(name)
    spec = quick_spec(name)
    t = spec.train
    for key, value in quick["train"].items():  # every quick key is a real field and lands as written
        assert getattr(t, key) == value, key
    planned = t.planned_env_steps()
    _, interval, intervals = t.interval_plan()
    assert planned <= MAX_STEPS and t.envs <= MAX_ENVS and t.eval_episodes <= MAX_EVAL_EPISODES
    assert t.torch_threads == 1
    assert 1 + intervals >= MIN_VALIDATIONS and interval == t.eval_every
    # the same method and validation workloads as the full recipe: only the budget and its knobs change
    full = prepare_run(name)
    assert spec.scenario == full.scenario and spec.policy == full.policy
    assert (t.eval_seed, t.eval_scenario, t.train_scenario, t.eval_action) == (
        full.train.eval_seed, full.train.eval_scenario, full.train.train_scenario, full.train.eval_action)
    assert t.imitate is None
    assert planned < full.train.planned_env_steps()


@pytest.mark.parametrize("name", ["synthetic-3", "testbed-6"])
def test_print_config_quick_shows_the_quick_recipe_resolved(name, tmp_path, capsys):
    argv = ["--config", name, "--quick", "--print-config", "--logdir", str(tmp_path)]
    assert train_cli.main(argv) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    resolved = resolved_config(quick_spec(name, flags={"logdir": str(tmp_path), "progress": False}))
    assert doc == yaml.safe_load(yaml.safe_dump(resolved))  # YAML writes tuple fields as lists
    for key, value in quick_recipe(name)["train"].items():
        assert doc["train"][key] == value, key
    assert train_cli.main(["--config", name, "--print-config", "--logdir", str(tmp_path)]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["train"]["steps"] == prepare_run(name).train.steps
    assert not any(tmp_path.iterdir())  # no run directory


def test_flags_and_overrides_beat_the_quick_recipe(tmp_path):
    path = tmp_path / "mine.yaml"
    text = (ROOT / "configs" / "synthetic-3.yaml").read_text()
    path.write_text(text.replace(f"{QUICK_SECTION}:\n", f"{QUICK_SECTION}:\n  policy:\n    hidden: 32\n", 1))
    spec = quick_spec(str(path))
    quick = quick_recipe(str(path))
    assert spec.policy.hidden == 32 and spec.train.steps == quick["train"]["steps"]
    spec = quick_spec(str(path), ["policy.hidden=16", "train.lr=3e-4"], flags={"steps": 32768, "envs": None})
    assert spec.policy.hidden == 16 and spec.train.lr == 3e-4 and spec.train.steps == 32768
    assert spec.train.envs == quick["train"]["envs"]  # a flag left unset keeps the quick value


def test_a_quick_section_is_not_the_scenario_and_is_checked(tmp_path):
    text = (ROOT / "configs" / "synthetic-3.yaml").read_text()
    assert load_scenario("synthetic-3") == load_scenario(ROOT / "configs" / "synthetic-3.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace(f"{QUICK_SECTION}:\n", f"{QUICK_SECTION}:\n  trian:\n    lr: 1\n", 1))
    with pytest.raises(ConfigError, match="unknown quick section.*'trian'"):
        load_scenario(bad)
    bad.write_text(text.replace(f"{QUICK_SECTION}:\n  train:\n", f"{QUICK_SECTION}:\n  train: 3\n  old:\n", 1))
    with pytest.raises(ConfigError, match="'quick.train' section must be a mapping"):
        quick_recipe(bad)
    none = tmp_path / "none.yaml"
    none.write_text(text[:text.index(f"\n{QUICK_SECTION}:")])
    assert load_scenario(none).num_tasks == load_scenario("synthetic-3").num_tasks
    with pytest.raises(ConfigError, match="has no quick recipe"):
        quick_recipe(none)


def test_quick_needs_a_scenario_and_bad_quick_input_exits_2(tmp_path, capsys):
    assert train_cli.main(["--quick", "--print-config"]) == 2
    assert "--quick needs --config" in capsys.readouterr().err
    none = tmp_path / "none.yaml"
    text = (ROOT / "configs" / "synthetic-3.yaml").read_text()
    none.write_text(text[:text.index(f"\n{QUICK_SECTION}:")])
    assert train_cli.main(["--config", str(none), "--quick", "--print-config"]) == 2
    assert "has no quick recipe" in capsys.readouterr().err


def test_the_makefile_demo_and_the_readme_use_the_quick_recipe():
    demo = (ROOT / "Makefile").read_text().split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "train.py --config synthetic-3 --quick" in demo
    quick_start = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "python train.py --config synthetic-3 --quick" in quick_start
