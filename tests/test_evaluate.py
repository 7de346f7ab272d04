"""evaluate.py: outputs agree with each other, runs are reproducible, errors exit 2 cleanly.

The main fixture evaluates every available baseline on a tiny synthetic-3 workload (12 tasks,
3 seeds) twice: once through the CLI in a subprocess with 2 worker processes, once in-process
with 1 worker. Apart from the timing field ``decision_ms``, the two output directories must be
identical byte for byte.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from agents.evaluation.summary import ORACLE_MARK, TIMING_FIELDS, t_interval
from envs.bound import fastest_durations
from envs.config import ConfigError, load_scenario
from envs.core import Simulator

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_tasks=12"]
SEEDS = 3
OFFSET = 100_000
PLOTS = ("jct_cdf.png", "tasks_in_system.png", "utilisation.png", "mean_jct.png")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "evaluate.py"), "--quiet", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def evaluate_main():
    spec = importlib.util.spec_from_file_location("evaluate_cli", ROOT / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Two evaluations of the same seeds: CLI with 2 workers (a) and in-process with 1 (b)."""
    a = tmp_path_factory.mktemp("eval_a")
    b = tmp_path_factory.mktemp("eval_b")
    common = ["--scenario", "synthetic-3", "--schedulers", "all", "--seeds", str(SEEDS)]
    proc = cli(*common, "--workers", "2", "--out", str(a), *TINY)
    assert proc.returncode == 0, proc.stderr
    assert evaluate_main()([*common, "--workers", "1", "--out", str(b), "--quiet", *TINY]) == 0
    return a, b, proc.stdout


@pytest.fixture(scope="module")
def cfg():
    return load_scenario("synthetic-3", TINY).for_evaluation()


# ------------------------------------------------------------------------ statistics
def test_t_interval_known_sample():
    # sample 1..5: mean 3, s = sqrt(2.5), t(0.975, 4) = 2.776445105; half = t * s / sqrt(5) = 1.963243
    lo, hi = t_interval([1.0, 2.0, 3.0, 4.0, 5.0])
    assert lo == pytest.approx(3 - 1.963243, abs=1e-5)
    assert hi == pytest.approx(3 + 1.963243, abs=1e-5)
    # two points 4, 6: s = sqrt(2), t(0.975, 1) = 12.7062047; half = 12.7062047 * sqrt(2) / sqrt(2)
    assert t_interval([4.0, 6.0]) == pytest.approx((5 - 12.7062047, 5 + 12.7062047), abs=1e-5)
    assert t_interval([7.0]) == (None, None)
    assert t_interval([3.0, 3.0, 3.0]) == (3.0, 3.0)


def test_all_adds_the_non_preemptive_optimus():
    """``all`` = every baseline with its defaults, then the non-preemptive Optimus (not an oracle)."""
    from agents.baselines import available_schedulers
    from agents.evaluation.runner import resolve_schedulers

    specs = resolve_schedulers("all")
    names = [s.name for s in specs]
    assert names == available_schedulers() + ["optimus:preemptive=false"]
    variant = specs[-1]
    assert variant.baseline == "optimus" and dict(variant.options) == {"preemptive": False}
    assert not variant.is_oracle


def test_checkpoint_names():
    from agents.evaluation.runner import POLICY_PATTERN, policy_names

    names = policy_names(["tapfinger", "no-han", "tapfinger", "tapfinger"])
    assert names == ["tapfinger", "no-han", "tapfinger-2", "tapfinger-3"]
    assert all(POLICY_PATTERN.fullmatch(n) for n in names)
    assert not POLICY_PATTERN.fullmatch("optimus")


