"""Runs and checkpoints under faults: a stop before the final evaluation, damaged or diverged
checkpoints, file modes of what a run writes, and the run directory's lock file.

Every run here is tiny (sjf-3 with a dozen tasks, a 16-wide network, one thread): 80 env steps,
evaluated at 0, 40 and 80.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import train as train_cli
from agents.json_files import write_json
from agents.output_dirs import file_mode
from agents.policy.checkpoint import CheckpointError, read_checkpoint
from agents.training import rundir
from agents.training.callbacks import TrainerCallbacks
from agents.training.checkpoints import BEST, EVALUATED, LAST, RESULT_FILE, load_checkpoint
from agents.training.loop import TrainingInterrupted, run_training
from agents.training.prepare import prepare_run
from envs.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TINY = ["num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32",
        "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=1", "train.eval_every=40",
        "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=1",
        "train.validation_baselines=false"]
STEPS = 80


class Killed(BaseException):
    """Stands in for SIGKILL: the process ends where it is, without the loop's final save."""


def _spec(logdir: Path, name: str, resume: str | None = None):
    if resume is not None:
        return prepare_run(None, [], resume=resume)
    return prepare_run("sjf-3", [*TINY, f"train.run_name={name}"],
                       flags={"steps": STEPS, "envs": 2, "vector": "dummy", "logdir": str(logdir)})


def _stop_at_final_evaluation(monkeypatch, stop: type[BaseException]) -> None:
    """Raise ``stop`` as the evaluation at the last env step starts (its last.pt is written just before)."""
    test_fn = TrainerCallbacks.test_fn

    def stopping(self, epoch: int, env_step: int) -> None:
        if env_step >= STEPS:
            raise stop()
        test_fn(self, epoch, env_step)

    monkeypatch.setattr(TrainerCallbacks, "test_fn", stopping)


def _later_scores_better(monkeypatch) -> None:
    """Every evaluation scores better than the one before: the final one must give best.pt."""
    import agents.training.callbacks as callbacks

    calls = iter(range(1, 10_000))
    monkeypatch.setattr(callbacks, "evaluation_score", lambda stats: -1000.0 + next(calls))


def _result(run: Path) -> dict:
    return json.loads((run / RESULT_FILE).read_text())


# ---------------------------------------------------------------------------------------
# a stop after the last save and before the final evaluation
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stop", [KeyboardInterrupt, Killed], ids=["sigterm", "kill"])
def test_a_run_stopped_before_its_final_evaluation_resumes_into_it(tmp_path, monkeypatch, stop):
    _later_scores_better(monkeypatch)
    with monkeypatch.context() as m:
        _stop_at_final_evaluation(m, stop)
        with pytest.raises(TrainingInterrupted if stop is KeyboardInterrupt else Killed):
            run_training(_spec(tmp_path, "r"))
    run = tmp_path / "r"
    counters = load_checkpoint(run / LAST)["counters"]
    assert counters["env_step"] == STEPS and counters[EVALUATED] == STEPS - 40  # the state the stop left
    assert load_checkpoint(run / BEST)["counters"]["best_env_step"] == STEPS - 40
    if stop is KeyboardInterrupt:
        assert _result(run)["finished"] is False

    result = run_training(_spec(tmp_path, "r", resume=str(run / LAST)))  # "nothing to do" without the fix
    assert result.env_steps == STEPS and not result.interrupted  # the evaluation only, no more training
    last = load_checkpoint(run / LAST)["counters"]
    assert last["env_step"] == STEPS and last[EVALUATED] == STEPS
    assert last["gradient_steps"] == counters["gradient_steps"]
    assert load_checkpoint(run / BEST)["counters"]["best_env_step"] == STEPS  # best.pt saw the final evaluation
    doc = _result(run)
    assert doc["finished"] is True and doc["best_env_step"] == STEPS and doc["env_steps"] == STEPS
    with pytest.raises(ConfigError, match="nothing to do"):  # finished now: nothing is left
        _spec(tmp_path, "r", resume=str(run / LAST))


