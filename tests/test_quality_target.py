"""The quality target in evaluation outputs: oracle baselines, paired per-seed differences and the
``target`` verdict in ``summary.json``, the printed table and ``REPORT.md``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from agents.baselines import ORACLE_BASELINES, available_schedulers, uses_oracle
from agents.evaluation.report import ReportEntry, format_report, median_reductions
from agents.evaluation.runner import resolve_schedulers, run_evaluation
from agents.evaluation.summary import BOUND_RATIO_TARGET, build_summary, format_table, target_check, target_text
from agents.policy.checkpoint import save_policy_checkpoint
from agents.policy.config import PolicyConfig
from agents.policy.network import TapFingerPolicy
from envs.config import ConfigError, load_scenario
from envs.observation import ObservationSpec

SEEDS = [100_000, 100_001, 100_002]


def test_oracle_baselines_are_the_duration_readers():
    assert ORACLE_BASELINES <= set(available_schedulers())
    for name in ("okita", "pd-maxweight", "pd-maxsche", "pd-preemptive", "sjf"):
        assert uses_oracle(name)
    for name in ("optimus", "random", "min", "tiresias"):
        assert not uses_oracle(name)
    assert uses_oracle("optimus", {"oracle": True}) and not uses_oracle("optimus", {"preemptive": False})


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    cfg = load_scenario("synthetic-3", ["num_tasks=12", "max_start_slowdown=0"]).for_evaluation()
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg),
                             PolicyConfig(hidden=16, han_layers=1, heads=2, pointer_heads=2, pointer_ffn=32))
    ckpt = save_policy_checkpoint(tmp_path_factory.mktemp("ck") / "tiny.pt", policy, cfg)
    specs = resolve_schedulers("min,optimus,optimus:preemptive=false,okita,pd-maxsche", [str(ckpt)], cfg)
    run = run_evaluation(cfg, specs, SEEDS, workers=1, progress=False)
    return run, build_summary(run)


def test_paired_differences_are_per_seed_means_with_t_intervals(evaluation):
    run, summary = evaluation
    assert summary["oracle"] == ["okita", "pd-maxsche"]
    tap = np.array([r.jct.mean() for r in run.results["tapfinger"]])
    assert set(summary["paired"]) == {"min", "optimus", "optimus:preemptive=false", "okita", "pd-maxsche"}
    for name, entry in summary["paired"].items():
        diff = tap - np.array([r.jct.mean() for r in run.results[name]])
        assert entry["per_seed"] == pytest.approx(diff.tolist(), abs=1e-12)
        assert entry["mean_diff"] == pytest.approx(diff.mean(), abs=1e-12)
        half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / math.sqrt(len(diff))
        assert entry["ci95"] == pytest.approx([diff.mean() - half, diff.mean() + half], abs=1e-9)


def test_target_names_the_best_baselines_and_judges_them(evaluation):
    run, summary = evaluation
    s, t = summary["schedulers"], summary["target"]
    online = ["min", "optimus", "optimus:preemptive=false"]
    assert t["best_non_oracle"] == min(online, key=lambda n: s[n]["mean_jct"])
    assert t["best_oracle"] == min(["okita", "pd-maxsche"], key=lambda n: s[n]["mean_jct"])
    hi = summary["paired"][t["best_non_oracle"]]["ci95"][1]
    assert t["beats_best_non_oracle"] is (hi < 0)
    ratio = s["tapfinger"]["mean_jct"] / summary["bound"]["mean_jct"]
    assert t["bound_ratio"] == pytest.approx(ratio)
    assert t["within_bound_ratio"] is (ratio <= BOUND_RATIO_TARGET)
    assert t["met"] is (t["beats_best_non_oracle"] and t["within_bound_ratio"])
    baselines = ["min", "optimus", "optimus:preemptive=false", "okita", "pd-maxsche"]
    assert t["best_baseline"] == min(baselines, key=lambda n: s[n]["mean_jct"])
    closest = s[t["best_baseline"]]["mean_jct"] / summary["bound"]["mean_jct"]
    assert t["best_baseline_bound_ratio"] == pytest.approx(closest)
    table = format_table(summary, run)
    verdict = {True: "met", False: "not met"}
    lines = table.splitlines()
    start = lines.index("targets for tapfinger:")
    beats, bound, oracle, overall = lines[start + 1:]  # one line per target, the oracle for reference, the verdict
    best = t["best_non_oracle"]
    lo, hi = summary["paired"][best]["ci95"]
    assert beats == (f"  below the best non-oracle baseline {best}, paired 95% interval below 0: "
                     f"{verdict[t['beats_best_non_oracle']]} (paired Δ {summary['paired'][best]['mean_diff']:+.2f}"
                     f"±{(hi - lo) / 2:.2f})")
    assert bound == (f"  within {BOUND_RATIO_TARGET:g}x the bound: {verdict[t['within_bound_ratio']]} "
                     f"({ratio:.2f}x; closest baseline {t['best_baseline']} {closest:.2f}x)")
    assert oracle.startswith(f"  for reference, not a target: the best oracle baseline {t['best_oracle']} *")
    met = [t["beats_best_non_oracle"], t["within_bound_ratio"]].count(True)
    assert overall == f"  -> {met} of 2 targets met: {'MET' if t['met'] else 'not met'}"
    # the oracle baselines' rows are marked, the mark explained under the table; the policy's row is not
    rows = {line.split()[0]: line.split()[1] for line in lines[2:start] if line.split() and line.split()[0] in s}
    assert {name for name, mark in rows.items() if mark == "*"} == {"okita", "pd-maxsche"}
    assert "* oracle baseline: reads the true task durations" in table


def test_target_check_on_hand_made_numbers():
    schedulers = {p: {"mean_jct": 4.0} for p in ("pol",)}
    schedulers |= {"a": {"mean_jct": 5.0}, "b": {"mean_jct": 4.5}, "o": {"mean_jct": 3.0}, "x": {"mean_jct": None}}
    paired = {"a": {"ci95": [-1.5, -0.5]}, "b": {"ci95": [-0.9, -0.1]}, "o": {"ci95": [0.5, 1.5]},
              "x": {"ci95": [None, None]}}
    t = target_check(schedulers, paired, ["o"], "pol", bound=3.2)
    assert (t["best_non_oracle"], t["best_oracle"], t["beats_best_non_oracle"]) == ("b", "o", True)
    assert t["bound_ratio"] == pytest.approx(1.25) and t["within_bound_ratio"] and t["met"]
    assert t["best_baseline"] == "o" and t["best_baseline_bound_ratio"] == pytest.approx(3.0 / 3.2)
    paired["b"] = {"ci95": [-0.9, 0.2]}  # the interval reaches zero: not a significant win
    assert target_check(schedulers, paired, ["o"], "pol", bound=3.2)["met"] is False
    paired["b"] = {"ci95": [-0.9, -0.1]}
    far = target_check(schedulers, paired, ["o"], "pol", bound=3.0)  # 4.0 / 3.0 > 1.3
    assert far["beats_best_non_oracle"] and not far["within_bound_ratio"] and not far["met"]
    one_seed = target_check(schedulers, {"b": {"ci95": [None, None]}}, [], "pol", bound=3.2)
    assert one_seed["beats_best_non_oracle"] is None and one_seed["met"] is False
    schedulers["other-checkpoint"] = {"mean_jct": 2.5}  # a second learned policy is no baseline
    paired["other-checkpoint"] = {"ci95": [0.1, 0.9]}
    t = target_check(schedulers, paired, ["o"], "pol", bound=3.2, policies=["pol", "other-checkpoint"])
    assert (t["best_non_oracle"], t["met"], t["best_baseline"]) == ("b", True, "o")
    assert target_check(schedulers, paired, ["o"], "pol", bound=3.2)["best_non_oracle"] == "other-checkpoint"


def test_the_verdict_gives_each_target_its_own_line_with_its_number():
    schedulers = {"pol": {"mean_jct": 4.0}, "b": {"mean_jct": 4.5}, "o": {"mean_jct": 3.0}}
    paired = {"b": {"mean_diff": -0.5, "ci95": [-0.9, -0.1]}, "o": {"mean_diff": 1.0, "ci95": [0.5, 1.5]}}

    def lines(paired, bound, **kw):
        summary = {"target": target_check(schedulers, paired, ["o"], "pol", bound=bound, **kw), "paired": paired,
                   "max_start_slowdown": 2.0}
        return target_text(summary, "pol").splitlines()

    assert lines(paired, 3.2) == [
        "targets for pol:",
        "  below the best non-oracle baseline b, paired 95% interval below 0: met (paired Δ -0.50±0.40)",
        "  within 1.3x the bound: met (1.25x; closest baseline o 0.94x)",
        "  for reference, not a target: the best oracle baseline o * (paired Δ +1.00±0.50)",
        "  -> 2 of 2 targets met: MET",
    ]
    far = lines(paired, 2.5)  # 4.0 / 2.5 = 1.6: one target met, the other not, so the target is not met
    assert far[2] == "  within 1.3x the bound: not met (1.60x; closest baseline o 1.20x)"
    assert far[-1] == "  -> 1 of 2 targets met: not met"
    one_seed = {"b": {"mean_diff": -0.5, "ci95": [None, None]}, "o": {"mean_diff": 1.0, "ci95": [None, None]}}
    assert lines(one_seed, 3.2)[1] == ("  below the best non-oracle baseline b, paired 95% interval below 0: "
                                       "undecided (one seed: no interval) (paired Δ -0.50)")
    held = lines(paired, 3.2, policy_oracle=True)  # a floored policy is held to the oracle baseline too
    assert held[3] == ("  below the best oracle baseline o *, paired 95% interval below 0 (pol reads the true "
                       "durations, max_start_slowdown=2, so it must beat that one too): not met (paired Δ +1.00±0.50)")
    assert held[-1] == "  -> 2 of 3 targets met: not met"


def test_a_policy_reading_the_true_durations_must_beat_the_oracle_baselines_too():
    schedulers = {"pol": {"mean_jct": 4.0}, "b": {"mean_jct": 4.5}, "o": {"mean_jct": 4.2}}
    paired = {"b": {"ci95": [-0.9, -0.1]}, "o": {"ci95": [-0.4, 0.1]}}
    plain = target_check(schedulers, paired, ["o"], "pol", bound=3.2)
    assert plain["met"] and not plain["policy_uses_oracle"] and plain["beats_best_oracle"] is False
    held = target_check(schedulers, paired, ["o"], "pol", bound=3.2, policy_oracle=True)
    assert held["policy_uses_oracle"] and not held["met"]  # ties the oracle baseline
    paired["o"] = {"ci95": [-0.4, -0.05]}
    assert target_check(schedulers, paired, ["o"], "pol", bound=3.2, policy_oracle=True)["met"]
    no_oracle = target_check(schedulers, {"b": paired["b"]}, [], "pol", bound=3.2, policy_oracle=True)
    assert no_oracle["beats_best_oracle"] is None and no_oracle["met"]  # nothing oracle ran to beat


def test_report_overview_lists_every_scenario(evaluation):
    run, summary = evaluation
    entries = [ReportEntry("synthetic-3", summary, "tiny.pt", run.cfg, median_reductions(summary)),
               ReportEntry("sjf-3", {"schedulers": {}, "bound": {"mean_jct": 1.0}}, None, run.cfg, {})]
    text = format_report(entries, SEEDS)
    overview = text[text.index("## Quality target"):text.index("## synthetic-3")]
    t, s = summary["target"], summary["schedulers"]
    best = t["best_non_oracle"]
    lo, hi = summary["paired"][best]["ci95"]
    row = (f"| synthetic-3 | {s['tapfinger']['mean_jct']:.2f} | {best} {s[best]['mean_jct']:.2f} "
           f"| {summary['paired'][best]['mean_diff']:+.2f} [{lo:+.2f}, {hi:+.2f}] |")
    assert row in overview
    closest = t["best_baseline"]
    ratio = s[closest]["mean_jct"] / summary["bound"]["mean_jct"]
    assert f"| {closest} {ratio:.2f} | {'yes' if t['met'] else 'no'} |" in overview
    yes = {True: "yes", False: "no"}
    assert f"[{lo:+.2f}, {hi:+.2f}] | {yes[t['beats_best_non_oracle']]} | {t['best_oracle']} " in overview
    assert f"| {t['bound_ratio']:.2f} | {yes[t['within_bound_ratio']]} | {closest} {ratio:.2f} |" in overview
    assert "| sjf-3 | no checkpoint |" in overview
    scenario_table = text[text.index("## synthetic-3"):]
    assert "| okita (oracle) |" in scenario_table and "| pd-maxsche (oracle) |" in scenario_table
    assert "| tapfinger |" in scenario_table and "| optimus |" in scenario_table


def test_a_floored_evaluation_is_marked_and_held_to_the_oracles(evaluation, tmp_path):
    run, summary = evaluation
    assert summary["max_start_slowdown"] == 0.0 and not summary["target"]["policy_uses_oracle"]
    cfg = load_scenario("synthetic-3", ["num_tasks=12", "max_start_slowdown=2"]).for_evaluation()
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg),
                             PolicyConfig(hidden=16, han_layers=1, heads=2, pointer_heads=2, pointer_ffn=32))
    ckpt = save_policy_checkpoint(tmp_path / "tiny.pt", policy, cfg)
    specs = resolve_schedulers("optimus,okita", [str(ckpt)], cfg)
    floored = build_summary(run_evaluation(cfg, specs, SEEDS, workers=1, progress=False))
    assert floored["max_start_slowdown"] == 2.0 and floored["target"]["policy_uses_oracle"]
    assert floored["target"]["beats_best_oracle"] is not None
    overview = format_report([ReportEntry("synthetic-3", floored, "tiny.pt", cfg, {})], SEEDS)
    assert f"| synthetic-3 | {floored['schedulers']['tapfinger']['mean_jct']:.2f} (floor 2) |" in overview
    text = target_text(floored, "tapfinger")
    held = next(line for line in text.splitlines() if "must beat that one too" in line)
    verdict = {True: "met", False: "not met", None: "undecided"}[floored["target"]["beats_best_oracle"]]
    assert held.startswith(f"  below the best oracle baseline {floored['target']['best_oracle']} *") and verdict in held
    assert f"of 3 targets met: {'MET' if floored['target']['met'] else 'not met'}" in text


def test_an_online_floor_is_marked_and_not_held_to_the_oracles(tmp_path):
    cfg = load_scenario("synthetic-3", ["num_tasks=12", "max_start_slowdown=2"]).for_evaluation()
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg),
                             PolicyConfig(hidden=16, han_layers=1, heads=2, pointer_heads=2, pointer_ffn=32))
    ckpt = save_policy_checkpoint(tmp_path / "tiny.pt", policy, cfg)
    specs = resolve_schedulers("optimus,okita", [str(ckpt)], cfg, policy_floor="online")
    assert [s.start_floor for s in specs if s.is_policy] == ["online"]
    online = build_summary(run_evaluation(cfg, specs, SEEDS, workers=1, progress=False))
    assert online["start_floor"] == "online" and online["max_start_slowdown"] == 2.0
    assert not online["target"]["policy_uses_oracle"]
    overview = format_report([ReportEntry("synthetic-3", online, "tiny.pt", cfg, {})], SEEDS)
    assert f"| synthetic-3 | {online['schedulers']['tapfinger']['mean_jct']:.2f} (online floor 2) |" in overview
    assert "must beat that one too" not in target_text(online, "tapfinger")
    with pytest.raises(ConfigError, match="start floor must be one of"):
        resolve_schedulers("optimus", [str(ckpt)], cfg, policy_floor="oracle")


def test_every_scheduler_runs_each_seeds_own_workload(evaluation):
    """Common random numbers, checked against the source: every scheduler's tasks on seed s (the
    policy's included) are the workload drawn from s itself (arrival step and type of every task,
    a placement only on a cluster the task can reach), not merely the same as each other's."""
    from envs.workload import generate_workload, rng_streams

    run, _ = evaluation
    assert run.policy_names == ["tapfinger"] and len(run.results) == 6
    for seed_index, seed in enumerate(SEEDS):
        workload = generate_workload(run.cfg, rng_streams(seed))
        assert len(run.bound[seed_index]) == workload.num_tasks
        for name, results in run.results.items():
            rec = results[seed_index].records
            assert results[seed_index].seed == seed
            assert len(rec["arrival"]) == workload.num_tasks, name  # every task arrived (no truncation)
            np.testing.assert_array_equal(rec["arrival"], workload.arrival, err_msg=name)
            np.testing.assert_array_equal(rec["type"], workload.task_type, err_msg=name)
            placed = rec["cluster"] >= 0
            assert placed.all(), name
            assert workload.eligible[np.arange(workload.num_tasks), rec["cluster"]].all(), name
    other = generate_workload(run.cfg, rng_streams(SEEDS[0] + 1))
    assert not np.array_equal(other.arrival, generate_workload(run.cfg, rng_streams(SEEDS[0])).arrival)
