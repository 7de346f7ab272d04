"""Recipes in files: every scenario YAML carries its training recipe (the paper's method), train.py
trains it with no overrides, ``--print-config`` shows it resolved, a test-bed YAML says which
variant trains, and ``benchmarks/reproduce.py`` turns seeds of a recipe into the results files."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import train as train_cli
from agents.evaluation.runner import REPORT_SEED_OFFSET, REPORT_SEEDS
from agents.training.envs import evaluation_scenario
from agents.training.prepare import prepare_run, resolved_config
from agents.training.rundir import CONFIG_FILE
from envs.config import ConfigError, RECIPE_SECTIONS, available_scenarios, load_scenario, split_scenario_yaml

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = available_scenarios()


def test_the_seven_scenarios_have_yaml_files():
    assert set(SCENARIOS) >= {"synthetic-3", "synthetic-6", "multi-3", "hetero-6", "testbed-3", "testbed-6", "sjf-3"}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_recipe_is_the_papers_method_trained_from_scratch(name):
    _, _, sections = split_scenario_yaml(name)
    assert set(sections) == set(RECIPE_SECTIONS)
    assert "steps" in sections["train"], "the recipe states its step budget"
    spec = prepare_run(name)
    assert spec.train.steps == sections["train"]["steps"]
    # the paper's method: HAN + pointer, Bayes' rule, no start floor, no warm start
    assert spec.policy.variant == "tapfinger" and spec.policy.conflicts == "bayes" and not spec.policy.faithful
    assert spec.scenario.max_start_slowdown == 0
    assert spec.train.imitate is None
    # every recipe key is a real field (typos would have raised) and differs from nothing it does not set
    def plain(v):  # a YAML list is read into a tuple field
        return list(v) if isinstance(v, tuple) else v

    for key, value in sections["train"].items():
        assert plain(getattr(spec.train, key)) == value
    for key, value in sections["policy"].items():
        assert plain(getattr(spec.policy, key)) == value


@pytest.mark.parametrize("name", ["testbed-3", "testbed-6"])
def test_a_testbed_recipe_trains_and_validates_on_the_evaluation_variant(name):
    spec = prepare_run(name)
    assert spec.train.train_scenario == "eval" and spec.train.eval_scenario == "eval"
    base = load_scenario(name)
    evaluated = base.for_evaluation()
    assert spec.scenario == evaluated != base  # (32, 16) clusters at the evaluation load
    assert spec.scenario.capacities[0] == (32, 16)
    assert evaluation_scenario(spec.scenario, spec.train) == evaluated
    assert spec.scenario.for_evaluation() == spec.scenario  # evaluating the checkpoint changes nothing
    # the paper's training variant is still one override away
    assert prepare_run(name, ["train.train_scenario=train"]).scenario == base


def test_load_scenario_sets_the_recipe_aside_and_refuses_a_malformed_section(tmp_path):
    assert load_scenario("synthetic-3").name == "synthetic-3"
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "configs" / "synthetic-3.yaml").read_text().replace("train:\n", "train: 3\nold:\n", 1))
    with pytest.raises(ConfigError, match="'train' section must be a mapping"):
        load_scenario(bad)


def test_print_config_prints_the_resolved_sections_and_trains_nothing(tmp_path, capsys):
    argv = ["--config", "synthetic-3", "--print-config", "--logdir", str(tmp_path), "train.lr=1e-3", "num_tasks=50"]
    assert train_cli.main(argv) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    assert list(doc) == ["scenario", "policy", "train"]
    # train.py turns the progress bars off when stderr is not a terminal (as under pytest)
    expected = resolved_config(prepare_run("synthetic-3", ["train.lr=1e-3", "num_tasks=50"],
                                           flags={"logdir": str(tmp_path), "progress": False}))
    assert doc == expected
    assert doc["train"]["lr"] == 1e-3 and doc["scenario"]["num_tasks"] == 50
    assert doc["train"]["steps"] == prepare_run("synthetic-3").train.steps  # the recipe's budget
    assert not any(tmp_path.iterdir())  # no run directory


def test_the_held_out_range_is_fixed_and_disjoint_from_every_other_range():
    from agents.evaluation.results import report_seeds
    from agents.evaluation.runner import DEFAULT_SEED_OFFSET
    from agents.training.config import EVAL_SEED_DEFAULT, TRAIN_SEED_MIN

    seeds = report_seeds()
    assert len(seeds) == REPORT_SEEDS >= 30 and seeds[0] == REPORT_SEED_OFFSET
    assert EVAL_SEED_DEFAULT + 10_000 < DEFAULT_SEED_OFFSET + 100_000 <= seeds[0] and seeds[-1] < TRAIN_SEED_MIN
    assert report_seeds(3) == seeds[:3]
    with pytest.raises(ValueError):
        report_seeds(REPORT_SEEDS + 1)


# ---------------------------------------------------------------------------------------
# benchmarks/reproduce.py, end to end on a tiny recipe
# ---------------------------------------------------------------------------------------
#: a small scenario, without its recipe sections
TINY_SCENARIO = """
mode: single
num_clusters: 3
capacities: [[16, 16]]
per_task_max: [16, 16]
arrival_rate: 2
num_tasks: 10
switch_overhead: 0.5
task_types:
  - {name: img, prob: 0.5, min_req: [2, 1], progress: {kind: constant, steps: 4}}
  - {name: lm, prob: 0.5, min_req: [2, 1], progress: {kind: tanh, scale: 16, offset: 1.2}}
