"""What a new user trips over (issue 13) and the single safe checkpoint loader (issue 12):
bad inputs to ``train.py`` / ``evaluate.py`` exit 2 with one line on stderr and write nothing;
a checkpoint carrying a pickled object is refused, never executed; overrides may stand
anywhere on the command line; the scheduler-option syntax is shared with the baselines
benchmark; the ``--steps`` rounding rule; the package list covers every package folder."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import train as train_cli
from agents.policy.checkpoint import CheckpointError, read_checkpoint
from agents.training.config import TrainConfig
from envs.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = "payload executed"


def evaluate_main():
    spec = importlib.util.spec_from_file_location("evaluate_cli", ROOT / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def run_cli(script: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(err: str, prog: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err
    return lines[0]


class Payload:
    """Unpickling this object calls print(PAYLOAD): what a malicious checkpoint would do."""

    def __reduce__(self):
        return (print, (PAYLOAD,))


@pytest.fixture(scope="module")
def evil_checkpoint(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("evil") / "last.pt"
    torch.save({"model": {}, "policy_config": {}, "scenario": {}, "obs_spec": {}, "counters": {"x": Payload()}}, path)
    return path


# ---------------------------------------------------------------------------------------
# safe loading (issue 12, item 3)
# ---------------------------------------------------------------------------------------
def test_checkpoint_error_is_a_config_error():
    assert issubclass(CheckpointError, ConfigError)


@pytest.mark.parametrize("path", sorted((ROOT / "checkpoints").glob("*.pt")), ids=lambda p: p.stem)
def test_shipped_checkpoint_loads_with_weights_only(path):
    """Every shipped file: safe loading, trained on the scenario it is named after, acts on it."""
    data = torch.load(path, map_location="cpu", weights_only=True)
    assert {"model", "policy_config", "scenario", "obs_spec"} <= set(data)
    from agents.policy.checkpoint import checkpoint_eval_action, load_policy_checkpoint
    from envs.config import load_scenario

    policy, meta = load_policy_checkpoint(path, scenario=load_scenario(path.stem).for_evaluation())
    assert meta["scenario"].name == path.stem and policy.cfg.variant == "tapfinger"
    # a shipped file acts as its recipe validated it (train.eval_action of configs/<scenario>.yaml)
    from agents.training.prepare import prepare_run

    assert checkpoint_eval_action(meta, path) == prepare_run(path.stem).train.eval_action


#: a removed train option (TrainConfig.REMOVED) and a value other than its old default
REMOVED_SET = {"init_from": "runs/x/best.pt", "collect_episodes": 4, "buffer_per_env": 512}


@pytest.mark.parametrize("path", sorted((ROOT / "checkpoints").glob("*.pt")), ids=lambda p: p.stem)
def test_shipped_checkpoint_with_removed_options_resumes(path, tmp_path):
    """A file written before options were removed holds them at their old defaults: the reader drops
    them, so ``train.py --resume`` and ``evaluate.py --checkpoint`` still take it. Each shipped file is
    made such a file (those trained before the removal are such files already)."""
    from agents.training.checkpoints import load_checkpoint
    from agents.training.prepare import prepare_run

    assert set(TrainConfig.REMOVED) == set(REMOVED_SET)
    raw = torch.load(path, map_location="cpu", weights_only=True)
    raw["train_config"] = {**raw["train_config"], **TrainConfig.REMOVED}
    path = tmp_path / path.name
    torch.save(raw, path)
    train = load_checkpoint(path)["train_config"]
    assert not set(TrainConfig.REMOVED) & set(train)
    assert TrainConfig.from_dict(train).to_dict() == {**TrainConfig().to_dict(), **train}
    done = int(raw["counters"]["env_step"])
    logdir = tmp_path / "runs"
    spec = prepare_run(None, [], flags={"steps": done + 1, "logdir": str(logdir)}, resume=str(path))
    assert spec.resume is not None and spec.train.steps == done + 1 and not logdir.exists()


@pytest.mark.parametrize("key", sorted(REMOVED_SET))
def test_a_checkpoint_with_a_removed_option_set_is_refused(key, tmp_path, capsys):
    """A removed option that changed the run (any value but its old default) cannot be honoured by a
    resume: the file is refused in one line naming the option (exit 2). Its weights still evaluate."""
    from agents.policy.checkpoint import checkpoint_eval_action, load_policy_checkpoint
    from agents.training.checkpoints import load_checkpoint

    data = torch.load(ROOT / "checkpoints" / "synthetic-3.pt", map_location="cpu", weights_only=True)
    data["train_config"][key] = REMOVED_SET[key]
    path = tmp_path / "last.pt"
    torch.save(data, path)
    with pytest.raises(CheckpointError, match=rf"train\.{key}=.*has been removed"):
        load_checkpoint(path)
    _, meta = load_policy_checkpoint(path)
    assert checkpoint_eval_action(meta, path) == "argmax"
    assert train_cli.main(["--resume", str(path), "--steps", "10000000", "--logdir", str(tmp_path / "runs")]) == 2
    assert f"train.{key}" in one_line_error(capsys.readouterr().err, "train.py")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key", sorted(REMOVED_SET))
def test_a_removed_option_is_an_unknown_key(key, tmp_path, capsys):
    """Given now, as an override or in a recipe, a removed option is unknown like any other key."""
    assert train_cli.main(["--config", "sjf-3", f"train.{key}={REMOVED_SET[key]}", "--logdir", str(tmp_path)]) == 2
    assert f"unknown train key {key!r}" in one_line_error(capsys.readouterr().err, "train.py")
    with pytest.raises(ConfigError, match=f"unknown train key {key!r}"):
        TrainConfig.from_dict({key: TrainConfig.REMOVED[key]})  # even at its old default


def test_every_scenario_ships_a_checkpoint():
    """One file per scenario, and otherwise only family recipes' files (``configs/<recipe>.yaml``)."""
    from envs.config import available_scenarios, is_recipe_file

    shipped = {p.stem for p in (ROOT / "checkpoints").glob("*.pt")}
    assert set(available_scenarios()) <= shipped
    others = shipped - set(available_scenarios())
    assert all(is_recipe_file(ROOT / "configs" / f"{name}.yaml") for name in others), others


