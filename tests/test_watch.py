"""A run a new user can watch (issue 58): progress between evaluations, TensorBoard that reads at a
glance (descriptions, the custom layout, the validation baselines), learning curves and results pages
readable near the end of training.

Runs are tiny (synthetic-3 with a dozen tasks, a small network, one thread), as in test_training.py.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

import train as train_cli
from agents.training.checkpoints import LAST
from agents.training.loop import run_training
from agents.training.prepare import prepare_run
from agents.training import progress as progress_mod
from agents.training import validation_baselines as vb
from agents.training.logger import (
    BASELINES_RUN,
    BEST_CHART,
    CUSTOM_SCALARS_TAG,
    TAG_DESCRIPTIONS,
    TENSORBOARD_KEEP,
    baseline_description,
    baseline_run,
    custom_layout,
    scalar_tag,
    tag_description,
)
from agents.training.progress import RunProgress

ROOT = Path(__file__).resolve().parents[1]
TINY = ["num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32"]
FAST = [
    "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=2", "train.eval_every=40",
    "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=2",
]
#: a plain status line (:meth:`RunProgress.line`) of a run of 80 env steps
STATUS = (r"step \d+/80 \(\d+%\)(, \d+ env steps/s, ETA [\d:]+)?; validation mean JCT (n/a|\d+\.\d{3})"
          r"( \(best \d+\.\d{3}\))?(; rival \S+ \d+\.\d{3})?(; validating)?")


def _spec(logdir: Path, name: str, *extra: str, steps: int = 80, **kw):
    flags = {"steps": steps, "envs": 2, "seed": 0, "logdir": str(logdir), "vector": "dummy"}
    return prepare_run("synthetic-3", [*TINY, *FAST, f"train.run_name={name}", *extra], flags=flags, **kw)


def _events(path: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _steps(path: Path, tag: str) -> list[int]:
    """The steps of ``tag`` over the event files directly in ``path``, in the order their processes started."""
    from agents.evaluation.curves import event_files, read_event_file

    files = sorted(read_event_file(f, tag) for f in event_files(path))
    return [step for _, points in files for step, _ in points]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):
    """One tiny run of 80 env steps (evaluations at 0, 40, 80)."""
    spec = _spec(tmp_path_factory.mktemp("watch"), "tiny")
    run_training(spec)
    return spec


# ---------------------------------------------------------------------------------------
# progress between evaluations
# ---------------------------------------------------------------------------------------
def test_the_status_line_names_rate_eta_and_the_validation_figures():
    clock = iter([0.0, 10.0]).__next__
    p = RunProgress(1000, 5000, bar=False, every_s=30.0, rival=("optimus", 4.5), clock=clock)
    assert p.line(now=0.0) == "step 1000/5000 (20%); validation mean JCT n/a; rival optimus 4.500"
    p.training_step(1000)  # the rate counts from this process's first training step (clock 10.0)
    p.collected(2000)
    p.evaluated(5.25, 4.75)
    assert p.line(now=20.0) == ("step 3000/5000 (60%), 200 env steps/s, ETA 00:10; validation mean JCT 5.250 "
                                "(best 4.750); rival optimus 4.500")
    p.validation_started()
    assert p.line(now=20.0).endswith("; validating")
    assert re.fullmatch(STATUS.replace("/80", "/5000"), p.line(now=20.0))


def test_a_due_line_is_printed_while_no_hook_runs(monkeypatch, capsys):
    """The ticker prints during an update or a validation, when the trainer calls nothing."""
    monkeypatch.setattr(progress_mod, "TICK_S", 0.02)
    p = RunProgress(0, 100, bar=False, every_s=0.05)
    p.start()
    try:
        p.training_step(40)
        capsys.readouterr()
        time.sleep(0.5)  # no call into p: the trainer is busy
    finally:
        p.close()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 3 and all(ln.startswith("step 40/100 (40%)") for ln in lines), lines


def test_the_bar_shows_env_steps_and_the_validation_figures(capsys):
    p = RunProgress(0, 1000, bar=True, every_s=30.0, rival=("optimus", 4.5))
    assert p.every_s is None  # the bar replaces the plain lines
    p.training_step(0)
    p.collected(250)
    p.evaluated(5.25, 4.75)
    p.write("step 250: eval mean JCT 5.250")
    p.close()
    out = capsys.readouterr()
    assert "step 250: eval mean JCT 5.250" in out.out and "env steps" not in out.out
    assert "250/1000 env steps" in out.err and "val JCT 5.250 (best 4.750), optimus 4.500" in out.err
    big = RunProgress(24576, 1966080, bar=True, every_s=None)  # a recipe's run, resumed: counts scaled
    big.close()
    assert "24.6k/1.97M env steps" in capsys.readouterr().err


def _cli(tmp_path: Path, name: str, *extra: str) -> list[str]:
    argv = ["--config", "synthetic-3", "--steps", "80", "--envs", "2", "--vector", "dummy", "--logdir", str(tmp_path),
            *TINY, *FAST, f"train.run_name={name}", *extra]
    return argv


def test_off_a_terminal_status_lines_carry_the_validation_figures_and_quiet_silences_them(tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.setattr(train_cli, "STATUS_EVERY_S", 0.0)  # a line at every training step (stdout is no terminal)
    assert train_cli.main(_cli(tmp_path, "plain")) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    status = [ln for ln in lines if re.fullmatch(STATUS, ln)]
    assert len(status) >= 2, out.out
    assert any("validation mean JCT n/a" not in ln and "(best " in ln and "; rival optimus" in ln for ln in status)
    baselines = [ln for ln in lines if ln.startswith("validation baselines (mean JCT on the validation workloads): ")]
    assert len(baselines) == 1 and "optimus " in baselines[0] and "optimus:preemptive=false " in baselines[0]
    assert "\r" not in out.err and "env steps [" not in out.err  # no bar off a terminal

    assert train_cli.main(_cli(tmp_path, "quiet", "--quiet")) == 0
    out = capsys.readouterr()
    assert not [ln for ln in out.out.splitlines() if ln.startswith("step ") and "/80" in ln], out.out
    assert "\r" not in out.err and "env steps" not in out.err
    assert [ln for ln in out.out.splitlines() if "eval mean JCT" in ln]  # the evaluation lines stay


# ---------------------------------------------------------------------------------------
# TensorBoard
# ---------------------------------------------------------------------------------------
def test_every_scalar_the_run_writes_carries_its_description(tiny_run):
    run_dir = tiny_run.run_dir
    for scope, keys in TENSORBOARD_KEEP.items():
        assert all(TAG_DESCRIPTIONS.get(scalar_tag(scope, k)) for k in keys), scope
    runs = {run_dir: tag_description, **{run_dir / baseline_run(k): (lambda _, k=k: baseline_description(k))
                                         for k in vb.VALIDATION_BASELINE_SPECS}}
    for path, describe in runs.items():
        ea = _events(path)
        tags = ea.Tags()["scalars"]
        assert tags and set(ea.Tags()["tensors"]) <= {CUSTOM_SCALARS_TAG}, path  # no tensor copy of a point
        for tag in tags:
            assert ea.SummaryMetadata(tag).summary_description == describe(tag) != "", tag
            steps = [e.step for e in ea.Scalars(tag)]
            assert len(steps) == len(set(steps)), f"{tag}: a point must be written once"


def test_the_baselines_are_drawn_beside_the_validation_curve_with_the_results_pages_figures(tiny_run):
    from agents.evaluation.curves import baseline_means, baseline_specs, read_validation
    from agents.training.validation_baselines import VALIDATION_BASELINES

    run_dir = tiny_run.run_dir
    curve = [e.step for e in _events(run_dir).Scalars("test/mean_jct")]
    assert curve == [0, 40, 80]
    validation = read_validation(run_dir)
    means, _ = baseline_means(validation, baseline_specs(VALIDATION_BASELINES, validation))
    assert sorted(p.name for p in (run_dir / BASELINES_RUN).iterdir()) == sorted(vb.VALIDATION_BASELINE_SPECS)
    for label, mean in means.items():
        ea = _events(run_dir / baseline_run(label))
        assert ea.Tags()["scalars"] == ["test/mean_jct"]  # drawn on the run's validation chart
        points = [(e.step, e.value) for e in ea.Scalars("test/mean_jct")]
        assert [s for s, _ in points] == curve and all(v == pytest.approx(mean, rel=1e-6) for _, v in points)
    saved = json.loads((run_dir / vb.BASELINES_FILE).read_text())
    assert saved["seeds"] == validation.seeds and saved["mean_jct"] == pytest.approx(means)


def test_the_custom_layout_opens_with_validation_against_the_baselines(tiny_run):
    from tensorboard.plugins.custom_scalar import layout_pb2

    ea = _events(tiny_run.run_dir)
    layout = layout_pb2.Layout()
    event = ea.Tensors("custom_scalars__config__")[0]
    layout.ParseFromString(event.tensor_proto.string_val[0])
    first, second = layout.category[0].chart[:2]
    assert layout.category[0].title == "validation" and "baselines" in first.title and second.title == BEST_CHART
    every_tag = set(_events(tiny_run.run_dir).Tags()["scalars"])
    drawn = [{t for t in every_tag if any(re.match(rx, t) for rx in chart.multiline.tag)} for chart in (first, second)]
    assert drawn == [{"test/mean_jct"}, {"test/best_mean_jct"}]  # the current evaluation and the best apart
    for label in vb.VALIDATION_BASELINE_SPECS:  # the baselines' runs write the first chart's tag
        assert _events(tiny_run.run_dir / baseline_run(label)).Tags()["scalars"] == ["test/mean_jct"]
    for category in layout.category:  # every chart draws something the run wrote
        for chart in category.chart:
            assert any(re.match(rx, t) for rx in chart.multiline.tag for t in every_tag), chart.title
    assert custom_layout(["optimus"])["validation"]  # the layout names the validation chart first


def test_a_resumed_run_reads_its_baselines_back(tiny_run, tmp_path, monkeypatch):
    import shutil

    run_dir = tmp_path / "resumed"
    shutil.copytree(tiny_run.run_dir, run_dir)

    def refuse(*args, **kwargs):
        raise AssertionError("a resumed run must not run its baselines again")

    monkeypatch.setattr(vb, "run_baselines", refuse)
    run_training(prepare_run(None, [], flags={"steps": 120}, resume=str(run_dir / LAST)))
    steps = _steps(run_dir / baseline_run("optimus"), "test/mean_jct")
    # over both processes each step once: the evaluation last.pt was saved after is not written again
    assert steps == _steps(run_dir, "test/mean_jct") == [0, 40, 80, 120]
    assert _steps(run_dir, "test/best_mean_jct") == [0, 40, 80, 120]


def test_saved_baselines_are_reused_only_for_the_same_validation_workloads(tmp_path):
    from agents.training.config import TrainConfig

    train = TrainConfig(eval_episodes=2)
    means = {"optimus": 4.5, "optimus:preemptive=false": None}
    vb.write_baselines(tmp_path, train, means)
    assert vb.read_baselines(tmp_path, train) == means
    assert vb.read_baselines(tmp_path, TrainConfig(eval_episodes=3)) is None  # other workloads
    assert vb.read_baselines(tmp_path, TrainConfig(eval_episodes=2, eval_scenario="eval")) is None
    doc = json.loads((tmp_path / vb.BASELINES_FILE).read_text())
    doc["mean_jct"]["optimus"] = "4.5"
    (tmp_path / vb.BASELINES_FILE).write_text(json.dumps(doc))
    assert vb.read_baselines(tmp_path, train) is None  # a malformed file is computed again
    (tmp_path / vb.BASELINES_FILE).write_text("{")
    assert vb.read_baselines(tmp_path, train) is None


def test_without_baselines_nothing_runs_and_nothing_is_drawn(tmp_path, monkeypatch):
    monkeypatch.setattr(vb, "run_baselines", lambda *a, **k: pytest.fail("baselines ran"))
    spec = _spec(tmp_path, "nobase", "train.validation_baselines=false", steps=40)
    run_training(spec)
    assert not (spec.run_dir / BASELINES_RUN).exists() and not (spec.run_dir / vb.BASELINES_FILE).exists()


def test_the_readme_lists_exactly_the_tags_a_run_writes(tiny_run):
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## TensorBoard"):readme.index("## Results")]
    listed = set(re.findall(r"`((?:test|training|update|usage|warmstart)/[^`*]+)`", section))
    patterns = {tag for tag in listed if "<name>" in tag}  # one tag per named scenario (train.also_validate_on)
    assert patterns == {"test/also/<name>/mean_jct"}
    assert all(tag_description(tag.replace("<name>", "multi-3")) for tag in patterns)
    listed -= patterns
    described = set(TAG_DESCRIPTIONS)
    assert listed <= described, listed - described
    written = set(_events(tiny_run.run_dir).Tags()["scalars"])
    assert written <= listed, written - listed
    assert described <= listed, described - listed  # GPU and warm-start tags too


def test_the_validation_baselines_have_one_owner():
    from agents.evaluation.curves import DEFAULT_BASELINES
    from agents.training.validation_baselines import VALIDATION_BASELINES
    from agents.baselines.specs import parse_scheduler_spec, split_scheduler_list

    assert VALIDATION_BASELINES == DEFAULT_BASELINES == vb.VALIDATION_BASELINES
    for label in split_scheduler_list(VALIDATION_BASELINES):
        assert parse_scheduler_spec(label) == vb.VALIDATION_BASELINE_SPECS[label]
    assert vb.validation_rival({"optimus": 4.4, "optimus:preemptive=false": 4.2}) == ("optimus:preemptive=false", 4.2)


# ---------------------------------------------------------------------------------------
# learning curves and results pages
# ---------------------------------------------------------------------------------------
def _curves(points: dict[str, list[tuple[int, float]]]):
    from agents.evaluation.curves import Curves, RunCurve, Validation
    from envs.config import load_scenario

    runs = [RunCurve(name, Path(name), pts) for name, pts in points.items()]
    return Curves(Validation(load_scenario("synthetic-3"), [10000, 10001], "train"), runs,
                  {"optimus": 4.34, "optimus:preemptive=false": 4.96}, 3.0)


def test_the_curve_plot_spans_the_end_of_training_not_the_untrained_start(tmp_path):
    import matplotlib

    matplotlib.use("Agg", force=True)
    from agents.evaluation import curves as cv

    steps = [0, 100, 200, 300, 400]
    c = _curves({"seed 0": list(zip(steps, [60.6, 7.0, 4.5, 4.2, 3.99])),
                 "seed 1": list(zip(steps, [22.4, 6.5, 4.6, 4.3, 4.14]))})
    lo, hi = cv.value_range(c)
    assert lo < 3.0 and 7.0 < hi < 8.0  # the bound, the late points and the baselines; not 60.6 or 22.4
    seen = {}
    original = cv.save_figure

    def keep(fig, path):
        seen["ylim"] = fig.axes[0].get_ylim()
        seen["stars"] = [ln.get_markersize() for ln in fig.axes[0].lines if ln.get_marker() == "*"]
        return original(fig, path)

    cv.save_figure = keep
    try:
        cv.plot_curves(c, tmp_path / "c.png")
    finally:
        cv.save_figure = original
    assert seen["ylim"] == pytest.approx((lo, hi)) and (tmp_path / "c.png").stat().st_size > 0
    # one best star per run, each smaller than the one before (coinciding stars all show), plus the legend's
    assert seen["stars"][:2] == cv.best_marker_sizes(2) and seen["stars"][0] > seen["stars"][1]


def test_each_results_page_shows_the_papers_figure_beside_ours():
    from agents.evaluation.reference import REDUCTION, REFERENCE, SCENARIO_TO_EXPERIMENT
    from agents.evaluation.results import read_results
    from agents.evaluation.results_page import paper_markdown, scenario_markdown

    r = read_results(ROOT / "docs" / "results" / "synthetic-3.json")
    exp, figure = SCENARIO_TO_EXPERIMENT["synthetic-3"]
    text = "\n".join(paper_markdown(r))
    assert figure in text and f"| tapfinger | {REFERENCE[exp]['TapFinger'][0]:.2f} | {r.over_seeds['mean_jct']:.2f} |" in text
    ours = 1 - r.over_seeds["mean_jct"] / r.baselines["optimus"]["mean_jct"]
    assert f"| optimus | {REFERENCE[exp]['Optimus'][0]:.2f} | {r.baselines['optimus']['mean_jct']:.2f} | " \
           f"{100 * REDUCTION[exp]['Optimus'][0]:.1f}% | {100 * ours:.1f}% |" in text
    assert text in scenario_markdown(r)
    from dataclasses import replace

    assert paper_markdown(replace(r, scenario="no-such-scenario")) == []