# ------------------------------------------------------------------------ files
def test_summary_schema_and_table(outputs):
    a, _, stdout = outputs
    summary = json.loads((a / "summary.json").read_text())
    from agents.baselines import ORACLE_BASELINES, available_schedulers
    from agents.baselines.specs import all_schedulers

    # no checkpoint: no reduction, paired differences or target
    assert set(summary) == {"scenario", "seeds", "schedulers", "bound", "oracle", "max_start_slowdown", "switch_overhead"}
    assert summary["oracle"] == [n for n in available_schedulers() if n in ORACLE_BASELINES]
    assert summary["scenario"] == "synthetic-3"
    assert summary["seeds"] == list(range(OFFSET, OFFSET + SEEDS))
    assert list(summary["schedulers"]) == all_schedulers()
    assert "optimus:preemptive=false" in summary["schedulers"]  # a non-oracle baseline of the target
    keys = {"mean_jct", "median_jct", "p90_jct", "ci95", "mean_wait", "mean_tasks_in_system", "cpu_util", "gpu_util",
            "decision_ms", "conflicts", "switches", "switch_share", "coordination"}
    preemptive = {"tiresias", "optimus", "pd-preemptive"}  # the baselines that re-size running tasks
    for name, s in summary["schedulers"].items():
        assert set(s) == keys, name
        # only a preemptive scheduler re-sizes a running task, and the table says how often under a switching overhead
        assert (s["switches"] > 0) == (name in preemptive) and 0.0 <= s["switch_share"] <= 1.0, name
        assert (f"switching of {name}: " in stdout) == (name in preemptive), name
        assert s["conflicts"] == 0.0, name  # centralised baselines never claim a task twice
        assert s["coordination"] is None, name  # only a learned policy's agents claim on their own
        assert s["ci95"][0] <= s["ci95"][1]
        assert 0.0 <= s["cpu_util"] <= 1.0 and 0.0 <= s["gpu_util"] <= 1.0
        assert s["decision_ms"] >= 0.0
        assert summary["bound"]["mean_jct"] <= s["mean_jct"], name  # nobody beats the bound
        assert name in stdout
    # the printed table: best first, the bound on top, each oracle baseline's row marked (explained under it)
    names = set(summary["schedulers"]) | {"bound"}
    rows = [line.split() for line in stdout.splitlines()[2:] if line.split() and line.split()[0] in names]
    order = [row[0] for row in rows]
    means = {n: s["mean_jct"] for n, s in summary["schedulers"].items()}
    assert order[0] == "bound"
    assert order[1:] == sorted(means, key=means.get)
    assert [row[0] for row in rows if row[1] == ORACLE_MARK] == [n for n in order if n in summary["oracle"]]
    assert summary["oracle"] and f"{ORACLE_MARK} oracle baseline: reads the true task durations" in stdout


def test_every_scheduler_has_every_task_on_the_same_workload(outputs, cfg):
    a, _, _ = outputs
    rows = read_rows(a / "tasks.csv")
    assert list(rows[0]) == ["scheduler", "seed", "task_id", "type", "arrival", "start", "finish", "jct",
                             "cluster", "cpu", "gpu"]
    summary = json.loads((a / "summary.json").read_text())
    by = defaultdict(list)
    for r in rows:
        by[(r["scheduler"], int(r["seed"]))].append(r)
    names = list(summary["schedulers"])
    assert set(by) == {(n, s) for n in names for s in summary["seeds"]}
    types = {t.name for t in cfg.task_types}
    for seed in summary["seeds"]:
        reference = None
        for n in names:
            rs = by[(n, seed)]
            assert [int(r["task_id"]) for r in rs] == list(range(cfg.num_tasks))
            workload = [(r["arrival"], r["type"]) for r in rs]
            assert reference is None or workload == reference, f"{n} saw another workload on seed {seed}"
            reference = workload
            for r in rs:
                assert r["type"] in types
                assert int(r["finish"]) - int(r["arrival"]) == int(r["jct"]) >= 1
                assert int(r["arrival"]) <= int(r["start"]) < int(r["finish"])
                assert 0 <= int(r["cluster"]) < cfg.num_clusters
                lo = next(t.min_req for t in cfg.task_types if t.name == r["type"])
                if not json.loads((a / "run.json").read_text())["schedulers"][n]["preemptive"]:
                    assert int(r["cpu"]) >= lo[0] and int(r["gpu"]) >= lo[1]


