"""Recipe tuning: candidates parse and are checked before anything trains, and
``benchmarks/tune.py`` end to end on a tiny recipe scores every seed on validation workloads only."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_recipes import TINY_RECIPE, TINY_SCENARIO  # tests/ is on sys.path (pytest rootdir insertion)

from agents.evaluation.results import report_seeds
from agents.evaluation.ablations import RECIPE
from agents.evaluation.tuning import (
    Candidate, TuningRow, end_means, end_split, mean_split, page_stem, parse_candidate, probe_overrides, run_dir, sets_probe_key, signal_fields,
    summarise, training_signals,
)
from envs.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TUNE = ROOT / "benchmarks" / "tune.py"


def test_a_candidate_is_a_name_and_its_overrides():
    assert parse_candidate("ent01:train.ent_coef=0.01") == Candidate("ent01", ("train.ent_coef=0.01",))
    c = parse_candidate("two:train.ent_coef=0.01, train.lr=6e-4")
    assert c.overrides == ("train.ent_coef=0.01", "train.lr=6e-4")
    # a list value keeps its commas; a colon inside a value is part of the value
    assert parse_candidate("caps:capacities=[[16,16],[8,8]]").overrides == ("capacities=[[16,16],[8,8]]",)
    assert parse_candidate("imi:train.imitate=optimus:preemptive=false,train.lr=1e-4").overrides == (
        "train.imitate=optimus:preemptive=false", "train.lr=1e-4")


@pytest.mark.parametrize("text, message", [
    ("train.ent_coef=0.01", "expected NAME:key=value"),
    ("ent01:", "expected NAME:key=value"),
    ("a/b:train.lr=1", "must be one plain word"),
    ("recipe:train.lr=1", "not 'recipe'"),
    ("x:train.lr", "is not key=value"),
])
def test_a_malformed_candidate_is_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_candidate(text)


def test_the_recipe_runs_are_reproduce_runs(tmp_path):
    assert run_dir(tmp_path / "t", tmp_path / "r", "multi-3", RECIPE, 2) == tmp_path / "r" / "multi-3" / "s2"
    assert run_dir(tmp_path / "t", tmp_path / "r", "multi-3", "ent01", 2) == tmp_path / "t" / "multi-3" / "ent01" / "s2"


def test_a_probe_keeps_every_run_and_page_apart_from_the_full_budget_ones(tmp_path):
    for name in (RECIPE, "ent01"):
        assert run_dir(tmp_path / "t", tmp_path / "r", "multi-3", name, 1, probe=524288) == (
            tmp_path / "t" / "multi-3" / "probe-524288" / name / "s1")
    assert probe_overrides(None) == () and probe_overrides(4096) == ("train.steps=4096",)
    assert page_stem("multi-3") == "multi-3" and page_stem("multi-3", 4096) == "multi-3-probe-4096"
    assert sets_probe_key(parse_candidate("b:train.lr=1e-3, train.steps=100"))
    assert not sets_probe_key(parse_candidate("b:train.lr=1e-3,train.steps_per_x=1"))


def _row(candidate, seed, best, recipe_best):
    return TuningRow("x", candidate, seed, 10, 60.0, "cpu", 5, best, best,
                     None if candidate == RECIPE else best - recipe_best, None)


def test_the_summary_pairs_each_seed_with_the_recipes_same_seed():
    recipe = {0: 4.0, 1: 4.2, 2: 5.0}
    cand = {0: 3.9, 1: 4.3, 2: 4.0}
    rows = [_row(RECIPE, s, v, v) for s, v in recipe.items()] + [_row("c", s, v, recipe[s]) for s, v in cand.items()]
    by = {s.candidate: s for s in summarise(rows, [Candidate("c", ("train.lr=1",))])}
    assert by[RECIPE].mean == pytest.approx(13.2 / 3) and by[RECIPE].diff_mean is None
    assert by["c"].mean == pytest.approx(12.2 / 3)
    assert by["c"].sd == pytest.approx(float(np.std([3.9, 4.3, 4.0], ddof=1)))
    assert by["c"].diff_mean == pytest.approx(-1.0 / 3)
    assert by["c"].seeds_better == 2  # seeds 0 and 2 improve, seed 1 does not
    lo, hi = by["c"].diff_ci95
    assert lo < by["c"].diff_mean < hi and lo < 0 < hi  # one seed worse: the interval spans zero
    assert by["c"].overrides == ["train.lr=1"] and by["c"].wall_s == 60.0


def test_training_signals_average_the_first_and_the_last_quarter_of_a_runs_collections():
    points = [(800, 4.0), (0, 10.0), (100, 20.0), (200, 90.0), (300, 50.0), (400, 7.0), (500, 1.0), (600, float("nan")),
              (700, 6.0)]  # eight finite points in step order: two at each end
    assert end_means(points) == (pytest.approx(15.0), pytest.approx(5.0))  # (10+20)/2, (6+4)/2
    assert end_means([(500, 1.0)]) == (1.0, 1.0)  # one point is both ends
    assert end_means([(0, float("nan"))]) == (None, None)
    signals = training_signals({"training/mean_jct": points, "training/conflict_rate": [(0, 0.5), (900, 0.1)]})
    assert set(signals) == set(signal_fields())
    assert signals["training_jct_first"] == pytest.approx(15.0) and signals["training_jct_last"] == pytest.approx(5.0)
    assert signals["training_lost_claims_first"] == 0.5 and signals["training_lost_claims_last"] == 0.1
    assert signals["training_gpu_util_first"] is None  # a tag the run never logged


def test_the_summary_averages_each_training_signal_over_seeds_and_names_the_training_scenarios():
    rows = [_row(RECIPE, 0, 4.0, 4.0), _row(RECIPE, 1, 4.2, 4.2)]
    rows[0].training_jct_last, rows[1].training_jct_last = 8.0, 10.0
    rows[0].training_gpu_util_first = 0.5  # the other seed has none: the mean is over the seeds that have it
    (summary,) = summarise(rows, [], {RECIPE: ["multi-3"]})
    assert summary.signals["training_jct_last"] == pytest.approx(9.0)
    assert summary.signals["training_gpu_util_first"] == 0.5 and summary.signals["training_jct_first"] is None
    assert summary.trains_on == ["multi-3"]


def test_where_a_run_ended_is_each_task_types_allocation_and_times_averaged_over_seeds():
    def rows(gpu):
        return [{"type": "img", "tasks": 3, "share": 0.5, "wait": 1.0, "run": 4.0, "jct": 5.0, "cpu": 2.0, "gpu": gpu},
                {"type": "all", "tasks": 6, "share": 1.0, "wait": 0.0, "run": 0.0, "jct": 0.0, "cpu": 0.0, "gpu": 0.0}]

    assert end_split(rows(1.0)) == [{"type": "img", "cpu": 2.0, "gpu": 1.0, "wait": 1.0, "run": 4.0}]
    (img,) = mean_split([end_split(rows(1.0)), end_split(rows(3.0))])
    assert img == {"type": "img", "cpu": 2.0, "gpu": 2.0, "wait": 1.0, "run": 4.0}
    assert mean_split([]) == []


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """tune.py in this process (its run_evaluation calls recorded), on a tiny recipe, two seeds."""
    import importlib.util

    import agents.evaluation.runner as runner

    tmp = tmp_path_factory.mktemp("tuning")
    recipe = tmp / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE)
    spec = importlib.util.spec_from_file_location("tune_cli", TUNE)
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)
    seen = []
    original = runner.run_evaluation

    def recording(cfg, specs, seeds, *a, **k):
        seen.append(list(seeds))
        return original(cfg, specs, seeds, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(runner, "run_evaluation", recording)
    try:
        rc = tune.main(["--config", str(recipe), "--candidate", "lr:train.lr=1e-3", "--seeds", "2",
                        "--runs", str(tmp / "tuning"), "--recipe-runs", str(tmp / "reproduce"),
                        "--out", str(tmp / "out"), "--workers", "1", "--device", "cpu", "--threads", "1"])
    finally:
        mp.undo()
    assert rc == 0
    return tmp, seen


def test_tune_trains_the_recipe_and_the_candidate_where_reproduce_and_tuning_keep_them(tuned):
    import yaml

    tmp, _ = tuned
    for seed in (0, 1):
        recipe = yaml.safe_load((tmp / "reproduce" / "tiny-3" / f"s{seed}" / "config.yaml").read_text())
        cand = yaml.safe_load((tmp / "tuning" / "tiny-3" / "lr" / f"s{seed}" / "config.yaml").read_text())
        assert recipe["train"]["seed"] == cand["train"]["seed"] == seed
        assert cand["train"]["lr"] == pytest.approx(1e-3) and recipe["train"]["lr"] != cand["train"]["lr"]


def test_tune_scores_on_the_validation_workloads_only(tuned):
    tmp, seen = tuned
    validation = [10_000, 10_001]  # eval_seed 10000, eval_episodes 2 (the tiny recipe)
    assert len(seen) == 5  # each of the four runs as it finished, then the baselines
    assert all(call == validation for call in seen)  # every one on the same workloads
    assert not set(report_seeds()) & {s for call in seen for s in call}
    doc = json.loads((tmp / "out" / "tiny-3.json").read_text())
    assert doc["validation_seeds"] == validation


def test_tune_writes_one_row_per_candidate_and_seed_paired_with_the_recipe(tuned):
    tmp, _ = tuned
    out = tmp / "out"
    rows = list(csv.DictReader((out / "tiny-3.csv").open()))
    assert [(r["candidate"], r["seed"]) for r in rows] == [("recipe", "0"), ("recipe", "1"), ("lr", "0"), ("lr", "1")]
    by = {(r["candidate"], r["seed"]): r for r in rows}
    for seed in ("0", "1"):
        for c in ("recipe", "lr"):
            r = by[c, seed]
            # trained by this code, the run's logged best is its best.pt's score now
            assert float(r["validation_best"]) == pytest.approx(float(r["logged_best"]), rel=1e-4)
            assert int(r["env_steps"]) == 128
        assert float(by["lr", seed]["diff_vs_recipe"]) == pytest.approx(
            float(by["lr", seed]["validation_best"]) - float(by["recipe", seed]["validation_best"]), abs=2e-4)
        assert by["recipe", seed]["diff_vs_recipe"] == ""
    doc = json.loads((out / "tiny-3.json").read_text())
    summary = {s["candidate"]: s for s in doc["summaries"]}
    assert summary["lr"]["overrides"] == ["train.lr=1e-3"]
    assert summary["lr"]["mean"] == pytest.approx(sum(float(by["lr", s]["validation_best"]) for s in "01") / 2, abs=1e-3)
    assert set(doc["baselines"]) == {"optimus", "optimus:preemptive=false"}
    assert all(v is not None and math.isfinite(v) for v in doc["baselines"].values())
    # the env steps to beat count to the better baseline, named in the JSON, each CSV row and the page
    from agents.evaluation.results import validation_rival

    rival = min(doc["baselines"], key=lambda k: (doc["baselines"][k], k != "optimus"))
    assert doc["validation_rival"] == rival == validation_rival(doc["baselines"])[0]
    assert {r["validation_rival"] for r in rows} == {rival}
    assert summary["lr"]["steps_to_beat_rival"] == [
        None if by["lr", s]["steps_to_beat_rival"] == "" else int(by["lr", s]["steps_to_beat_rival"]) for s in "01"]
    md = (out / "tiny-3.md").read_text()
    assert md.splitlines()[4].strip() == ("python benchmarks/tune.py --config " + str(tmp / "tiny-3.yaml")
                                          + " --candidate lr:train.lr=1e-3 --seeds 2")
    assert "| lr | `train.lr=1e-3` | 2 |" in md and "The held-out workloads are not run here." in md
    assert f"| env steps to beat {rival} |" in md
    assert (out / "tiny-3.png").stat().st_size > 1000


def test_tune_reads_each_runs_training_signals_from_its_own_event_files(tuned):
    from agents.evaluation.curves import read_scalars
    from agents.evaluation.tuning import TRAINING_SIGNALS

    tmp, _ = tuned
    rows = list(csv.DictReader((tmp / "out" / "tiny-3.csv").open()))
    assert set(signal_fields()) <= set(rows[0])
    for r in rows:
        d = (tmp / "reproduce" / "tiny-3" if r["candidate"] == RECIPE else tmp / "tuning" / "tiny-3" / "lr") / f"s{r['seed']}"
        expected = training_signals(read_scalars(d, [tag for _, tag in TRAINING_SIGNALS]))
        for key, value in expected.items():
            assert (r[key] == "") == (value is None) and (value is None or float(r[key]) == pytest.approx(value, abs=1e-4))
        assert r["training_lost_claims_first"] != ""  # every collection logs its conflict rate
    md = (tmp / "out" / "tiny-3.md").read_text()
    assert "Training signals:" in md and "| candidate | trains on | mean JCT of its training episodes |" in md
    assert "| lr | tiny-3 |" in md


def test_tune_scores_each_runs_last_checkpoint_beside_its_best(tuned):
    import yaml

    tmp, _ = tuned
    doc = json.loads((tmp / "out" / "tiny-3.json").read_text())
    types = [t["name"] for t in yaml.safe_load(TINY_RECIPE)["task_types"]]
    for row in doc["rows"]:
        assert row["last_mean_jct"] is not None and math.isfinite(row["last_mean_jct"])
        assert [r["type"] for r in row["last_split"]] == types
        assert all(r["cpu"] >= 1 and r["gpu"] >= 0 and r["run"] > 0 for r in row["last_split"] if r["cpu"] is not None)
    for summary in doc["summaries"]:
        mine = [r for r in doc["rows"] if r["candidate"] == summary["candidate"]]
        assert summary["last_mean"] == pytest.approx(np.mean([r["last_mean_jct"] for r in mine]))
    rows = list(csv.DictReader((tmp / "out" / "tiny-3.csv").open()))
    assert all(r["last_mean_jct"] != "" for r in rows)
    md = (tmp / "out" / "tiny-3.md").read_text()
    assert "Where the runs ended:" in md and f"| {types[0]}: CPUs, GPUs |" in md


def _tune(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TUNE), *argv], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("candidates, message", [
    (["v:train.eval_seed=5"], "--candidate v changes train.eval_seed"),
    (["v:train.eval_episodes=4"], "--candidate v changes train.eval_episodes"),
    (["v:train.nope=1"], "--candidate v: "),
    (["v:name=other"], "--candidate v renames the scenario"),
    (["v:train.lr=1e-3", "v:train.lr=1e-4"], "--candidate 'v' is given twice"),
    ([], "give at least one --candidate"),
    (["v:train.steps=65536", "--probe", "131072"], "--candidate v sets train.steps: under --probe"),
    (["v:train.lr=1e-3", "--probe", "0"], "--probe must be >= 1"),
])
def test_tune_refuses_bad_candidates_before_anything_trains(tmp_path, candidates, message):
    args = ["--config", "synthetic-3", "--runs", str(tmp_path / "t"), "--recipe-runs", str(tmp_path / "r"),
            "--out", str(tmp_path / "o")]
    if "--probe" in candidates:
        at = candidates.index("--probe")
        args += candidates[at:at + 2]
        candidates = candidates[:at]
    for c in candidates:
        args += ["--candidate", c]
    proc = _tune(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not any((tmp_path / d).exists() for d in ("t", "r", "o"))


def test_a_results_page_links_the_scenarios_tuning_page_when_there_is_one(tmp_path):
    from agents.evaluation.results import read_results
    from agents.evaluation.results_page import write_scenario_results

    results = read_results(ROOT / "docs" / "results" / "multi-3.json")
    write_scenario_results(tmp_path, results)
    assert "tuning/" not in (tmp_path / "multi-3.md").read_text()
    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "multi-3.md").write_text("# a tuning page\n")
    write_scenario_results(tmp_path, results)
    assert "[tuning/multi-3.md](tuning/multi-3.md)" in (tmp_path / "multi-3.md").read_text()


def test_a_probe_trains_every_run_at_its_steps_and_writes_its_own_pages(tmp_path):
    """``--probe 64`` on the tiny recipe (128 steps): the recipe and the candidate both train 64 env steps
    under the tuning runs (reproduce.py's are not touched), and the pages are tiny-3-probe-64.*."""
    import yaml

    recipe = tmp_path / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE)
    proc = _tune("--config", str(recipe), "--candidate", "lr:train.lr=1e-3", "--seeds", "1", "--probe", "64",
                 "--runs", str(tmp_path / "tuning"), "--recipe-runs", str(tmp_path / "reproduce"),
                 "--out", str(tmp_path / "out"), "--workers", "1", "--device", "cpu", "--threads", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (tmp_path / "reproduce").exists()
    for name in (RECIPE, "lr"):
        saved = yaml.safe_load((tmp_path / "tuning" / "tiny-3" / "probe-64" / name / "s0" / "config.yaml").read_text())
        assert saved["train"]["steps"] == 64
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["seeds", *(f"tiny-3-probe-64.{x}" for x in ("csv", "json", "md", "png"))]
    assert sorted(p.name for p in (out / "seeds" / "tiny-3-probe-64").iterdir()) == ["lr-s0.json", "recipe-s0.json"]
    assert {int(r["env_steps"]) for r in csv.DictReader((out / "tiny-3-probe-64.csv").open())} == {64}
    assert json.loads((out / "tiny-3-probe-64.json").read_text())["probe"] == 64
    md = (out / "tiny-3-probe-64.md").read_text()
    assert md.splitlines()[0] == "# Recipe tuning on tiny-3: validation workloads only, a probe of 64 env steps"
    assert md.splitlines()[4].strip().endswith("--candidate lr:train.lr=1e-3 --seeds 1 --probe 64")
    assert "trains 64 env steps (`train.steps=64`) instead of the recipe's 128" in md
    assert "![tiny-3 validation curves](tiny-3-probe-64.png)" in md


def test_stored_runs_write_the_page_again_without_their_run_directories(tmp_path):
    """A finished run is scored and stored as it ends; with the run directories gone the same command
    writes the same page without training, a stored run of another recipe is refused with one line, and
    ``--restart`` trains again."""
    import shutil

    recipe = tmp_path / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE)
    common = ["--config", str(recipe), "--seeds", "1", "--probe", "64", "--runs", str(tmp_path / "tuning"),
              "--recipe-runs", str(tmp_path / "reproduce"), "--out", str(tmp_path / "out"), "--workers", "1",
              "--device", "cpu", "--threads", "1"]
    first = _tune("--candidate", "lr:train.lr=1e-3", *common)
    assert first.returncode == 0, first.stdout + first.stderr
    csv_path = tmp_path / "out" / "tiny-3-probe-64.csv"
    before = csv_path.read_text()
    stored = json.loads((tmp_path / "out" / "seeds" / "tiny-3-probe-64" / "lr-s0.json").read_text())
    assert stored["recipe"]["train"]["lr"] == pytest.approx(1e-3) and stored["validation_seeds"] == [10_000, 10_001]
    shutil.rmtree(tmp_path / "tuning")
    again = _tune("--candidate", "lr:train.lr=1e-3", *common)
    assert again.returncode == 0, again.stdout + again.stderr
    assert not (tmp_path / "tuning").exists()  # nothing trained
    assert again.stdout.count("not trained or scored again") == 2
    assert csv_path.read_text() == before
    other = _tune("--candidate", "lr:train.lr=2e-3", *common)
    assert other.returncode == 2 and not (tmp_path / "tuning").exists()
    (line,) = other.stderr.strip().splitlines()
    assert "lr-s0.json holds a seed of another recipe" in line and "train.lr" in line
    restarted = _tune("--candidate", "lr:train.lr=2e-3", "--restart", *common)
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    assert (tmp_path / "tuning" / "tiny-3" / "probe-64" / "lr" / "s0" / "best.pt").is_file()