def test_pickled_object_is_refused_by_the_loader(evil_checkpoint, capsys):
    with pytest.raises(CheckpointError, match="pickled Python object"):
        read_checkpoint(evil_checkpoint)
    assert PAYLOAD not in capsys.readouterr().out


def test_evaluate_refuses_a_pickled_object(evil_checkpoint, tmp_path):
    proc = run_cli("evaluate.py", "--scenario", "synthetic-3", "--checkpoint", str(evil_checkpoint),
                   "--out", str(tmp_path / "out"), "--quiet")
    assert proc.returncode == 2, proc.stderr
    assert PAYLOAD not in proc.stdout + proc.stderr
    assert "refusing to load it" in one_line_error(proc.stderr, "evaluate.py")
    assert not (tmp_path / "out").exists()


def test_train_resume_refuses_a_pickled_object(evil_checkpoint, tmp_path):
    proc = run_cli("train.py", "--resume", str(evil_checkpoint), "--steps", "100", "--logdir", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert PAYLOAD not in proc.stdout + proc.stderr
    assert "refusing to load it" in one_line_error(proc.stderr, "train.py")


def test_truncated_checkpoint_message_is_short(tmp_path, capsys):
    raw = (ROOT / "checkpoints" / "synthetic-3.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(raw[: len(raw) // 2])
    assert evaluate_main()(["--scenario", "synthetic-3", "--checkpoint", str(cut), "--out", str(tmp_path / "o")]) == 2
    line = one_line_error(capsys.readouterr().err, "evaluate.py")
    assert "corrupt" in line and "miniz" not in line and len(line) < 250
    assert train_cli.main(["--resume", str(cut), "--logdir", str(tmp_path / "runs")]) == 2
    line = one_line_error(capsys.readouterr().err, "train.py")
    assert "corrupt" in line and "miniz" not in line and len(line) < 250


def test_evaluating_an_untrained_model_says_so(tmp_path, capsys):
    """A checkpoint whose weights no update touched (a best.pt that stayed the step-0 model) is
    evaluated, with a warning; the shipped, trained one gets none."""
    ckpt = torch.load(ROOT / "checkpoints" / "synthetic-3.pt", weights_only=True)
    assert ckpt["counters"]["update_step"] > 0
    ckpt["counters"]["update_step"] = 0
    torch.save(ckpt, tmp_path / "best.pt")
    for path, warned in ((tmp_path / "best.pt", True), (ROOT / "checkpoints" / "synthetic-3.pt", False)):
        assert evaluate_main()(["--scenario", "synthetic-3", "num_tasks=8", "--checkpoint", str(path), "--schedulers",
                                "min", "--seeds", "5", "--quiet", "--out", str(tmp_path / f"o{warned}")]) == 0
        assert ("holds an untrained model" in capsys.readouterr().err) == warned


def test_incompatible_checkpoint_says_task_types(tmp_path, capsys):
    from agents.policy.checkpoint import save_policy_checkpoint
    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from envs.config import load_scenario
    from envs.observation import ObservationSpec

    cfg = load_scenario("testbed-3")
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1, heads=2,
                                                                             pointer_heads=2, pointer_ffn=32))
    path = save_policy_checkpoint(tmp_path / "testbed.pt", policy, cfg)
    assert evaluate_main()(["--scenario", "synthetic-3", "--checkpoint", str(path), "--out", str(tmp_path / "o")]) == 2
    line = one_line_error(capsys.readouterr().err, "evaluate.py")
    assert "task types: 3 in the model vs 2 in the scenario" in line and "K:" not in line


