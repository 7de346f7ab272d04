"""evaluate.py --curves: merged TensorBoard points, baseline lines on the validation workloads, errors.

Fake run directories are written the way the trainer writes them: ``config.yaml`` by
:func:`~agents.training.prepare.write_config` from :func:`prepare_run`, scalars under
:data:`~agents.training.logger.EVAL_MEAN_JCT_TAG` by torch's ``SummaryWriter``. The scenario
is tiny (synthetic-3, 12 tasks, 2 validation episodes) so the baselines run in seconds.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

from agents.evaluation.curves import DEFAULT_BASELINES, merge_points, read_curve, read_validation
from agents.evaluation.runner import resolve_schedulers, run_evaluation
from agents.training.envs import evaluation_scenario
from agents.training.logger import EVAL_MEAN_JCT_TAG, TENSORBOARD_KEEP, scalar_tag
from agents.training.prepare import prepare_run, write_config
from envs.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_tasks=12", "train.eval_episodes=2"]
#: (step, value) of the first process, then of the resumed one (which re-evaluates step 200)
FIRST = [(0, 30.0), (100, 12.0), (200, 9.0)]
SECOND = [(200, 8.5), (300, 7.0), (400, 7.5)]
MERGED = [(0, 30.0), (100, 12.0), (200, 8.5), (300, 7.0), (400, 7.5)]


def evaluate_main():
    spec = importlib.util.spec_from_file_location("evaluate_cli", ROOT / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def make_run(logdir: Path, name: str, *overrides: str, config: str = "synthetic-3") -> Path:
    """A run directory with the trainer's ``config.yaml`` (no event files yet)."""
    spec = prepare_run(config, [*TINY, f"train.run_name={name}", *overrides], flags={"logdir": str(logdir)})
    write_config(spec)
    return spec.run_dir


def write_scalars(run_dir: Path, points: list[tuple[int, float]], tag: str = EVAL_MEAN_JCT_TAG) -> None:
    """One event file (one training process) holding ``points`` under ``tag``."""
    writer = SummaryWriter(log_dir=str(run_dir))
    for step, value in points:
        writer.add_scalar(tag, value, global_step=step)
    writer.close()


def resumed_run(logdir: Path, name: str) -> Path:
    """A run written by two processes: the second file starts later and re-logs step 200.

    The first process's points are written after the second file is created, so only the
    files' start times (not the write order) make the second file win.
    """
    run_dir = make_run(logdir, name)
    first = SummaryWriter(log_dir=str(run_dir))
    time.sleep(0.01)
    write_scalars(run_dir, SECOND)
    for step, value in FIRST:
        first.add_scalar(EVAL_MEAN_JCT_TAG, value, global_step=step)
    first.close()
    return run_dir


def baseline_reference(seeds: list[int]) -> tuple[dict[str, float], float]:
    """The trainer's metric for each default baseline and the bound, straight from run_evaluation."""
    spec = prepare_run("synthetic-3", TINY)
    cfg = evaluation_scenario(spec.scenario, spec.train)
    run = run_evaluation(cfg, resolve_schedulers(DEFAULT_BASELINES, (), cfg), seeds, workers=1, progress=False)
    means = {name: float(np.mean([r.mean_jct for r in res])) for name, res in run.results.items()}
    return means, float(np.mean([b.mean() for b in run.bound]))


# ------------------------------------------------------------------------ reading runs
def test_tag_is_the_trainers():
    assert EVAL_MEAN_JCT_TAG == scalar_tag("test", "mean_jct")
    assert "mean_jct" in TENSORBOARD_KEEP["test"]


def test_merge_points_later_file_wins():
    # the file that started later wins at step 1 whatever the order the files are given in
    assert merge_points([(2.0, [(1, 9.0)]), (1.0, [(2, 6.0), (1, 5.0)])]) == [(1, 9.0), (2, 6.0)]


def test_read_curve_merges_event_files(tmp_path):
    run_dir = resumed_run(tmp_path, "a")
    assert len(list(run_dir.glob("*tfevents*"))) == 2
    curve = read_curve(run_dir)
    assert curve.name == "a"
    assert curve.points == MERGED  # float32-exact values
    assert curve.best == (300, 7.0)


def test_read_curve_cuts_at_max_steps(tmp_path):
    run_dir = resumed_run(tmp_path, "a")
    cut = read_curve(run_dir, max_steps=MERGED[1][0])
    assert cut.points == MERGED[:2]
    assert cut.best == min(MERGED[:2], key=lambda p: (p[1], p[0]))
    with pytest.raises(ConfigError, match="no "):
        read_curve(run_dir, max_steps=MERGED[0][0] - 1)


def test_max_steps_only_with_curves(tmp_path, capsys):
    assert evaluate_main()(["--scenario", "synthetic-3", "--max-steps", "10", "--quiet"]) == 2
    assert "--max-steps only applies to --curves" in capsys.readouterr().err


def test_validation_uses_the_eval_variant(tmp_path):
    spec = prepare_run("testbed-3", ["num_tasks=12", "train.train_scenario=train", "train.eval_scenario=eval",
                                     "train.eval_seed=500", "train.eval_episodes=3", "train.run_name=tb"],
                       flags={"logdir": str(tmp_path)})
    write_config(spec)
    v = read_validation(spec.run_dir)
    assert v.scenario == evaluation_scenario(spec.scenario, spec.train) != spec.scenario
    assert v.scenario.capacities[0] == (32, 16)
    assert v.seeds == [500, 501, 502] and v.eval_scenario == "eval"


