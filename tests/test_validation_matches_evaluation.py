"""best.pt's validation figure is what ``evaluate.py`` reports for it on the validation seeds.

A tiny testbed-6 run (sampled actions, where batch sizes could change the draws; agents reconciled
in room order, validated on the ``eval_overrides`` variant, as the recipe does) is evaluated by the command line as a user
would: ``evaluate.py --checkpoint best.pt --seed-offset 10000 --seeds <eval_episodes>`` with two
worker processes and no ``--scenario`` (the checkpoint's own). The mean JCT must be the run's best
validation mean JCT: the same workloads, the same draws and the same batched forward pass (every
validation episode in one batch, :func:`agents.evaluation.runner.seed_groups`).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agents.training.checkpoints import BEST
from agents.training.loop import run_training
from agents.training.prepare import prepare_run

ROOT = Path(__file__).resolve().parents[1]
EPISODES = 4
TINY = ["num_tasks=40", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32",
        "train.collect_steps=40", "train.batch_size=16", "train.eval_every=40", f"train.eval_episodes={EPISODES}",
        "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=2",
        "train.validation_baselines=false", "train.run_name=tb", "train.eval_action=sample"]


def evaluate_main():
    spec = importlib.util.spec_from_file_location("evaluate_cli", ROOT / "evaluate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def test_evaluate_reports_the_validation_figure_of_best_pt_on_a_testbed_scenario(tmp_path):
    flags = {"steps": 80, "envs": 2, "seed": 0, "logdir": str(tmp_path), "vector": "dummy"}
    spec = prepare_run("testbed-6", TINY, flags=flags)
    t = spec.train
    assert (t.eval_scenario, t.eval_action, t.eval_conflicts) == ("eval", "sample", "room")
    result = run_training(spec)
    assert result.best_mean_jct is not None
    out = tmp_path / "eval"
    code = evaluate_main()(["--checkpoint", str(spec.run_dir / BEST), "--schedulers", "tapfinger",
                            "--seed-offset", str(t.eval_seed), "--seeds", str(EPISODES), "--workers", "2",
                            "--out", str(out), "--quiet"])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    (name,) = [n for n in summary["schedulers"] if n.startswith("tapfinger")]
    # one decision of one task apart would move the mean by >= 1 / (40 x 4) steps
    assert summary["schedulers"][name]["mean_jct"] == pytest.approx(result.best_mean_jct, rel=1e-12, abs=0)
