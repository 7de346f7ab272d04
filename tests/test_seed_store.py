"""A recipe's finished seeds kept in ``<out>/seeds/<scenario>/s<seed>.json`` (:mod:`agents.evaluation.seed_store`):
``benchmarks/reproduce.py`` writes each as soon as the seed is trained and evaluated, trains only the seeds
not stored, writes the page from stored seeds without their run directories, and refuses seeds of another recipe."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from test_recipes import TINY_RECIPE, TINY_SCENARIO  # tests/ is on sys.path (pytest rootdir insertion)

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = 3


def _reproduce(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reproduce.py"), *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _args(tmp: Path, seeds: int, *extra: str) -> list[str]:
    return ["--config", str(tmp / "tiny-3.yaml"), "--seeds", str(seeds), "--heldout", str(HELDOUT),
            "--runs", str(tmp / "runs"), "--out", str(tmp / "results"), "--workers", "1", "--device", "cpu", *extra]


@pytest.fixture(scope="module")
def one_seed(tmp_path_factory):
    """A 1-seed reproduce of the tiny recipe; a copy of its results directory before anything else ran."""
    tmp = tmp_path_factory.mktemp("seed_store")
    (tmp / "tiny-3.yaml").write_text(TINY_RECIPE)
    proc = _reproduce(*_args(tmp, 1))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shutil.copytree(tmp / "results", tmp / "after-one")
    shutil.copytree(tmp / "runs", tmp / "runs-one")
    return tmp, proc


@pytest.fixture(scope="module")
def two_seeds(one_seed):
    """The run directories removed, then the same command with 2 seeds."""
    tmp, _ = one_seed
    shutil.rmtree(tmp / "runs")
    proc = _reproduce(*_args(tmp, 2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp, proc


def test_a_one_seed_reproduce_writes_the_seed_file(one_seed):
    from agents.evaluation.curves import read_curve
    from agents.evaluation.results import file_sha256
    from agents.evaluation.seed_runs import SeedRun, recipe_fingerprint, resolve_recipe
    from agents.evaluation.seed_store import read_seed, seed_path

    tmp, proc = one_seed
    path = seed_path(tmp / "after-one", "tiny-3", 0)
    doc = read_seed(path)
    run = tmp / "runs-one" / "tiny-3" / "s0"
    assert f"seed 0: wrote {seed_path(tmp / 'results', 'tiny-3', 0)}" in proc.stdout
    assert doc["seed"] == 0 and doc["recipe"]["train"]["seed"] == 0
    assert doc["recipe"] == recipe_fingerprint(resolve_recipe(SeedRun("", str(tmp / "tiny-3.yaml"), 0, run)))
    assert "logdir" not in doc["recipe"]["train"] and doc["recipe"]["train"]["batch_size"] == 32
    assert doc["training"] == json.loads((run / "result.json").read_text())
    assert doc["validation_curve"] == [list(p) for p in read_curve(run).points]
    assert doc["best_sha256"] == file_sha256(run / "best.pt")
    # the page's row is the mean of the stored per-workload means
    page = json.loads((tmp / "after-one" / "tiny-3.json").read_text())
    assert doc["heldout"]["seeds"] == page["heldout_seeds"] and len(doc["heldout"]["mean_jct"]) == HELDOUT
    assert page["rows"][0]["heldout_mean_jct"] == pytest.approx(float(np.mean(doc["heldout"]["mean_jct"])))
    assert page["seed0_sha256"] == doc["best_sha256"]
    assert len(doc["episodes"]) == HELDOUT and doc["split"]["rows"][-1]["type"] == "all"
    assert doc["counterfactual"]["conflicts"] == "room" and len(doc["counterfactual"]["heldout_mean_jct"]) == HELDOUT


def test_b_without_runs_only_the_missing_seed_trains_and_the_page_covers_both(two_seeds):
    from agents.evaluation.seed_store import read_seed, seed_path

    tmp, proc = two_seeds
    assert "seed 0: finished run stored in" in proc.stdout and "train.py --config" in proc.stdout
    assert "--seed 0" not in proc.stdout and "--seed 1" in proc.stdout  # only seed 1 trained
    assert sorted(p.name for p in (tmp / "runs" / "tiny-3").iterdir() if p.is_dir()) == ["s1"]
    # seed 0's file is the one the first run wrote, untouched
    assert (seed_path(tmp / "results", "tiny-3", 0).read_bytes()
            == seed_path(tmp / "after-one", "tiny-3", 0).read_bytes())
    docs = [read_seed(seed_path(tmp / "results", "tiny-3", s)) for s in (0, 1)]
    page = json.loads((tmp / "results" / "tiny-3.json").read_text())
    assert [r["seed"] for r in page["rows"]] == [0, 1]
    for row, doc in zip(page["rows"], docs):
        assert row["heldout_mean_jct"] == pytest.approx(float(np.mean(doc["heldout"]["mean_jct"])))
        assert row["env_steps"] == doc["training"]["env_steps"] and row["wall_s"] == doc["training"]["wall_s"]
        assert row["validation_best"] == min(v for _, v in doc["validation_curve"])
    assert page["over_seeds"]["seeds"] == [0, 1]
    assert page["seed0_sha256"] == docs[0]["best_sha256"]
    # where the time goes: both seeds pooled; what lost claims cost: seed 0's stored counterfactual
    pooled = page["diagnosis"]["splits"]["tapfinger"]
    assert pooled["rows"][-1]["tasks"] == sum(d["split"]["rows"][-1]["tasks"] for d in docs)
    assert pooled["lost_claims"] == pytest.approx(np.mean([d["split"]["lost_claims"] for d in docs]))
    counter = page["conflict_counterfactual"]
    assert counter["policy"] == "tapfinger-s0" and counter["mean_jct"] == docs[0]["counterfactual"]["mean_jct"]
    assert counter["vs_trained"]["mean_diff"] == pytest.approx(
        counter["mean_jct"] - page["rows"][0]["heldout_mean_jct"], abs=1e-9)
    md = (tmp / "results" / "tiny-3.md").read_text()
    assert "over 2 training seed(s)" in md and "## Where the time goes (held out)" in md


def test_c_a_changed_recipe_is_refused_naming_the_keys(two_seeds, tmp_path):
    tmp, _ = two_seeds
    changed = tmp_path / "tiny-3.yaml"
    changed.write_text(TINY_RECIPE.replace("batch_size: 32", "batch_size: 16"))
    before = {p: p.stat().st_mtime_ns for p in (tmp / "results").rglob("*") if p.is_file()}
    args = _args(tmp, 3)
    args[1] = str(changed)
    args[args.index("--runs") + 1] = str(tmp_path / "runs")
    proc = _reproduce(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()[-1:]
    assert "holds a seed of another recipe (train.batch_size: stored 32, recipe 16)" in line and "--restart" in line
    assert "Traceback" not in proc.stderr and not (tmp_path / "runs").exists()
    assert before == {p: p.stat().st_mtime_ns for p in (tmp / "results").rglob("*") if p.is_file()}


def test_restart_deletes_the_stored_seeds_and_evaluates_a_finished_run_again(two_seeds, tmp_path):
    """The same numbers again: a finished run is evaluated, not trained; seed 0 (no run left) is gone."""
    from agents.evaluation.seed_store import read_seed, seed_path, stored_seeds

    tmp, _ = two_seeds
    out = tmp_path / "results"
    shutil.copytree(tmp / "results", out)
    args = _args(tmp, 1, "--first-seed", "1", "--restart")
    args[args.index("--out") + 1] = str(out)
    proc = _reproduce(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "seed 1: finished run in" in proc.stdout and "train.py --config" not in proc.stdout
    assert list(stored_seeds(out, "tiny-3")) == [1]
    again, first = (read_seed(seed_path(d, "tiny-3", 1)) for d in (out, tmp / "results"))
    assert again["heldout"] == first["heldout"] and again["split"] == first["split"]


@pytest.mark.parametrize("extra, message", [
    (["--ship", "SHIP"], "is gone (seed 0's results are stored without its weights)"),
    (["--heldout", "2"], "was evaluated on 3 held-out workloads, not 2"),
])
def test_a_stored_seed_without_its_run_refuses_what_needs_the_run(two_seeds, tmp_path, extra, message):
    tmp, _ = two_seeds
    proc = _reproduce(*_args(tmp, 2), *[str(tmp_path / "ship") if a == "SHIP" else a for a in extra])
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "ship").exists()


# ---------------------------------------------------------------------------------------
# pooled_split: the seeds' split rebuilt from their stored splits
# ---------------------------------------------------------------------------------------
def test_the_pooled_split_is_the_split_of_the_pooled_episodes():
    """Clusters of two sizes (the by-capacity table), episodes split into two "seeds" of a baseline,
    with coordination tallies: pooling the stored splits gives time_split of all the episodes."""
    import yaml

    from agents.evaluation.diagnosis import time_split
    from agents.evaluation.runner import resolve_schedulers, run_evaluation
    from agents.evaluation.seed_store import pooled_split
    from envs.config import ScenarioConfig

    raw = yaml.safe_load(TINY_SCENARIO)
    raw.update(name="tiny-3", capacities=[[16, 16], [8, 8], [16, 16]])
    cfg = ScenarioConfig.from_dict(raw)
    run = run_evaluation(cfg, resolve_schedulers("min", (), cfg), [1, 2, 3, 4, 5], workers=1, progress=False)
    episodes = [dataclasses.replace(r) for r in run.results["min"]]
    preemptive = run.preemptive.get("min", False)
    for k, r in enumerate(episodes):
        r.extra = {**r.extra, "coordination": {"contested": k + 1, "distinct": 2.0 * k, "uniform": 1.5 * k,
                                               "matching": 3.0 * k, "real_steps": 10 + k, "idle_ends": k}}
        r.conflicts = k
    names, caps = [t.name for t in cfg.task_types], cfg.capacities
    docs = [{"split": time_split(part, names, preemptive, caps),
             "episodes": [{"conflicts": r.conflicts, "coordination": r.extra["coordination"]} for r in part]}
            for part in (episodes[:2], episodes[2:])]
    pooled, direct = pooled_split(docs), time_split(episodes, names, preemptive, caps)
    assert direct["by_capacity"] and direct["coordination"]
    assert set(pooled) == set(direct)
    for key in ("unfinished", "lost_claims"):
        assert pooled[key] == pytest.approx(direct[key])
    assert pooled["coordination"] == pytest.approx(direct["coordination"])
    for part in ("rows", "by_capacity"):
        assert len(pooled[part]) == len(direct[part])
        for a, b in zip(pooled[part], direct[part]):
            assert a.keys() == b.keys() and a["type"] == b["type"] and a.get("capacity") == b.get("capacity")
            assert {k: v for k, v in a.items() if k not in ("type", "capacity")} == pytest.approx(
                {k: v for k, v in b.items() if k not in ("type", "capacity")})
