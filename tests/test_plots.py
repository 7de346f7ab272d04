"""Evaluation figures a reader gets at a glance: the axes span the contenders (a scheduler far above is
drawn cut, its value written), oracle baselines carry the tables' mark, the learned policy stands out, the
CDF ends at a high percentile of the contenders' JCTs."""

from __future__ import annotations

import copy
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from agents.evaluation import plots  # noqa: E402
from agents.evaluation.curves import oracle_baselines  # noqa: E402
from agents.evaluation.summary import ORACLE_MARK, build_summary  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------
# the axis rules
# ---------------------------------------------------------------------------------------
def test_contenders_are_the_schedulers_near_the_best_and_the_policy():
    means = {"sjf": 3.6, "tapfinger": 3.9, "optimus": 4.3, "random": 9.8, "tiresias": 23.9, "none": None}
    assert plots.contenders(means) == ["sjf", "tapfinger", "optimus"]
    # a policy far off still sets the axis: it is what the figure is about
    assert plots.contenders({**means, "tapfinger": 20.0}, always=["tapfinger"]) == ["sjf", "tapfinger", "optimus"]
    assert plots.contenders(means, factor=3.0) == ["sjf", "tapfinger", "optimus", "random"]
    assert plots.contenders({"a": None, "b": float("nan")}) == []


def test_the_bar_axis_spans_the_contenders_not_the_outlier():
    highs = {"sjf": 3.9, "optimus": 5.0, "tiresias": 38.6}
    top = plots.bar_top(highs, ["sjf", "optimus"])
    assert top == pytest.approx(plots.HEADROOM * 5.0) and top < 38.6
    assert plots.bar_top(highs, []) == pytest.approx(plots.HEADROOM * 38.6)  # nobody shown: every bar whole
    assert plots.bar_top({}, []) == 1.0


def test_the_cdf_ends_at_the_contenders_percentile():
    rng = np.random.default_rng(0)
    pools = {"sjf": rng.uniform(2, 8, 500), "optimus": rng.uniform(2, 11, 500), "tiresias": rng.uniform(2, 100, 500)}
    xmax = plots.cdf_xmax(pools, ["sjf", "optimus"])
    assert xmax == pytest.approx(np.percentile(np.concatenate([pools["sjf"], pools["optimus"]]), plots.CDF_PERCENTILE))
    assert xmax < 11.0 < plots.cdf_xmax(pools, ["sjf", "optimus", "tiresias"])
    assert plots.cdf_xmax({"a": np.array([])}, ["a"]) == 1.0


def test_oracles_carry_the_tables_mark():
    assert plots.scheduler_label("sjf", ["sjf"]) == f"sjf {ORACLE_MARK}"
    assert plots.scheduler_label("optimus", ["sjf"]) == "optimus"
    # the curve plots decide as the evaluation's specs do
    assert oracle_baselines(["optimus", "optimus:oracle=true", "sjf", "tiresias", "not a spec:::"]) == [
        "optimus:oracle=true", "sjf"]


# ---------------------------------------------------------------------------------------
# the figures
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def evaluation():
    """A tiny evaluation: the shipped synthetic-3 policy, two oracles, two baselines, two seeds."""
    from agents.evaluation.runner import resolve_schedulers, run_evaluation
    from envs.config import load_scenario

    cfg = load_scenario("synthetic-3", ["num_tasks=12"]).for_evaluation()
    specs = resolve_schedulers("sjf,okita,optimus,tiresias", (str(ROOT / "checkpoints" / "synthetic-3.pt"),), cfg)
    run = run_evaluation(cfg, specs, [0, 1])
    return run, build_summary(run)


def _drawn(monkeypatch, draw, *args) -> dict:
    """The axes of the figure ``draw`` saves (its texts, tick labels, limits)."""
    seen = {}

    def keep(fig, path):
        ax = fig.axes[0]
        seen.update(ylim=ax.get_ylim(), xlim=ax.get_xlim(), texts=[t.get_text() for t in ax.texts],
                    ticks={t.get_text(): t.get_fontweight() for t in ax.get_xticklabels()},
                    legend={t.get_text(): t.get_fontweight() for t in ax.get_legend().get_texts()},
                    xlabel=ax.get_xlabel(), ylabel=ax.get_ylabel(),
                    bars=[(p.get_height(), p.get_hatch()) for p in ax.patches])
        return original(fig, path)

    original = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", keep)
    draw(*args)
    return seen


