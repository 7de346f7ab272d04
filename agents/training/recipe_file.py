"""Write values into the recipe sections of a scenario YAML as text, keeping its other lines.

A scenario file (``configs/<scenario>.yaml``) is commented by hand, so it is edited line by line
rather than loaded and dumped: :func:`set_recipe_values` replaces the value of a key of the
``policy:`` or ``train:`` section in place, adds a missing key at the end of its section, or adds
the section. A scenario key that is a learning choice (:data:`~envs.config.LEARNING_KEYS`) is a
top-level line: replaced in place, or added after the scenario's last line. The comment of a
replaced line is dropped (it described the old value) and reported. The caller checks the result
by resolving it (:mod:`agents.evaluation.adoption`).

:func:`quick_arguments` reads the other way: ``train.py --quick`` lays the YAML's quick recipe
(:func:`~envs.config.quick_recipe`) under the command line's flags and overrides.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import yaml

from envs.config import LEARNING_KEYS, RECIPE_SECTIONS, ConfigError, quick_recipe


def yaml_value(value: Any) -> str:
    """``value`` as one line of YAML flow text (``65536``, ``sample``, ``0.0003``, ``[16, 16]``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000)
    return text.split("\n...")[0].strip()


def _section_span(lines: list[str], section: str) -> tuple[int, int] | None:
    """``(header, end)``: the section's header line and one past its last indented line; None if absent."""
    header = None
    for i, line in enumerate(lines):
        if re.match(rf"^{re.escape(section)}\s*:", line):
            header = i
            break
    if header is None:
        return None
    if re.match(rf"^{re.escape(section)}\s*:\s*[^\s#]", lines[header]):
        raise ConfigError(f"the {section!r} section is written in flow style ({lines[header].strip()!r}); "
                          "write its values by hand")
    end = header + 1
    for i in range(header + 1, len(lines)):
        line = lines[i]
        if not line.strip() or (line[:1].isspace() and line.lstrip().startswith("#")):
            continue  # blank lines and indented comments neither end the section nor extend it
        if not line[:1].isspace():
            break
        end = i + 1
    return header, end


def _value_line(indent: str, key: str) -> re.Pattern[str]:
    """A ``key: value  # comment`` line at ``indent``, with the value and the comment as groups."""
    return re.compile(rf"^{re.escape(indent)}{re.escape(key)}\s*:(?P<value>[^#]*?)(?P<comment>\s*#.*)?$")


def _replace(lines: list[str], i: int, pattern: re.Pattern[str], new: str, name: str, dropped: list[str]) -> None:
    comment = pattern.match(lines[i]).group("comment")
    if comment:
        dropped.append(f"{name}:{comment.strip().lstrip('#')}")
    lines[i] = new


def _set_scenario_value(lines: list[str], key: str, value: Any, dropped: list[str]) -> None:
    """Write the top-level scenario ``key``: in place, or after the scenario's last line (before the
    first recipe section and the comments that introduce it)."""
    pattern = _value_line("", key)
    found = [i for i, line in enumerate(lines) if pattern.match(line)]
    if len(found) > 1:
        raise ConfigError(f"scenario key {key!r} is written {len(found)} times; write its value by hand")
    line = f"{key}: {yaml_value(value)}"
    if found:
        _replace(lines, found[0], pattern, line, f"scenario.{key}", dropped)
        return
    spans = [span for span in (_section_span(lines, section) for section in RECIPE_SECTIONS) if span]
    end = min((header for header, _ in spans), default=len(lines))
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    lines.insert(end, line)


def set_recipe_values(text: str, values: Mapping[tuple[str, str], Any]) -> tuple[str, list[str]]:
    """``text`` with each ``(section, key) -> value`` of ``values`` written into its recipe section
    (``("scenario", key)``: a :data:`~envs.config.LEARNING_KEYS` line), and the comments dropped
    from replaced lines (``section.key: comment``)."""
    lines = text.splitlines()
    dropped: list[str] = []
    for (section, key), value in values.items():
        if section == "scenario" and key in LEARNING_KEYS:
            _set_scenario_value(lines, key, value, dropped)
            continue
        if section not in RECIPE_SECTIONS:
            raise ConfigError(f"{section}.{key}: only the {' and '.join(RECIPE_SECTIONS)} sections and the "
                              f"scenario's learning keys ({', '.join(LEARNING_KEYS)}) are recipe values")
        span = _section_span(lines, section)
        if span is None:
            while lines and not lines[-1].strip():
                lines.pop()
            lines += [f"{section}:", f"  {key}: {yaml_value(value)}"]
            continue
        header, end = span
        body = [i for i in range(header + 1, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")]
        indent = re.match(r"^(\s+)", lines[body[0]]).group(1) if body else "  "
        pattern = _value_line(indent, key)
        found = next((i for i in body if pattern.match(lines[i])), None)
        if found is None:
            lines.insert(end, f"{indent}{key}: {yaml_value(value)}")
            continue
        _replace(lines, found, pattern, f"{indent}{key}: {yaml_value(value)}", f"{section}.{key}", dropped)
    return "\n".join(lines) + "\n", dropped


def quick_arguments(config: str, flags: Mapping[str, Any], overrides: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """``train.py --quick``: the CLI ``flags`` and ``key=value`` ``overrides`` with the scenario's quick
    recipe beneath them. Its ``train`` values join the flags (an explicit flag wins), its ``policy``
    values lead the overrides (a later one wins), so the precedence is: defaults < the YAML's recipe <
    its quick section < the flags < the overrides."""
    quick = quick_recipe(config)
    given = {key: value for key, value in flags.items() if value is not None}
    policy = [f"policy.{key}={yaml_value(value)}" for key, value in quick["policy"].items()]
    return {**quick["train"], **given}, policy + list(overrides)
