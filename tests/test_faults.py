"""Faults injected on purpose: runs never lose or mix work.

Run-directory ownership (concurrent and repeated names, ``run_name`` escaping ``--logdir``,
``--resume`` into the checkpoint's own directory, a copied file continued as a new run, another
run's ``best.pt`` never adopted), SIGTERM (saves ``last.pt``, exits 143, resumes), a kill
mid-save, vector env worker and Ray actor death (a clear error, never a hang), a full disk,
unwritable outputs, the plan and memory ceilings, an evaluation in which no task finishes, and
the smaller cases (pickle message, huge seeds, torch-geometric's generated files). Nothing is
silently rewound, mixed or half-written: ``evaluate.py`` outputs are all or nothing, replaced only
with ``--overwrite`` and written by one evaluation at a time; ``--resume`` never rewinds a run;
a malformed checkpoint is one line before any run directory exists; a run stopped before its
first ``last.pt`` leaves no directory; a full disk exits 74; the memory estimate covers the
allocation grid; scheduler options and integer flags are typed and bounded.

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
from agents.output_dirs import EXIT_IO_ERROR, OutputWriteError
from agents.policy.checkpoint import CheckpointError, read_checkpoint, save_policy_checkpoint
from agents.training.checkpoints import BEST, LAST, load_checkpoint
from agents.training.loop import run_training
from agents.training.prepare import prepare_run
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


@pytest.mark.parametrize("kind", ["batch", "subproc"])
def test_a_dead_vector_env_worker_stops_the_run_with_one_line_and_last_pt(tmp_path, kind):
    run = tmp_path / "workers"
    argv = [*_argv(tmp_path, "train.run_name=workers", *(["train.workers=2"] if kind == "batch" else []),
                   steps=400_000)]
    argv[argv.index("dummy")] = kind
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for(run / LAST, proc)
    time.sleep(1.0)
    # the batched kind's workers are spawned (their command line says so); tianshou's are forked
    workers = [p for p in _children(proc.pid)
               if kind == "subproc" or "multiprocessing" in Path(f"/proc/{p}/cmdline").read_text()]
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


def test_a_killed_subproc_worker_raises_worker_died_at_the_next_step():
    import functools

    from agents.training.envs import build_vector_env, make_env
    from agents.training.vector_env import WorkerDied
    from envs.batched import random_valid_actions
    from envs.observation import KEYS

    cfg = load_scenario("sjf-3", ["num_tasks=12"])
    env = build_vector_env("subproc", [functools.partial(make_env, cfg.to_dict(), (0, 0, i)) for i in range(3)])
    try:
        obs, _ = env.reset()
        assert len(env.get_env_attr("running_mean_jct")) == 3
        env.workers[2].process.kill()
        env.workers[2].process.join(10)
        batch = {k: np.stack([o[k] for o in obs]) for k in KEYS}
        act = random_valid_actions(batch, cfg.per_task_max[1] + 1, np.random.default_rng(0))
        with pytest.raises(WorkerDied, match="worker 2 .*died .*signal 9"):
            env.step(act)
    finally:
        try:
            env.close()
        except Exception:  # noqa: BLE001 - the dead worker's pipe; what matters is the error above
            pass


class _DyingProcess:
    """A process that reads as alive for its first ``alive_polls`` polls: the kernel closes a killed
    process's pipes before its parent can reap it."""

    def __init__(self, alive_polls: int) -> None:
        self.polls, self.alive_polls = 0, alive_polls
        self.pid, self.exitcode = 4242, None

    def is_alive(self) -> bool:
        self.polls += 1
        if self.polls > self.alive_polls:
            self.exitcode = -9
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        pass


