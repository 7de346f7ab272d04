"""Validation on other scenarios of the run's task family (``train.also_validate_on``): the relative JCT
``best.pt`` is chosen on, the config checks, and tiny runs that validate on three scenarios."""

from __future__ import annotations

import json
import math

import pytest
import yaml

import train as train_cli
from envs.config import split_scenario_yaml
from agents.evaluation.family_page import validated_also
from agents.training.checkpoints import BEST, LAST, load_checkpoint
from agents.training.config import options_beyond_the_paper
from agents.training.logger import tag_description
from agents.training.loop import run_training
from agents.training.validation_baselines import BASELINES_FILE, baselines_file
from agents.training.validation_set import RELATIVE_JCT_TAG, ValidationPoint, other_tag, relative_jct
from tests.test_scenario_mix import _spec, _variant
from tests.test_training import FAST, TINY, _scalars


def test_the_relative_jct_is_the_mean_ratio_to_each_scenario_s_rival():
    assert relative_jct([3.0, 8.0], [4.0, 4.0]) == pytest.approx((0.75 + 2.0) / 2)
    assert relative_jct([3.0], [3.0]) == pytest.approx(1.0)
    assert relative_jct([3.0, None], [4.0, 4.0]) is None, "a scenario without a JCT"
    assert relative_jct([3.0, 4.0], [4.0, None]) is None, "a scenario without a rival"
    assert relative_jct([3.0], [0.0]) is None and relative_jct([math.nan], [1.0]) is None


def test_the_score_ranks_lower_relative_jct_higher_and_truncated_evaluations_last():
    good = ValidationPoint({"a": 3.0, "b": 4.0}, 0.9, truncated=0)
    worse = ValidationPoint({"a": 3.0, "b": 5.0}, 1.1, truncated=0)
    cut = ValidationPoint({"a": 2.0, "b": 2.0}, 0.5, truncated=1)
    missing = ValidationPoint({"a": 2.0, "b": None}, None, truncated=0)
    assert good.score > worse.score > cut.score > missing.score == -math.inf
    assert good.summary() == "b 4.000; relative JCT 0.900"


@pytest.mark.parametrize("overrides, message", [
    (["train.also_validate_on=[sjf-3]"], "the run's own scenario"),
    (["train.also_validate_on=[no-such-scenario]"], "unknown scenario"),
    (["train.also_validate_on=[sjf-2,sjf-2]"], "twice"),
    (["train.also_validate_on=[synthetic-3]"], "train.also_validate_on: 'synthetic-3' runs in single mode"),
    (["train.also_validate_on=[hetero-6]"], "task types"),
    (["train.also_validate_on=[sjf-2]", "train.validation_baselines=false"], "set validation_baselines=true"),
    (["train.also_validate_on=[sjf-2]", "policy.shared_actors=false"], "train.also_validate_on names [2] clusters"),
])
def test_bad_validation_scenarios_exit_2_in_one_line_before_any_work(overrides, message, tmp_path, capsys):
    two = _variant(tmp_path, "sjf-2", num_clusters=2)
    overrides = [o.replace("sjf-2", two) for o in overrides]
    argv = ["--config", "sjf-3", *TINY, *FAST, "policy.shared_actors=true", *overrides, "--logdir", str(tmp_path)]
    assert train_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sjf-2.yaml"], "no run directory"


def test_a_run_validates_on_its_other_scenarios_and_keeps_the_best_relative_jct(tmp_path, capsys):
    two, four = _variant(tmp_path, "sjf-2", num_clusters=2), _variant(tmp_path, "sjf-4", num_clusters=4)
    spec = _spec(tmp_path, "train.run_name=also", f"train.also_validate_on=[{two},{four}]", "train.eval_episodes=2",
                 steps=160)
    spec.eval_lines = True
    assert [s.num_clusters for s in spec.validation_others] == [2, 4]
    run_training(spec)
    scalars = _scalars(spec.run_dir)
    own = dict(scalars["test/mean_jct"])
    others = {name: dict(scalars[other_tag(name)]) for name in ("sjf-2", "sjf-4")}
    relative = dict(scalars[RELATIVE_JCT_TAG])
    assert sorted(own) == sorted(relative) == sorted(others["sjf-2"]) == sorted(others["sjf-4"]) == [0, 40, 80, 120, 160]
    # each scenario's rival, computed once and saved in the run directory
    rivals = {}
    for name, path in (("sjf-3", BASELINES_FILE), ("sjf-2", baselines_file("sjf-2")), ("sjf-4", baselines_file("sjf-4"))):
        means = json.loads((spec.run_dir / path).read_text())["mean_jct"]
        rivals[name] = min(v for v in means.values() if v is not None)
    for step, value in relative.items():
        expected = (own[step] / rivals["sjf-3"] + others["sjf-2"][step] / rivals["sjf-2"]
                    + others["sjf-4"][step] / rivals["sjf-4"]) / 3
        assert value == pytest.approx(expected, rel=1e-5)
    # best.pt holds the evaluation of the lowest relative JCT, and its own scenario's JCT there
    best_step = min(relative, key=lambda s: (relative[s], s))
    counters = load_checkpoint(spec.run_dir / BEST)["counters"]
    assert counters["best_env_step"] == best_step
    assert counters["best_score"] == pytest.approx(-relative[best_step], rel=1e-5)
    assert counters["best_mean_jct"] == pytest.approx(own[best_step], rel=1e-5)
    assert load_checkpoint(spec.run_dir / LAST)["counters"]["best_score"] == counters["best_score"]
    out = capsys.readouterr().out
    assert "validation baselines on sjf-2 (the policy acting by argmax, conflicts by bayes):" in out
    assert "; relative JCT " in out and "(best.pt " in out
    saved = yaml.safe_load((spec.run_dir / "config.yaml").read_text())
    assert saved["train"]["also_validate_on"] == [two, four]


