"""Training on a set of scenarios (``train.scenarios``): the schedule, the family checks, and tiny runs
that train on other cluster counts and validate on their own scenario."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import train as train_cli
from agents.training.checkpoints import BEST, LAST, load_checkpoint
from agents.training.config import TrainConfig, options_beyond_the_paper
from agents.training.loop import run_training
from agents.training.prepare import prepare_run
from agents.training.scenario_mix import CURRICULUM, MIXTURE, ScenarioSchedule
from envs.config import ConfigError, split_scenario_yaml
from tests.test_training import FAST, TINY, _scalars


def _variant(tmp_path: Path, name: str, **changes) -> str:
    """A YAML path: sjf-3's scenario (12 tasks) with ``changes``, named ``name``."""
    _, raw, _ = split_scenario_yaml("sjf-3")
    raw.update(num_tasks=12, name=name, **changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _spec(tmp_path: Path, *extra: str, steps: int = 160, seed: int = 0):
    flags = {"steps": steps, "envs": 2, "seed": seed, "logdir": str(tmp_path), "vector": "dummy"}
    return prepare_run("sjf-3", [*TINY, *FAST, "policy.shared_actors=true", *extra], flags=flags)


# ---------------------------------------------------------------------------------------------- schedule
def test_a_curriculum_trains_each_scenario_for_its_share_in_order():
    s = ScenarioSchedule((0.25, 0.75), CURRICULUM, steps=1000, seed=0, batch=50)
    assert [s.index_at(x) for x in (0, 200, 249, 250, 999, 5000)] == [0, 0, 0, 1, 1, 1]


def test_a_mixture_draws_by_share_from_the_seed_and_the_collection_index():
    shares = (0.2, 0.8)
    s = ScenarioSchedule(shares, MIXTURE, steps=10**9, seed=3, batch=100)
    draws = np.array([s.index_at(c * 100) for c in range(4000)])
    assert abs(draws.mean() - 0.8) < 0.03
    assert s.index_at(250) == s.index_at(200), "one collection, one scenario"
    again = ScenarioSchedule(shares, MIXTURE, steps=10**9, seed=3, batch=100)
    assert [again.index_at(c * 100) for c in range(50)] == draws[:50].tolist()
    other = ScenarioSchedule(shares, MIXTURE, steps=10**9, seed=4, batch=100)
    assert [other.index_at(c * 100) for c in range(50)] != draws[:50].tolist()


def test_shares_default_to_equal_and_are_normalised():
    t = TrainConfig(scenarios=("a", "b", "c"), scenario_shares=None)
    assert ScenarioSchedule.from_train(t).shares == pytest.approx((1 / 3,) * 3)
    t = TrainConfig(scenarios=("a", "b"), scenario_shares=(1.0, 3.0))
    assert ScenarioSchedule.from_train(t).shares == pytest.approx((0.25, 0.75))


@pytest.mark.parametrize("overrides, message", [
    (["train.scenario_shares=[1.0]"], "one share per entry"),
    (["train.scenarios=[sjf-3]", "train.scenario_shares=[0.5,0.5]"], "one share per entry"),
    (["train.scenarios=[sjf-3]", "train.scenario_shares=[0]"], "scenario_shares"),
    (["train.scenarios=[sjf-3,sjf-3]"], "twice"),
    (["train.scenarios=[sjf-3]", "train.scenario_order=shuffle"], "scenario_order"),
    (["train.scenarios=[no-such-scenario]"], "unknown scenario"),
    (["train.scenarios=[synthetic-3]"], "mode"),  # sjf-3 is a multi-mode scenario
    (["train.scenarios=[sjf-3,sjf-1s]", "policy.observe_mode=true", "train.gamma=null"], "set train.gamma"),  # single mode
    (["train.scenarios=[hetero-6]"], "task types"),  # multi mode, other task types
    (["train.scenario_reward=per_cluster"], "set scenarios too"),
    (["train.scenarios=[sjf-3]", "train.scenario_reward=shared"], "scenario_reward must be one of"),
])
def test_bad_training_scenarios_exit_2_in_one_line_before_any_work(overrides, message, tmp_path, capsys):
    single = _variant(tmp_path, "sjf-1s", mode="single")
    overrides = [o.replace("sjf-1s", single) for o in overrides]
    argv = ["--config", "sjf-3", *TINY, *FAST, "policy.shared_actors=true", *overrides, "--logdir", str(tmp_path)]
    assert train_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sjf-1s.yaml"], "no run directory"


def test_scenario_reward_sets_the_reward_of_the_other_training_scenarios_only(tmp_path):
    two = _variant(tmp_path, "sjf-2", num_clusters=2)
    spec = _spec(tmp_path, f"train.scenarios=[{two},sjf-3]", "train.scenario_reward=per_cluster")
    assert [(s.num_clusters, s.reward) for s in spec.trained_on] == [(2, "per_cluster"), (3, "team")]
    assert spec.learned_reward == "per_cluster, team"
    spec = _spec(tmp_path, f"train.scenarios=[{two},sjf-3]")
    assert [s.reward for s in spec.trained_on] == ["team", "team"] and spec.learned_reward == "team"
    assert _spec(tmp_path, "reward=per_cluster").learned_reward == "per_cluster"


def test_per_agent_parameters_cannot_train_on_another_cluster_count(tmp_path):
    four = _variant(tmp_path, "sjf-4", num_clusters=4)
    with pytest.raises(ConfigError, match="per-agent parameters"):
        prepare_run("sjf-3", [*TINY, *FAST, "policy.shared_actors=false", f"train.scenarios=[{four}]"],
                    flags={"logdir": str(tmp_path)})


def test_the_page_names_training_on_other_cluster_counts():
    words = options_beyond_the_paper({"train": {"scenarios": ["multi-3"], "scenario_order": "curriculum"}})
    assert any("trained on other cluster counts" in w and "`multi-3`" in w for w in words)
    assert not any("cluster counts" in w for w in options_beyond_the_paper({"train": {}}))


# ---------------------------------------------------------------------------------------------- runs
def test_the_run_s_own_scenario_alone_trains_as_without_the_option(tmp_path):
    def params(name: str, *extra: str) -> dict[str, torch.Tensor]:
        spec = _spec(tmp_path, f"train.run_name={name}", *extra, steps=80)
        run_training(spec)
        return load_checkpoint(spec.run_dir / LAST)["model"]

    a, b = params("plain"), params("named", "train.scenarios=[sjf-3]")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_curriculum_trains_on_other_cluster_counts_and_validates_on_its_own(tmp_path):
    two, four = _variant(tmp_path, "sjf-2", num_clusters=2), _variant(tmp_path, "sjf-4", num_clusters=4)
    spec = _spec(tmp_path, "train.run_name=cur", f"train.scenarios=[{two},{four}]", "train.scenario_shares=[1,1]",
                 steps=160)
    assert [s.num_clusters for s in spec.trained_on] == [2, 4]
    result = run_training(spec)
    assert result.env_steps == 160
    seen = _scalars(spec.run_dir)["training/scenario"]
    assert [(step, int(k)) for step, k in seen] == [(0, 0), (40, 0), (80, 1), (120, 1)]
    # validation ran on the run's own scenario (3 clusters); the checkpoints name it
    for name in (LAST, BEST):
        assert load_checkpoint(spec.run_dir / name)["scenario"]["num_clusters"] == 3
    saved = yaml.safe_load((spec.run_dir / "config.yaml").read_text())
    assert [s["num_clusters"] for s in saved["meta"]["training_scenarios"]] == [2, 4]


def test_a_training_scenario_trains_with_the_scenario_reward(tmp_path):
    two = _variant(tmp_path, "sjf-2", num_clusters=2)

    def run(name: str, *extra: str):
        spec = _spec(tmp_path, f"train.run_name={name}", f"train.scenarios=[{two}]", *extra, steps=80)
        run_training(spec)
        return spec, load_checkpoint(spec.run_dir / LAST)["model"]

    (_, team), (spec, per_cluster) = run("team"), run("pc", "train.scenario_reward=per_cluster")
    saved = yaml.safe_load((spec.run_dir / "config.yaml").read_text())
    assert [s["reward"] for s in saved["meta"]["training_scenarios"]] == ["per_cluster"]
    assert any(not torch.equal(team[k], per_cluster[k]) for k in team), "the reward the agents learn from changed"


def test_a_mixture_resumes_where_it_stopped(tmp_path):
    two = _variant(tmp_path, "sjf-2", num_clusters=2)
    mix = [f"train.scenarios=[{two},sjf-3]", "train.scenario_order=mixture"]
    spec = _spec(tmp_path, "train.run_name=whole", *mix, steps=160)
    run_training(spec)
    whole = [(s, int(k)) for s, k in _scalars(spec.run_dir)["training/scenario"]]
    assert {k for _, k in whole} == {0, 1}, "a mixture of 4 collections should draw both scenarios at seed 0"
    half = _spec(tmp_path, "train.run_name=half", *mix, steps=80)
    run_training(half)
    resumed = prepare_run(None, ["train.steps=160"], resume=str(half.run_dir / LAST))
    run_training(resumed)
    assert [(s, int(k)) for s, k in _scalars(half.run_dir)["training/scenario"]] == whole


def test_a_policy_that_sees_the_mode_trains_on_both_modes(tmp_path):
    single = _variant(tmp_path, "sjf-3s", mode="single")
    with pytest.raises(ConfigError, match="observe_mode"):
        _spec(tmp_path, f"train.scenarios=[sjf-3,{single}]", "train.gamma=0.99")
    spec = _spec(tmp_path, "train.run_name=both", f"train.scenarios=[sjf-3,{single}]", "train.gamma=0.99",
                 "policy.observe_mode=true", steps=160)
    assert [s.mode for s in spec.trained_on] == ["multi", "single"]
    result = run_training(spec)
    assert result.env_steps == 160
    assert [int(k) for _, k in _scalars(spec.run_dir)["training/scenario"]] == [0, 0, 1, 1]
    assert load_checkpoint(spec.run_dir / BEST)["policy_config"]["observe_mode"] is True


def test_the_synthetic_family_recipe_trains_both_modes_and_validates_on_hetero_6(tmp_path):
    spec = prepare_run("generalist-synthetic", [], flags={"logdir": str(tmp_path)})
    assert spec.scenario.name == "generalist-synthetic" and spec.scenario.num_clusters == 6
    assert [(s.name, s.mode) for s in spec.trained_on] == [("synthetic-3", "single"), ("multi-3", "multi")]
    assert spec.policy.observe_mode and spec.train.gamma == 0.99
