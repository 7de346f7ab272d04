"""One policy per task family: the family of a recipe, how it acts on each scenario, and a tiny
end-to-end run of ``benchmarks/generalist.py`` (train, evaluate on every scenario, store, page)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from pathlib import Path

from agents.evaluation.family import family_scenarios, stored_family_seeds, targets_met
from agents.evaluation.results import file_sha256
from agents.training.prepare import acting_rule, prepare_run

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("generalist_cli", ROOT / "benchmarks" / "generalist.py")
generalist = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(generalist)
TINY_RECIPE = """base: hetero-6
num_tasks: 12
policy: {hidden: 16, han_layers: 1, pointer_layers: 1, pointer_ffn: 32, observe_mode: true}
train:
  scenarios: [synthetic-3, multi-3]
  scenario_order: mixture
  gamma: 0.99
  steps: 80
  envs: 2
  collect_steps: 40
  batch_size: 16
  repeat: 1
  eval_every: 40
  eval_episodes: 1
  max_batchsize: 256
"""


def test_the_family_of_a_recipe_is_every_scenario_its_policy_can_act_in():
    assert family_scenarios(prepare_run("generalist-synthetic")) == ["hetero-6", "multi-3", "synthetic-3", "synthetic-6"]
    # a policy that does not see the mode acts only in its own mode's scenarios of the task family
    assert family_scenarios(prepare_run("multi-3")) == ["hetero-6", "multi-3"]
    assert family_scenarios(prepare_run("testbed-6")) == ["testbed-3", "testbed-6"]
    assert family_scenarios(prepare_run("generalist-testbed")) == ["testbed-3", "testbed-6"]


def test_the_test_bed_family_recipe_trains_as_testbed_6_and_chooses_on_both_scenarios():
    """``generalist-testbed`` is testbed-6's recipe with ``best.pt`` chosen on testbed-3 too: nothing
    else may drift apart between the two files."""
    family, own = prepare_run("generalist-testbed"), prepare_run("testbed-6")
    assert family.train.also_validate_on == ("testbed-3",)
    assert dataclasses.replace(family.train, also_validate_on=None) == own.train
    assert family.policy == own.policy


def test_each_scenario_is_acted_in_as_its_own_recipe_acts():
    assert acting_rule("multi-3") == ("argmax", "bayes")
    assert acting_rule("testbed-6")[1] == "room"  # its recipe's train.eval_conflicts
    for name in ("synthetic-6", "hetero-6"):
        assert acting_rule(name)[0] == prepare_run(name).train.eval_action


def test_the_targets_need_every_seed_below_the_baseline():
    row = {"mean_jct": 3.0, "rival_mean_jct": 3.5, "own_mean_jct": 2.96,
           "paired": [{"mean_diff": -0.5, "ci95": [-0.7, -0.3]}, {"mean_diff": -0.4, "ci95": [-0.8, 0.1]}]}
    assert targets_met(row) == {"beats_rival": False, "within_2pct_of_own": True}
    assert targets_met({**row, "paired": [], "rival_mean_jct": None})["beats_rival"] is None
    row["paired"][1]["ci95"] = [-0.8, -0.1]
    row["own_mean_jct"] = 2.9
    assert targets_met(row) == {"beats_rival": True, "within_2pct_of_own": False}


def test_a_recipe_of_one_scenario_is_refused_in_one_line(tmp_path, capsys):
    assert generalist.main(["--config", "sjf-3", "--runs", str(tmp_path / "runs"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "a family recipe acts in two or more" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_family_recipe_is_trained_evaluated_on_its_family_stored_and_paged(tmp_path, capsys):
    recipe = tmp_path / "tiny-family.yaml"
    recipe.write_text(TINY_RECIPE)
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(ROOT / "docs" / "results" / "multi-3.json", out / "multi-3.json")  # one scenario with a page
    argv = ["--config", str(recipe), "--seeds", "1", "--heldout", "1", "--runs", str(tmp_path / "runs"),
            "--out", str(out), "--device", "cpu", "--workers", "1"]
    ship = tmp_path / "ship"
    assert generalist.main([*argv, "--ship", str(ship)]) == 0
    stored = stored_family_seeds(out, "tiny-family")
    assert list(stored) == [0]
    doc = json.loads(stored[0].read_text())
    assert doc["training"]["env_steps"] == 80 and doc["training"]["finished"]
    # the shipped file is seed 0's best.pt, and the checkpoint index gives it the family's row
    assert doc["best_sha256"] == file_sha256(ship / "tiny-family.pt")
    row = next(line for line in (ship / "README.md").read_text().splitlines() if line.startswith("| `tiny-family.pt`"))
    assert "generalist.py --config" in row and "80 env steps" in row
    assert all(f"{name} " in row for name in ("hetero-6", "multi-3", "synthetic-3", "synthetic-6"))
    assert "[generalist.md](generalist.md)" in (out / "README.md").read_text()  # the index links the page
    assert sorted(doc["scenarios"]) == ["hetero-6", "multi-3", "synthetic-3", "synthetic-6"]
    assert doc["scenarios"]["synthetic-6"]["conflicts"] == "room"
    assert doc["scenarios"]["multi-3"]["action"] == "argmax"
    page = json.loads((out / "generalist.json").read_text())["tiny-family"]
    rows = {r["scenario"]: r for r in page["rows"]}
    assert rows["multi-3"]["rival"] == "optimus" and len(rows["multi-3"]["paired"]) == 1
    assert rows["synthetic-3"]["rival"] is None  # no page of its own under --out
    assert rows["synthetic-3"]["targets"] == {"beats_rival": None, "within_2pct_of_own": None}
    assert page["validated_on"] == "hetero-6" and page["also_validated_on"] == []
    [trained] = page["training"]
    assert trained["seed"] == 0 and trained["env_steps"] == 80 and trained["wall_s"] > 0
    assert trained["best_env_step"] == doc["training"]["best_env_step"] in (0, 40, 80)
    text = (out / "generalist.md").read_text()
    assert "## tiny-family" in text and "| multi-3 |" in text
    assert f"chosen on validation: s0 at {trained['best_env_step']:,} of 80 env steps. Wall time per seed: " in text
    # a second run finds the seed stored: nothing trained or evaluated again
    capsys.readouterr()
    shutil.rmtree(tmp_path / "runs")
    assert generalist.main(argv) == 0
    assert "not trained or evaluated again" in capsys.readouterr().out
    # shipping needs the weights the stored seed was evaluated with: refused in one line without them
    assert generalist.main([*argv, "--ship", str(ship)]) == 2
    err = capsys.readouterr().err.strip()
    assert "is gone" in err and len(err.splitlines()) == 1
