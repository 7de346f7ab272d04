"""docs/configuration.md is generated from the config dataclasses and must be current."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from agents.policy.config import PolicyConfig
from agents.training.config import TrainConfig
from envs.config import ScenarioConfig
from envs.config_reference import SECTIONS, missing_comments, render, section_rows

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def test_the_page_is_current():
    assert PAGE.read_text() == render(), "stale: run python -m envs.config_reference > docs/configuration.md"


def test_every_key_has_a_meaning_and_every_field_is_listed():
    assert missing_comments() == []
    page = PAGE.read_text()
    for cls, prefix in ((ScenarioConfig, ""), (PolicyConfig, "policy."), (TrainConfig, "train.")):
        for f in dataclasses.fields(cls):
            assert f"| `{prefix}{f.name}` |" in page


def test_defaults_are_the_dataclasses():
    rows = {key: default for _, prefix, path in SECTIONS for key, _, default, _ in
            section_rows(__import__(path.rpartition(".")[0], fromlist=["x"]).__dict__[path.rpartition(".")[2]], prefix)}
    assert rows["train.lr"] == f"`{TrainConfig().lr}`" and rows["policy.hidden"] == f"`{PolicyConfig().hidden}`"
    assert rows["mode"] == "required" and rows["train.imitate"] == "null" and rows["train.progress"] == "true"