"""
TINY_RECIPE = TINY_SCENARIO + """policy: {hidden: 16, han_layers: 1, pointer_layers: 1, pointer_dim: 16, pointer_ffn: 16}
train: {steps: 128, envs: 2, collect_steps: 64, batch_size: 32, eval_every: 64, eval_episodes: 2,
        torch_threads: 1, vector: dummy}
"""


def _reproduce(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reproduce.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reproduce")
    recipe = tmp / "tiny-3.yaml"
    recipe.write_text(TINY_RECIPE)
    args = ["--config", str(recipe), "--seeds", "2", "--heldout", "3", "--runs", str(tmp / "runs"),
            "--out", str(tmp / "results"), "--workers", "1", "--device", "cpu", "--ship", str(tmp / "ship")]
    proc = _reproduce(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp, args, proc


def test_reproduce_trains_every_seed_with_the_recipe_alone(reproduced):
    tmp, _, proc = reproduced
    for seed in (0, 1):
        run = tmp / "runs" / "tiny-3" / f"s{seed}"
        saved = yaml.safe_load((run / CONFIG_FILE).read_text())
        assert saved["train"]["seed"] == seed and saved["train"]["steps"] == 128
        assert saved["policy"]["hidden"] == 16  # from the YAML, not passed on the command line
        result = json.loads((run / "result.json").read_text())
        assert result["finished"] and result["env_steps"] == 128 and result["wall_s"] > 0
        assert (run / "best.pt").is_file()
        # the checkpoint holds the complete resolved config
        from agents.training.checkpoints import load_checkpoint

        ckpt = load_checkpoint(run / "best.pt")
        assert ckpt["train_config"] == saved["train"] and ckpt["policy_config"] == saved["policy"]
    # CPU machine settings are passed to the trainer, nothing of the recipe
    assert "train.torch_threads=" in proc.stdout and "train.lr" not in proc.stdout


def test_reproduce_writes_one_row_per_seed_and_the_index(reproduced):
    tmp, _, _ = reproduced
    out = tmp / "results"
    rows = list(csv.DictReader((out / "tiny-3.csv").open()))
    assert [r["seed"] for r in rows] == ["0", "1"]
    doc = json.loads((out / "tiny-3.json").read_text())
    assert doc["heldout_seeds"] == [REPORT_SEED_OFFSET + k for k in range(3)]
    assert doc["validation_seeds"] == [10_000, 10_001]
    assert doc["recipe"]["scenario"] == {"reward": "team"}  # the reward its agents learned from, named on the page
    assert "learn from the `team` reward" in (out / "tiny-3.md").read_text()
    for row, csv_row in zip(doc["rows"], rows):
        assert row["heldout_mean_jct"] == pytest.approx(float(csv_row["heldout_mean_jct"]), abs=1e-4)
        assert row["env_steps"] == 128
        lo, hi, d = row["diff_non_oracle_lo"], row["diff_non_oracle_hi"], row["diff_non_oracle"]
        assert lo <= d <= hi
        # the paired difference is against the baseline's own held-out mean
        base = doc["baselines"][row["best_non_oracle"]]["mean_jct"]
        assert d == pytest.approx(row["heldout_mean_jct"] - base, abs=1e-9)
        assert not doc["baselines"][row["best_non_oracle"]]["oracle"]
        assert doc["baselines"][row["best_oracle"]]["oracle"]
    means = [r["heldout_mean_jct"] for r in doc["rows"]]
    assert doc["over_seeds"]["mean_jct"] == pytest.approx(sum(means) / 2)
    # sample efficiency: each seed's env steps until its curve beat the best validation baseline, named
    from agents.evaluation.curves import read_curve
    from agents.evaluation.results import steps_to_beat, validation_rival

    rival, rival_mean = validation_rival(doc["validation_baselines"])
    assert doc["validation_rival"] == rival and [r["validation_rival"] for r in rows] == [rival, rival]
    for seed, row, csv_row in zip((0, 1), doc["rows"], rows):
        beat = steps_to_beat(read_curve(tmp / "runs" / "tiny-3" / f"s{seed}").points, rival_mean)
        assert row["steps_to_beat_rival"] == beat and csv_row["steps_to_beat_rival"] == ("" if beat is None else str(beat))
    md = (out / "tiny-3.md").read_text()
    assert "python benchmarks/reproduce.py --config" in md and "| 0 |" in md and "| 1 |" in md
    assert f"Validation rival: **{rival}**" in md and f"| every seed beats {rival} on validation |" in md
    assert (out / "tiny-3.png").stat().st_size > 1000
    index = (out / "README.md").read_text()
    assert "[tiny-3](tiny-3.md)" in index and "python benchmarks/reproduce.py --index-only" in index
    assert (tmp / "ship" / "tiny-3.pt").read_bytes() == (tmp / "runs" / "tiny-3" / "s0" / "best.pt").read_bytes()
    shipped = (tmp / "ship" / "README.md").read_text()
    assert "| `tiny-3.pt` | `python benchmarks/reproduce.py --config" in shipped and "128 env steps" in shipped


def test_the_page_says_where_the_time_goes_and_what_lost_claims_cost(reproduced):
    tmp, _, _ = reproduced
    doc = json.loads((tmp / "results" / "tiny-3.json").read_text())
    rival = doc["over_seeds"]["best_non_oracle"]
    diag, counter = doc["diagnosis"], doc["conflict_counterfactual"]
    assert diag["baseline"] == rival and set(diag["splits"]) == {"tapfinger", rival}
    ours, theirs = diag["splits"]["tapfinger"]["rows"][-1], diag["splits"][rival]["rows"][-1]
    # from the same episodes as the table: the all row is the pooled mean JCT (every task finishes)
    assert diag["splits"]["tapfinger"]["unfinished"] == 0 and diag["splits"][rival]["unfinished"] == 0
    assert ours["jct"] == pytest.approx(sum(r["heldout_mean_jct"] for r in doc["rows"]) / 2)
    assert theirs["jct"] == pytest.approx(doc["baselines"][rival]["mean_jct"])
    assert ours["wait"] + ours["run"] == pytest.approx(ours["jct"])
    # seed 0's weights again with no claim lost, compared on the same workloads
    assert counter["policy"] == "tapfinger-s0" and counter["conflicts"] == "room" and counter["lost_claims"] == 0
    seed0 = doc["rows"][0]["heldout_mean_jct"]
    assert counter["vs_trained"]["mean_diff"] == pytest.approx(counter["mean_jct"] - seed0, abs=1e-9)
    assert counter["vs_baseline"]["mean_diff"] == pytest.approx(counter["mean_jct"] - doc["baselines"][rival]["mean_jct"],
                                                                abs=1e-9)
    assert "## Where the time goes (held out)" in (tmp / "results" / "tiny-3.md").read_text()


def test_index_only_rewrites_each_page_from_its_json(reproduced, tmp_path):
    import shutil

    tmp, _, _ = reproduced
    out = tmp_path / "results"
    shutil.copytree(tmp / "results", out)
    page = (out / "tiny-3.md").read_text()
    (out / "tiny-3.md").write_text("a page of an older format\n")
    proc = _reproduce("--index-only", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (out / "tiny-3.md").read_text() == page


def test_the_page_says_whether_a_seed_trained_within_the_cpu_budget(reproduced):
    import dataclasses

    from agents.evaluation.results import CPU_WALL_TARGET_S, read_results
    from agents.evaluation.results_page import verdicts

    tmp, _, _ = reproduced
    results = read_results(tmp / "results" / "tiny-3.json")
    [(what, met, evidence)] = [v for v in verdicts(results) if "wall time" in v[0]]
    assert what == "wall time per seed on the CPU within about 2.0 h" and met is True
    assert evidence.startswith("longest s") and evidence.endswith(" min")
    assert "| wall time per seed on the CPU within about 2.0 h | **yes** |" in (tmp / "results" / "tiny-3.md").read_text()
    slow = dataclasses.replace(results.rows[1], wall_s=CPU_WALL_TARGET_S + 600)
    over = dataclasses.replace(results, rows=[results.rows[0], slow])
    assert [(met, evidence) for what, met, evidence in verdicts(over) if "wall time" in what] == [
        (False, "longest s1: 2.2 h")]
    on_gpu = dataclasses.replace(results, rows=[dataclasses.replace(r, device="cuda") for r in over.rows])
    assert not [what for what, _, _ in verdicts(on_gpu) if "wall time" in what]  # the budget is the CPU's


def test_the_page_names_the_seeds_still_improving_late_in_their_budget(reproduced):
    import dataclasses

    from agents.evaluation.results import late_bests, read_results
    from agents.evaluation.results_page import late_best_text

    tmp, _, _ = reproduced
    results = read_results(tmp / "results" / "tiny-3.json")
    assert late_best_text(results.rows) in (tmp / "results" / "tiny-3.md").read_text()
    early = [dataclasses.replace(r, env_steps=1000, best_env_step=step) for r, step in zip(results.rows, (900, 0))]
    assert late_bests(early) == []  # 900 of 1000 is not past LATE_BEST_FRACTION
    assert late_best_text(early) == "Budget: no seed set its best validation point in the last 10% of its run."
    late = [early[0], dataclasses.replace(early[1], best_env_step=1000)]
    assert [r.seed for r in late_bests(late)] == [late[1].seed]
    assert late_best_text(late) == (
        f"Budget: 1 of 2 seeds set their best validation point in the last 10% of their runs (s{late[1].seed} at "
        "1,000 of 1,000 env steps): they were still improving that late in the budget.")
    unknown = [dataclasses.replace(r, best_env_step=None) for r in late]  # resumed from a file older than the counter
    assert late_bests(unknown) == []


def test_the_index_counts_each_scenarios_targets_and_lists_scenarios_not_run(reproduced, tmp_path):
    import shutil

    from agents.evaluation.results import read_results
    from agents.evaluation.results_index import write_index
    from agents.evaluation.results_page import verdicts

    tmp, _, _ = reproduced
    out = tmp_path / "results"
    out.mkdir()
    shutil.copy(tmp / "results" / "tiny-3.json", out / "tiny-3.json")
    lines = write_index(out, "the command", ["absent-6", "tiny-3"]).read_text().splitlines()
    header = next(line for line in lines if line.startswith("| scenario |"))
    rows = [line for line in lines if line.startswith("| [tiny-3]") or line.startswith("| absent-6 |")]
    assert [r.split(" |")[0] for r in rows] == ["| [tiny-3](tiny-3.md)", "| absent-6"]  # results first
    assert all(r.count("|") == header.count("|") for r in rows)  # every row has every column
    checks = verdicts(read_results(out / "tiny-3.json"))
    met = sum(m is True for _, m, _ in checks)
    assert header.endswith("| targets met |") and rows[0].endswith(f"| {met} of {len(checks)} |")
    assert "not run yet: `python benchmarks/reproduce.py --config absent-6 --seeds 1`" in rows[1]
    assert not any(line.startswith("- [") for line in lines)  # no other page in out yet: none linked
    (out / "generalist.md").write_text("# a family page\n")
    (out / "generalist.json").write_text('{"tiny-3": {"rows": []}}')  # another page's JSON: no scenario results
    links = [line for line in write_index(out, "the command").read_text().splitlines() if line.startswith("- [")]
    assert [link.split(":")[0] for link in links] == ["- [generalist.md](generalist.md)"]


def test_the_checkpoint_index_names_a_file_that_is_no_seed_of_its_recipe(reproduced, tmp_path):
    from agents.evaluation.results_index import checkpoint_index

    tmp, _, _ = reproduced
    ship = tmp_path / "ship"
    ship.mkdir()
    (ship / "tiny-3.pt").write_bytes((tmp / "runs" / "tiny-3" / "s1" / "best.pt").read_bytes())  # seed 1, not 0
    assert "not a seed of the current recipe" in checkpoint_index(ship, tmp / "results")


def test_the_readme_shows_the_generated_results_table():
    from agents.evaluation.results_index import README_BEGIN, README_END, readme_table

    readme = (ROOT / "README.md").read_text()
    block = readme.split(README_BEGIN, 1)[1].split(README_END, 1)[0].strip()
    generated = ROOT / "docs" / "results" / "README.md"
    assert block == (readme_table(generated.read_text()) if generated.is_file() else "")
    if generated.is_file():
        assert "](docs/results/" in block  # the scenario links work from the top level


def test_reproduce_does_not_train_a_finished_seed_again(reproduced):
    tmp, args, _ = reproduced
    best = tmp / "runs" / "tiny-3" / "s0" / "best.pt"
    before = best.stat().st_mtime_ns
    proc = _reproduce(*args)
    assert proc.returncode == 0, proc.stderr
    assert "seed 0: finished run" in proc.stdout and "seed 1: finished run" in proc.stdout
    assert best.stat().st_mtime_ns == before


def test_reproduce_refuses_runs_of_another_recipe(reproduced, tmp_path):
    """The recipe file changed after its seeds trained: the old runs are neither reused nor
    resumed, and nothing is trained or written."""
    from agents.evaluation.seed_runs import SeedRun, recipe_differences

    tmp, args, _ = reproduced
    changed = tmp_path / "tiny-3.yaml"
    changed.write_text(TINY_RECIPE.replace("batch_size: 32", "batch_size: 16, lr: 0.002"))
    run = tmp / "runs" / "tiny-3" / "s1"
    assert recipe_differences(SeedRun("s1", str(tmp / "tiny-3.yaml"), 1, run)) == []
    assert sorted(recipe_differences(SeedRun("s1", str(changed), 1, run))) == [
        "train.batch_size: run 32, recipe 16", "train.lr: run 0.0001, recipe 0.002"]
    assert recipe_differences(SeedRun("s1", str(tmp / "tiny-3.yaml"), 0, run)) == ["train.seed: run 1, recipe 0"]
    before = {p: p.stat().st_mtime_ns for p in (tmp / "runs").rglob("*") if p.is_file()}
    out = tmp_path / "out"
    proc = _reproduce(*[str(changed) if a == str(tmp / "tiny-3.yaml") else a for a in args[:-2]],
                      "--out", str(out))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "holds a run of another recipe (train.batch_size: run 32, recipe 16" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
    assert before == {p: p.stat().st_mtime_ns for p in (tmp / "runs").rglob("*") if p.is_file()}


@pytest.mark.parametrize("argv, message", [
    (["--config", "no-such-scenario"], "unknown scenario"),
    (["--config", "synthetic-3", "--seeds", "0"], "--seeds must be >= 1"),
    (["--config", "synthetic-3", "--heldout", "31"], "--heldout"),
    (["--seeds", "1"], "--config is required"),
])
def test_reproduce_bad_input_exits_2(argv, message, tmp_path):
    proc = _reproduce(*argv, "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["parallel", "threads", "workers"])
def test_the_machine_options_below_one_are_one_line_errors(name):
    """reproduce.py, ablations.py and tune.py share these options and their check."""
    from argparse import Namespace

    from agents.evaluation.seed_runs import machine_device

    args = Namespace(device="cpu", parallel=1, threads=None, workers=None)
    assert machine_device(args) == "cpu"
    setattr(args, name, 0)
    with pytest.raises(ConfigError, match=f"--{name} must be >= 1, got 0"):
        machine_device(args)


def test_a_page_names_every_option_beyond_the_paper_its_recipe_uses():
    from agents.evaluation.results_page import recipe_text
    from agents.training.config import PAPER_METHOD, options_beyond_the_paper

    paper = {"train": {}, "policy": {"shared_actors": False}, "scenario": {"reward": "per_cluster"}}
    assert options_beyond_the_paper(paper) == [] and "no option beyond it" in recipe_text(paper)
    shared = options_beyond_the_paper({**paper, "policy": {}})  # the default: one actor for every agent
    assert shared == [PAPER_METHOD["policy.shared_actors"][1]]
    team = options_beyond_the_paper({**paper, "scenario": {}})  # the default reward (and results saved without it)
    assert team == [PAPER_METHOD["scenario.reward"][1].format(value="team")]
    mixed = recipe_text({**paper, "scenario": {"reward": "team, per_cluster"}})
    assert "learn from the `team, per_cluster` reward" in mixed
    text = recipe_text({"train": {"stagger_start": True, "lost_claim_penalty": 4.0},
                        "policy": {"shared_actors": False, "conflicts": "room"}, "scenario": {"reward": "per_cluster"}})
    assert "staggered starts" in text and "a penalty of 4.0" in text and "`room`" in text and "shared" not in text


def test_every_acting_mode_beyond_the_paper_is_described_in_words():
    from agents.policy.modes import ACTION_WORDS, EVAL_ACTIONS, PAPER_ACTIONS
    from agents.training.config import options_beyond_the_paper

    assert set(ACTION_WORDS) == set(EVAL_ACTIONS) - PAPER_ACTIONS
    for action in EVAL_ACTIONS:
        named = options_beyond_the_paper({"train": {"eval_action": action}, "policy": {"shared_actors": False},
                                          "scenario": {"reward": "per_cluster"}})
        words = ACTION_WORDS.get(action)
        assert named == ([] if words is None else [
            f"agents that act outside training (validation, evaluation) by `{action}` ({words})"]), action


def test_every_conflict_mode_beyond_the_paper_is_described_in_words():
    from agents.policy.modes import CONFLICT_MODES, CONFLICT_WORDS, PAPER_CONFLICTS
    from agents.training.config import options_beyond_the_paper

    assert set(CONFLICT_WORDS) == set(CONFLICT_MODES) - {PAPER_CONFLICTS}
    for mode, words in CONFLICT_WORDS.items():
        named = options_beyond_the_paper({"train": {}, "policy": {"shared_actors": False, "conflicts": mode},
                                          "scenario": {"reward": "per_cluster"}})
        assert named == [f"conflicts resolved by `{mode}` ({words}) instead of the paper's Bayes rule"]