def test_summary_agrees_with_tasks_csv(outputs, cfg):
    a, _, _ = outputs
    summary = json.loads((a / "summary.json").read_text())
    rows = read_rows(a / "tasks.csv")
    caps = np.array(cfg.capacities, dtype=float).sum(axis=0)
    for name, s in summary["schedulers"].items():
        mine = [r for r in rows if r["scheduler"] == name]
        jct = np.array([float(r["jct"]) for r in mine])
        assert s["mean_jct"] == pytest.approx(jct.mean(), rel=1e-12)
        assert s["median_jct"] == pytest.approx(np.median(jct), rel=1e-12)
        assert s["p90_jct"] == pytest.approx(np.percentile(jct, 90), rel=1e-12)
        wait = np.array([int(r["start"]) - int(r["arrival"]) for r in mine], dtype=float)
        assert s["mean_wait"] == pytest.approx(wait.mean(), rel=1e-12) and 0.0 <= s["mean_wait"] < s["mean_jct"]
        per_seed = [np.mean([float(r["jct"]) for r in mine if int(r["seed"]) == seed]) for seed in summary["seeds"]]
        k = len(per_seed)
        half = 4.302653 * np.std(per_seed, ddof=1) / math.sqrt(k)  # t(0.975, 2) = 4.302653: three seeds
        assert s["ci95"] == pytest.approx([np.mean(per_seed) - half, np.mean(per_seed) + half], abs=1e-5)
        # every episode ends with its last completion: steps = latest finish per seed
        steps = sum(max(int(r["finish"]) for r in mine if int(r["seed"]) == seed) for seed in summary["seeds"])
        # Little's law on whole episodes: sum over steps of tasks in system = sum of JCTs
        assert s["mean_tasks_in_system"] == pytest.approx(jct.sum() / steps, rel=1e-12)
        # utilisation: CPU-steps allocated = sum over tasks of allocation x running steps
        span = np.array([int(r["finish"]) - int(r["start"]) for r in mine], dtype=float)
        cpu = np.array([float(r["cpu"]) for r in mine]) @ span
        gpu = np.array([float(r["gpu"]) for r in mine]) @ span
        assert s["cpu_util"] == pytest.approx(cpu / (steps * caps[0]), rel=1e-5)
        assert s["gpu_util"] == pytest.approx(gpu / (steps * caps[1]), rel=1e-5)
    sim = Simulator(cfg, summary["seeds"][0])
    fastest = []
    for seed in summary["seeds"]:
        sim.reset(seed)
        fastest.append(fastest_durations(sim))
    assert summary["bound"]["mean_jct"] == pytest.approx(np.concatenate(fastest).mean(), rel=1e-12)


def test_runs_are_identical_apart_from_timings(outputs):
    a, b, _ = outputs
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    assert {"summary.json", "tasks.csv", "run.json", "scenario.yaml", *PLOTS} <= set(names)
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for doc in (sa, sb):
        for s in doc["schedulers"].values():
            for key in TIMING_FIELDS:
                s.pop(key)
    assert sa == sb
    for name in ("tasks.csv", "run.json", "scenario.yaml", *PLOTS):  # no timing is plotted
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_plots_written(outputs):
    a, _, _ = outputs
    for name in PLOTS:
        data = (a / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n", name
        assert len(data) > 10_000, name  # a real figure, not an empty canvas


# ------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "args, message",
    [
        (["--scenario", "synthetic-3", "--schedulers", "min,nosuch"], "valid: random, min"),
        (["--scenario", "nosuch-scenario"], "unknown scenario"),
        (["--scenario", "testbed-3", "trace.params=/nonexistent/fit.json"], "/nonexistent/fit.json"),
        (["--scenario", "synthetic-3", "--schedulers", "tapfinger"], "needs a policy checkpoint"),
        (["--scenario", "synthetic-3", "--seeds", "0"], "--seeds"),
        (["--scenario", "synthetic-3", "nosuchkey=1"], "nosuchkey"),
        (["--scenario", "synthetic-3", "--schedulers", "optimus:floor=never"], "start floor must be one of"),
        (["--scenario", "synthetic-3", "--schedulers", "optimus:floor_factor=3"], "floor_factor needs floor"),
        (["--scenario", "synthetic-3", "--schedulers", ""], "--schedulers is empty"),
        (["--scenario", "synthetic-3", "--schedulers", " "], "--schedulers is empty"),
        (["--report", "--schedulers", ""], "--schedulers is empty"),
        (["--curves", "runs/none", "--schedulers", ""], "--schedulers is empty"),
        (["--scenario", "synthetic-3", "--schedulers", "random,,min"], "'random,,min' has an empty item"),
        (["--scenario", "synthetic-3", "--schedulers", "random,min,"], "has an empty item"),
        (["--scenario", "synthetic-3", "--schedulers", "min,random,min"], "names 'min' twice"),
        (["--scenario", "synthetic-3", "--schedulers", "optimus:oracle=true,preemptive=false,"
                                                       "optimus:preemptive=false,oracle=true"], "the same options"),
        (["num_tasks=12"], "--scenario is required (or --checkpoint, or --report)"),
    ],
)
def test_bad_input_exits_2(tmp_path, args, message):
    proc = cli(*args, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_corrupt_checkpoint_exits_2(tmp_path):
    bad = tmp_path / "corrupt.pt"
    bad.write_bytes(b"this is not a torch checkpoint")
    proc = cli("--scenario", "synthetic-3", "--checkpoint", str(bad), "--out", str(tmp_path / "out"), *TINY)
    assert proc.returncode == 2, proc.stderr
    assert "corrupt.pt" in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------------ with a policy
def _tiny_checkpoint(path: Path, scenario: str, eval_action: str | None = None) -> Path:
    torch = pytest.importorskip("torch")
    pytest.importorskip("agents.policy.scheduler")
    from agents.policy.checkpoint import save_policy_checkpoint
    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from envs.observation import ObservationSpec

    cfg = load_scenario(scenario)
    torch.manual_seed(0)
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1, heads=2,
                                                                             pointer_heads=2, pointer_ffn=32))
    extra = {"train_config": {"eval_action": eval_action}} if eval_action else None
    return save_policy_checkpoint(path, policy, cfg, extra)


