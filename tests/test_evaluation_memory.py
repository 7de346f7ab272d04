"""An evaluation beyond the machine's memory is refused before any episode runs."""

from __future__ import annotations

import pytest

import agents.evaluation.memory as memory
from agents.evaluation.memory import check_evaluation_memory, evaluation_bytes, job_bytes
from agents.training.budget import MEMORY_FRACTION
from envs.config import ConfigError, load_scenario

from tests.test_evaluate import evaluate_main


def test_the_estimate_grows_with_the_grid_the_tasks_the_group_and_the_workers():
    cfg = load_scenario("synthetic-3")
    big_grid = load_scenario("synthetic-3", ["per_task_max=[64,32]"])
    more_tasks = load_scenario("synthetic-3", ["num_tasks=20000"])
    assert job_bytes(big_grid, 1, False) > job_bytes(cfg, 1, False)
    assert job_bytes(more_tasks, 1, False) > job_bytes(cfg, 1, False)
    assert job_bytes(cfg, 8, True) > 8 * job_bytes(cfg, 1, False)  # the policy's logits come on top
    assert evaluation_bytes(cfg, [4, 3], True, 2) == 2 * job_bytes(cfg, 4, True)
    assert evaluation_bytes(cfg, [4, 3], False, 2) == 2 * job_bytes(cfg, 1, False)


def test_a_plan_over_the_limit_is_refused_with_what_to_lower():
    cfg = load_scenario("synthetic-3")
    need = evaluation_bytes(cfg, [5], True, 2)
    check_evaluation_memory(cfg, [5], True, 2, available=int(need / MEMORY_FRACTION) + 1)
    with pytest.raises(ConfigError, match=r"--workers or --policy-batch.*per_task_max"):
        check_evaluation_memory(cfg, [5], True, 2, available=int(need / MEMORY_FRACTION) - 1)


def test_evaluate_refuses_it_in_one_line_before_running(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(memory, "available_memory", lambda: 1024)
    out = tmp_path / "eval"
    code = evaluate_main()(["--scenario", "synthetic-3", "--schedulers", "min", "--seeds", "2", "--workers", "1",
                            "--out", str(out), "--quiet", "num_tasks=12"])
    err = capsys.readouterr().err
    assert code == 2 and "the evaluation would need about" in err and "Traceback" not in err
    assert not (out / "summary.json").exists()