def test_a_pipe_that_breaks_before_its_worker_is_reaped_is_still_a_dead_worker():
    import types

    from agents.training.envs import WatchedSubprocVectorEnv
    from agents.training.vector_env import WorkerDied

    env = WatchedSubprocVectorEnv.__new__(WatchedSubprocVectorEnv)  # only _watched and its workers are used
    healthy, dying = types.SimpleNamespace(process=_DyingProcess(10**9)), _DyingProcess(3)
    env.workers = [healthy, types.SimpleNamespace(process=dying)]

    def reset_by_peer():
        raise ConnectionResetError(104, "Connection reset by peer")

    with pytest.raises(WorkerDied, match=r"worker 1 \(pid 4242\) died \(killed by signal 9\)"):
        env._watched(reset_by_peer)
    assert dying.polls == 4


def test_a_broken_pipe_with_every_worker_alive_is_not_blamed_on_a_worker(monkeypatch):
    import types

    from agents.training import vector_env
    from agents.training.envs import WatchedSubprocVectorEnv

    monkeypatch.setattr(vector_env, "DEATH_GRACE_S", 0.1)
    env = WatchedSubprocVectorEnv.__new__(WatchedSubprocVectorEnv)
    env.workers = [types.SimpleNamespace(process=_DyingProcess(10**9))]

    def broken():
        raise BrokenPipeError(32, "Broken pipe")

    with pytest.raises(BrokenPipeError):
        env._watched(broken)


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

    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
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
    with pytest.raises(OutputWriteError, match="no space left on the device.*previous file, if any, is unchanged"):
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
    from agents.policy.config import PolicyConfig
    from agents.policy.network import TapFingerPolicy
    from envs.observation import ObservationSpec
    from evaluate import main as evaluate

    cfg = load_scenario("synthetic-3", ["num_tasks=12", "max_steps=30"])
    policy = TapFingerPolicy(ObservationSpec.from_config(cfg), PolicyConfig(hidden=16, han_layers=1))
    with torch.no_grad():  # every agent's allocation head puts all its mass on void (its last logit): nothing starts
        policy.alloc_head.out.weight.zero_()
        policy.alloc_head.out.bias.zero_()
        policy.alloc_head.out.bias[..., -1] = 1e4
    ckpt = save_policy_checkpoint(tmp_path / "void.pt", policy, cfg)
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


_GENERATE = ("import sys; from agents.policy.config import PolicyConfig;"
             "from agents.policy.network import TapFingerPolicy;"
             "from envs.observation import ObservationSpec; from envs.config import load_scenario;"
             "TapFingerPolicy(ObservationSpec.from_config(load_scenario('sjf-3')),"
             " PolicyConfig(hidden=16, encoder='pyg'));"
             "print([m.__file__ for n, m in sys.modules.items() if n.startswith('networks.han_')][0], flush=True);")


def test_torch_geometrics_generated_modules_are_one_reused_file_even_after_sigkill(tmp_path):
    """Two processes, each killed by SIGKILL, reuse one generated module in the cache directory and
    leave nothing in the temporary directory."""
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYG_HOME": str(tmp_path / "pyg")}
    files = []
    for _ in range(2):
        code = _GENERATE + "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                              timeout=120)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        files.append(Path(proc.stdout.strip().splitlines()[-1]))
    assert files[0] == files[1] and files[0].parent == tmp_path / "pyg" / "generated" and files[0].is_file()
    assert files[0].name.startswith("networks.han_PerGraphHANConv_propagate-")
    assert [p.name for p in files[0].parent.glob("*.py")] == [files[0].name]
    assert not list((tmp_path / "tmp").rglob("*.py"))


