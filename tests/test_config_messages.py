"""Messages a new user reads (issue 58): a scenario file that does not exist is named as a missing file,
and an override key in the wrong section (or nearly a field's name) is answered with the override meant.
A config file that is not UTF-8, gives a key twice or quotes a number is refused with one line, exit 2,
before any work, by train.py, evaluate.py and the benchmarks ("Faults and figures" F3, F4, F6)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import train as train_cli
from agents.training.config import key_hint, override_fields, split_overrides
from envs.config import ConfigError, load_scenario


def test_a_missing_scenario_file_is_named_as_a_missing_file(capsys):
    assert train_cli.main(["--config", "configs/my-scenario.yaml", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "scenario file 'configs/my-scenario.yaml' does not exist" in err and "unknown scenario" not in err
    assert "synthetic-3" in err  # the shipped ones, to pick from
    with pytest.raises(ConfigError, match="scenario file '/no/such/dir/x.yml' does not exist"):
        load_scenario("/no/such/dir/x.yml")
    with pytest.raises(ConfigError, match="unknown scenario 'my-scenario'; available: "):
        load_scenario("my-scenario")  # a name, not a file


@pytest.mark.parametrize("override, message", [
    ("lr=1e-3", "unknown scenario key 'lr'; did you mean train.lr?"),
    ("scenario.ent_coef=0", "unknown scenario key 'ent_coef'; did you mean train.ent_coef?"),
    ("hidden=32", "unknown scenario key 'hidden'; did you mean policy.hidden?"),
    ("hiden=32", "unknown scenario key 'hiden'; did you mean policy.hidden?"),
    ("train.hidden=32", "unknown train key 'hidden'; did you mean policy.hidden?"),
    ("policy.lr=1e-3", "unknown policy key 'lr'; did you mean train.lr?"),
    ("train.num_tasks=50", "unknown train key 'num_tasks'; did you mean num_tasks?"),
    ("num_task=50", "unknown scenario key 'num_task'; did you mean num_tasks?"),
    ("train.eval_episode=4", "unknown train key 'eval_episode'; did you mean train.eval_episodes?"),
])
def test_an_override_in_the_wrong_section_names_the_one_meant(override, message, capsys):
    with pytest.raises(ConfigError, match=message.replace("?", r"\?")):
        split_overrides([override])
    assert train_cli.main(["--config", "synthetic-3", override, "--print-config"]) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_key_near_nothing_still_lists_the_valid_keys(capsys):
    assert key_hint("zzzz", override_fields()) is None
    split_overrides(["zzzz=1"])  # routed; the scenario's own check refuses it
    assert train_cli.main(["--config", "synthetic-3", "zzzz=1", "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "unknown scenario key 'zzzz'; valid keys: " in err and "did you mean" not in err


def test_known_keys_route_as_before():
    split = split_overrides(["train.lr=0.001", "policy.hidden=64", "num_tasks=50", "connectivity.model=random_subset"])
    assert split.train == {"lr": 0.001} and split.policy == {"hidden": 64}
    assert split.scenario == {"num_tasks": 50, "connectivity.model": "random_subset"}


# ---------------------------------------------------------------------------------------
# a bad config file: one line, exit 2, nothing done (F3, F4, F6)
# ---------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[1]

#: fault -> (the edit of configs/sjf-3.yaml, or None for its Latin-1 bytes; what the one line says)
BAD_CONFIGS = {
    "not-utf8": (None, ":1:6: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
    "duplicate-top": (("num_tasks: 192", "num_tasks: 192\nnum_tasks: 50"),
                      ":8:1: duplicate key 'num_tasks' at the top level (first at line 7, column 1)"),
    "duplicate-train": (("  lr: 3.0e-4", "  lr: 3.0e-4\n  lr: 1.0e-3"),
                        ":32:3: duplicate key 'lr' in the 'train' section (first at line 31, column 3)"),
    "quoted-number": (("capacities: [[16, 16]]", 'capacities: [["16", 16]]'),
                      "scenario.capacities[0][0] must be int, got '16': a quoted string is not a number"),
}


def bad_config(tmp_path: Path, fault: str) -> Path:
    text = (ROOT / "configs" / "sjf-3.yaml").read_text()
    edit, _ = BAD_CONFIGS[fault]
    path = tmp_path / f"{fault}.yaml"
    if edit is None:
        path.write_bytes(text.replace("# Paper", "# Caf\u00e9 Paper").encode("latin-1"))
    else:
        assert edit[0] in text
        path.write_text(text.replace(edit[0], edit[1], 1))
    return path


def the_one_line(err: str, prog: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"{prog}: error: "), err
    return lines[0]


def script_main(rel: str):
    spec = importlib.util.spec_from_file_location(f"cli_{Path(rel).stem}", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


@pytest.mark.parametrize("fault", list(BAD_CONFIGS))
def test_train_refuses_a_bad_config_file_with_one_line(tmp_path, fault):
    path = bad_config(tmp_path, fault)
    runs = tmp_path / "runs"
    small = ["--steps", "8", "--envs", "1", "--vector", "dummy", "num_tasks=4", "train.eval_episodes=1",
             "train.validation_baselines=false", "train.collect_steps=8", "train.eval_every=8", "train.batch_size=8"]
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "--config", str(path), "--logdir", str(runs), *small],
                          cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2, proc.stderr
    line = the_one_line(proc.stderr, "train.py")
    says = BAD_CONFIGS[fault][1]
    assert (f"{path}{says}" if says.startswith(":") else says) in line
    assert not runs.exists() and not proc.stdout, "refused before any work: no run directory, no output"


@pytest.mark.parametrize("fault", list(BAD_CONFIGS))
def test_evaluate_and_the_benchmarks_refuse_a_bad_config_file_with_one_line(tmp_path, fault, capsys):
    path = bad_config(tmp_path, fault)
    says = BAD_CONFIGS[fault][1]
    out = tmp_path / "out"
    assert script_main("evaluate.py")(["--scenario", str(path), "--schedulers", "min", "--out", str(out)]) == 2
    assert says in the_one_line(capsys.readouterr().err, "evaluate.py")
    assert not out.exists()
    assert train_cli.main(["--config", str(path), "--quick", "--print-config"]) == 2
    assert says in the_one_line(capsys.readouterr().err, "train.py")
    runs = tmp_path / "runs"
    assert script_main("benchmarks/tune.py")(["--config", str(path), "--candidate", "a:train.lr=1e-3", "--runs",
                                              str(runs), "--out", str(out)]) == 2
    assert says in the_one_line(capsys.readouterr().err, "tune.py")
    assert script_main("benchmarks/reproduce.py")(["--config", str(path), "--runs", str(runs), "--out", str(out)]) == 2
    assert says in the_one_line(capsys.readouterr().err, "reproduce.py")
    assert not runs.exists() and not out.exists()