# ------------------------------------------------------------------------ the CLI
def test_curves_png_json_and_baselines(tmp_path, capsys):
    a = resumed_run(tmp_path, "a")
    b = make_run(tmp_path, "b")
    write_scalars(b, [(0, 25.0), (100, 10.0)])
    png = tmp_path / "out" / "curves.png"
    argv = ["--curves", str(a), "--curves", str(b), "--out", str(png), "--workers", "1", "--quiet"]
    assert evaluate_main()(argv) == 0
    out = capsys.readouterr()

    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    doc = json.loads(png.with_suffix(".json").read_text())
    assert doc["tag"] == EVAL_MEAN_JCT_TAG and doc["scenario"] == "synthetic-3"
    assert doc["seeds"] == [10_000, 10_001]
    assert [tuple(p) for p in doc["runs"]["a"]["points"]] == MERGED
    assert doc["runs"]["a"]["best"] == {"step": 300, "mean_jct": 7.0}
    assert doc["runs"]["b"]["best"] == {"step": 100, "mean_jct": 10.0}

    means, bound = baseline_reference(doc["seeds"])
    assert set(doc["baselines"]) == {"optimus", "optimus:preemptive=false"}
    assert doc["baselines"] == pytest.approx(means, rel=1e-12)
    assert doc["bound"] == pytest.approx(bound, rel=1e-12)

    assert "a: best validation mean JCT 7.000 at env step 300" in out.out
    assert "b: best validation mean JCT 10.000 at env step 100" in out.out
    assert f"optimus: mean JCT {means['optimus']:.3f}" in out.out
    assert str(png) in out.err


def test_out_directory_gets_scenario_name(tmp_path):
    run_dir = make_run(tmp_path, "a")
    write_scalars(run_dir, [(0, 20.0)])
    out = tmp_path / "plots"
    assert evaluate_main()(["--curves", str(run_dir), "--out", str(out), "--schedulers", "min", "--workers", "1",
                            "--quiet"]) == 0
    assert (out / "synthetic-3.png").stat().st_size > 0
    assert set(json.loads((out / "synthetic-3.json").read_text())["baselines"]) == {"min"}


# ------------------------------------------------------------------------ errors
def _run_without_config(tmp_path: Path) -> list[str]:
    d = tmp_path / "empty"
    d.mkdir()
    return [str(d)]


def _run_without_events(tmp_path: Path) -> list[str]:
    return [str(make_run(tmp_path, "noevents"))]


def _run_without_tag(tmp_path: Path) -> list[str]:
    run_dir = make_run(tmp_path, "notag")
    write_scalars(run_dir, [(0, 1.0)], tag=scalar_tag("training", "mean_jct"))
    return [str(run_dir)]


def _runs_of_two_scenarios(tmp_path: Path) -> list[str]:
    a = make_run(tmp_path, "s3")
    b = make_run(tmp_path, "sjf", config="sjf-3")
    for run_dir in (a, b):
        write_scalars(run_dir, [(0, 1.0)])
    return [str(a), str(b)]


def _valid_run(tmp_path: Path) -> list[str]:
    run_dir = make_run(tmp_path, "ok")
    write_scalars(run_dir, [(0, 1.0)])
    return [str(run_dir)]


@pytest.mark.parametrize(
    "runs, extra, message",
    [
        (lambda tmp: [str(tmp / "nosuch")], [], "not a directory"),
        (_run_without_config, [], "no config.yaml"),
        (_run_without_events, [], "no TensorBoard event files"),
        (_run_without_tag, [], f"no {EVAL_MEAN_JCT_TAG!r} scalars"),
        (_runs_of_two_scenarios, [], "different workloads"),
        (lambda tmp: [str(tmp)], ["--checkpoint", "x.pt"], "cannot be combined with --checkpoint"),
        (lambda tmp: [str(tmp)], ["--report"], "cannot be combined with --report"),
        (lambda tmp: [str(tmp)], ["num_tasks=5"], "key=value overrides"),
        (_valid_run, ["--schedulers", "tapfinger"], "baselines only"),
        (lambda tmp: [str(tmp)], ["--policy-floor", "online"], "cannot be combined with --policy-floor"),
        (lambda tmp: [str(tmp)], ["--policy-batch", "4"], "cannot be combined with --policy-batch"),
    ],
    ids=["not-a-dir", "no-config", "no-events", "no-tag", "two-scenarios", "checkpoint", "report", "overrides",
         "policy-scheduler", "policy-floor", "policy-batch"],
)
def test_bad_input_exits_2(tmp_path, capsys, runs, extra, message):
    out = tmp_path / "out" / "c.png"
    argv = [arg for run in runs(tmp_path) for arg in ("--curves", run)]
    assert evaluate_main()([*argv, *extra, "--out", str(out), "--workers", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evaluate.py: error: --curves") and message in err, err
    assert "Traceback" not in err
    assert not out.parent.exists()


def test_step_tick_labels_are_compact():
    from agents.evaluation.curves import steps_label

    assert [steps_label(x) for x in (0, 500, 65536, 1_500_000, 8_000_000)] == ["0", "500", "65.54k", "1.5M", "8M"]