# ---------------------------------------------------------------------------------------
# bad scenario input: trace files, YAML (issue 13, items 1 and 6)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("vector", [[], ["--envs", "1", "--vector", "dummy"]])
@pytest.mark.parametrize("trace", ["missing", "malformed"])
def test_bad_trace_file_exits_2_in_both_clis(tmp_path, capsys, vector, trace):
    path = tmp_path / "trace.csv"
    if trace == "malformed":
        path.write_text("task,cpu,gpu\nmnist,one,2\n")
    override = f"trace.params={path}"
    runs = tmp_path / "runs"
    assert train_cli.main(["--config", "testbed-3", "--steps", "10", override, "--logdir", str(runs), *vector]) == 2
    line = one_line_error(capsys.readouterr().err, "train.py")
    assert str(path) in line
    assert not runs.exists(), "no run directory on bad input"
    out = tmp_path / "out"
    assert evaluate_main()(["--scenario", "testbed-3", override, "--out", str(out), "--quiet"]) == 2
    assert str(path) in one_line_error(capsys.readouterr().err, "evaluate.py")
    assert not out.exists()


def test_malformed_yaml_is_one_line_naming_file_and_line(tmp_path, capsys):
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: broken\nmode: single\n  num_clusters: 3\n")
    assert train_cli.main(["--config", str(bad), "--logdir", str(tmp_path / "runs")]) == 2
    assert f"{bad}:3:" in one_line_error(capsys.readouterr().err, "train.py")
    assert evaluate_main()(["--scenario", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert f"{bad}:3:" in one_line_error(capsys.readouterr().err, "evaluate.py")


# ---------------------------------------------------------------------------------------
# plain arguments (issue 13, item 6; issue 12)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [["--steps", "-5"], ["--envs", "0"], ["--seed", "-1"]])
def test_bad_ranges_exit_2_before_torch_is_imported(argv):
    code = ("import sys; sys.path.insert(0, '.'); import train; rc = train.main(%r); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)" % (argv,))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert argv[0] in one_line_error(proc.stderr, "train.py")
    assert time.perf_counter() - start < 5


def test_overrides_may_stand_between_flags(tmp_path, capsys):
    args = train_cli.build_parser().parse_intermixed_args(["--config", "sjf-3", "num_tasks=12", "--steps", "100",
                                                           "policy.hidden=16", "--envs", "2"])
    assert (args.config, args.steps, args.envs) == ("sjf-3", 100, 2)
    assert args.overrides == ["num_tasks=12", "policy.hidden=16"]
    # a bad override placed before a flag is reported as such, not as "unrecognized arguments"
    assert train_cli.main(["--config", "sjf-3", "foo=1", "--steps", "100", "--logdir", str(tmp_path)]) == 2
    line = one_line_error(capsys.readouterr().err, "train.py")
    assert "foo" in line and "unrecognized" not in line
    out = tmp_path / "out"
    assert evaluate_main()(["--scenario", "synthetic-3", "num_tasks=8", "--seeds", "1", "--schedulers", "min",
                            "--workers", "1", "--quiet", "--out", str(out)]) == 0
    assert "num_tasks: 8" in (out / "scenario.yaml").read_text()


def test_evaluate_device_cuda_without_a_checkpoint_exits_2(tmp_path, capsys):
    assert evaluate_main()(["--scenario", "synthetic-3", "--device", "cuda", "--out", str(tmp_path / "o")]) == 2
    assert "--checkpoint" in one_line_error(capsys.readouterr().err, "evaluate.py")


@pytest.mark.parametrize("second", ["okita", "optimus:preemptive=false"])
def test_space_separated_schedulers_get_a_hint(tmp_path, capsys, second):
    """``--schedulers a b``: the second name lands among the scenario overrides; the error says
    that schedulers are one comma-separated list (not "unknown scenario key")."""
    out = tmp_path / "o"
    assert evaluate_main()(["--scenario", "synthetic-3", "--schedulers", "optimus", second, "--out", str(out)]) == 2
    line = one_line_error(capsys.readouterr().err, "evaluate.py")
    assert f"{second!r} looks like a scheduler" in line and "comma-separated" in line
    assert not out.exists()


def test_evaluate_warns_below_five_seeds(tmp_path, capsys):
    assert evaluate_main()(["--scenario", "synthetic-3", "num_tasks=8", "--seeds", "2", "--schedulers", "min",
                            "--workers", "1", "--quiet", "--out", str(tmp_path / "o")]) == 0
    assert "warning: 2 seeds give wide 95% intervals" in capsys.readouterr().err


def test_a_fatal_error_is_not_preceded_by_the_few_seeds_warning(tmp_path, capsys):
    """Bad input is refused with its one line alone: the warnings about the seeds come only once
    the input is checked."""
    assert evaluate_main()(["--scenario", "no-such-scenario", "--seeds", "2", "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evaluate.py: error:") and "warning:" not in err
    assert evaluate_main()(["--report", "--scenario", "no-such-scenario", "--seeds", "2", "--quiet"]) == 2
    assert "warning:" not in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# scheduler options and checkpoint names (issue 13, item 7)
# ---------------------------------------------------------------------------------------
def test_one_scheduler_option_syntax_for_evaluate_and_the_benchmark(tmp_path, capsys):
    from agents.baselines.specs import is_scheduler_spec, parse_scheduler_spec, split_scheduler_list
    from agents.evaluation.runner import resolve_schedulers

    spec = importlib.util.spec_from_file_location("bench_baselines", ROOT / "benchmarks" / "baselines.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # the benchmark reads scheduler lists with evaluate.py's own functions
    assert bench.resolve_schedulers is resolve_schedulers and bench.is_spec is is_scheduler_spec
    assert parse_scheduler_spec("optimus:preemptive=false,oracle=true") == (
        "optimus", {"preemptive": False, "oracle": True})
    assert split_scheduler_list("min,optimus:preemptive=false,oracle=true,random") == [
        "min", "optimus:preemptive=false,oracle=true", "random"]
    with pytest.raises(ConfigError, match="follows no scheduler"):
        split_scheduler_list("min,oracle=true")
    out = tmp_path / "out"
    assert evaluate_main()(["--scenario", "synthetic-3", "num_tasks=8", "--seeds", "1", "--workers", "1", "--quiet",
                            "--schedulers", "optimus:oracle=true,optimus", "--out", str(out)]) == 0
    import json

    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["schedulers"]) == {"optimus:oracle=true", "optimus"}
    capsys.readouterr()
    assert evaluate_main()(["--scenario", "synthetic-3", "--schedulers", "optimus:nosuch=1", "--out",
                            str(tmp_path / "bad")]) == 2
    assert "nosuch" in one_line_error(capsys.readouterr().err, "evaluate.py")


def test_checkpoints_are_named_after_their_files():
    from agents.evaluation.runner import checkpoint_names

    assert checkpoint_names(["checkpoints/synthetic-3.pt"], ["tapfinger"]) == ["tapfinger"]
    assert checkpoint_names(["a.pt", "runs/b.pt"], ["tapfinger", "tapfinger"]) == ["a", "b"]
    assert checkpoint_names(["runs/x/best.pt", "runs/y/best.pt"], ["tapfinger", "no-han"]) == ["x/best", "y/best"]
    assert checkpoint_names(["min.pt", "b.pt"], ["tapfinger"] * 2, taken=["min"]) == ["min.pt", "b"]


# ---------------------------------------------------------------------------------------
# the --steps rounding rule (issue 13, item 5)
# ---------------------------------------------------------------------------------------
def test_steps_rounding_rule():
    t = TrainConfig(steps=3000, envs=8)  # collection batch 128 x 8 = 1024, one interval of 3000
    assert t.planned_env_steps() == 3072
    t = TrainConfig(steps=250_000, envs=8, eval_every=16384, collect_steps=2048)
    assert t.epoch_plan() == (16384, 16) and t.planned_env_steps() == 262_144
    t = TrainConfig(steps=50, envs=2, eval_every=30, collect_steps=20)
    assert t.epoch_plan() == (30, 2) and t.planned_env_steps() == 80  # 2 intervals x ceil(30 / 20) x 20
    t = TrainConfig(steps=100, envs=3, collect_steps=10, eval_every=100)  # batch rounded to whole envs: 12
    assert t.collection_batch() == 12 and t.planned_env_steps() == 108
    assert TrainConfig(steps=120, envs=2, eval_every=40, collect_steps=40).planned_env_steps(done=80) == 120
    # a resume keeps the fresh run's intervals: it first finishes the one it stopped in
    grid = TrainConfig(steps=120, envs=2, eval_every=40, collect_steps=20)
    assert [grid.interval_plan(d) for d in (0, 20, 40, 60, 100)] == [
        (40, 40, 3), (20, 40, 3), (40, 40, 2), (20, 40, 2), (20, 40, 1)]
    assert {grid.planned_env_steps(d) for d in (0, 20, 40, 60, 100)} == {120}
    assert grid.interval_plan(30) == (40, 40, 3)  # off the collection grid: the steps left planned afresh
    assert grid.interval_plan(120) == (1, 1, 1)  # at the planned end: one more collection, as before


def test_short_run_reports_rounding_eval_lines_and_best_step(tmp_path, capsys, monkeypatch):
    import re

    monkeypatch.setattr(train_cli, "STATUS_EVERY_S", 0.0)  # a status line at every training step
    argv = ["--config", "sjf-3", "--steps", "50", "--envs", "2", "--vector", "dummy", "--logdir", str(tmp_path),
            "num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1",
            "policy.pointer_ffn=32", "train.collect_steps=20", "train.eval_every=30", "train.batch_size=16",
            "train.eval_episodes=1", "train.torch_threads=1", "train.max_batchsize=256", "train.run_name=short"]
    assert train_cli.main(argv) == 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "plan: 80 env steps" in text
    evals = [ln for ln in out.out.splitlines() if ln.startswith("step ") and "eval mean JCT" in ln]
    assert [ln.split(":")[0] for ln in evals] == ["step 0", "step 40", "step 80"]
    assert all("(best " in ln and " at step " in ln for ln in evals)
    done = [ln for ln in out.out.splitlines() if ln.startswith("done: 80 env steps")]
    assert len(done) == 1 and " at env step " in done[0]
    assert "test_reward" not in text and "\x1b[" not in text  # no tianshou line, no bar escapes off a TTY
    status = (r"step \d+/80 \(\d+%\)(, \d+ env steps/s, ETA [\d:]+)?; validation mean JCT (n/a|\d+\.\d{3})"
              r"( \(best \d+\.\d{3}\))?(; rival \S+ \d+\.\d{3})?(; validating)?")
    assert any(re.fullmatch(status, ln) for ln in out.out.splitlines()), out.out
    best = torch.load(tmp_path / "short" / "best.pt", weights_only=True)["counters"]
    assert f"at env step {best['best_env_step']}" in done[0]
    if best["best_env_step"] == 0:
        assert "untrained model" in done[0]


# ---------------------------------------------------------------------------------------
# packaging (issue 13, item 8)
# ---------------------------------------------------------------------------------------
def test_package_discovery_covers_every_package_folder():
    tomllib = pytest.importorskip("tomllib")
    from setuptools import find_namespace_packages

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    find = conf["packages"]["find"]
    assert find.get("namespaces", True)
    found = set(find_namespace_packages(where=str(ROOT), include=find["include"], exclude=find.get("exclude", [])))
    for top in ("envs", "agents", "networks"):
        for folder in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__":
                continue
            name = ".".join(folder.relative_to(ROOT).parts)
            assert name in found, f"{name} is not packaged"
    assert not any("__pycache__" in name for name in found)
    assert "envs.data" in conf["package-data"]


def test_a_stored_recipe_with_a_removed_option_set_differs_from_today_s():
    from agents.evaluation.seed_runs import fingerprint_differences, recipe_fingerprint
    from agents.training.prepare import prepare_run

    spec = prepare_run("sjf-3")
    saved = recipe_fingerprint(spec)
    saved["train"] = {**saved["train"], **TrainConfig.REMOVED}  # saved before the options went: old defaults
    assert fingerprint_differences(saved, spec) == []
    saved["train"]["collect_episodes"] = 4
    assert fingerprint_differences(saved, spec) == ["train.collect_episodes: run 4, an option this version removed"]