def test_a_far_off_baseline_is_drawn_cut_with_its_value(evaluation, monkeypatch, tmp_path):
    run, summary = evaluation
    summary = copy.deepcopy(summary)
    s = summary["schedulers"]
    far = 40.0 * max(st["mean_jct"] for st in s.values())
    s["tiresias"]["mean_jct"], s["tiresias"]["ci95"] = far, [far - 1.0, far + 1.0]
    seen = _drawn(monkeypatch, plots.plot_mean_jct, run, summary, tmp_path / "mean_jct.png")
    top = seen["ylim"][1]
    assert top < far and top >= max(st["mean_jct"] for n, st in s.items() if n != "tiresias")
    assert f"{far:.2f}" in seen["texts"] and "cut" in seen["ylabel"]
    assert max(h for h, _ in seen["bars"]) == pytest.approx(top)  # the cut bar ends at the axis top
    # the oracles as the table marks them, the policy in bold and hatched
    oracle = set(summary["oracle"])
    assert oracle == {"sjf", "okita"}
    assert {f"{n} {ORACLE_MARK}" for n in oracle} <= set(seen["ticks"])
    assert seen["ticks"][run.policy_names[0]] == "bold"
    assert [w for t, w in seen["ticks"].items() if t != run.policy_names[0]] == ["normal"] * (len(s) - 1)
    assert sum(hatch == "//" for _, hatch in seen["bars"]) == len(run.policy_names)


def test_a_bar_whose_interval_leaves_the_axes_keeps_its_value_inside(evaluation, monkeypatch, tmp_path):
    import warnings

    run, summary = evaluation
    summary = copy.deepcopy(summary)
    s = summary["schedulers"]
    means = {n: st["mean_jct"] for n, st in s.items()}
    shown = plots.contenders(means, run.policy_names)
    top = plots.bar_top({n: st["ci95"][1] for n, st in s.items()}, shown)
    low = plots.CONTENDER_FACTOR * min(means.values())
    assert low < top  # room for a bar that is not a contender and still stands whole
    name, m = "tiresias", (low + top) / 2
    s[name]["mean_jct"], s[name]["ci95"] = m, [0.0, 20.0 * top]  # a wide t-interval, far above the axes
    assert plots.contenders({**means, name: m}, run.policy_names) == shown
    positions = {}

    def keep(fig, path):
        ax = fig.axes[0]
        positions.update({t.get_text(): t.get_position()[1] for t in ax.texts}, top=ax.get_ylim()[1])
        return original(fig, path)

    original = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", keep)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib cannot lay out a figure with a label far outside its axes
        plots.plot_mean_jct(run, summary, tmp_path / "mean_jct.png")
    assert positions[f"{m:.2f}"] < positions["top"]


def test_the_jct_cdf_ends_at_the_contenders_percentile(evaluation, monkeypatch, tmp_path):
    run, summary = evaluation
    seen = _drawn(monkeypatch, plots.plot_jct_cdf, run, summary, tmp_path / "jct_cdf.png")
    pools = {n: np.concatenate([r.jct for r in res]) for n, res in run.results.items()}
    means = {n: st["mean_jct"] for n, st in summary["schedulers"].items()}
    xmax = plots.cdf_xmax(pools, plots.contenders(means, run.policy_names))
    assert seen["xlim"][1] == pytest.approx(max(xmax, float(np.concatenate(run.bound).max())) + 0.5)
    assert f"{plots.CDF_PERCENTILE}th percentile" in seen["xlabel"]
    policy = [t for t in seen["legend"] if t.startswith(f"{run.policy_names[0]} (")]
    assert policy and seen["legend"][policy[0]] == "bold"
    assert any(t.startswith(f"sjf {ORACLE_MARK} (") for t in seen["legend"])


def test_every_evaluation_figure_is_written(evaluation, tmp_path):
    run, summary = evaluation
    paths = plots.write_plots(run, summary, tmp_path)
    assert [p.name for p in paths] == ["jct_cdf.png", "tasks_in_system.png", "utilisation.png", "mean_jct.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


def test_the_marks_are_explained_only_when_present():
    assert plots.marks_note(["sjf"], ["tapfinger"]) == f"{ORACLE_MARK} oracle: reads the true task durations; " \
        "bold: the learned policy"
    assert plots.marks_note([], ["tapfinger"]) == "bold: the learned policy"
    assert plots.marks_note([], []) == ""
