"""Messages a new user reads (issue 58): a scenario file that does not exist is named as a missing file,
and an override key in the wrong section (or nearly a field's name) is answered with the override meant."""

from __future__ import annotations

import pytest

import train as train_cli
from agents.training.config import key_hint, override_fields, split_overrides
from envs.config import ConfigError, load_scenario


def test_a_missing_scenario_file_is_named_as_a_missing_file(capsys):
    assert train_cli.main(["--config", "configs/my-scenario.yaml", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "scenario file 'configs/my-scenario.yaml' does not exist" in err and "unknown scenario" not in err
    assert "synthetic-3" in err  # the shipped ones, to pick from
    with pytest.raises(ConfigError, match="scenario file '/no/such/dir/x.yml' does not exist"):
        load_scenario("/no/such/dir/x.yml")
    with pytest.raises(ConfigError, match="unknown scenario 'my-scenario'; available: "):
        load_scenario("my-scenario")  # a name, not a file


@pytest.mark.parametrize("override, message", [
    ("lr=1e-3", "unknown scenario key 'lr'; did you mean train.lr?"),
    ("scenario.ent_coef=0", "unknown scenario key 'ent_coef'; did you mean train.ent_coef?"),
    ("hidden=32", "unknown scenario key 'hidden'; did you mean policy.hidden?"),
    ("hiden=32", "unknown scenario key 'hiden'; did you mean policy.hidden?"),
    ("train.hidden=32", "unknown train key 'hidden'; did you mean policy.hidden?"),
    ("policy.lr=1e-3", "unknown policy key 'lr'; did you mean train.lr?"),
    ("train.num_tasks=50", "unknown train key 'num_tasks'; did you mean num_tasks?"),
    ("num_task=50", "unknown scenario key 'num_task'; did you mean num_tasks?"),
    ("train.eval_episode=4", "unknown train key 'eval_episode'; did you mean train.eval_episodes?"),
])
def test_an_override_in_the_wrong_section_names_the_one_meant(override, message, capsys):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        split_overrides([override])
    assert train_cli.main(["--config", "synthetic-3", override, "--print-config"]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_key_near_nothing_still_lists_the_valid_keys(capsys):
    assert key_hint("zzzz", override_fields()) is None
    split_overrides(["zzzz=1"])  # routed; the scenario's own check refuses it
    assert train_cli.main(["--config", "synthetic-3", "zzzz=1", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario key 'zzzz'; valid keys: " in err and "did you mean" not in err


def test_known_keys_route_as_before():
    split = split_overrides(["train.lr=0.001", "policy.hidden=64", "num_tasks=50", "connectivity.model=random_subset"])
    assert split.train == {"lr": 0.001} and split.policy == {"hidden": 64}
    assert split.scenario == {"num_tasks": 50, "connectivity.model": "random_subset"}
