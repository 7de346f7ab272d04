"""What carries (``benchmarks/transfer.py``): a shipped checkpoint on the validation workloads of the
other scenarios of its family, acting as each scenario's recipe acts, beside its validation rival."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from agents.evaluation.transfer import shipped_sources

ROOT = Path(__file__).resolve().parent.parent
_SPEC = importlib.util.spec_from_file_location("transfer_cli", ROOT / "benchmarks" / "transfer.py")
transfer = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(transfer)


def test_only_files_named_after_a_recipe_are_sources(tmp_path):
    shutil.copy(ROOT / "checkpoints" / "synthetic-3.pt", tmp_path / "synthetic-3.pt")
    (tmp_path / "notes.pt").write_bytes(b"")
    assert shipped_sources(tmp_path) == ["synthetic-3"]


def test_a_checkpoint_acts_in_the_other_scenarios_of_its_family(tmp_path):
    ship = tmp_path / "ship"
    ship.mkdir()
    shutil.copy(ROOT / "checkpoints" / "synthetic-3.pt", ship / "synthetic-3.pt")
    out = tmp_path / "out"
    assert transfer.main(["--checkpoints", str(ship), "--out", str(out), "--workers", "1"]) == 0
    doc = json.loads((out / "transfer.json").read_text())
    assert [s["target"] for s in doc["sections"]] == ["synthetic-6"]  # its family's other scenario
    sec = doc["sections"][0]
    assert (sec["action"], sec["conflicts"]) == ("argmax", "room")  # as synthetic-6's recipe acts
    assert sec["validation_seeds"] == list(range(10000, 10016))
    assert sec["rival"] in ("optimus", "optimus:preemptive=false")
    (row,) = sec["rows"]
    assert row["source"] == "synthetic-3" and not row["own"] and row["trained_on"] == ["synthetic-3"]
    assert len(row["vs_rival"]["per_seed"]) == 16 and row["mean_jct"] > 0
    page = (out / "transfer.md").read_text()
    assert "## synthetic-6" in page and "| `synthetic-3.pt` | `synthetic-3` |" in page


def test_no_recipe_checkpoint_is_refused_in_one_line(tmp_path, capsys):
    assert transfer.main(["--checkpoints", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "no <recipe>.pt file" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()
