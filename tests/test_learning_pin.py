"""The learning code checked two ways on tiny runs (a fixed seed, two PPO updates of a small
scenario), one per case of :data:`CASES`:

* determinism: the run trained twice in one process from one seed gives the same bits, the
  parameters (a sha256) and every logged update statistic;
* the reference: the run's update statistics and a summary of every parameter tensor (its sum and
  its sum of absolute values) match ``tests/learning_pin.json`` within :data:`RTOL` (and
  :data:`ATOL` for statistics that are rounding noise). A tolerance, not a hash, so the check holds
  on other CPUs and under numerics that round differently, and still fails on a changed learning rule
  (an ignored PPO clip, a flipped entropy sign, advantage normalisation switched off each move
  some value by far more than :data:`RTOL`).

The reference records the torch version that wrote it; when the installed torch differs, a
failure says so. A deliberate change of the learning rule regenerates the reference with
``python tests/test_learning_pin.py`` and says so in its commit message.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
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
#: the learning paths checked: the defaults, and every option of the loss and the returns at once
CASES = {
    "defaults": [],
    "options": ["train.old_stats=behaviour", "train.value_clip=true", "train.return_scaling_window=40",
                "train.lost_claim_penalty=1.5", "train.shards=2", "train.ent_coef=0.05", "reward=per_cluster"],
    "multi": ["mode=multi", "train.gamma=null", "train.advantage_normalization=false"],
}
#: the update/ scalars logged (float32 as TensorBoard stores them)
UPDATE_TAGS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
               "explained_variance", "return_scale", "return_std", "grad_norm", "logp_mismatch", "active_fraction")

REFERENCE_FILE = Path(__file__).with_name("learning_pin.json")
#: the command that writes :data:`REFERENCE_FILE` (run from the project root)
REGENERATE = "python tests/test_learning_pin.py"
#: relative tolerance of every value compared with the reference; a parameter tensor's sum is
#: compared to RTOL times its sum of absolute values (a sum near 0 has no relative precision).
#: Runs under other numerics (ATen's scalar or AVX2 kernels, MKL and oneDNN held to AVX2 or SSE4.1,
#: numpy without its AVX-512 loops, foreach Adam) stay within 4e-5 of the reference on an
#: AVX-512 Intel CPU; each mutation of the module docstring moves some update statistic by more than 1e-2.
RTOL = 1e-3
#: absolute tolerance of ``logp_mismatch``, stored against recomputed log-probabilities: rounding
#: noise (~1e-7) whose relative value means nothing
ATOL = {"logp_mismatch": 1e-6}
#: parameters not compared: the critic's pooling score bias shifts a softmax, which ignores shifts,
#: so its gradient is rounding noise that Adam turns into steps of up to the learning rate
UNCOMPARED = frozenset({"critic.pool_score.bias"})


def trained(tmp: Path, case: str) -> dict[str, object]:
    """Train the tiny run of ``case``; return its parameters' sha256 (``params``), each parameter
    tensor's ``[sum, sum of |x|]`` (``tensors``) and its update scalars (``update``)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    flags = {"steps": 80, "envs": 2, "seed": 7, "logdir": str(tmp), "vector": "dummy"}
    spec = prepare_run("synthetic-3", [*BASE, *CASES[case], f"train.run_name=ref-{case}"], flags=flags)
    run_training(spec)
    model = load_checkpoint(spec.run_dir / LAST)["model"]
    digest = hashlib.sha256()
    tensors = {}
    for name in sorted(model):
        x = model[name].detach().cpu().contiguous()
        digest.update(name.encode())
        digest.update(x.numpy().tobytes())
        x = x.double()
        tensors[name] = [x.sum().item(), x.abs().sum().item()]
    ea = EventAccumulator(str(spec.run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    update = {tag: [e.value for e in ea.Scalars(f"update/{tag}")] for tag in UPDATE_TAGS}
    return {"params": digest.hexdigest(), "tensors": tensors, "update": update}


def mismatches(got: dict[str, object], want: dict[str, object]) -> list[str]:
    """The values of ``got`` (a :func:`trained` result) outside the tolerances around ``want`` (a
    case of the reference), one line each; empty when all match."""
    out = []
    if set(got["tensors"]) != set(want["tensors"]):
        out.append(f"parameter names differ: {sorted(set(got['tensors']) ^ set(want['tensors']))}")
    for name in sorted((set(got["tensors"]) & set(want["tensors"])) - UNCOMPARED):
        (s, a), (ws, wa) = got["tensors"][name], want["tensors"][name]
        if not abs(s - ws) <= RTOL * wa:
            out.append(f"sum({name}) = {s!r}, reference {ws!r} (tolerance {RTOL * wa:.3g})")
        if not math.isclose(a, wa, rel_tol=RTOL):
            out.append(f"sum(|{name}|) = {a!r}, reference {wa!r}")
    for tag in UPDATE_TAGS:
        g, w = got["update"][tag], want["update"][tag]
        if len(g) != len(w):
            out.append(f"update/{tag}: {len(g)} values, reference {len(w)}")
            continue
        for i, (x, y) in enumerate(zip(g, w)):
            if not math.isclose(x, y, rel_tol=RTOL, abs_tol=ATOL.get(tag, 0.0)):
                out.append(f"update/{tag}[{i}] = {x!r}, reference {y!r}")
    return out


def reference() -> dict[str, object]:
    return json.loads(REFERENCE_FILE.read_text())


_first: dict[str, dict[str, object]] = {}


def first_run(tmp_path_factory, case: str) -> dict[str, object]:
    """This process's first :func:`trained` run of ``case`` (trained once, shared by the tests)."""
    if case not in _first:
        _first[case] = trained(tmp_path_factory.mktemp(f"first-{case}"), case)
    return _first[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_seed_trains_the_same_bits_twice_in_one_process(tmp_path_factory, case):
    first = first_run(tmp_path_factory, case)
    second = trained(tmp_path_factory.mktemp(f"second-{case}"), case)
    assert second["update"] == first["update"]
    assert second["params"] == first["params"]


def failure_message(case: str, bad: list[str], ref_torch: str) -> str:
    """What a failed reference check of ``case`` says: the values outside the tolerances, and
    whether the reference was written with the installed torch (``ref_torch`` is the one that was)."""
    if ref_torch == torch.__version__:
        versions = f"The reference was written with this torch ({torch.__version__})."
    else:
        versions = (f"The reference was written with torch {ref_torch}, this is torch {torch.__version__}: "
                    f"if the new torch explains the difference, regenerate it ({REGENERATE}).")
    return "\n".join([f"{case}: {len(bad)} values outside rtol {RTOL} of the reference:", *bad[:20], versions])


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_updates_match_the_reference(tmp_path_factory, case):
    ref = reference()
    bad = mismatches(first_run(tmp_path_factory, case), ref["cases"][case])
    assert not bad, failure_message(case, bad, ref["torch"])


def test_a_failure_names_both_torch_versions_when_they_differ():
    other = failure_message("defaults", ["update/loss[0] = 1.0, reference 2.0"], "0.0.1")
    assert "torch 0.0.1, this is torch " + torch.__version__ in other and REGENERATE in other
    assert "update/loss[0]" in other
    same = failure_message("defaults", ["update/loss[0] = 1.0, reference 2.0"], torch.__version__)
    assert f"this torch ({torch.__version__})" in same and "0.0.1" not in same


def test_the_reference_covers_every_case_and_tag():
    ref = reference()
    assert set(ref["cases"]) == set(CASES) and ref["regenerate"] == REGENERATE
    for case in ref["cases"].values():
        assert set(case["update"]) == set(UPDATE_TAGS)
        assert case["tensors"] and all(len(v) == 2 and v[1] >= abs(v[0]) for v in case["tensors"].values())


def write_reference(ref: dict[str, object]) -> None:
    """``ref`` as JSON in :data:`REFERENCE_FILE`, each list of numbers on one line."""
    text = json.dumps(ref, indent=1)
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    REFERENCE_FILE.write_text(text + "\n")


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        runs = {case: trained(Path(d), case) for case in sorted(CASES)}
    cases = {case: {"tensors": r["tensors"], "update": r["update"]} for case, r in runs.items()}
    write_reference({"torch": torch.__version__, "regenerate": REGENERATE, "cases": cases})
    print(f"wrote {REFERENCE_FILE}")
