"""Faults injected on purpose: runs never lose or mix work.

Run-directory ownership (concurrent and repeated names, ``run_name`` escaping ``--logdir``,
``--resume`` into the checkpoint's own directory, a copied file continued as a new run, another
run's ``best.pt`` never adopted), SIGTERM (saves ``last.pt``, exits 143, resumes), a kill
mid-save, vector env worker and Ray actor death (a clear error, never a hang), a full disk,
unwritable outputs, the plan and memory ceilings, an evaluation in which no task finishes, and
the smaller cases (pickle message, huge seeds, torch-geometric's generated files).

Every train.py run here is tiny (sjf-3 with a dozen tasks, a 16-wide network, one thread).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import train as train_cli
from agents.policy.checkpoint import CheckpointError, read_checkpoint, save_policy_checkpoint
from agents.training import BEST, LAST, load_checkpoint, prepare_run, run_training
from agents.training import rundir
from agents.training.budget import check_plan, estimate_bytes
from envs.config import ConfigError, load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ["num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32",
        "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=1", "train.eval_every=40",
        "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=1"]


def _argv(tmp_path: Path, *extra: str, steps: int = 80) -> list[str]:
    return ["--config", "sjf-3", "--steps", str(steps), "--envs", "2", "--vector", "dummy", "--logdir", str(tmp_path),
            "--quiet", *TINY, *extra]


def _train(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 300), **kw)


# ---------------------------------------------------------------------------------------
# run-directory ownership
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("owner")
    assert train_cli.main(_argv(tmp, "train.run_name=a")) == 0
    return tmp, tmp / "a"


def test_a_taken_run_name_is_refused_and_the_run_left_intact(finished_run, capsys):
    tmp, run = finished_run
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    assert train_cli.main(_argv(tmp, "train.run_name=a")) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--resume" in err and "Traceback" not in err
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before


def test_default_names_never_collide(tmp_path):
    names = {rundir.default_run_name("sjf-3", "tapfinger", 0) for _ in range(50)}
    assert len(names) == 50  # same second, different names
    # a taken default name is drawn again instead of written into
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "marker").write_text("other run")
    got, lock = rundir.claim(taken, fresh=True, default_name=True, retry_name=lambda: "fresh")
    lock.release()
    assert got == tmp_path / "fresh" and got.is_dir() and (taken / "marker").read_text() == "other run"


def test_two_runs_started_together_get_their_own_directories(tmp_path):
    procs = [subprocess.Popen([sys.executable, str(ROOT / "train.py"), *_argv(tmp_path, steps=40)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(runs) == 2
    ids = {rundir.read_run_id(r) for r in runs}
    assert len(ids) == 2 and None not in ids
    for r in runs:  # each run's checkpoints carry its own id
        assert load_checkpoint(r / LAST)["counters"][rundir.RUN_ID] == rundir.read_run_id(r)


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", "..", ""])
def test_run_name_cannot_leave_the_logdir(tmp_path, capsys, name):
    assert train_cli.main(_argv(tmp_path / "logs", f"train.run_name={name}")) == 2
    assert "train.run_name must be a plain directory name" in capsys.readouterr().err
    assert not (tmp_path / "escape").exists() and not (tmp_path / "logs").exists()


def test_resume_goes_on_in_the_checkpoints_own_directory_whatever_the_logdir(finished_run, tmp_path, capsys):
    _, run = finished_run
    elsewhere = tmp_path / "elsewhere"
    assert train_cli.main(["--resume", str(run / LAST), "--steps", "120", "--logdir", str(elsewhere), "--quiet"]) == 0
    assert "checkpoints in " + str(run) in capsys.readouterr().out
    assert load_checkpoint(run / LAST)["counters"]["env_step"] == 120
    assert not elsewhere.exists()


def test_a_copied_checkpoint_goes_on_as_a_new_run_and_never_adopts_anothers_best(finished_run, tmp_path, capsys):
    _, run = finished_run
    copy = tmp_path / "copies" / LAST
    copy.parent.mkdir()
    copy.write_bytes((run / LAST).read_bytes())
    # another run's best.pt beside the copy: its best must not be taken over
    (copy.parent / BEST).write_bytes((run / BEST).read_bytes())
    logdir = tmp_path / "logs"
    before = load_checkpoint(run / LAST)["counters"]["env_step"]
    assert train_cli.main(["--resume", str(copy), "--steps", str(before + 40), "--logdir", str(logdir), "--quiet"]) == 0
    out = capsys.readouterr().out
    new = [p for p in logdir.iterdir() if p.is_dir()]
    assert len(new) == 1 and f"checkpoints in {new[0]}" in out
    ckpt = load_checkpoint(new[0] / LAST)
    assert ckpt["counters"]["env_step"] == before + 40  # the history goes on
    assert ckpt["counters"][rundir.RUN_ID] == rundir.read_run_id(new[0]) != rundir.checkpoint_run_id(
        load_checkpoint(copy))
    best = load_checkpoint(new[0] / BEST)["counters"]  # the new run's best is one of its own evaluations
    assert best[rundir.RUN_ID] == rundir.read_run_id(new[0]) and before <= best["best_env_step"] <= before + 40
    assert sorted(p.name for p in copy.parent.iterdir()) == [BEST, LAST]


def test_a_run_in_use_is_locked(finished_run):
    _, run = finished_run
    lock = rundir.RunLock(run)
    try:
        spec = prepare_run(None, [], flags={"steps": 400}, resume=str(run / LAST))
        assert not spec.fresh_dir and spec.run_dir == run
        with pytest.raises(ConfigError, match="in use by another training process"):
            run_training(spec)
    finally:
        lock.release()


# ---------------------------------------------------------------------------------------
# signals and kills
# ---------------------------------------------------------------------------------------
def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.is_file():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.1)


def test_sigterm_saves_last_pt_exits_143_and_the_run_resumes(tmp_path):
    run = tmp_path / "term"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *_argv(tmp_path, "train.run_name=term",
                                                                          steps=400_000)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(run / LAST, proc)  # saved right after start-up, before the first collection
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (out, err)
    assert "terminated (SIGTERM)" in err and f"--resume {run / LAST}" in err
    counters = load_checkpoint(run / LAST)["counters"]
    assert not list(run.glob(rundir.STALE_TMP_GLOB))
    resumed = _train(["--resume", str(run / LAST), "--steps", str(counters["env_step"] + 40), "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(run / LAST)["counters"]["env_step"] == counters["env_step"] + 40


def test_sigkill_mid_run_leaves_last_pt_intact_and_resume_clears_partial_files(tmp_path):
    run = tmp_path / "kill"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *_argv(tmp_path, "train.run_name=kill",
                                                                          "train.save_every=40", steps=400_000)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(run / LAST, proc)
    time.sleep(2.5)  # saves every 40 env steps: the kill lands at any point of the cycle
    proc.kill()
    proc.communicate(timeout=60)
    read_checkpoint(run / LAST)  # whole and readable
    (run / "last.ptabc123.tmp").write_bytes(b"partial")  # what a kill inside torch.save leaves
    steps = load_checkpoint(run / LAST)["counters"]["env_step"]
    resumed = _train(["--resume", str(run / LAST), "--steps", str(steps + 40), "--quiet"])
    assert resumed.returncode == 0, resumed.stderr
    assert not list(run.glob(rundir.STALE_TMP_GLOB))


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def test_a_dead_vector_env_worker_stops_the_run_with_one_line_and_last_pt(tmp_path):
    run = tmp_path / "workers"
    argv = [*_argv(tmp_path, "train.run_name=workers", "train.workers=2", steps=400_000)]
    argv[argv.index("dummy")] = "batch"
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for(run / LAST, proc)
    time.sleep(1.0)
    workers = [p for p in _children(proc.pid) if "multiprocessing" in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(workers) >= 2
    os.kill(workers[-1], signal.SIGKILL)
    out, err = proc.communicate(timeout=120)  # never hangs
    assert proc.returncode == 1, (out, err)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines[-1].startswith("train.py: error: vector env worker") and "died" in lines[-1]
    assert "saved" in lines[-1] and "Traceback" not in err
    read_checkpoint(run / LAST)


def test_a_killed_process_worker_raises_worker_died_at_the_next_step():
    from agents.training.vector_env import ShardedBatchVectorEnv, WorkerDied

    cfg = load_scenario("sjf-3", ["num_tasks=12"])
    env = ShardedBatchVectorEnv(cfg, 4, 2, "process", seed_keys=[(0, 0, i) for i in range(4)])
    try:
        env.reset()
        env.shards.procs[1].kill()
        env.shards.procs[1].join(10)
        with pytest.raises(WorkerDied, match="worker 1 .*died .*signal 9"):
            env.step(np.zeros((4, 3, 3), dtype=np.int64))
    finally:
        env.close()


def test_a_killed_ray_actor_raises_worker_died():
    ray = pytest.importorskip("ray")  # the test extra installs it (make test)
    from agents.training.vector_env import ShardedBatchVectorEnv, WorkerDied

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    try:
        cfg = load_scenario("sjf-3", ["num_tasks=12"])
        env = ShardedBatchVectorEnv(cfg, 4, 2, "ray", seed_keys=[(0, 0, i) for i in range(4)])
        env.reset()
        ray.kill(env.shards.actors[0])
        start = time.monotonic()
        with pytest.raises(WorkerDied, match="Ray actor died"):
            env.step(np.zeros((4, 3, 3), dtype=np.int64))
        assert time.monotonic() - start < 60
        env.close()
    finally:
        ray.shutdown()


# ---------------------------------------------------------------------------------------
# disks and output locations
# ---------------------------------------------------------------------------------------
def test_a_full_disk_during_a_save_is_one_clear_error_and_keeps_the_previous_file(tmp_path, monkeypatch):
    import shutil

    from agents.policy import PolicyConfig, TapFingerPolicy
    from envs.observation import ObservationSpec

    cfg = load_scenario("sjf-3", ["num_tasks=12"])
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1))
    path = save_policy_checkpoint(tmp_path / LAST, policy, cfg)
    before = path.read_bytes()

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1234 vs 1000")

    real = shutil.disk_usage
    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=4096))
    with pytest.raises(CheckpointError, match="no space left on the device.*previous file, if any, is unchanged"):
        save_policy_checkpoint(path, policy, cfg)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [LAST]  # no partial file left


def test_too_little_disk_space_is_refused_before_anything_is_built(tmp_path, monkeypatch, capsys):
    import shutil

    import agents.output_dirs as output_dirs

    real = shutil.disk_usage
    monkeypatch.setattr(output_dirs.shutil, "disk_usage", lambda p: real(p)._replace(free=10 * 2**20))
    built = []
    import agents.training.loop as loop

    monkeypatch.setattr(loop, "training_envs", lambda *a, **k: built.append(1))
    assert train_cli.main(_argv(tmp_path, "train.run_name=full")) == 2
    err = capsys.readouterr().err
    assert "MiB free on its filesystem" in err and not built and not (tmp_path / "full").exists()


@pytest.mark.parametrize("where", ["file", "under-file", "proc"])
def test_unwritable_logdir_is_refused_before_anything_is_built(tmp_path, capsys, where):
    target = {"file": tmp_path / "f", "under-file": tmp_path / "f" / "sub", "proc": Path("/proc/tapfinger-logs")}[where]
    (tmp_path / "f").write_text("a file")
    started = time.monotonic()
    assert train_cli.main(_argv(target)) == 2
    err = capsys.readouterr().err
    assert "--logdir" in err and ("not a directory" in err or "not writable" in err), err
    assert "Traceback" not in err and time.monotonic() - started < 30


@pytest.mark.parametrize("where", ["file", "proc"])
def test_evaluate_checks_out_before_running_anything(tmp_path, capsys, where):
    from evaluate import main as evaluate

    target = tmp_path / "f" if where == "file" else Path("/proc/tapfinger-out")
    (tmp_path / "f").write_text("a file")
    started = time.monotonic()
    code = evaluate(["--scenario", "synthetic-3", "--schedulers", "optimus", "--seeds", "200", "--workers", "1",
                     "--out", str(target), "--quiet", "num_tasks=400"])
    err = capsys.readouterr().err
    assert code == 2 and "--out" in err and "Traceback" not in err
    assert time.monotonic() - started < 20  # refused before 200 episodes of 400 tasks ran


# ---------------------------------------------------------------------------------------
# plan and memory ceilings
# ---------------------------------------------------------------------------------------
def test_a_plan_far_beyond_steps_is_refused(tmp_path, capsys):
    base = ["--config", "synthetic-3", "--envs", "100000", "--steps", "200000", "--logdir", str(tmp_path)]
    assert train_cli.main(base) == 2  # the recipe's collections of 8,192 steps
    err = capsys.readouterr().err
    assert "--envs 100,000 is more than train.collect_steps (8,192)" in err
    assert train_cli.main([*base, "train.collect_steps=null"]) == 2  # the default: 128 x envs per collection
    err = capsys.readouterr().err
    assert "51,200,000 env steps for --steps 200,000 (collections of 12,800,000" in err and "more than 2x" in err
    assert not any(tmp_path.iterdir())


def test_a_plan_beyond_the_memory_limit_is_refused_naming_it(tmp_path):
    spec = prepare_run("synthetic-3", ["train.collect_steps=65536"], flags={"envs": 256, "logdir": str(tmp_path)})
    need = estimate_bytes(spec)
    assert need > 65536 * 2 * 1000  # observations of both the step and the next one
    check_plan(spec, available=4 * need)  # fits
    with pytest.raises(ConfigError, match=r"above the limit of .* GiB \(80% of the .* GiB available\)"):
        check_plan(spec, available=need)


# ---------------------------------------------------------------------------------------
# evaluation, checkpoints, seeds, generated files
# ---------------------------------------------------------------------------------------
def test_an_evaluation_in_which_the_policy_finishes_no_task_prints_na_and_writes_its_outputs(tmp_path, capsys):
    from agents.policy import PolicyConfig, TapFingerPolicy
    from envs.observation import ObservationSpec
    from evaluate import main as evaluate

    cfg = load_scenario("synthetic-3", ["num_tasks=12", "max_steps=30"])
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1))
    with torch.no_grad():
        for p in policy.parameters():
            p.fill_(float("nan"))
    ckpt = save_policy_checkpoint(tmp_path / "nan.pt", policy, cfg)
    out = tmp_path / "out"
    code = evaluate(["--scenario", "synthetic-3", "--checkpoint", str(ckpt), "--schedulers", "optimus", "--seeds", "2",
                     "--workers", "1", "--out", str(out), "--quiet", "num_tasks=12", "max_steps=30"])
    text = capsys.readouterr().out
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["schedulers"]["tapfinger"]["mean_jct"] is None
    assert "n/a" in text and "tapfinger finished no task" in text and "not met" in text
    assert (out / "tasks.csv").is_file() and (out / "jct_cdf.png").is_file()


def test_a_pickle_carrying_checkpoint_is_named_as_such(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("true",))

    path = tmp_path / "evil.pt"
    torch.save({"model": Payload()}, path)
    with pytest.raises(CheckpointError, match="holds a pickled Python object .*system"):
        read_checkpoint(path)


@pytest.mark.parametrize("seed", ["99999999999999999999", str(2**32)])
def test_a_huge_seed_is_one_line_of_error(tmp_path, capsys, seed):
    assert train_cli.main(_argv(tmp_path, "--seed", seed)) == 2
    err = capsys.readouterr().err
    assert "--seed must be <= 4294967295" in err and "Traceback" not in err
    assert train_cli.main(_argv(tmp_path, f"train.seed={seed}")) == 2
    assert "seed must be between 0 and 4294967295" in capsys.readouterr().err


def test_torch_geometrics_generated_modules_are_removed_at_exit(tmp_path):
    code = ("import tempfile, sys; from agents.policy import PolicyConfig, TapFingerPolicy;"
            "from envs.observation import ObservationSpec; from envs.config import load_scenario;"
            "TapFingerPolicy(ObservationSpec.from_config(load_scenario('sjf-3')), PolicyConfig(hidden=16, encoder='pyg'));"
            "print([m.__file__ for n, m in sys.modules.items() if n.startswith('networks.han_')][0])")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    generated = Path(proc.stdout.strip().splitlines()[-1])
    assert generated.parent == tmp_path and generated.name.startswith("networks.han_PerGraphHANConv")
    assert not generated.exists() and not list(tmp_path.glob("*.py"))
