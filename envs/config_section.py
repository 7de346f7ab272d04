"""One way to declare, fill and validate a configuration section (``scenario``, ``policy``, ``train``).

A section is a dataclass that also derives from :class:`ConfigSection` and declares

* ``SECTION``: its name, the prefix of every key and message (``policy.hidden``,
  ``scenario.connectivity.threshold``);
* its fields, with plain annotations (``int``, ``float``, ``bool``, ``str``, ``X | None``, and
  tuples of those: ``tuple[int, int]``, ``tuple[tuple[int, int], ...]``); fields of any other
  type (a nested section, a mapping) are structure, passed through as given for the owner of
  the section to build;
* its defaults, once, as the dataclass field defaults; fields without one are required;
* ``CHECKS``: declarative rules (:func:`at_least`, :func:`greater_than`, :func:`between`,
  :func:`one_of`, :func:`rule`), run in order by :meth:`ConfigSection.validate`; a bound on a
  tuple field holds for every number in it;
* ``VALIDATE_ON_INIT``: validate in ``__init__`` (``policy``, ``scenario``: every instance is
  valid) or only when :meth:`~ConfigSection.validate` is called (``train``: built in layers --
  defaults, YAML, CLI flags, ``key=value`` overrides -- and validated once at the end);
* ``NULL_IS_DEFAULT``: the keys whose null (an empty YAML value) reads as "not given", so the
  default applies (``scenario.trace``, ``scenario.switch_overhead``); elsewhere null is a value;
* ``REMOVED``: keys the section had once, each with its old default. A stored section (a checkpoint's)
  is read through :meth:`ConfigSection.without_removed`: a removed key at its old default is dropped,
  since it changed nothing, and any other value is refused, naming the key; as an override or in a
  YAML, a removed key is unknown like any other.

Values from YAML or the command line are typed by :func:`coerce` (``4.0`` for an ``int``, lists for
tuples; a string is never a number, a bool never an int): :func:`apply_values` assigns them
to a mutable section, :meth:`ConfigSection.typed` returns them for a frozen one (the scenario
builds its structure from them, then the instance). :meth:`ConfigSection.from_dict` builds a
validated section from one or more mappings; :meth:`ConfigSection.check_values` runs the checks
on values before the instance exists. Every problem is a :class:`ConfigError` naming the key:
unknown keys (with the valid ones), missing required keys, ill-typed values and failed checks.

This module imports nothing of the project (``envs.config`` and ``agents`` build on it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    ClassVar,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
    TypeVar,
)

S = TypeVar("S", bound="ConfigSection")

_SCALARS = (bool, int, float, str)


class ConfigError(ValueError):
    """A configuration is malformed; the message says which field and why."""


# ---------------------------------------------------------------------------------------
# typed assignment
# ---------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _options(annotation: Any) -> tuple[Any, ...]:
    """The alternatives of a field annotation (``int | None`` -> ``(int, NoneType)``)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return typing.get_args(annotation)
    return (annotation,)


def _tuple_args(annotation: Any) -> tuple[Any, ...] | None:
    """The element annotations of a typed tuple (``tuple[int, int]``, ``tuple[X, ...]``) whose
    elements are scalars or typed tuples themselves; None for any other annotation."""
    if typing.get_origin(annotation) is not tuple:
        return None
    args = typing.get_args(annotation)
    elements = args[:1] if len(args) == 2 and args[1] is Ellipsis else args
    if not elements or not all(a in _SCALARS or _tuple_args(a) is not None for a in elements):
        return None
    return args


def _tuple_items(args: tuple[Any, ...], value: Any) -> list[tuple[Any, Any]] | None:
    """``(element, annotation)`` pairs of a list/tuple ``value`` of the right length, else None."""
    if not isinstance(value, (list, tuple)):
        return None
    if len(args) == 2 and args[1] is Ellipsis:
        return [(v, args[0]) for v in value]
    return list(zip(value, args)) if len(value) == len(args) else None


