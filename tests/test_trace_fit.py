"""Trace parsing, power-law fitting, the three trace modes, the CLI and the shipped table."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from envs import trace_table
from envs.durations import steps_to_finish
from envs.progress_registry import TRACE_MODES
from envs.trace_fit import main
from envs.trace_models import ConstantRateProgress, PowerLawProgress, load_trace_models
from envs.trace_table import TraceError, fit_file, parse_trace

STEP = 10.0


def training_row(task: str, c: int, g: int, total: float, b: float, n: int = 6) -> str:
    """A row whose normalised progress is exactly (elapsed / total)**b (first epoch at 0 s)."""
    elapsed = np.linspace(0.0, total, n)
    loss = 100.0 - 50.0 * (elapsed / total) ** b
    tuples = ",".join(f'"({float(e)!r}, {float(v)!r})"' for e, v in zip(elapsed, loss))
    return f"{task},{c},{g},{total!r},{tuples}"


# (cpu, gpu) -> (total seconds, exponent) of the synthetic training task
TRAIN = {(1, 1): (40.0, 2.0), (1, 2): (100.0, 1.0), (2, 1): (60.0, 1.5), (2, 2): (30.0, 0.8)}
# (cpu, gpu) -> total seconds of the two repetitions of the inference task
INFER = {(1, 1): (18.0, 22.0), (1, 2): (20.0, 20.0), (2, 1): (25.0, 15.0), (2, 2): (10.0, 10.0)}


def synthetic_lines() -> list[str]:
    lines = []
    for (c, g), (total, b) in TRAIN.items():
        lines += [training_row("mnist", c, g, total, b)] * 2
    for (c, g), totals in INFER.items():
        lines += [f"audio,{c},{g},{t!r}" for t in totals]
    return lines


def write(tmp_path: Path, lines: list[str], name: str = "trace.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


@pytest.fixture
def table(tmp_path: Path) -> dict:
    return fit_file(write(tmp_path, synthetic_lines()), STEP)


def test_parse_reads_rows_with_line_numbers(tmp_path: Path) -> None:
    rows = parse_trace(write(tmp_path, synthetic_lines()))
    assert len(rows) == 16
    assert [r.line for r in rows] == list(range(1, 17))
    first = rows[0]
    assert (first.task, first.cpu, first.gpu, first.total_seconds) == ("mnist", 1, 1, 40.0)
    assert len(first.epochs) == 6 and first.epochs[0] == (0.0, 100.0) and first.epochs[-1] == (40.0, 50.0)
    assert rows[-1].task == "audio" and rows[-1].epochs == () and not rows[-1].is_training


def test_fit_recovers_a_known_power_law(table: dict) -> None:
    e = table["tasks"]["mnist"]
    assert e["kind"] == "training"
    for (c, g), (total, b) in TRAIN.items():
        i, j = c - 1, g - 1
        assert e["total_seconds"][i][j] == total
        assert e["b"][i][j] == pytest.approx(b, abs=1e-6)
        assert e["a"][i][j] == pytest.approx((total / STEP) ** -b, rel=1e-6)
        # the free two-parameter fit finds the same exact curve on noise-free data
        assert e["b_free"][i][j] == pytest.approx(b, abs=1e-4)
        assert e["a_free"][i][j] == pytest.approx((total / STEP) ** -b, rel=1e-4)
        assert e["rmse"][i][j] < 1e-6


def test_per_step_gain_is_the_hand_computed_difference() -> None:
    # p(x) = x^2 / 16: at p = 0.25 the task is at k = 2 steps; p(3) = 9/16
    fn = PowerLawProgress(np.array([[1 / 16]]), np.array([[2.0]]))
    legacy = PowerLawProgress(np.array([[1 / 16]]), np.array([[2.0]]), absolute=True)
    one = np.array([1, 1])
    p = np.array([0.25, 0.0])
    np.testing.assert_allclose(fn.delta(one, one, p), [9 / 16 - 0.25, 1 / 16])
    np.testing.assert_allclose(legacy.delta(one, one, p), [9 / 16, 1 / 16])


def test_fitted_table_gives_the_hand_computed_gain(tmp_path: Path, table: dict) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    models = load_trace_models(str(path), "powerlaw")
    # cell (1, 1): T = 40 s = 4 steps, b = 2 -> p(x) = x^2 / 16
    got = models["mnist"].delta(np.array([1]), np.array([1]), np.array([0.25]))
    assert got[0] == pytest.approx(0.3125, rel=1e-5)
    assert steps_to_finish(models["mnist"], np.array([1]), np.array([1]))[0] == 4
    # inference: mean of 18 s and 22 s = 20 s -> 10 / 20 per step
    assert models["audio"].delta(np.array([1]), np.array([1]), np.array([0.7]))[0] == pytest.approx(0.5)


def test_modes_differ_as_expected(tmp_path: Path, table: dict) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    c, g = np.array([1]), np.array([2])  # T = 100 s = 10 steps, b = 1 -> 0.1 per step
    correct = steps_to_finish(load_trace_models(str(path), "powerlaw")["mnist"], c, g)[0]
    # legacy: p <- p + a (p / a + 1) = 2 p + a, so p_n = 0.1 (2^n - 1) reaches 1 at n = 4
    legacy = steps_to_finish(load_trace_models(str(path), "legacy")["mnist"], c, g)[0]
    # HEAD: constant 10 / (100 + 14) per step -> ceil(11.4) = 12
    const = steps_to_finish(load_trace_models(str(path), "constant_rate")["mnist"], c, g)[0]
    assert (correct, legacy, const) == (10, 4, 12)
    audio = load_trace_models(str(path), "constant_rate")["audio"]
    assert audio.delta(np.array([2]), np.array([1]), np.array([0.0]))[0] == pytest.approx(10 / (20 + 14))


def test_repetitions_are_averaged_not_overwritten(tmp_path: Path) -> None:
    lines = [training_row("lm", 1, 1, 40.0, 1.0), training_row("lm", 1, 1, 60.0, 1.0), "audio,1,1,18.0", "audio,1,1,22.0"]
    t1 = fit_file(write(tmp_path, lines, "a.csv"), STEP)
    t2 = fit_file(write(tmp_path, lines[::-1], "b.csv"), STEP)
    assert t1["tasks"] == t2["tasks"]  # order of repetitions is irrelevant
    e = t1["tasks"]["lm"]
    assert e["reps"] == [[2]] and e["total_seconds"] == [[50.0]]
    assert t1["tasks"]["audio"]["total_seconds"] == [[20.0]]
    # the anchored exponent minimises the squared error over the pooled points of both runs
    x = np.concatenate([np.linspace(0, 4, 6), np.linspace(0, 6, 6)])
    p = np.concatenate([np.linspace(0, 1, 6), np.linspace(0, 1, 6)])
    grid = np.linspace(0.5, 2.0, 15001)
    sse = [np.sum(((x / 5.0) ** b - p) ** 2) for b in grid]
    assert e["b"][0][0] == pytest.approx(grid[int(np.argmin(sse))], abs=2e-4)
    assert e["b"][0][0] != pytest.approx(1.0, abs=0.01)  # neither repetition's own exponent alone


def test_allocations_are_clipped_to_the_grid_and_zero_means_no_gain(tmp_path: Path, table: dict) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    for mode in TRACE_MODES:
        for fn in load_trace_models(str(path), mode).values():
            p = np.array([0.3, 0.3, 0.3, 0.3])
            got = fn.delta(np.array([2, 99, 0, 2]), np.array([2, 99, 2, 0]), p)
            assert got[0] == got[1] > 0
            assert got[2] == got[3] == 0.0


def _replace(lines: list[str], idx: int, new: str) -> list[str]:
    out = list(lines)
    out[idx] = new
    return out


GOOD = synthetic_lines()
MALFORMED = [
    ("too few columns", _replace(GOOD, 2, "mnist,2,1"), 3, "at least 4 columns"),
    ("non-numeric cpu", _replace(GOOD, 4, GOOD[4].replace("mnist,2,1,", "mnist,two,1,")), 5, "cpu count"),
    ("zero gpus", _replace(GOOD, 0, GOOD[0].replace("mnist,1,1,", "mnist,1,0,")), 1, "gpu count"),
    ("non-numeric total", _replace(GOOD, 9, "audio,1,1,fast"), 10, "total seconds"),
    ("bad tuple", _replace(GOOD, 1, GOOD[1] + ',"(1.0; 2.0)"'), 2, "column 11"),
    ("non-numeric loss", _replace(GOOD, 3, GOOD[3].replace("(0.0, 100.0)", "(0.0, nan-ish)")), 4, "validation loss"),
    ("elapsed not increasing", _replace(GOOD, 6, training_row("mnist", 2, 2, 30.0, 0.8)
                                         .replace('"(0.0, 100.0)"', '"(7.0, 100.0)"')), 7, "got 6.0 after 7.0"),
    ("one epoch", _replace(GOOD, 5, 'mnist,2,1,60.0,"(3.0, 10.0)"'), 6, "at least 2 epochs"),
    ("loss rises", _replace(GOOD, 2, 'mnist,1,2,100.0,"(3.0, 10.0)","(90.0, 12.0)"'), 3, "does not decrease"),
    ("epochs outlast total", _replace(GOOD, 2, 'mnist,1,2,100.0,"(3.0, 10.0)","(190.0, 2.0)"'), 3, "after the total"),
    ("training row for inference task", _replace(GOOD, 12, training_row("audio", 2, 1, 25.0, 1.0)), 13, "first row (line 9)"),
    ("inference row for training task", _replace(GOOD, 3, "mnist,1,2,100.0"), 4, "first row (line 1)"),
    ("missing cell", GOOD[:6] + [training_row("mnist", 2, 1, 60.0, 1.5)] * 2 + GOOD[8:], None, "no row for cpu=2, gpu=2"),
    ("bad task name", _replace(GOOD, 8, "au dio,1,1,18.0"), 9, "task name"),
]


@pytest.mark.parametrize("lines,line,fragment", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_trace_names_file_and_line(tmp_path: Path, lines: list[str], line: int | None, fragment: str) -> None:
    path = write(tmp_path, lines)
    with pytest.raises(TraceError) as err:
        parse_trace(path)
    msg = str(err.value)
    assert fragment in msg
    if line is not None:
        assert msg.startswith(f"{path}:{line}:")


def test_missing_cell_names_the_task_line_range(tmp_path: Path) -> None:
    lines = GOOD[:6] + GOOD[8:]  # mnist cpu=2 gpu=2 removed: mnist rows are now lines 1-6
    path = write(tmp_path, lines)
    with pytest.raises(TraceError, match=r"trace\.csv:1-6: task 'mnist'.*cpu=2, gpu=2.*cpu 1\.\.2 x gpu 1\.\.2"):
        parse_trace(path)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="nope.csv: trace file not found"):
        parse_trace(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="no rows"):
        parse_trace(write(tmp_path, ["", ""]))


def test_cli_writes_table_with_provenance(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = write(tmp_path, synthetic_lines())
    out = tmp_path / "sub" / "params.json"
    assert main(["--trace", str(src), "--out", str(out), "--step-seconds", "5", "--overhead-seconds", "4"]) == 0
    assert "mnist" in capsys.readouterr().out
    table = json.loads(out.read_text())
    prov = table["provenance"]
    assert prov["source"] == "trace.csv" and prov["rows"] == 16
    assert prov["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert prov["step_seconds"] == table["step_seconds"] == 5.0 and table["overhead_seconds"] == 4.0
    assert "curve_fit" in prov["method"]
    # with 5-second steps the (1, 1) training cell takes 40 / 5 = 8 steps
    fn = load_trace_models(str(out), "powerlaw")["mnist"]
    assert steps_to_finish(fn, np.array([1]), np.array([1]))[0] == 8


def test_cli_bad_input_exits_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    src = write(tmp_path, _replace(GOOD, 2, "mnist,2,1"))
    assert main(["--trace", str(src), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err
    assert f"{src}:3:" in err and "Traceback" not in err
    assert not (tmp_path / "o.json").exists()
    assert main(["--trace", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o.json")]) == 2
    assert main(["--trace", str(write(tmp_path, GOOD)), "--out", str(tmp_path / "o.json"), "--step-seconds", "0"]) == 2


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda t: t.update(format="other"), "format"),
        (lambda t: t.pop("tasks"), "missing key 'tasks'"),
        (lambda t: t["tasks"]["mnist"]["b"].pop(), "tasks.mnist.b has shape"),
        (lambda t: t["tasks"]["mnist"]["a"][1].__setitem__(0, -1.0), r"tasks.mnist.a\[1\]\[0\] = -1.0"),
        (lambda t: t["tasks"]["audio"].pop("total_seconds"), "tasks.audio.total_seconds is missing"),
        (lambda t: t.update(cpu=[2, 3]), "cpu must list"),
        (lambda t: t.update(step_seconds=-1), "step_seconds"),
    ],
)
def test_malformed_table_raises(tmp_path: Path, table: dict, mutate, fragment: str) -> None:
    mutate(table)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(table))
    with pytest.raises(TraceError, match=fragment) as err:
        load_trace_models(str(path), "powerlaw")
    assert str(path) in str(err.value)


def test_unreadable_or_missing_table_and_unknown_mode(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": \n nope}')
    with pytest.raises(TraceError, match=r"bad.json:2: not valid JSON"):
        load_trace_models(str(bad), "powerlaw")
    with pytest.raises(TraceError, match="table not found"):
        load_trace_models(str(tmp_path / "none.json"), "legacy")
    with pytest.raises(TraceError, match="unknown trace mode 'exact'"):
        load_trace_models(None, "exact")


def test_models_are_cached_per_path_and_mode(tmp_path: Path, table: dict) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    m1 = load_trace_models(str(path), "powerlaw")
    m1.pop("mnist")  # the caller's dict is a copy
    m2 = load_trace_models(str(path), "powerlaw")
    assert m2["audio"] is m1["audio"] and "mnist" in m2
    m3 = load_trace_models(str(path), "legacy")
    assert m3["mnist"] is not m2["mnist"] and m3["mnist"].absolute


def test_csv_path_is_fitted_on_load(tmp_path: Path) -> None:
    models = load_trace_models(str(write(tmp_path, synthetic_lines())), "powerlaw")
    assert isinstance(models["mnist"], PowerLawProgress) and isinstance(models["audio"], ConstantRateProgress)
    assert steps_to_finish(models["mnist"], np.array([2]), np.array([1]))[0] == 6  # 60 s / 10


# -------------------------------------------------------------------------------------
# The shipped table
# -------------------------------------------------------------------------------------
def shipped() -> dict:
    return json.loads(trace_table.DEFAULT_TABLE.read_text())


@pytest.mark.skipif(not trace_table.DEFAULT_TRACE.is_file(), reason="shared trace not available")
def test_shipped_table_is_reproduced_from_the_shared_trace() -> None:
    table = shipped()
    assert table["provenance"]["sha256"] == trace_table.sha256_of(trace_table.DEFAULT_TRACE)
    refit = fit_file(trace_table.DEFAULT_TRACE, table["step_seconds"], table["overhead_seconds"])
    assert refit["provenance"] == table["provenance"] and refit.keys() == table.keys()
    for task, entry in table["tasks"].items():
        assert refit["tasks"][task].keys() == entry.keys()
        for key, value in entry.items():
            if key == "kind":
                assert refit["tasks"][task][key] == value
            else:  # last-bit differences of the optimiser across platforms are fine
                np.testing.assert_allclose(refit["tasks"][task][key], value, rtol=1e-6, atol=1e-9, err_msg=f"{task}.{key}")


def test_shipped_table_steps_follow_the_measured_times() -> None:
    table = shipped()
    step, overhead = table["step_seconds"], table["overhead_seconds"]
    c, g = np.meshgrid(table["cpu"], table["gpu"], indexing="ij")
    assert c.shape == (16, 8)
    models = {m: load_trace_models(None, m) for m in TRACE_MODES}
    for task in ("mnist", "lm", "audio"):
        total = np.array(table["tasks"][task]["total_seconds"])
        assert np.all(np.array(table["tasks"][task]["reps"]) == 2)
        steps = {m: steps_to_finish(models[m][task], c.ravel(), g.ravel()).reshape(c.shape) for m in models}
        # anchored curve + correct difference: exactly the measured duration in steps
        np.testing.assert_array_equal(steps["powerlaw"], np.ceil(total / step))
        np.testing.assert_array_equal(steps["constant_rate"], np.ceil((total + overhead) / step))
        assert np.all(steps["legacy"] <= steps["powerlaw"])
        if task != "audio":
            assert np.any(steps["legacy"] < steps["powerlaw"])
            # legacy mode, the reference code's bug (absolute progress added as the per-step gain,
            # envs/trace_models.py): mnist finishes in 3-6 steps, lm in 4-8
            assert (steps["legacy"].min(), steps["legacy"].max()) == ((3, 6) if task == "mnist" else (4, 8))
