"""Ablations: the variant registry (each the recipe with one change, valid for every scenario) and
``benchmarks/ablations.py`` end to end on a tiny recipe (runs, paired comparison, files)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_recipes import TINY_RECIPE  # tests/ is on sys.path (pytest rootdir insertion)

from agents.evaluation.ablations import ABLATIONS, CURVE_CEILING, CURVE_FLOOR, CURVE_HEADROOM, RECIPE, curve_ylim, run_dir
from agents.training.prepare import prepare_run
from envs.config import ConfigError, available_scenarios, load_scenario

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(ABLATIONS))
def test_each_variant_changes_the_recipe_in_one_respect_only(name):
    recipe = prepare_run("synthetic-3")
    spec = prepare_run("synthetic-3", list(ABLATIONS[name].overrides))
    changed = {f"scenario.{k}" for k, v in spec.scenario.to_dict().items() if recipe.scenario.to_dict()[k] != v}
    changed |= {f"policy.{k}" for k, v in spec.policy.to_dict().items() if recipe.policy.to_dict()[k] != v}
    changed |= {f"train.{k}" for k, v in spec.train.to_dict().items() if recipe.train.to_dict()[k] != v}
    keys = {o.split("=")[0] if "." in o.split("=")[0] else f"scenario.{o.split('=')[0]}" for o in ABLATIONS[name].overrides}
    assert changed == keys  # exactly the variant's keys, nothing else
    assert spec.train.steps == recipe.train.steps  # an equal budget
    if name == RECIPE:
        assert not changed


def test_the_curve_axis_is_cut_near_the_baselines_but_shows_every_curve_end():
    # variants that end below the ceiling: cut at CURVE_CEILING x the worst baseline
    assert curve_ylim([3.8, 4.8, None], [4.0, 4.5]) == pytest.approx((CURVE_FLOOR * 3.8, CURVE_CEILING * 4.8))
    # a short probe whose runs end far above the baselines: the axis rises to show the highest end
    low, top = curve_ylim([3.8, 4.8], [15.5, 7.5, float("nan")])
    assert low == pytest.approx(CURVE_FLOOR * 3.8) and top == pytest.approx(CURVE_HEADROOM * 15.5) and top > 15.5
    assert curve_ylim([None, float("nan")], [5.0]) is None  # no finite baseline: matplotlib's own range
    assert curve_ylim([3.8], []) == pytest.approx((CURVE_FLOOR * 3.8, CURVE_CEILING * 3.8))


def test_the_variants_cover_the_issue_list_and_apply_to_every_scenario():
    assert {"recipe", "imitation", "room", "sequential", "floor-online", "floor-oracle", "no-han", "no-pointer",
            "vanilla", "paper-size", "per-cluster-reward", "agent-id", "claim-penalty"} <= set(ABLATIONS)
    assert ABLATIONS["floor-online"].floor == "online" and ABLATIONS["floor-oracle"].floor == "scenario"
    for scenario in available_scenarios():
        other_counts = {s.num_clusters for s in prepare_run(scenario).trained_on} != {load_scenario(scenario).num_clusters}
        for a in ABLATIONS.values():
            tied = "policy.shared_actors=false" in a.overrides or "policy.agent_id=true" in a.overrides
            if tied and other_counts:  # per-agent parameters cannot train on other cluster counts
                with pytest.raises(ConfigError, match="per-agent parameters"):
                    prepare_run(scenario, list(a.overrides))
            else:
                prepare_run(scenario, list(a.overrides))  # a ConfigError would fail here


def test_run_directories_share_the_recipes_runs_with_reproduce(tmp_path):
    assert run_dir(tmp_path, "synthetic-3", RECIPE, 1) == tmp_path / "synthetic-3" / "s1"
    assert run_dir(tmp_path, "synthetic-3", "room", 1) == tmp_path / "synthetic-3" / "room" / "s1"


@pytest.fixture(scope="module")
def ablated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ablations")
    recipe = tmp / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "ablations.py"), "--scenarios", str(recipe), "--variants",
           "room,floor-online", "--seeds", "2", "--heldout", "3", "--runs", str(tmp / "runs"), "--out", str(tmp / "out"),
           "--workers", "1", "--device", "cpu", "--threads", "1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp


def test_ablations_write_one_row_per_variant_and_seed(ablated):
    out = ablated / "out"
    rows = list(csv.DictReader((out / "ablations.csv").open()))
    assert [(r["variant"], r["seed"]) for r in rows] == [
        ("recipe", "0"), ("recipe", "1"), ("room", "0"), ("room", "1"), ("floor-online", "0"), ("floor-online", "1")]
    assert all(r["scenario"] == "tiny-3" and int(r["env_steps"]) == 128 for r in rows)
    assert all(r["diff_vs_recipe"] == "" for r in rows if r["variant"] == "recipe")
    doc = json.loads((out / "ablations.json").read_text())
    by = {s["variant"]: s for s in doc["summaries"]}
    assert by["recipe"]["vs_recipe"] is None
    for v in ("room", "floor-online"):
        seeds = [float(r["heldout_mean_jct"]) for r in rows if r["variant"] == v]
        assert by[v]["mean_jct"] == pytest.approx(sum(seeds) / 2, abs=1e-3)
        lo, hi = by[v]["vs_recipe"]["ci95"]
        assert lo <= by[v]["vs_recipe"]["mean_diff"] <= hi
    md = (out / "ablations.md").read_text()
    assert md.splitlines()[4].strip().startswith("python benchmarks/ablations.py --scenarios")
    assert "| room | 2 |" in md and "| floor-online | 2 |" in md and "max_start_slowdown=3" in md
    # the env steps to beat count to the scenario's best validation baseline, named in the JSON, the CSV and the page
    rival = doc["validation_rivals"]["tiny-3"]
    assert rival in {"optimus", "optimus:preemptive=false"} and {r["validation_rival"] for r in rows} == {rival}
    assert f"| env steps to beat {rival} (validation) |" in md
    assert [len(s["steps_to_beat_rival"]) for s in doc["summaries"]] == [2, 2, 2]
    # the floor variant's rivals ran behind the same floor, on the same workloads
    floored = {k: v for k, v in doc["baselines"]["tiny-3"].items() if "floor=" in k}
    assert set(floored) == {"optimus:floor=online", "optimus:preemptive=false,floor=online"}
    assert all(v is not None and v > 0 for v in floored.values())
    assert "optimus:floor=online" in md.split("## Variants")[0]
    assert (out / "ablations-tiny-3.png").stat().st_size > 1000
    # the variants trained in their own mode: the room run's checkpoint says so
    saved = (ablated / "runs" / "tiny-3" / "room" / "s0" / "config.yaml").read_text()
    assert "conflicts: room" in saved


def test_ablations_bad_variant_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ablations.py"), "--scenarios", "synthetic-3",
                           "--variants", "nope", "--runs", str(tmp_path / "r")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "unknown variant(s) ['nope']" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_variant_that_is_the_recipe_already_is_refused_before_training(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ablations.py"), "--scenarios", "synthetic-6",
                           "--variants", "per-cluster-reward", "--runs", str(tmp_path / "r")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "is synthetic-6's recipe already" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()