def test_a_finished_run_and_a_file_without_the_record_have_nothing_to_do(tmp_path, capsys):
    run_training(_spec(tmp_path, "done"))
    run = tmp_path / "done"
    assert load_checkpoint(run / LAST)["counters"][EVALUATED] == STEPS
    assert train_cli.main(["--resume", str(run / LAST), "--quiet"]) == 2
    assert "nothing to do" in capsys.readouterr().err
    data = torch.load(run / LAST, weights_only=True)  # a file that does not record its evaluations
    data["counters"].pop(EVALUATED)
    torch.save(data, run / LAST)
    with pytest.raises(ConfigError, match="nothing to do"):
        _spec(tmp_path, "done", resume=str(run / LAST))


# ---------------------------------------------------------------------------------------
# diverged and damaged checkpoints: one line, exit 2, before any work
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    logdir = tmp_path_factory.mktemp("trained")
    run_training(_spec(logdir, "t"))
    return logdir / "t" / LAST


def _nan_weights(data: dict) -> None:
    key = next(k for k, v in data["model"].items() if v.is_floating_point())
    data["model"][key] = data["model"][key].clone().fill_(float("nan"))


def _inf_optimizer(data: dict) -> None:
    state = next(iter(data["optimizer"]["state"].values()))
    key = next(k for k, v in state.items() if isinstance(v, torch.Tensor) and v.numel() > 1)
    state[key] = torch.full_like(state[key], float("inf"))


def _copy(trained: Path, tmp_path: Path, mutate=None) -> Path:
    data = torch.load(trained, weights_only=True)
    if mutate is not None:
        mutate(data)
    path = tmp_path / "copied" / LAST
    path.parent.mkdir(exist_ok=True)
    torch.save(data, path)
    return path


def _flip_tensor_byte(path: Path) -> None:
    """Change one byte inside a stored tensor (torch stores members uncompressed); the zip's CRC
    no longer matches, everything else about the file is intact."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    raw[at] ^= 0x40
    path.write_bytes(bytes(raw))


def _one_error_line(err: str, prog: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


DAMAGES = {
    "nan-weights": (lambda p: None, _nan_weights, "NaN or infinite"),
    "inf-optimizer": (lambda p: None, _inf_optimizer, "optimizer.state."),
    "crc": (_flip_tensor_byte, None, "fails its CRC check"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_diverged_or_damaged_checkpoint_is_refused_by_resume(trained, tmp_path, capsys, damage):
    after, mutate, message = DAMAGES[damage]
    path = _copy(trained, tmp_path, mutate)
    after(path)
    if damage == "crc":  # the premise: torch alone loads the damaged file
        assert isinstance(torch.load(path, weights_only=True), dict)
    logdir = tmp_path / "logs"
    assert train_cli.main(["--resume", str(path), "--steps", "400", "--logdir", str(logdir), "--quiet"]) == 2
    assert message in _one_error_line(capsys.readouterr().err, "train.py")
    assert not logdir.exists()
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(path)


@pytest.mark.parametrize("damage", ["nan-weights", "crc"])
def test_evaluate_refuses_a_diverged_or_damaged_checkpoint_before_any_episode(trained, tmp_path, capsys, damage):
    from evaluate import main as evaluate

    after, mutate, message = DAMAGES[damage]
    path = _copy(trained, tmp_path, mutate)
    after(path)
    out = tmp_path / "out"
    code = evaluate(["--scenario", "sjf-3", "--checkpoint", str(path), "--seeds", "1", "--workers", "1",
                     "--out", str(out), "--quiet", "num_tasks=12"])
    assert code == 2 and message in _one_error_line(capsys.readouterr().err, "evaluate.py")
    assert not out.exists()


def test_shipped_checkpoints_pass_the_checks():
    for path in sorted((ROOT / "checkpoints").glob("*.pt")):
        read_checkpoint(path)


# ---------------------------------------------------------------------------------------
# one file mode for everything a run or an evaluation writes
# ---------------------------------------------------------------------------------------
@pytest.fixture
def umask():
    """Set the process's umask for one test, then put it back."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_umask_mode(tmp_path, umask, mask):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from agents.evaluation.plots import save_figure
    from agents.policy.checkpoint import save_policy_checkpoint
    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from envs.config import load_scenario
    from envs.observation import ObservationSpec

    umask(mask)
    assert file_mode() == 0o666 & ~mask
    scenario = load_scenario("sjf-3")
    net = TapFingerPolicy(ObservationSpec.from_config(scenario), PolicyConfig(hidden=16))
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    paths = [write_json(tmp_path / "a.json", {"x": 1}), save_policy_checkpoint(tmp_path / "a.pt", net, scenario),
             save_figure(fig, tmp_path / "a.png")]
    (tmp_path / "plain.txt").write_text("x")  # what open() gives
    want = (tmp_path / "plain.txt").stat().st_mode & 0o777
    assert want == 0o666 & ~mask
    assert {p.name: p.stat().st_mode & 0o777 for p in paths} == {p.name: want for p in paths}