def _type_name(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    args = _tuple_args(annotation)
    if args is not None:
        return "[" + ", ".join("..." if a is Ellipsis else _type_name(a) for a in args) + "]"
    origin = typing.get_origin(annotation) or annotation
    return getattr(origin, "__name__", str(annotation))


def _type_names(options: Sequence[Any]) -> str:
    return " or ".join(_type_name(o) for o in options)


def coerce(section: str, name: str, value: Any, annotation: Any) -> Any:
    """Check/convert ``value`` to the dataclass field type ``annotation`` (int, float, bool, str,
    X | None, typed tuples from lists); a value for any other annotation is returned as given.

    A number field takes a number: an ``int`` for a ``float``, an integral ``float`` (``4.0``,
    ``1e3``) for an ``int``, never a ``bool`` and never a string, numeric text included (``"16"``:
    in a YAML file a quoted scalar is a string; the config loader, :mod:`envs.config_yaml`, already
    reads an unquoted ``3e-4`` as a float, in files and in ``key=value`` overrides alike)."""
    options = _options(annotation)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{section}.{name} must not be null")
    for opt in options:
        if opt is type(None):
            continue
        if opt is bool:
            if isinstance(value, bool):
                return value
        elif opt is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
            if isinstance(value, float) and value.is_integer():
                return int(value)
        elif opt is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif opt is str:
            if isinstance(value, str):
                return value
        elif (args := _tuple_args(opt)) is not None:
            items = _tuple_items(args, value)
            if items is not None:
                return tuple(coerce(section, f"{name}[{i}]", v, a) for i, (v, a) in enumerate(items))
        else:  # structure (a nested section, a mapping): its owner builds it
            return value
    hint = ""
    if isinstance(value, str) and (int in options or float in options) and _is_number_text(value):
        hint = f": a quoted string is not a number (write {value.strip()} without quotes)"
    raise ConfigError(f"{section}.{name} must be {_type_names(options)}, got {value!r}{hint}")


def _is_number_text(text: str) -> bool:
    """``text`` reads as a finite number (``"16"``, ``"3e-4"``): a number written in quotes."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def _has_type(value: Any, annotation: Any) -> bool:
    if annotation is Any:
        return True
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if (args := _tuple_args(annotation)) is not None:
        items = _tuple_items(args, value) if isinstance(value, tuple) else None
        return items is not None and all(_has_type(v, a) for v, a in items)
    origin = typing.get_origin(annotation) or annotation
    if origin is tuple:  # a tuple of structure, e.g. tuple[TaskType, ...]
        return isinstance(value, tuple)
    return isinstance(value, origin) if isinstance(origin, type) else True


def check_type(section: str, name: str, value: Any, annotation: Any) -> None:
    """ConfigError unless ``value`` already has the field type (no conversion; an int is a float)."""
    if not any(_has_type(value, opt) for opt in _options(annotation)):
        raise ConfigError(f"{section}.{name} must be {_type_names(_options(annotation))}, got {value!r}")


def check_keys(section: str, values: Iterable[str], names: Iterable[str]) -> None:
    """ConfigError naming the first key of ``values`` that is not one of ``names`` (and the valid ones)."""
    names = list(names)
    for key in values:
        if key not in names:
            raise ConfigError(f"unknown {section} key {key!r}; valid keys: {', '.join(sorted(names))}")


def apply_values(obj: Any, section: str, values: Mapping[str, Any]) -> None:
    """Set dataclass fields of ``obj`` from a mapping, type-checked; unknown keys raise."""
    hints = _field_types(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for key, value in values.items():
        check_keys(section, (key,), names)
        setattr(obj, key, coerce(section, key, value, hints[key]))


def _same_value(value: Any, default: Any) -> bool:
    """``value`` equals ``default`` as a stored config holds it (a bool never equals a number)."""
    if isinstance(value, bool) or isinstance(default, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value == default
    return value == default


# ---------------------------------------------------------------------------------------
# declarative checks
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One rule of a section: ``holds(cfg)`` must be true, else ``ConfigError("<section>." + message(cfg))``."""

    holds: Callable[[Any], bool]
    message: Callable[[Any], str]


class _Values:
    """Attribute view of a mapping: the checks of a section run on values before its instance exists."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.__dict__.update(values)


def _field_values(cfg: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(cfg):
        return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    return dict(vars(cfg))


def run_checks(section: str, checks: Iterable[Check], cfg: Any) -> None:
    """Run ``checks`` in order on ``cfg`` (a section, or a mapping of field values); the first
    that fails raises ``ConfigError("<section>.<its message>")``."""
    view = _Values(cfg) if isinstance(cfg, Mapping) else cfg
    for check in checks:
        if not check.holds(view):
            raise ConfigError(f"{section}.{check.message(view)}")


def rule(holds: Callable[[Any], bool], message: str) -> Check:
    """A rule over several fields; ``message`` may name fields in braces (``"hidden ({hidden}) ..."``),
    filled in from the config (``str.format`` syntax, ``{name!r}`` and ``{name[key]}`` included)."""

    def text(cfg: Any) -> str:
        return message.format_map(_field_values(cfg))

    return Check(holds, text)


def _numbers(value: Any) -> Iterator[Any]:
    """The numbers of a value: itself, or every element of a (nested) tuple."""
    if isinstance(value, tuple):
        for v in value:
            yield from _numbers(v)
    else:
        yield value


def _bound(name: str, ok: Callable[[Any], bool], text: str, nullable: bool) -> Check:
    """``name`` must satisfy ``ok`` (every number of it, for a tuple; or be None when ``nullable``);
    message ``<name> must be <text>, got v`` (``must hold values <text>`` for a tuple)."""
    text = f"{text} or null" if nullable else text

    def holds(cfg: Any) -> bool:
        value = getattr(cfg, name)
        return nullable if value is None else all(ok(v) for v in _numbers(value))

    def message(cfg: Any) -> str:
        value = getattr(cfg, name)
        verb = "hold values" if isinstance(value, tuple) else "be"
        return f"{name} must {verb} {text}, got {value!r}"

    return Check(holds, message)


def at_least(name: str, low: float, *, finite: bool = False, nullable: bool = False) -> Check:
    """``name >= low`` (and finite when ``finite``)."""
    return _bound(name, lambda v: v >= low and (not finite or math.isfinite(v)),
                  f"finite and >= {low}" if finite else f">= {low}", nullable)


def greater_than(name: str, low: float, *, finite: bool = False, nullable: bool = False) -> Check:
    """``name > low`` (and finite when ``finite``)."""
    return _bound(name, lambda v: v > low and (not finite or math.isfinite(v)),
                  f"finite and > {low}" if finite else f"> {low}", nullable)


def between(name: str, low: float, high: float, *, open: bool = False, nullable: bool = False) -> Check:
    """``low <= name <= high`` (``open``: ``low < name < high``); NaN never is."""
    if open:
        return _bound(name, lambda v: low < v < high, f"in ({low}, {high})", nullable)
    return _bound(name, lambda v: low <= v <= high, f"in [{low}, {high}]", nullable)


def one_of(name: str, choices: Sequence[Any]) -> Check:
    """``name`` is one of ``choices``."""
    choices = tuple(choices)
    return Check(lambda cfg: getattr(cfg, name) in choices,
                 lambda cfg: f"{name} must be one of {list(choices)}, got {getattr(cfg, name)!r}")


# ---------------------------------------------------------------------------------------
# the section base class
# ---------------------------------------------------------------------------------------
class ConfigSection:
    """Base of a configuration dataclass (module docstring): typed assignment, declarative checks."""

    SECTION: ClassVar[str] = ""
    CHECKS: ClassVar[tuple[Check, ...]] = ()
    VALIDATE_ON_INIT: ClassVar[bool] = True
    NULL_IS_DEFAULT: ClassVar[frozenset[str]] = frozenset()
    REMOVED: ClassVar[Mapping[str, Any]] = {}

    def __post_init__(self) -> None:
        if self.VALIDATE_ON_INIT:
            self.validate()

    def validate(self: S, section: str | None = None) -> S:
        """Check every field's type, then :attr:`CHECKS` in order; raises :class:`ConfigError`
        (messages prefixed with ``section``, default :attr:`SECTION`)."""
        section = section or self.SECTION
        hints = _field_types(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_type(section, f.name, getattr(self, f.name), hints[f.name])
        run_checks(section, self.CHECKS, self)
        return self

    @classmethod
    def typed(cls, values: Mapping[str, Any], section: str | None = None) -> dict[str, Any]:
        """``values`` typed by field (:func:`coerce`): unknown keys raise; a null of
        :attr:`NULL_IS_DEFAULT` is left out (its default applies). ``section`` names the values
        in messages (default :attr:`SECTION`; e.g. ``scenario.task_types[2]`` for a list entry)."""
        section = section or cls.SECTION
        if not isinstance(values, Mapping):
            raise ConfigError(f"{section} config must be a mapping, got {type(values).__name__}")
        hints = _field_types(cls)
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        out: dict[str, Any] = {}
        for key, value in values.items():
            check_keys(section, (key,), names)
            if not (value is None and key in cls.NULL_IS_DEFAULT):
                out[key] = coerce(section, key, value, hints[key])
        return out

    @classmethod
    def check_values(cls, values: Mapping[str, Any], section: str | None = None) -> None:
        """Run :attr:`CHECKS` on the defaults updated with (typed) ``values``, before the instance
        exists (a section whose structure is built from checked values); a required field
        (no default) missing from ``values`` raises."""
        section = section or cls.SECTION
        full: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in values:
                full[f.name] = values[f.name]
            elif f.default is not dataclasses.MISSING:
                full[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                full[f.name] = f.default_factory()
            else:
                raise ConfigError(f"missing required {section} key {f.name!r}")
        run_checks(section, cls.CHECKS, full)

    @classmethod
    def without_removed(cls, values: Mapping[str, Any], section: str | None = None) -> dict[str, Any]:
        """``values`` (a stored section, e.g. a checkpoint's) without the :attr:`REMOVED` keys that hold
        their old default; a removed key holding another value raises :class:`ConfigError` naming it
        (the stored run used an option this version no longer has)."""
        section = section or cls.SECTION
        out = dict(values)
        for key, default in cls.REMOVED.items():
            if key not in out:
                continue
            value = out.pop(key)
            if not _same_value(value, default):
                raise ConfigError(f"{section}.{key}={value!r}: the option {section}.{key} has been removed; "
                                  f"only its old default ({default!r}) can still be read")
        return out

    def apply(self: S, values: Mapping[str, Any]) -> S:
        """Assign ``values`` (typed, :func:`apply_values`; unknown keys raise); does not validate.
        Mutable sections only (a frozen one is built by :meth:`from_dict`)."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"{self.SECTION} config must be a mapping, got {type(values).__name__}")
        apply_values(self, self.SECTION, values)
        return self

    @classmethod
    def from_dict(cls: type[S], raw: Mapping[str, Any], *more: Mapping[str, Any]) -> S:
        """The defaults, then ``raw`` and every mapping of ``more`` in turn (typed), validated."""
        values: dict[str, Any] = {}
        for layer in (raw, *more):
            values.update(cls.typed(layer))
        return cls(**values).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]