def test_the_other_scenarios_validation_replays_the_same_workloads_each_time(tmp_path):
    """Two runs of one seed write the same points: the other scenarios' workloads and draws are fixed."""
    two = _variant(tmp_path, "sjf-2", num_clusters=2)

    def points(name: str) -> list[tuple[int, float]]:
        spec = _spec(tmp_path, f"train.run_name={name}", f"train.also_validate_on=[{two}]", steps=80)
        run_training(spec)
        return _scalars(spec.run_dir)[other_tag("sjf-2")]

    assert points("a") == points("b")


def test_each_other_scenario_is_validated_acting_as_its_own_recipe_acts(tmp_path):
    """A scenario whose recipe resolves conflicts by `room` is validated so; the policy's own rule comes back."""
    from agents.training.tianshou_glue.algorithm import TianshouJointPolicy
    from agents.training.validation_set import OtherValidation

    _, raw, _ = split_scenario_yaml("sjf-3")
    raw.update(num_tasks=12, name="sjf-2r", num_clusters=2)
    path = tmp_path / "sjf-2r.yaml"
    path.write_text(yaml.safe_dump({**raw, "train": {"eval_conflicts": "room", "eval_action": "sample"}}))
    spec = _spec(tmp_path, "train.run_name=rule", f"train.also_validate_on=[{path}]", steps=40)
    spec.run_dir.mkdir(parents=True)
    seen = []

    class Policy:
        deterministic_eval, argmax_allocation_eval, keep_busy_eval, eval_conflicts = True, False, False, None
        acting_as = TianshouJointPolicy.acting_as

        def reset_eval_generators(self):
            pass

    class Algorithm:
        policy = Policy()

    others = OtherValidation(spec, Algorithm(), {"optimus": 4.0})
    assert others.rules == {"sjf-2r": ("sample", "room")}

    class Collector:
        def reset(self, reset_stats):
            pass

        def collect(self, n_episode):
            p = Algorithm.policy
            seen.append((p.deterministic_eval, p.keep_busy_eval, p.eval_conflicts))
            return type("Stats", (), {"mean_jct": 5.0, "truncated_episodes": 0})()

    others.collectors = {"sjf-2r": Collector()}
    point = others.evaluate(type("Stats", (), {"mean_jct": 4.0, "truncated_episodes": 0})())
    others.close()
    assert seen == [(False, False, "room")], "sampled, conflicts by room, while its workloads replay"
    p = Algorithm.policy
    assert (p.deterministic_eval, p.keep_busy_eval, p.eval_conflicts) == (True, False, None), "the run's own rule back"
    assert point.mean_jct == {"sjf-3": 4.0, "sjf-2r": 5.0}


def test_the_family_recipe_validates_on_every_scenario_of_its_family(tmp_path):
    from agents.training.prepare import prepare_run

    spec = prepare_run("generalist-synthetic", [], flags={"logdir": str(tmp_path)})
    assert [s.name for s in spec.validation_others] == ["synthetic-3", "multi-3", "synthetic-6"]
    assert [s.mode for s in spec.validation_others] == ["single", "multi", "single"]
    from agents.training.prepare import acting_rule

    assert acting_rule("synthetic-6") == ("argmax", "room") and acting_rule("multi-3") == ("argmax", "bayes")


def test_the_pages_name_the_other_validation_scenarios():
    words = options_beyond_the_paper({"train": {"also_validate_on": ["synthetic-3", "multi-3"]}})
    assert any("best.pt chosen on validation on `synthetic-3`, `multi-3` too" in w for w in words)
    assert not any("best.pt chosen" in w for w in options_beyond_the_paper({"train": {}}))
    assert validated_also([]) == ""
    assert "`synthetic-3`" in validated_also(["synthetic-3"]) and "relative" in validated_also(["synthetic-3"])
    assert "sjf-2" in tag_description(other_tag("sjf-2"))
    assert tag_description(RELATIVE_JCT_TAG)