def test_without_a_writable_cache_the_generated_modules_are_removed_at_exit(tmp_path):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "pyg").write_text("a file, not a directory")
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "PYG_HOME": str(tmp_path / "pyg")}
    proc = subprocess.run([sys.executable, "-c", _GENERATE], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    generated = Path(proc.stdout.strip().splitlines()[-1])
    assert generated.parent == tmp_path / "tmp" and not generated.exists()
    assert not list((tmp_path / "tmp").glob("*.py"))


# ---------------------------------------------------------------------------------------
# evaluate.py outputs: all or nothing, never replaced unasked, one writer at a time
# ---------------------------------------------------------------------------------------
EVAL = ["--scenario", "synthetic-3", "--schedulers", "min", "--workers", "1", "--quiet", "num_tasks=8"]


def _evaluate(*args: str) -> int:
    from evaluate import main as evaluate

    return evaluate([*EVAL, *args])


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _one_error_line(err: str, prog: str = "evaluate.py") -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: ") and "Traceback" not in err, err
    return lines[0]


def test_default_out_is_a_new_directory_per_evaluation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _evaluate("--seeds", "1") == 0
    assert _evaluate("--seeds", "1") == 0
    runs = sorted((tmp_path / "results" / "synthetic-3").iterdir())
    assert len(runs) == 2 and all(r.name.startswith("baselines-") for r in runs)
    assert all((r / "summary.json").is_file() for r in runs)
    assert not [p.name for p in (tmp_path / "results" / "synthetic-3").iterdir() if p.name.startswith(".")]
    assert f"wrote {runs[-1].relative_to(tmp_path)}/" in capsys.readouterr().err


def test_an_out_holding_an_evaluation_is_replaced_only_with_overwrite(tmp_path, capsys):
    out = tmp_path / "out"
    assert _evaluate("--seeds", "1", "--out", str(out)) == 0
    before = _snapshot(out)
    capsys.readouterr()
    assert _evaluate("--seeds", "2", "--out", str(out)) == 2
    assert "--overwrite" in _one_error_line(capsys.readouterr().err)
    assert _snapshot(out) == before
    assert _evaluate("--seeds", "2", "--out", str(out), "--overwrite") == 0
    assert len(json.loads((out / "summary.json").read_text())["seeds"]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, aside or lock files left
    capsys.readouterr()
    (out / "notes.txt").write_text("mine")  # a file an evaluation never writes: never deleted
    assert _evaluate("--seeds", "1", "--out", str(out), "--overwrite") == 2
    assert "notes.txt" in _one_error_line(capsys.readouterr().err)
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.bin").write_text("x")
    assert _evaluate("--seeds", "1", "--out", str(other), "--overwrite") == 2
    assert "holds other files" in _one_error_line(capsys.readouterr().err)
    assert (other / "data.bin").read_text() == "x"


def test_a_full_disk_mid_write_exits_74_and_leaves_the_previous_outputs(tmp_path, monkeypatch, capsys):
    import errno

    import agents.evaluation.summary as summary

    out = tmp_path / "out"
    assert _evaluate("--seeds", "1", "--out", str(out)) == 0
    before = _snapshot(out)

    def full(path, run):
        path.write_text("scheduler,seed,task,par")  # a truncated file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(summary, "write_tasks_csv", full)
    capsys.readouterr()
    assert _evaluate("--seeds", "2", "--out", str(out), "--overwrite") == EXIT_IO_ERROR
    line = _one_error_line(capsys.readouterr().err)
    assert "No space left on device" in line and "unchanged" in line
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_too_little_space_for_the_outputs_is_refused_before_any_episode(tmp_path, monkeypatch, capsys):
    import shutil

    import agents.output_dirs as output_dirs

    real = shutil.disk_usage
    monkeypatch.setattr(output_dirs.shutil, "disk_usage", lambda p: real(p)._replace(free=2**20))
    started = time.monotonic()
    assert _evaluate("--seeds", "200", "--out", str(tmp_path / "out"), "num_tasks=400") == 2
    assert "MiB free" in _one_error_line(capsys.readouterr().err) and time.monotonic() - started < 20
    assert not list(tmp_path.iterdir())


def test_a_second_evaluation_of_the_same_out_is_refused_and_a_dead_holder_blocks_nothing(tmp_path, capsys):
    from agents.evaluation.outputs import StagedOutput

    out = tmp_path / "results" / "out"
    with StagedOutput(out):  # another evaluation holds --out
        started = time.monotonic()
        assert _evaluate("--seeds", "50", "--out", str(out)) == 2
        assert "being written by another evaluation" in _one_error_line(capsys.readouterr().err)
        assert time.monotonic() - started < 20 and not out.exists()
    holder = ("import os, signal, sys; from agents.evaluation.outputs import StagedOutput;"
              "s = StagedOutput(sys.argv[1]); s.staging.mkdir(); (s.staging / 'summary.json').write_text('{}');"
              "os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", holder, str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert any(p.name.startswith(".out.tmp-") for p in out.parent.iterdir())  # what the crash left
    assert _evaluate("--seeds", "1", "--out", str(out)) == 0  # the kernel released the lock
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]  # the dead writer's staging is gone


def test_outputs_left_aside_by_a_killed_publish_are_put_back(tmp_path):
    from agents.evaluation.outputs import StagedOutput

    aside = tmp_path / ".out.old-123-abcd"  # killed between renaming the old outputs aside and the new in
    aside.mkdir()
    (aside / "summary.json").write_text("{}")
    with pytest.raises(ConfigError, match="--overwrite"):
        StagedOutput(tmp_path / "out")
    assert (tmp_path / "out" / "summary.json").read_text() == "{}" and not aside.exists()


def test_the_report_is_written_whole_and_replaced_only_with_overwrite(tmp_path, capsys):
    from evaluate import main as evaluate

    out = tmp_path / "report"
    argv = ["--report", "--scenario", "sjf-3", "--schedulers", "min", "--seeds", "1", "--workers", "1",
            "--checkpoint-dir", str(tmp_path / "none"), "--out", str(out), "--quiet", "num_tasks=8"]
    assert evaluate(argv) == 0
    assert (out / "REPORT.md").is_file() and (out / "sjf-3" / "summary.json").is_file()
    capsys.readouterr()
    assert evaluate(argv) == 2 and "--overwrite" in _one_error_line(capsys.readouterr().err)
    assert evaluate([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


# ---------------------------------------------------------------------------------------
# --resume never rewinds; malformed checkpoints are one line, before any run directory
# ---------------------------------------------------------------------------------------
def test_resume_from_an_older_file_of_the_run_is_refused(finished_run, tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(finished_run[1], run)  # the shared run stays as it is
    data = torch.load(run / LAST, weights_only=True)
    newest = data["counters"]["env_step"]
    data["counters"]["env_step"] = 40
    torch.save(data, run / "older.pt")
    before = {p.name: p.stat().st_mtime_ns for p in run.iterdir()}
    for name, why in (("older.pt", f"older than this run's last.pt (step 40 < {newest})"), (BEST, "")):
        assert train_cli.main(["--resume", str(run / name), "--steps", "400", "--quiet"]) == 2
        line = _one_error_line(capsys.readouterr().err, "train.py")
        assert why in line and f"resume from {run / LAST}" in line and "copy the file elsewhere" in line
    assert {p.name: p.stat().st_mtime_ns for p in run.iterdir()} == before
    assert train_cli.main(["--resume", str(run), "--steps", str(newest + 40), "--quiet"]) == 0  # last.pt goes on


def _mutated(finished_run, tmp_path: Path, mutate) -> Path:
    data = torch.load(finished_run[1] / LAST, weights_only=True)
    mutate(data)
    path = tmp_path / "copied" / LAST  # not in its run's directory: it would start a new run
    path.parent.mkdir()
    torch.save(data, path)
    return path


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(scenario=["not", "a", "mapping"]), "scenario must be a mapping, got list"),
    (lambda d: d["counters"].update(env_step=float("nan")), "counters.env_step must be an integer >= 0, got nan"),
    (lambda d: d["counters"].pop("epoch"), "counters lacks epoch"),
    (lambda d: d.update(optimizer={"lr": 1e-4}), "optimizer lacks state, param_groups"),
    (lambda d: d["return_scaler"].update(var=-1.0), "return_scaler.var must be a finite number >= 0"),
    (lambda d: d["rng"].pop("torch"), "rng lacks torch"),
    (lambda d: d["model"].update({"alien": 3}), "model.alien must be a tensor"),
    (lambda d: d["policy_config"].update(hidden=32), "weights do not fit the architecture"),
    (lambda d: d["optimizer"]["param_groups"][0]["params"].pop(), "optimizer state holds"),
])
def test_a_malformed_checkpoint_is_one_line_and_creates_no_run_directory(finished_run, tmp_path, capsys, mutate,
                                                                          message):
    path = _mutated(finished_run, tmp_path, mutate)
    logdir = tmp_path / "logs"
    assert train_cli.main(["--resume", str(path), "--steps", "400", "--logdir", str(logdir), "--quiet"]) == 2
    assert message in _one_error_line(capsys.readouterr().err, "train.py")
    assert not logdir.exists()


def test_evaluate_reports_a_malformed_checkpoint_in_one_line(finished_run, tmp_path, capsys):
    path = _mutated(finished_run, tmp_path, lambda d: d.update(scenario=42))
    assert _evaluate("--seeds", "1", "--checkpoint", str(path), "--out", str(tmp_path / "out")) == 2
    assert "scenario must be a mapping, got 42" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------
# runs stopped or failed before their first last.pt; I/O failures during training
# ---------------------------------------------------------------------------------------
def _fail_at_start(monkeypatch, action) -> None:
    """Make the run stop where it builds its envs: after its directory exists, before its first last.pt."""
    import agents.training.loop as loop

    def envs(*args, **kwargs):
        action()
        raise AssertionError("not reached")

    monkeypatch.setattr(loop, "training_envs", envs)


def test_sigterm_before_training_starts_exits_143_and_leaves_no_directory(tmp_path, monkeypatch, capsys):
    def term():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here

    _fail_at_start(monkeypatch, term)
    handler = signal.getsignal(signal.SIGTERM)
    assert train_cli.main(_argv(tmp_path, "train.run_name=early")) == 143
    err = capsys.readouterr().err
    assert "terminated (SIGTERM) before training started" in err and "removed" in err
    assert not (tmp_path / "early").exists() and signal.getsignal(signal.SIGTERM) is handler


@pytest.mark.parametrize(("error", "code"), [(ConfigError("bad value"), 2), (KeyboardInterrupt(), 130)])
def test_a_run_that_stops_before_its_first_last_pt_removes_its_directory(tmp_path, monkeypatch, capsys, error, code):
    def fail():
        raise error

    _fail_at_start(monkeypatch, fail)
    assert train_cli.main(_argv(tmp_path, "train.run_name=early")) == code
    assert not (tmp_path / "early").exists() and not list(tmp_path.iterdir())
    assert "removed" in capsys.readouterr().err


def test_a_full_disk_during_training_exits_74_in_one_line(tmp_path, monkeypatch, capsys):
    import errno

    import agents.policy.checkpoint as checkpoint

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", full)
    assert train_cli.main(_argv(tmp_path, "train.run_name=run")) == EXIT_IO_ERROR
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("train.py:")]
    assert len(lines) == 1 and "no space left on the device" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "run").exists()  # nothing to resume: removed


