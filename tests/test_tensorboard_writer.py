"""What TensorBoard reads from a run: each point once (its description on the first), no step written twice
over a resume, the validation cards first, and current and best validation apart in the custom layout.

The event files are read back as TensorBoard's loaders read them (``EventAccumulator``; the raw records for
the count of points)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2, summary_pb2

from agents.training.logger import (
    BEST_CHART,
    BEST_MEAN_JCT_TAG,
    CUSTOM_SCALARS_TAG,
    EVAL_MEAN_JCT_TAG,
    TAG_DESCRIPTIONS,
    BaselineScalars,
    RunWriter,
    baseline_description,
    baseline_run,
    custom_layout,
    written_before,
)


def _records(log_dir: Path) -> list[tuple[str, int]]:
    """Every (tag, step) written to the event files of ``log_dir``, copies included."""
    out = []
    for path in sorted(log_dir.glob("*tfevents*")):
        for record in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(record)
            out += [(v.tag, int(event.step)) for v in event.summary.value]
    return out


def _accumulator(log_dir: Path) -> EventAccumulator:
    ea = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _write(log_dir: Path, steps: list[int], layout: list[str] | None = None) -> None:
    writer = RunWriter(log_dir=str(log_dir))
    if layout is not None:
        writer.add_custom_scalars(custom_layout(layout))
    for step in steps:
        writer.add_scalar(EVAL_MEAN_JCT_TAG, 10.0 - step / 100, step)
        writer.add_scalar("update/loss", 1.0, step)
    writer.close()


def test_each_point_is_written_once_the_first_with_its_description(tmp_path):
    _write(tmp_path, [0, 40, 80])
    counts = Counter(_records(tmp_path))
    assert counts and set(counts.values()) == {1}, counts
    ea = _accumulator(tmp_path)
    assert ea.Tags()["tensors"] == []  # no new-style copy of a point
    for tag in (EVAL_MEAN_JCT_TAG, "update/loss"):
        assert [e.step for e in ea.Scalars(tag)] == [0, 40, 80]
        meta = ea.SummaryMetadata(tag)
        assert meta.summary_description == TAG_DESCRIPTIONS[tag]
        assert meta.data_class == summary_pb2.DATA_CLASS_SCALAR and meta.plugin_data.plugin_name == "scalars"


def test_a_resumed_writer_never_writes_a_step_twice(tmp_path):
    _write(tmp_path, [0, 40, 80], layout=["optimus"])
    assert written_before(tmp_path)[0] == {EVAL_MEAN_JCT_TAG: 80, "update/loss": 80}
    # the resumed process evaluates at last.pt's step 80 again, then goes on; its layout is the same
    _write(tmp_path, [80, 120, 160], layout=["optimus"])
    counts = Counter(_records(tmp_path))
    assert set(counts.values()) == {1}, counts
    assert sorted(s for t, s in counts if t == EVAL_MEAN_JCT_TAG) == [0, 40, 80, 120, 160]
    assert counts[(CUSTOM_SCALARS_TAG, 0)] == 1
    # the second process's points carry no second description, yet the tag keeps the first
    assert _accumulator(tmp_path).SummaryMetadata(EVAL_MEAN_JCT_TAG).summary_description == \
        TAG_DESCRIPTIONS[EVAL_MEAN_JCT_TAG]
    # a changed layout is stored again
    _write(tmp_path, [200], layout=["optimus", "sjf"])
    assert Counter(_records(tmp_path))[(CUSTOM_SCALARS_TAG, 0)] == 2


def test_the_baselines_are_runs_drawn_on_the_validation_chart(tmp_path):
    baselines = BaselineScalars(tmp_path, {"optimus": 4.34, "optimus:preemptive=false": 4.96, "never": None})
    for step in (0, 40, 40, 80):
        baselines.write(step)
    baselines.close()
    assert not (tmp_path / baseline_run("never")).exists()
    for label, mean in (("optimus", 4.34), ("optimus:preemptive=false", 4.96)):
        ea = _accumulator(tmp_path / baseline_run(label))
        assert ea.Tags()["scalars"] == [EVAL_MEAN_JCT_TAG]
        assert [(e.step, round(e.value, 2)) for e in ea.Scalars(EVAL_MEAN_JCT_TAG)] == [(0, mean), (40, mean),
                                                                                          (80, mean)]
        assert ea.SummaryMetadata(EVAL_MEAN_JCT_TAG).summary_description == baseline_description(label)


def test_tensorboard_opens_on_the_validation_cards():
    """TensorBoard lists tag groups (the part before the first '/') by name: validation's comes first."""
    groups = sorted({tag.split("/")[0] for tag in TAG_DESCRIPTIONS})
    assert groups[0] == EVAL_MEAN_JCT_TAG.split("/")[0] == BEST_MEAN_JCT_TAG.split("/")[0]


def test_the_custom_layout_shows_current_and_best_validation_apart():
    layout = custom_layout(["optimus", "optimus:preemptive=false"])
    category, charts = next(iter(layout.items()))
    assert category == "validation"
    (first, (kind1, tags1)), (second, (kind2, tags2)) = list(charts.items())[:2]
    assert "optimus, optimus:preemptive=false" in first and second == BEST_CHART and first != second
    every_tag = [*TAG_DESCRIPTIONS, CUSTOM_SCALARS_TAG]
    assert [t for t in every_tag if any(re.match(rx, t) for rx in tags1)] == [EVAL_MEAN_JCT_TAG]
    assert [t for t in every_tag if any(re.match(rx, t) for rx in tags2)] == [BEST_MEAN_JCT_TAG]
    assert "baselines" not in next(iter(custom_layout([])["validation"]))