def test_tapfinger_checkpoint_and_reduction(tmp_path, capsys):
    ckpt = _tiny_checkpoint(tmp_path / "tiny.pt", "synthetic-3")
    out, again = tmp_path / "out", tmp_path / "again"
    for d in (out, again):
        code = evaluate_main()(["--scenario", "synthetic-3", "--checkpoint", str(ckpt), "--schedulers", "min,random",
                                "--seeds", "2", "--workers", "1", "--out", str(d), "--quiet", *TINY])
        assert code == 0
    assert (out / "tasks.csv").read_bytes() == (again / "tasks.csv").read_bytes()  # the policy is deterministic
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["schedulers"]) == ["min", "random", "tapfinger"]
    tap = summary["schedulers"]["tapfinger"]["mean_jct"]
    assert set(summary["reduction"]) == {"min", "random"}
    for name, red in summary["reduction"].items():
        assert red == pytest.approx(1 - tap / summary["schedulers"][name]["mean_jct"], rel=1e-12)
    rows = [r for r in read_rows(out / "tasks.csv") if r["scheduler"] == "tapfinger"]
    assert len(rows) == 2 * 12 and all(r["jct"] for r in rows)
    printed = capsys.readouterr().out
    assert "tap. gain" in printed and "coordination of tapfinger:" in printed
    coordination = summary["schedulers"]["tapfinger"]["coordination"]
    assert coordination["uniform"] <= coordination["matching"] and 0.0 <= coordination["idle_share"] <= 1.0
    # conflicts per episode: what the episodes themselves counted
    from agents.policy.scheduler import TapFingerScheduler
    from envs import load_scenario, run_episode

    cfg = load_scenario("synthetic-3", TINY)
    direct = [run_episode(cfg, TapFingerScheduler(checkpoint=ckpt), seed).conflicts for seed in summary["seeds"]]
    assert summary["schedulers"]["tapfinger"]["conflicts"] == pytest.approx(np.mean(direct))


def test_checkpoint_without_scenario_evaluates_on_the_scenario_it_stores(tmp_path):
    """No --scenario: the checkpoint's stored scenario (its evaluation variant), overrides applied."""
    ckpt = _tiny_checkpoint(tmp_path / "tb.pt", "testbed-3")
    out = tmp_path / "out"
    assert evaluate_main()(["--checkpoint", str(ckpt), "--schedulers", "min", "--seeds", "1", "--workers", "1",
                            "--out", str(out), "--quiet", *TINY]) == 0
    used = load_scenario(str(out / "scenario.yaml"))
    expected = load_scenario("testbed-3", TINY).for_evaluation()
    assert used.name == "testbed-3" and used.num_tasks == 12
    assert used.to_dict() == expected.to_dict()
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["schedulers"]) == {"min", "tapfinger"}