# ---------------------------------------------------------------------------------------
# the memory estimate covers what the scenario sizes; typed scheduler options; flag ceilings
# ---------------------------------------------------------------------------------------
HUGE_GRID = ["capacities=[[100000000,16]]", "per_task_max=[100000000,16]"]


def test_a_huge_allocation_grid_is_refused_before_anything_is_built(tmp_path, monkeypatch, capsys):
    import agents.training.loop as loop

    built = []
    monkeypatch.setattr(loop, "training_envs", lambda *a, **k: built.append(1))
    started = time.monotonic()
    argv = ["--config", "synthetic-3", "--envs", "8", "--device", "cpu", "--logdir", str(tmp_path), "--quiet",
            "train.torch_threads=1", "train.collect_steps=1024", "train.eval_every=2048", "train.eval_episodes=2",
            *HUGE_GRID]
    assert train_cli.main(argv) == 2
    line = _one_error_line(capsys.readouterr().err, "train.py")
    assert "allocation grid of 100,000,001 x 17" in line and "per_task_max" in line
    assert not built and not any(tmp_path.iterdir()) and time.monotonic() - started < 30


@pytest.mark.parametrize(("key", "small", "large"), [
    ("per_task_max", "per_task_max=[8,4]", "per_task_max=[64,16]"),
    ("pending_slots", "pending_slots=5", "pending_slots=100"),
    ("num_clusters", "num_clusters=2", "num_clusters=12"),
    ("num_tasks", "num_tasks=50", "num_tasks=500000"),
])
def test_the_memory_estimate_grows_with_every_size_the_scenario_controls(tmp_path, key, small, large):
    base = ["capacities=[[64,16]]", "per_task_max=[16,4]"] if key != "num_clusters" else []
    sizes = [estimate_bytes(prepare_run("synthetic-3", [*base, value], flags={"envs": 8, "logdir": str(tmp_path)}))
             for value in (small, large)]
    assert sizes[1] > 1.5 * sizes[0], (key, sizes)


