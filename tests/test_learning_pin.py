"""Pin of the learning code: a fixed seed, a tiny scenario and two PPO updates give exactly the
parameters and logged update statistics recorded here.

A refactor of the loss, GAE, return scaling or tianshou glue that changes behaviour in any bit
fails this test. A deliberate change of the learning rule regenerates the pins
(``tests/learning_pin.json``) with ``python tests/test_learning_pin.py`` and says so in its
commit message.
"""

from __future__ import annotations

import hashlib
import json
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


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_updates_reproduce_the_pinned_parameters_and_statistics(tmp_path, case):
    torch.set_num_threads(1)
    got = pinned_run(tmp_path, case)
    want = json.loads(PIN_FILE.read_text())[case]
    assert got["update"] == want["update"]
    assert got["params"] == want["params"]


if __name__ == "__main__":  # regenerate the pins
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        pins = {case: pinned_run(Path(d), case) for case in sorted(CASES)}
    PIN_FILE.write_text(json.dumps(pins, indent=1) + "\n")
    print(f"wrote {PIN_FILE}")
