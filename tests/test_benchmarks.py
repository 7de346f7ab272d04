"""The benchmarks that run episodes (``baselines.py``, ``tune_pd.py``, ``learning.py``) run them
through the evaluation runner (:func:`agents.evaluation.runner.run_evaluation`), keep their JSON
output keys, and give the same numbers as a direct :func:`envs.scheduling.run_episode` on the
same seeds, whatever the number of worker processes."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agents.baselines import make_scheduler
from envs import load_scenario, run_episode
from envs.bound import bound_mean_jct
from envs.core import Simulator

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_tasks=8"]
TIMINGS = {"decision_ms", "elapsed_s", "seconds", "workers"}


def bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def last_json(out: str) -> dict:
    return json.loads([ln for ln in out.splitlines() if ln.strip()][-1])


def without_timings(doc):
    if isinstance(doc, dict):
        return {k: without_timings(v) for k, v in doc.items() if k not in TIMINGS}
    if isinstance(doc, list):
        return [without_timings(v) for v in doc]
    return doc


def test_baselines_benchmark_keys_and_numbers_match_run_episode(capsys):
    args = ["--seeds", "2", "--scenarios", "synthetic-3", "--schedulers", "min", "optimus:oracle=true",
            "--workers", "1", "--json", *TINY]
    assert bench("baselines").main(args) == 0
    doc = last_json(capsys.readouterr().out)
    assert set(doc) == {"benchmark", "seeds", "workers", "train_variant", "overrides", "elapsed_s", "skipped",
                        "results"}
    assert doc["seeds"] == [0, 1] and doc["overrides"] == TINY and doc["skipped"] == {}
    res = doc["results"]["synthetic-3"]
    assert list(res["schedulers"]) == ["min", "optimus:oracle=true"]
    cfg = load_scenario("synthetic-3", TINY).for_evaluation()
    for label, (name, options) in {"min": ("min", {}), "optimus:oracle=true": ("optimus", {"oracle": True})}.items():
        row = res["schedulers"][label]
        assert set(row) == {"mean_jct", "ci95", "ci95_range", "per_seed", "seeds", "decision_ms", "steps",
                            "truncated", "invalid"}
        direct = [run_episode(cfg, make_scheduler(name, **options), seed) for seed in (0, 1)]
        assert row["per_seed"] == [r.mean_jct for r in direct]
        assert row["mean_jct"] == pytest.approx(np.mean(row["per_seed"]))
        assert row["steps"] == pytest.approx(np.mean([r.steps for r in direct]))
        assert row["truncated"] == 0 and row["invalid"] == 0
    bound = res["bound"]
    assert set(bound) == {"mean_jct", "ci95", "ci95_range", "per_seed", "seeds"}
    assert bound["per_seed"] == [bound_mean_jct(Simulator(cfg, seed)) for seed in (0, 1)]


def test_baselines_benchmark_cli_with_workers_matches_in_process(capsys):
    """The benchmark as a script in 2 spawned workers equals the in-process run."""
    common = ["--seeds", "2", "--scenarios", "synthetic-3", "multi-3", "--schedulers", "random", "tiresias"]
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "baselines.py"), *common, "--workers", "2",
                           *TINY], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| synthetic-3 | random |" in proc.stdout and "| multi-3 | *bound* |" in proc.stdout
    assert bench("baselines").main([*common, "--workers", "1", "--json", *TINY]) == 0
    assert without_timings(last_json(proc.stdout)) == without_timings(last_json(capsys.readouterr().out))


def test_baselines_benchmark_reports_a_failing_scheduler_and_keeps_the_others(monkeypatch, capsys):
    from agents.baselines.simple import MinScheduler

    def broken(self, sim):
        raise RuntimeError("boom")

    monkeypatch.setattr(MinScheduler, "decide", broken)
    args = ["--seeds", "2", "--scenarios", "synthetic-3", "--schedulers", "min", "random", "--workers", "1", *TINY]
    assert bench("baselines").main(args) == 1
    captured = capsys.readouterr()
    assert "scheduler(s) failed: min" in captured.err
    assert "| synthetic-3 | min | failed: RuntimeError: boom |" in captured.out
    res = last_json(captured.out)["results"]["synthetic-3"]
    assert res["schedulers"]["min"]["error"] == "RuntimeError: boom"
    assert math.isfinite(res["schedulers"]["random"]["mean_jct"]) and math.isfinite(res["bound"]["mean_jct"])


def test_baselines_benchmark_bad_input_exits_2(capsys):
    assert bench("baselines").main(["--schedulers", "nosuch", "--scenarios", "synthetic-3"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_tune_pd_compare_and_dry_run(tmp_path, capsys):
    tune = bench("tune_pd")
    assert tune.main(["--compare", "--scenarios", "synthetic-3", "--seeds", "0-1", "--workers", "1",
                      "--schedulers", "min", "pd-maxsche:F=paper,cpu_policy=min"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seeds"] == [0, 1] and doc["variant"] == "eval"
    cells = doc["results"]["synthetic-3"]
    assert list(cells) == ["min", 'pd-maxsche{"F": "paper", "cpu_policy": "min"}']
    cfg = load_scenario("synthetic-3").for_evaluation()
    direct = [tune.episode_score(run_episode(cfg, make_scheduler("min"), seed)) for seed in (0, 1)]
    assert cells["min"]["mean_jct"] == round(float(np.mean(direct)), 3)
    assert set(cells["min"]) == {"mean_jct", "decision_ms", "invalid", "truncated"}

    out = tmp_path / "tuned.json"
    assert tune.main(["--scenarios", "synthetic-3", "--seeds", "1000", "--grid", "1", "10", "--workers", "1",
                      "--schedulers", "pd-maxsche", "--out", str(out), "--dry-run"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not out.exists() and doc["_meta"]["written"] is None
    assert doc["pd-maxsche"]["synthetic-3"] in (1.0, 10.0) and doc["pd-maxsche"]["default"] in (1.0, 10.0)
    assert set(doc["scores"]["pd-maxsche"]["synthetic-3"]) == {"1.0", "10.0"}


def test_learning_evaluation_runs_checkpoints_and_baselines_through_the_runner():
    learning = bench("learning")
    cfg = load_scenario("synthetic-3", TINY)
    checkpoint = ROOT / "checkpoints" / "synthetic-3.pt"
    if not checkpoint.is_file():
        pytest.skip("no shipped checkpoint")
    from agents.evaluation.runner import resolve_schedulers
    from agents.policy.scheduler import TapFingerScheduler

    specs = [learning.policy_spec("tapfinger(best)", checkpoint, cfg), *resolve_schedulers("min")]
    table = learning.evaluate(cfg, specs, [100_000, 100_001], workers=1)
    assert list(table) == ["tapfinger(best)", "min"]
    for row in table.values():
        assert {"mean_jct", "ci95", "per_seed", "truncated"} <= set(row)
    direct = [run_episode(cfg, TapFingerScheduler(checkpoint=checkpoint), seed).mean_jct for seed in (100_000, 100_001)]
    assert table["tapfinger(best)"]["per_seed"] == [round(j, 4) for j in direct]


def test_update_minibatch_benchmark_reports_both_pointer_layouts(capsys):
    mod = bench("update_minibatch")
    assert mod.main(["--scenario", "synthetic-3", "--batch", "16", "--collect", "64", "--envs", "4",
                     "--repeats", "1", "policy.hidden=16", "policy.pointer_dim=16", "policy.pointer_ffn=16"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["scenario"] == "synthetic-3" and out["batch"] == 16
    assert 0.0 <= out["active_fraction"] <= 1.0
    assert out["full_rows_samples_per_s"] > 0 and out["compact_rows_samples_per_s"] > 0
    with pytest.raises(SystemExit):
        mod.main(["--batch", "128", "--collect", "64"])  # a minibatch larger than what was collected


def test_flop_count_of_a_known_product():
    mod = bench("policy_latency")
    a, b = torch.ones(8, 32), torch.ones(32, 16)
    assert mod.mflop_per_sample(lambda: a @ b, batch=8) == round(2 * 8 * 32 * 16 / 8 / 1e6, 3)


def test_policy_latency_keys_flops_and_rates(capsys):
    mod = bench("policy_latency")
    assert mod.main(["--cpu-only", "--no-train", "--repeats", "1", "--warmup", "0"]) == 0
    out = last_json(capsys.readouterr().out)
    keys = {"cpu-N3", "cpu-N3-b64", "cpu-N6", "cpu-N6-b64", "cpu-N6-b1024", "cpu-N24", "cpu-N24-b64"}
    assert keys <= set(out) and keys <= set(out["cpu_time"])
    assert set(out["flops"]) == {"cpu-N6-b1024"}
    # hidden 128, 3 HAN layers and a 2-layer pointer over 6 x 10 slots: millions of flops per sample
    assert 1.0 < out["flops"]["cpu-N6-b1024"] < 1000.0
    assert out["gflops"]["cpu-N6-b1024"] == pytest.approx(out["flops"]["cpu-N6-b1024"] * out["cpu-N6-b1024"] / 1000,
                                                          abs=0.01)
    assert out["settings"]["policy"]["conflicts"] == "bayes"
    assert mod.main(["--threads", "0"]) == 2


def test_policy_latency_trains_on_shards(capsys):
    mod = bench("policy_latency")
    assert mod.main(["--cpu-only", "--repeats", "1", "--warmup", "0", "--shards", "2", "--json"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["settings"]["shards"] == 2
    assert out["cpu-N6-train-b256"] > 0 and out["cpu-N6-train-b1024"] > 0
    assert 1.0 < out["flops"]["cpu-N6-train-b1024"] < 1000.0
    assert mod.main(["--shards", "0"]) == 2


def test_policy_latency_sequential_conflicts(capsys):
    mod = bench("policy_latency")
    assert mod.main(["--cpu-only", "--no-train", "--repeats", "1", "--warmup", "0", "--conflicts", "sequential"]) == 0
    out = last_json(capsys.readouterr().out)
    assert out["settings"]["policy"]["conflicts"] == "sequential" and out["cpu-N6"] > 0


def test_policy_latency_takes_policy_overrides(capsys):
    mod = bench("policy_latency")
    tiny = ["policy.hidden=16", "policy.pointer_dim=16", "policy.pointer_ffn=16"]
    assert mod.main(["--cpu-only", "--no-train", "--repeats", "1", "--warmup", "0", "--json", *tiny]) == 0
    out = last_json(capsys.readouterr().out)
    policy = out["settings"]["policy"]
    assert (policy["hidden"], policy["pointer_dim"], policy["pointer_ffn"]) == (16, 16, 16)
    # a smaller model does fewer matrix products per sample than the default's millions
    assert out["flops"]["cpu-N6-b1024"] < 1.0
    capsys.readouterr()
    for bad in ("policy.bogus=1", "policy.hidden=63", "train.lr=0.1", "num_clusters=3", "policy.hidden"):
        assert mod.main(["--cpu-only", bad]) == 2
        assert "error:" in capsys.readouterr().err


SPEED_TINY = ["--envs", "4", "--iterations", "1", "train.collect_steps=32", "train.batch_size=16",
              "policy.hidden=16", "policy.pointer_dim=16", "policy.pointer_ffn=16", "num_tasks=8"]


def test_training_speed_reports_rates(capsys):
    mod = bench("training_speed")
    assert mod.main(["--json", *SPEED_TINY]) == 0
    out = last_json(capsys.readouterr().out)
    from agents.training.prepare import prepare_run

    recipe = prepare_run(out["scenario"]).train  # the run is train.py's: the scenario's recipe, then the overrides
    assert out["collect_steps"] == 32 and out["batch_size"] == 16 and out["repeat"] == 2  # the benchmark's own
    assert out["precision"] == recipe.precision and out["old_stats"] == recipe.old_stats
    assert out["malloc"] == recipe.malloc
    assert out["env_steps_per_s"] > 0 and out["collect_steps_per_s"] > out["env_steps_per_s"]
    assert out["update_samples_per_s"] > 0


def test_training_speed_compares_variants_in_one_process(capsys):
    mod = bench("training_speed")
    assert mod.main(["--json", "--compare", "train.old_stats=recompute,behaviour", *SPEED_TINY]) == 0
    out = last_json(capsys.readouterr().out)
    assert list(out["variants"]) == ["recompute", "behaviour"]
    assert [v["old_stats"] for v in out["variants"].values()] == ["recompute", "behaviour"]
    assert out["ratios"]["recompute"] == 1.0 and out["ratios"]["behaviour"] > 0
    for bad in ("train.old_stats=behaviour", "=a,b", "train.old_stats", "train.old_stats=recompute,stored"):
        with pytest.raises(SystemExit):
            mod.main(["--compare", bad, *SPEED_TINY])


def test_training_speed_rotates_the_order_of_compared_runs(capsys):
    """The position in a round can favour a run, so every round starts with another variant."""
    mod = bench("training_speed")
    assert [mod.round_order(3, i) for i in range(4)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    assert mod.round_order(2, 1) == [1, 0] and mod.round_order(1, 5) == [0]
    assert mod.main(["--compare", "train.old_stats=recompute,behaviour", *SPEED_TINY, "--iterations", "3"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("iteration")]
    order = [ln.split("[")[1].split("]")[0] for ln in lines]
    assert order == ["behaviour", "recompute", "recompute", "behaviour", "behaviour", "recompute"]


@pytest.mark.parametrize("compare", ["train.malloc=keep,system", "train.torch_threads=1,2"])
def test_training_speed_refuses_to_compare_a_process_wide_setting(compare, capsys):
    mod = bench("training_speed")
    with pytest.raises(SystemExit):
        mod.main(["--compare", compare, *SPEED_TINY])
    err = capsys.readouterr().err
    assert compare.partition("=")[0] in err and "separate processes" in err
