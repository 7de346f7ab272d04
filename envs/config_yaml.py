"""The one reader of config YAML: scenario files (``--config``/``--scenario``, ``configs/<name>.yaml``)
and the values of ``key=value`` overrides.

Three rules on top of PyYAML's safe loader, so that a file means what it says or is refused with one
line (a :class:`~envs.config_section.ConfigError`):

* **UTF-8**: a config file is read as UTF-8 text (a leading byte-order mark is allowed); any other
  encoding is refused, naming the first bad byte's line and column (:func:`read_config_file`).
* **Unique keys**: a key given twice in one mapping, at any nesting level (``num_tasks`` twice at
  the top level, ``lr`` twice under ``train:``, a key twice in a task type's ``progress``), is
  refused naming the key, its section and both lines; PyYAML alone keeps the last value silently.
* **Numbers are numbers**: an unquoted scalar written like a number with an exponent (``3e-4``,
  ``1e5``, ``1.0e5``) is a float, as YAML 1.2 reads it; YAML 1.1 (PyYAML) reads it as text because
  its exponent has no dot or no sign. A *quoted* scalar stays a string (``"16"``), so a config
  field that declares a number refuses it (:func:`envs.config_section.coerce`).

:class:`ConfigDumper` writes strings that this loader would read as numbers (``"3e-4"``) in quotes,
so a config it dumps reads back as it was.

This module imports nothing of the project above ``envs.config_section``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .config_section import ConfigError

#: an unquoted number with an exponent that YAML 1.1 leaves as text (no dot: ``3e-4``; no exponent
#: sign: ``1.0e5``); PyYAML's own float pattern keeps the forms it reads (``3.0e-4``, ``0.5``)
FLOAT_TEXT = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader with :data:`FLOAT_TEXT` read as floats (use :func:`load_config_text`,
    which also refuses duplicate keys)."""


class ConfigDumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes a string :class:`ConfigLoader` would read as a float."""


for _cls in (ConfigLoader, ConfigDumper):
    _cls.add_implicit_resolver(_FLOAT_TAG, FLOAT_TEXT, list("-+0123456789."))


class DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping gives one key twice; ``key`` and ``section`` (its dotted path, "" at the top level)."""

    def __init__(self, key: Any, section: str, first: yaml.Mark, again: yaml.Mark) -> None:
        where = f"in the {section!r} section" if section else "at the top level"
        super().__init__(problem=f"duplicate key {key!r} {where} (first at line {first.line + 1}, "
                                 f"column {first.column + 1}); give each key once",
                         problem_mark=again)
        self.key, self.section, self.first = key, section, first


def _child(section: str, part: str | int) -> str:
    if isinstance(part, int):
        return f"{section}[{part}]"
    return f"{section}.{part}" if section else part


def _refuse_duplicate_keys(loader: ConfigLoader, node: Node, section: str, seen: set[int]) -> None:
    """DuplicateKeyError for the first mapping under ``node`` that gives a key twice (each node
    visited once: an alias is not walked again)."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, SequenceNode):
        for k, item in enumerate(node.value):
            _refuse_duplicate_keys(loader, item, _child(section, k), seen)
    elif isinstance(node, MappingNode):
        first: dict[Any, yaml.Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:  # ``<<: *base``: explicit keys override merged ones (YAML)
                _refuse_duplicate_keys(loader, value_node, section, seen)
                continue
            name = "?"
            if isinstance(key_node, ScalarNode):  # a scalar key is hashable; a complex key is left to PyYAML
                key = loader.construct_object(key_node, deep=True)
                if key in first:
                    raise DuplicateKeyError(key, section, first[key], key_node.start_mark)
                first[key], name = key_node.start_mark, str(key)
            _refuse_duplicate_keys(loader, value_node, _child(section, name), seen)


def load_config_text(text: str) -> Any:
    """``text`` parsed by :class:`ConfigLoader`; yaml.YAMLError (:class:`DuplicateKeyError` for a key
    given twice) when it is not valid YAML."""
    loader = ConfigLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(loader, node, "", set())
        return loader.construct_document(node)
    except RecursionError:
        raise yaml.YAMLError("nested too deeply") from None
    finally:
        loader.dispose()


def _line_column(text: str | bytes, offset: int) -> str:
    newline = "\n" if isinstance(text, str) else b"\n"
    line = text.count(newline, 0, offset) + 1
    return f"{line}:{offset - (text.rfind(newline, 0, offset) + 1) + 1}"


def yaml_error_message(path: str | Path, exc: yaml.YAMLError, text: str | None = None) -> str:
    """One line for a YAML error in ``path``: ``file:line:column: not valid YAML: <problem>``, or
    ``file:line:column: duplicate key ...`` (``text``: the file's text, to place a bad character)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (a control character)
        where = f"{path}:{_line_column(text, exc.position)}" if text is not None else str(path)
        return f"{where}: not valid YAML: unacceptable character #x{exc.character:04x} ({exc.reason})"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    if isinstance(exc, DuplicateKeyError):
        return f"{where}: {exc.problem}"
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or str(exc) or type(exc).__name__
    context = getattr(exc, "context", None)
    detail = f"{problem} ({context})" if context and context != problem else str(problem)
    return f"{where}: not valid YAML: {' '.join(detail.split())}"


def read_config_file(path: str | Path) -> Any:
    """The parsed content of the config file ``path`` (UTF-8 YAML, keys unique, module docstring);
    ConfigError (one line naming the file, and the line where it can) otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the file ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}:{_line_column(data, exc.start)}: not UTF-8 text (byte 0x{data[exc.start]:02x}); "
                          "save the file as UTF-8") from None
    try:
        return load_config_text(text)
    except yaml.YAMLError as exc:
        raise ConfigError(yaml_error_message(path, exc, text)) from None


def dump_config(value: Any, **kwargs: Any) -> str:
    """``value`` as YAML that :func:`load_config_text` reads back as it was (:class:`ConfigDumper`)."""
    return yaml.dump(value, Dumper=ConfigDumper, **kwargs)
