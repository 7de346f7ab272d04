"""``docs/configuration.md``: every scenario, policy and train key with its default and meaning,
generated from the config dataclasses.

A field's meaning is the comment written beside it in its dataclass: the ``#:`` lines right above
the field, or the ``#`` comment at the end of its line. So the reference has one owner, the
dataclass, and ``tests/test_config_reference.py`` fails when the page is stale or a field has
no comment. Regenerate with::

    python -m envs.config_reference > docs/configuration.md
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import re
import sys
import tokenize
import types
import typing
from typing import Any, Sequence

#: the sections of the page: (heading, dotted key prefix, dataclass path)
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("Scenario", "", "envs.config.ScenarioConfig"),
    ("Scenario: task types", "task_types[k].", "envs.config.TaskType"),
    ("Scenario: connectivity", "connectivity.", "envs.config.Connectivity"),
    ("Scenario: test-bed trace", "trace.", "envs.config.TraceSource"),
    ("Policy", "policy.", "agents.policy.config.PolicyConfig"),
    ("Train", "train.", "agents.training.config.TrainConfig"),
)

HEADER = """# Configuration reference

Generated from the config dataclasses by `python -m envs.config_reference > docs/configuration.md`
(`tests/test_config_reference.py` fails when this page is stale). A scenario YAML
(`configs/<name>.yaml`) holds the scenario keys at the top level, the recipe in its optional
`policy:` and `train:` sections, and the quick recipe in an optional `quick:` section (its own
`policy:` and `train:` values, laid over the recipe by `train.py --quick`). A recipe file names a
scenario under `base:` (`base: hetero-6`) and trains on that scenario's keys, its own top-level keys
laid over them; it is not listed among the scenarios (`configs/generalist-synthetic.yaml`). On the command line,
`train.<key>=v` and `policy.<key>=v` set those sections, any other `key=v` (or `scenario.<key>=v`)
the scenario; dotted keys reach nested fields (`connectivity.model=random_subset`). Precedence,
lowest first: these defaults, the YAML (with `--quick`, its `quick:` section over the recipe), the
CLI flags (`--steps`, `--envs`, `--seed`, ...), the `key=value` overrides. A key without a default is
required in the YAML.

A config file is UTF-8 text, and a mapping gives each key once, at any level: a key given twice
(`num_tasks` twice at the top level, `lr` twice under `train:`) is refused, naming the key and its
section (a plain YAML reader keeps the last value). Every value is the type its key declares: an `int`
key takes an integer (`16`, also `16.0` or `1e3`), a `float` key any number, a `bool` key `true` or
`false`. A quoted scalar is a string, never a number: `num_tasks: "16"` and `capacities: [["16", 16]]`
are refused like `num_tasks: true`. An unquoted number with an exponent is a number, as YAML 1.2
reads it (`lr: 3e-4`, `1e5`, `1.0e5`, which YAML 1.1 reads as text), in a file and in a `key=value`
override alike: an override's value is read by the same loader (`envs/config_yaml.py`).
"""


def _resolve(path: str) -> type:
    module, _, name = path.rpartition(".")
    __import__(module)
    return getattr(sys.modules[module], name)


def field_comments(cls: type) -> dict[str, str]:
    """The comment of every field of dataclass ``cls``: ``#:`` lines above it, else its end-of-line ``#``."""
    source = inspect.getsource(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    out: dict[str, str] = {}
    pending: list[str] = []
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped.startswith("#:"):
            pending.append(stripped[2:].strip())
            continue
        match = re.match(r"\s+(\w+)\s*:", line)
        if match and match.group(1) in names and not stripped.startswith("#"):
            name = match.group(1)
            trailing = comments.get(number, "")
            text = " ".join(pending) if pending else trailing.lstrip("#").strip()
            if text and name not in out:
                out[name] = text
        pending = []
    return out


def _type_text(annotation: Any) -> str:
    generic = typing.get_origin(annotation) is not None or isinstance(annotation, types.UnionType)
    text = str(annotation) if generic else getattr(annotation, "__name__", str(annotation))
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", text).replace("NoneType", "None")


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return "(the section's defaults)"
    else:
        return "required"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, dict) and not value:
        return "{}"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def section_rows(cls: type, prefix: str) -> list[tuple[str, str, str, str]]:
    """``(key, type, default, meaning)`` of every field of ``cls``, in declaration order."""
    hints = typing.get_type_hints(cls)
    comments = field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        rows.append((f"{prefix}{f.name}", _type_text(hints.get(f.name, f.type)), _default_text(f),
                     comments.get(f.name, "")))
    return rows


def missing_comments(sections: Sequence[tuple[str, str, str]] = SECTIONS) -> list[str]:
    """Keys whose field has no comment (the page would have an empty meaning)."""
    return [key for _, prefix, path in sections for key, _, _, text in section_rows(_resolve(path), prefix) if not text]


def render(sections: Sequence[tuple[str, str, str]] = SECTIONS) -> str:
    """The whole page."""
    parts = [HEADER]
    for title, prefix, path in sections:
        cls = _resolve(path)
        doc = inspect.getdoc(cls) or ""
        parts += [f"## {title}", "", f"`{path}`: {doc.splitlines()[0] if doc else ''}", "",
                  "| key | type | default | meaning |", "|---|---|---|---|"]
        for key, kind, default, text in section_rows(cls, prefix):
            parts.append(f"| `{key}` | `{_cell(kind)}` | {_cell(default)} | {_cell(text)} |")
        parts.append("")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