def test_checkpoints_storing_different_scenarios_need_scenario(tmp_path):
    a = _tiny_checkpoint(tmp_path / "a.pt", "synthetic-3")
    b = _tiny_checkpoint(tmp_path / "b.pt", "sjf-3")
    proc = cli("--checkpoint", str(a), "--checkpoint", str(b), "--out", str(tmp_path / "out"), *TINY)
    assert proc.returncode == 2, proc.stderr
    assert "store different scenarios (synthetic-3, sjf-3); give --scenario" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_checkpoint_of_another_scenario_exits_2(tmp_path):
    ckpt = _tiny_checkpoint(tmp_path / "testbed.pt", "testbed-3")  # 3 task types vs synthetic's 2
    proc = cli("--scenario", "synthetic-3", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), *TINY)
    assert proc.returncode == 2, proc.stderr
    assert "incompatible" in proc.stderr and "Traceback" not in proc.stderr


def test_policy_action_comes_from_the_checkpoint_or_the_flag(tmp_path, cfg):
    """A checkpoint validated by sampling is evaluated by sampling unless --policy-action says
    otherwise; sampling is seeded (same seeds, same result) and differs from the argmax."""
    from agents.evaluation.runner import resolve_schedulers
    from agents.policy.checkpoint import CheckpointError, checkpoint_eval_action
    from agents.policy.scheduler import TapFingerScheduler

    plain = _tiny_checkpoint(tmp_path / "plain.pt", "synthetic-3")
    sampled = _tiny_checkpoint(tmp_path / "sampled.pt", "synthetic-3", eval_action="sample")
    assert [s.action for s in resolve_schedulers("min", [str(plain)], cfg)][-1] == "argmax"  # no key: argmax
    assert [s.action for s in resolve_schedulers("min", [str(sampled)], cfg)][-1] == "sample"
    assert resolve_schedulers("min", [str(sampled)], cfg, policy_action="argmax")[-1].action == "argmax"
    with pytest.raises(ConfigError, match="policy action"):
        resolve_schedulers("min", [str(sampled)], cfg, policy_action="greedy")
    assert TapFingerScheduler(checkpoint=sampled).deterministic is False
    assert TapFingerScheduler(checkpoint=plain).deterministic is True
    with pytest.raises(CheckpointError, match="eval_action"):
        checkpoint_eval_action({"train_config": {"eval_action": "greedy"}}, "x.pt")

    def jcts(out: Path, *flags: str) -> list[str]:
        assert evaluate_main()(["--scenario", "synthetic-3", "--checkpoint", str(sampled), "--schedulers", "min",
                                "--seeds", "3", "--workers", "1", "--out", str(out), "--quiet", *flags, *TINY]) == 0
        run = json.loads((out / "run.json").read_text())
        assert run["checkpoints"]["tapfinger"]["action"] == (flags[-1] if flags else "sample")
        return [r["jct"] for r in read_rows(out / "tasks.csv") if r["scheduler"] == "tapfinger"]

    first, again = jcts(tmp_path / "a"), jcts(tmp_path / "b")
    argmax = jcts(tmp_path / "c", "--policy-action", "argmax")
    assert first == again
    assert first != argmax


def test_policy_action_needs_a_checkpoint(tmp_path):
    proc = cli("--scenario", "synthetic-3", "--policy-action", "sample", "--out", str(tmp_path / "out"), *TINY)
    assert proc.returncode == 2 and "--policy-action applies to checkpoints" in proc.stderr, proc.stderr
    proc = cli("--scenario", "synthetic-3", "--policy-conflicts", "sequential", "--out", str(tmp_path / "o2"), *TINY)
    assert proc.returncode == 2 and "--policy-conflicts applies to checkpoints" in proc.stderr, proc.stderr
    proc = cli("--scenario", "synthetic-3", "--policy-floor", "online", "--out", str(tmp_path / "o3"), *TINY)
    assert proc.returncode == 2 and "--policy-floor applies to checkpoints" in proc.stderr, proc.stderr
    proc = cli("--scenario", "synthetic-3", "--policy-floor", "oracle", "--out", str(tmp_path / "o4"), *TINY)
    assert proc.returncode == 2 and "invalid choice: 'oracle'" in proc.stderr, proc.stderr
    proc = cli("--scenario", "synthetic-3", "--policy-batch", "4", "--out", str(tmp_path / "o5"), *TINY)
    assert proc.returncode == 2 and "--policy-batch applies to checkpoints" in proc.stderr, proc.stderr
    proc = cli("--scenario", "synthetic-3", "--policy-batch", "0", "--out", str(tmp_path / "o6"), *TINY)
    assert proc.returncode == 2 and "--policy-batch must be >= 1, got 0" in proc.stderr, proc.stderr


