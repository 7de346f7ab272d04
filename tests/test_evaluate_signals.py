"""evaluate.py with worker processes: none outlives the command, however it stops.

A subprocess ``evaluate.py --workers 2`` on a workload long enough to be stopped mid-way is sent
SIGTERM, SIGINT or SIGKILL once its two spawned workers exist; every process it started (the
workers and multiprocessing's resource tracker) must be gone within a few seconds, and the exit
code and the last line must say which signal stopped it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[1]
#: a baseline-only evaluation of a few hundred episodes: minutes of work, stopped after seconds
LONG = ["--scenario", "synthetic-3", "--schedulers", "min", "--seeds", "400", "num_tasks=400", "--workers", "2",
        "--quiet"]
#: seconds the descendants get to end once the command was signalled (the watchdog polls every 0.5 s)
GONE_WITHIN_S = 10.0


def _workers(parent: psutil.Process) -> list[psutil.Process]:
    """The parent's spawned worker processes (not the resource tracker)."""
    out = []
    for child in parent.children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            pass
    return out


def _start_with_workers(out: Path, log: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """``evaluate.py`` started (output to ``log``: a pipe would stay open while an orphaned worker
    holds it) and given time to start both workers and give them a job."""
    with log.open("w") as fh:
        # a suite started in the background of a non-interactive shell runs with SIGINT ignored, which a
        # child inherits (and Python then installs no Ctrl-C handler); a handled signal is reset to its
        # default action at exec, so the child starts with Ctrl-C working
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            proc = subprocess.Popen([sys.executable, str(ROOT / "evaluate.py"), *LONG, "--out", str(out)], cwd=ROOT,
                                    stdout=fh, stderr=subprocess.STDOUT)
        finally:
            signal.signal(signal.SIGINT, previous)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while len(_workers(parent)) < 2:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.2)
    time.sleep(2.0)  # the workers import and run their initializer, then start on the jobs
    descendants = parent.children(recursive=True)
    assert proc.poll() is None, "the evaluation ended before it could be stopped: make LONG longer"
    return proc, descendants


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("signum, code, line", [
    (signal.SIGTERM, 143, "evaluate.py: terminated (SIGTERM)"),
    (signal.SIGINT, 130, "evaluate.py: interrupted"),
    (signal.SIGKILL, -signal.SIGKILL, None),
])
def test_no_process_outlives_the_evaluation(tmp_path, signum, code, line):
    out, log = tmp_path / "out", tmp_path / "log.txt"
    proc, descendants = _start_with_workers(out, log)
    assert len(descendants) >= 2
    proc.send_signal(signum)
    proc.wait(timeout=60)
    _, alive = psutil.wait_procs(descendants, timeout=GONE_WITHIN_S)
    err = log.read_text()
    for straggler in alive:  # leave nothing behind whatever the outcome
        straggler.kill()
    assert not alive, f"still running {GONE_WITHIN_S} s after {signum.name}: {[p.pid for p in alive]}"
    assert proc.returncode == code, err
    if line is not None:
        assert err.strip().splitlines()[-1] == line, err
        assert "Traceback" not in err, err
    assert not out.exists()  # nothing published


def test_a_result_cut_off_mid_message_does_not_hang_the_stopped_pool():
    """A worker stopped while it sends a result leaves part of a message in the result pipe; once the pool
    is stopped, its manager thread (which the interpreter's exit joins) must end rather than wait for the
    rest. The part is written here by hand: a length header promising more bytes than follow."""
    import multiprocessing
    import os
    import struct
    from concurrent.futures import ProcessPoolExecutor

    from agents.evaluation.runner import stop_pool

    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    assert pool.submit(os.getpid).result(timeout=60) > 0  # the worker and the manager thread run
    manager = pool._executor_manager_thread
    writer = pool._result_queue._writer
    os.write(writer.fileno(), struct.pack("!i", 1 << 16) + b"part of a pickled result")
    stop_pool(pool)
    manager.join(timeout=GONE_WITHIN_S)
    assert not manager.is_alive(), "the pool's manager thread still waits on the rest of the message"