@pytest.mark.parametrize(("spec", "message"), [
    ("optimus:preemptive=maybe", "option preemptive must be true or false (or 1/0), got 'maybe'"),
    ("optimus:preemptive=yes", "option preemptive must be true or false (or 1/0), got 'yes'"),
    ("tiresias:elastic=2", "option elastic must be true or false"),
    ("optimus:prior_weight=.inf", "option prior_weight must be a finite number"),
    ("tiresias:promote_after=100000000000", "option promote_after must be a finite number of magnitude at most"),
    ("optimus:nosuch=1", "unknown option(s) nosuch"),
])
def test_scheduler_options_are_typed(tmp_path, capsys, spec, message):
    assert _evaluate("--seeds", "1", "--schedulers", spec, "--out", str(tmp_path / "out")) == 2
    assert message in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_scheduler_booleans_take_true_false_1_0_in_any_case():
    from agents.baselines import make_scheduler
    from agents.baselines.specs import parse_scheduler_spec

    for text, value in (("false", False), ("FALSE", False), ("'false'", False), ("0", False), ("True", True),
                        ("1", True)):
        assert parse_scheduler_spec(f"optimus:preemptive={text}") == ("optimus", {"preemptive": value})
    assert make_scheduler("optimus", preemptive="false").preemptive is False
    with pytest.raises(ConfigError, match="must be true or false"):
        make_scheduler("optimus", preemptive="maybe")


@pytest.mark.parametrize(("argv", "message"), [
    (["--steps", "100000000000000000000"], "--steps must be <= 1000000000000"),
    (["--envs", "10000000"], "--envs must be <= 1000000"),
    (["--steps", "0"], "--steps must be >= 1"),
])
def test_train_flags_have_ceilings(tmp_path, capsys, argv, message):
    assert train_cli.main(["--config", "sjf-3", "--logdir", str(tmp_path / "logs"), *argv]) == 2
    assert message in _one_error_line(capsys.readouterr().err, "train.py")
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize(("argv", "message"), [
    (["--seeds", "10000000"], "--seeds must be <= 100000"),
    (["--seeds", "2", "--seed-offset", str(2**62)], "--seed-offset must be <= 4611686018427387902"),
    (["--seeds", "2", "--workers", "100000"], "--workers must be <= 1024"),
    (["--seeds", "2", "--policy-batch", "1000000"], "--policy-batch must be <= 100000"),
])
def test_evaluate_flags_have_ceilings(tmp_path, capsys, argv, message):
    assert _evaluate(*argv, "--out", str(tmp_path / "out")) == 2
    assert message in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
