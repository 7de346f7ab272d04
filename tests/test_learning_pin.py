"""Pin of the learning code: a fixed seed, a tiny scenario and two PPO updates give exactly the
parameters and logged update statistics recorded here.

A refactor of the loss, GAE, return scaling or tianshou glue that changes behaviour in any bit
fails this test. A deliberate change of the learning rule regenerates the pins
(``tests/learning_pin.json``) with ``python tests/test_learning_pin.py`` and says so in its
commit message.

Each run is a fresh Python process whose numerical libraries use code paths that give the same bits
on every x86-64 CPU (``PORTABLE_NUMERICS``): MKL's and oneDNN's kernels, ATen's vectorised kernels
and numpy's SIMD dispatch otherwise pick AVX2 or AVX-512 code by the CPU they find, and those round
differently in the last bits. The learning code itself avoids ``torch.sqrt`` (MKL's vector math,
whose last bits differ between CPU models even then; see :mod:`agents.training.optimizer`).

The pins hold on another vendor's CPU: one case runs under ``qemu-x86_64 -cpu``
:data:`EMULATED_CPU` (Debian's ``qemu-user``, installed by ``.ci/run``), which reports an AMD CPU
with AVX2 only to the libraries' dispatch. Without qemu that test is skipped, saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the project root on the path
    sys.path.insert(0, str(ROOT))

from agents.training.checkpoints import LAST, load_checkpoint  # noqa: E402
from agents.training.loop import run_training  # noqa: E402
from agents.training.prepare import prepare_run  # noqa: E402

#: what a tiny run trains (synthetic-3: single mode, Bayes conflicts; 2 updates of 2 x 2 minibatches)
BASE = [
    "num_tasks=12", "policy.hidden=16", "policy.han_layers=1", "policy.pointer_layers=1", "policy.pointer_ffn=32",
    "train.collect_steps=40", "train.batch_size=16", "train.eval_episodes=1", "train.eval_every=40",
    "train.torch_threads=1", "train.progress=false", "train.max_batchsize=256", "train.repeat=2", "train.lr=1e-3",
]
#: the learning paths pinned: the defaults, and every option of the loss and the returns at once
CASES = {
    "defaults": [],
    "options": ["train.old_stats=behaviour", "train.value_clip=true", "train.return_scaling_window=40",
                "train.lost_claim_penalty=1.5", "train.shards=2", "train.ent_coef=0.05", "reward=per_cluster"],
    "multi": ["mode=multi", "train.gamma=null", "train.advantage_normalization=false"],
}
#: update/ scalars compared exactly (float32 as TensorBoard stores them)
UPDATE_TAGS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
               "explained_variance", "return_scale", "return_std", "grad_norm", "logp_mismatch", "active_fraction")


def pinned_run(tmp: Path, case: str) -> dict[str, object]:
    """Train the tiny run of ``case`` and return its parameters' sha256 and its update scalars."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    flags = {"steps": 80, "envs": 2, "seed": 7, "logdir": str(tmp), "vector": "dummy"}
    spec = prepare_run("synthetic-3", [*BASE, *CASES[case], f"train.run_name=pin-{case}"], flags=flags)
    run_training(spec)
    model = load_checkpoint(spec.run_dir / LAST)["model"]
    digest = hashlib.sha256()
    for name in sorted(model):
        digest.update(name.encode())
        digest.update(model[name].detach().cpu().contiguous().numpy().tobytes())
    ea = EventAccumulator(str(spec.run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    scalars = {tag: [e.value for e in ea.Scalars(f"update/{tag}")] for tag in UPDATE_TAGS}
    return {"params": digest.hexdigest(), "update": scalars}


PIN_FILE = Path(__file__).with_name("learning_pin.json")

#: environment under which a run's floating point is the same on every x86-64 CPU (read at import
#: time by the libraries, hence a fresh process): MKL's conditional numerical reproducibility,
#: oneDNN capped at SSE4.1, ATen's scalar kernels, numpy without its dispatched SIMD loops, one thread
PORTABLE_NUMERICS = {
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
    "ATEN_CPU_CAPABILITY": "default",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def portable_env() -> dict[str, str]:
    """This process's environment with ``PORTABLE_NUMERICS`` laid over it."""
    return {**os.environ, **PORTABLE_NUMERICS}


def portable_pinned_run(tmp: Path, case: str, emulator: list[str] | None = None) -> dict[str, object]:
    """``pinned_run`` of ``case`` in a fresh process under ``PORTABLE_NUMERICS``, run by
    ``emulator`` (a command prefix) when one is given."""
    out = tmp / f"{case}.json"
    command = [*(emulator or []), sys.executable, __file__, "--case", case, "--tmp", str(tmp), "--out", str(out)]
    proc = subprocess.run(command, env=portable_env(), cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"pinned run of {case} failed:\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())


def assert_pinned(got: dict[str, object], case: str) -> None:
    """``got`` (a :func:`pinned_run`'s result) is the pins of ``case``: every update statistic, then
    the parameters' hash."""
    want = json.loads(PIN_FILE.read_text())[case]
    assert got["update"] == want["update"]
    assert got["params"] == want["params"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_updates_reproduce_the_pinned_parameters_and_statistics(tmp_path, case):
    assert_pinned(portable_pinned_run(tmp_path, case), case)


#: the CPU model qemu reports in :func:`test_the_pins_hold_on_an_emulated_amd_cpu` (AMD Zen 2, AVX2)
EMULATED_CPU = "EPYC-Rome"


def test_the_pins_hold_on_an_emulated_amd_cpu(tmp_path):
    """The defaults case under an emulated AMD CPU gives the pins: no code path of the run picks
    its rounding by the CPU's vendor, model or vector width (a few minutes: qemu translates every
    instruction)."""
    qemu = shutil.which("qemu-x86_64")
    if platform.machine() != "x86_64" or qemu is None:
        pytest.skip("needs qemu-x86_64 (Debian's qemu-user) on an x86-64 machine")
    assert_pinned(portable_pinned_run(tmp_path, "defaults", emulator=[qemu, "-cpu", EMULATED_CPU]), "defaults")


def test_the_portable_numerics_reach_the_run():
    """The child process really runs ATen's scalar kernels (the variable names are the libraries' own)."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    got = subprocess.run([sys.executable, "-c", code], env=portable_env(), capture_output=True, text=True,
                         check=True)
    assert got.stdout.strip() == "DEFAULT"


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description="Regenerate the learning pins, or compute one case.")
    parser.add_argument("--case", choices=sorted(CASES), help="compute this case only (the test's child process)")
    parser.add_argument("--tmp", type=Path, help="run directory root of --case")
    parser.add_argument("--out", type=Path, help="where --case writes its result")
    args = parser.parse_args()
    if args.case and (args.tmp is None or args.out is None):
        parser.error("--case needs --tmp and --out")
    if args.case:
        torch.set_num_threads(1)
        args.out.write_text(json.dumps(pinned_run(args.tmp, args.case)))
    else:  # regenerate the pins, each case in its own portable process
        with tempfile.TemporaryDirectory() as d:
            pins = {case: portable_pinned_run(Path(d), case) for case in sorted(CASES)}
        PIN_FILE.write_text(json.dumps(pins, indent=1) + "\n")
        print(f"wrote {PIN_FILE}")