def test_every_file_of_a_run_has_one_mode(tmp_path, umask):
    umask(0o022)
    run_training(_spec(tmp_path, "m"))
    modes = {str(p.relative_to(tmp_path)): p.stat().st_mode & 0o777 for p in (tmp_path / "m").rglob("*")
             if p.is_file()}
    assert {"m/last.pt", "m/best.pt", "m/result.json", "m/config.yaml"} <= set(modes)
    assert set(modes.values()) == {0o644}, modes


# ---------------------------------------------------------------------------------------
# the run directory's lock file
# ---------------------------------------------------------------------------------------
def _raise(exc: BaseException):
    def hook(*args, **kwargs):
        raise exc
    return hook


@pytest.mark.parametrize("end", ["normal", "interrupt", "error"])
def test_no_lock_file_is_left_when_a_run_ends(tmp_path, monkeypatch, end):
    spec = _spec(tmp_path, "l")
    if end == "interrupt":
        monkeypatch.setattr(TrainerCallbacks, "test_fn", _raise(KeyboardInterrupt()))
    if end == "error":
        monkeypatch.setattr(TrainerCallbacks, "test_fn", _raise(RuntimeError("boom")))
    if end == "normal":
        run_training(spec)
    else:
        with pytest.raises(TrainingInterrupted if end == "interrupt" else RuntimeError):
            run_training(spec)
    run = tmp_path / "l"
    assert (run / LAST).is_file() and not (run / rundir.LOCK_FILE).exists()


def test_a_lock_file_left_by_a_killed_process_is_taken_over_and_removed(tmp_path):
    run_training(_spec(tmp_path, "k"))
    run = tmp_path / "k"
    holder = ("import os, signal, sys; from pathlib import Path; from agents.training.rundir import RunLock;"
              "RunLock(Path(sys.argv[1])); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", holder, str(run)], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -9 and (run / rundir.LOCK_FILE).is_file()  # what the kill left
    data = torch.load(run / LAST, weights_only=True)
    result = run_training(prepare_run(None, [], flags={"steps": data["counters"]["env_step"] + 40},
                                      resume=str(run / LAST)))
    assert result.env_steps == data["counters"]["env_step"] + 40
    assert not (run / rundir.LOCK_FILE).exists()


def test_a_held_lock_refuses_and_a_lock_on_a_file_deleted_meanwhile_is_taken_again(tmp_path, monkeypatch):
    import fcntl

    first = rundir.RunLock(tmp_path)
    with pytest.raises(ConfigError, match="in use by another training process"):
        rundir.RunLock(tmp_path)
    assert (tmp_path / rundir.LOCK_FILE).is_file()  # the holder's file is kept
    flock = fcntl.flock
    released = []

    def late_flock(fd: int, op: int) -> None:  # the holder ends between our open and our flock
        if not released:
            released.append(True)
            first.release()
        flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", late_flock)
    second = rundir.RunLock(tmp_path)
    monkeypatch.setattr(fcntl, "flock", flock)
    assert released and (tmp_path / rundir.LOCK_FILE).is_file()
    with pytest.raises(ConfigError, match="in use"):  # the second holds the file now at the path
        rundir.RunLock(tmp_path)
    second.release()
    assert not (tmp_path / rundir.LOCK_FILE).exists()
    rundir.RunLock(tmp_path).release()