def test_a_candidate_may_not_change_where_a_family_recipe_validates(tmp_path):
    proc = _tune("--config", "generalist-synthetic", "--candidate", "v:train.also_validate_on=[synthetic-3]",
                 "--runs", str(tmp_path / "t"), "--recipe-runs", str(tmp_path / "r"), "--out", str(tmp_path / "o"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--candidate v changes train.also_validate_on" in proc.stderr and "Traceback" not in proc.stderr
    assert not any((tmp_path / d).exists() for d in ("t", "r", "o"))


def test_a_family_recipe_is_tuned_on_the_relative_jct_of_every_validation_scenario(tmp_path):
    """Each run's ``best.pt`` is scored on the other validation scenario too, acting by that scenario's rule,
    and each seed's relative JCT (over both scenarios' rivals) is paired with the recipe's same seed."""
    from agents.training.validation_set import relative_jct

    two = tmp_path / "tiny-2.yaml"
    two.write_text(TINY_SCENARIO.replace("num_clusters: 3", "num_clusters: 2")
                   + "train: {eval_conflicts: room}\n")
    recipe = tmp_path / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE.replace("pointer_ffn: 16}", "pointer_ffn: 16, shared_actors: true}")
                      .replace("vector: dummy}", f"vector: dummy, also_validate_on: ['{two}']}}"))
    common = ["--config", str(recipe), "--seeds", "2", "--probe", "64", "--runs", str(tmp_path / "tuning"),
              "--recipe-runs", str(tmp_path / "reproduce"), "--out", str(tmp_path / "out"), "--workers", "1",
              "--device", "cpu", "--threads", "1"]
    proc = _tune("--candidate", "lr:train.lr=1e-3", *common)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "out" / "tiny-3-probe-64.json").read_text())
    (other,) = doc["also_validated_on"]
    assert other["name"] == "tiny-2" and (other["action"], other["conflicts"]) == ("argmax", "room")
    assert other["rival"] in ("optimus", "optimus:preemptive=false") and other["rival_mean"] > 0
    own_rival = doc["baselines"][doc["validation_rival"]]
    rows = {(r["candidate"], r["seed"]): r for r in doc["rows"]}
    assert len(rows) == 4
    for (name, seed), r in rows.items():
        assert r["validation_also"]["tiny-2"] > 0
        assert r["relative_best"] == pytest.approx(
            relative_jct([r["validation_best"], r["validation_also"]["tiny-2"]], [own_rival, other["rival_mean"]]))
        if name != RECIPE:
            assert r["relative_diff_vs_recipe"] == pytest.approx(r["relative_best"] - rows[RECIPE, seed]["relative_best"])
    lr = next(s for s in doc["summaries"] if s["candidate"] == "lr")
    assert lr["relative_mean"] == pytest.approx(np.mean([rows["lr", s]["relative_best"] for s in (0, 1)]))
    assert lr["also_means"]["tiny-2"] == pytest.approx(np.mean([rows["lr", s]["validation_also"]["tiny-2"] for s in (0, 1)]))
    md = (tmp_path / "out" / "tiny-3-probe-64.md").read_text()
    assert "**Every validation scenario.**" in md and "| candidate | tiny-3 | tiny-2 | relative JCT, mean ± sd |" in md
    assert "tiny-2: acting by argmax, conflicts by room" in md
    # a stored run scored before the recipe validated elsewhere is scored again, not read as it is
    stored = tmp_path / "out" / "seeds" / "tiny-3-probe-64" / "lr-s0.json"
    old = json.loads(stored.read_text())
    del old["row"]["validation_also"]
    stored.write_text(json.dumps(old))
    again = _tune("--candidate", "lr:train.lr=1e-3", *common)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("not trained or scored again") == 3
    assert "tiny-2" in json.loads(stored.read_text())["row"]["validation_also"]