@pytest.mark.parametrize("chosen", ["sequential", "room"])
def test_policy_conflicts_come_from_the_checkpoint_or_the_flag(tmp_path, chosen):
    """A Bayes checkpoint evaluated with --policy-conflicts sequential (or room) loses no claim
    and equals a direct run of the same weights in that mode; run.json records the mode, and the
    policy is named after it (a mode beyond the paper is never reported as plain tapfinger)."""
    from agents.policy.scheduler import TapFingerScheduler
    from envs import run_episode

    ckpt = _tiny_checkpoint(tmp_path / "tiny.pt", "multi-3")
    results, names = {}, {"bayes": "tapfinger", chosen: f"tapfinger-{chosen}"}
    for mode in ("bayes", chosen):
        out = tmp_path / mode
        flags = ["--policy-conflicts", mode] if mode == chosen else []
        assert evaluate_main()(["--scenario", "multi-3", "--checkpoint", str(ckpt), "--schedulers", "min", "--seeds",
                                "2", "--workers", "1", "--out", str(out), "--quiet", *flags, *TINY]) == 0
        assert json.loads((out / "run.json").read_text())["checkpoints"][names[mode]]["conflicts"] == mode
        results[mode] = json.loads((out / "summary.json").read_text())
        assert set(results[mode]["schedulers"]) == {"min", names[mode]}
    assert results["bayes"]["schedulers"]["tapfinger"]["conflicts"] > 0
    assert results[chosen]["schedulers"][names[chosen]]["conflicts"] == 0
    cfg = load_scenario("multi-3", TINY).for_evaluation()
    sched = TapFingerScheduler(checkpoint=ckpt, conflicts=chosen)
    direct = [run_episode(cfg, sched, seed).jct.mean() for seed in results[chosen]["seeds"]]
    assert results[chosen]["schedulers"][names[chosen]]["mean_jct"] == pytest.approx(np.mean(direct))


# ------------------------------------------------------------------------ report
def test_report_puts_paper_numbers_next_to_ours(tmp_path):
    ckdir = tmp_path / "checkpoints"
    _tiny_checkpoint(ckdir / "synthetic-3.pt", "synthetic-3", eval_action="sample")
    out = tmp_path / "results"
    code = evaluate_main()(["--report", "--scenario", "synthetic-3,multi-3", "--schedulers", "min,optimus",
                            "--seeds", "2", "--workers", "1", "--checkpoint-dir", str(ckdir), "--out", str(out),
                            "--quiet", *TINY])
    assert code == 0
    text = (out / "REPORT.md").read_text()
    syn = json.loads((out / "synthetic-3" / "summary.json").read_text())
    multi = json.loads((out / "multi-3" / "summary.json").read_text())
    assert "## synthetic-3 (paper: `synthetic`" in text and "## multi-3 (paper: `multiple-gamma=1`" in text
    assert "tapfinger" in syn["schedulers"] and "tapfinger" not in multi["schedulers"]
    assert "Checkpoint: `" in text and "synthetic-3.pt`, acting by seeded sampling." in text
    section = text[text.index("## synthetic-3"):text.index("## multi-3")]
    tap = syn["schedulers"]["tapfinger"]
    for name in ("min", "optimus", "tapfinger"):
        assert f"| {name} | {syn['schedulers'][name]['mean_jct']:.2f} |" in section
    assert "| tapfinger | %.2f | [%.2f, %.2f] | 6.42 |" % (tap["mean_jct"], *tap["ci95"]) in section
    assert "| 12.74 |" in section and "| 8.56 |" in section  # the paper's Min and Optimus mean JCTs
    opt = syn["schedulers"]["optimus"]
    ours = "%.1f%% / %.1f%%" % (100 * syn["reduction"]["optimus"], 100 * (1 - tap["median_jct"] / opt["median_jct"]))
    assert f"| optimus | {ours} | 25.1% / 28.6% |" in section  # ours next to the paper's reduction
    multi_section = text[text.index("## multi-3"):]
    assert "No shipped checkpoint" in multi_section and "| TapFinger (paper only) | n/a | n/a | 4.29 |" in multi_section
