"""One way to declare, fill and validate a configuration section (``policy``, ``train``).

A section is a dataclass that also derives from :class:`ConfigSection` and declares

* ``SECTION``: its name, the prefix of every key and message (``policy.hidden``);
* its fields, with plain annotations (``int``, ``float``, ``bool``, ``str``, ``X | None``);
* ``CHECKS``: declarative rules (:func:`at_least`, :func:`greater_than`, :func:`between`,
  :func:`one_of`, :func:`rule`), run in order by :meth:`ConfigSection.validate`;
* ``VALIDATE_ON_INIT``: validate in ``__init__`` (``policy``: every instance is valid) or only
  when :meth:`~ConfigSection.validate` is called (``train``: built in layers -- defaults, YAML,
  CLI flags, ``key=value`` overrides -- and validated once at the end).

Values from YAML or the command line are assigned with :func:`apply_values`, which type-checks
and converts them (:func:`coerce`: numeric text such as ``3e-4`` for number fields, ``4.0`` for
an ``int``); :meth:`ConfigSection.from_dict` builds a validated section from one or more
mappings. Every problem is a :class:`~envs.config.ConfigError` naming the key: unknown keys
(with the valid ones), ill-typed values and failed checks.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

from envs.config import ConfigError

S = TypeVar("S", bound="ConfigSection")


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


def _type_names(options: Sequence[Any]) -> str:
    return " or ".join("null" if o is type(None) else o.__name__ for o in options)


def coerce(section: str, name: str, value: Any, annotation: Any) -> Any:
    """Check/convert ``value`` to the dataclass field type ``annotation`` (int, float, bool, str, X | None)."""
    options = _options(annotation)
    if value is None:
        if type(None) in options:
            return None
        raise ConfigError(f"{section}.{name} must not be null")
    if isinstance(value, str) and (int in options or float in options):
        # YAML 1.1 reads "3e-4" (no dot) as a string: accept numeric text for number fields
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None and math.isfinite(number):
            value = int(number) if int in options and float not in options and number.is_integer() else number
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
        else:  # pragma: no cover - no other field types are used
            return value
    raise ConfigError(f"{section}.{name} must be {_type_names(options)}, got {value!r}")


def check_type(section: str, name: str, value: Any, annotation: Any) -> None:
    """ConfigError unless ``value`` already has the field type (no conversion; an int is a float)."""
    for opt in _options(annotation):
        if opt is type(None):
            ok = value is None
        elif opt is bool:
            ok = isinstance(value, bool)
        elif opt is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif opt is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif opt is str:
            ok = isinstance(value, str)
        else:  # pragma: no cover - no other field types are used
            ok = True
        if ok:
            return
    raise ConfigError(f"{section}.{name} must be {_type_names(_options(annotation))}, got {value!r}")


def apply_values(obj: Any, section: str, values: Mapping[str, Any]) -> None:
    """Set dataclass fields of ``obj`` from a mapping, type-checked; unknown keys raise."""
    hints = _field_types(type(obj))
    names = [f.name for f in dataclasses.fields(obj)]
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"unknown {section} key {key!r}; valid keys: {', '.join(sorted(names))}")
        setattr(obj, key, coerce(section, key, value, hints[key]))


# ---------------------------------------------------------------------------------------
# declarative checks
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One rule of a section: ``holds(cfg)`` must be true, else ``ConfigError("<section>." + message(cfg))``."""

    holds: Callable[[Any], bool]
    message: Callable[[Any], str]


def rule(holds: Callable[[Any], bool], message: str) -> Check:
    """A rule over several fields; ``message`` may name fields in braces (``"hidden ({hidden}) ..."``),
    filled in from the config (``str.format`` syntax, ``{name!r}`` included)."""

    def text(cfg: Any) -> str:
        return message.format_map({f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})

    return Check(holds, text)


def _bound(name: str, ok: Callable[[Any], bool], text: str, nullable: bool) -> Check:
    """``name`` must satisfy ``ok`` (or be None when ``nullable``); message ``<name> must be <text>, got v``."""
    text = f"{text} or null" if nullable else text

    def holds(cfg: Any) -> bool:
        value = getattr(cfg, name)
        return nullable if value is None else ok(value)

    return Check(holds, lambda cfg: f"{name} must be {text}, got {getattr(cfg, name)!r}")


def at_least(name: str, low: float, *, nullable: bool = False) -> Check:
    """``name >= low``."""
    return _bound(name, lambda v: v >= low, f">= {low}", nullable)


def greater_than(name: str, low: float, *, finite: bool = False, nullable: bool = False) -> Check:
    """``name > low`` (and finite when ``finite``)."""
    return _bound(name, lambda v: v > low and (not finite or math.isfinite(v)),
                  f"finite and > {low}" if finite else f"> {low}", nullable)


def between(name: str, low: float, high: float, *, open: bool = False, nullable: bool = False) -> Check:
    """``low <= name <= high`` (``open``: ``low < name < high``)."""
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

    def __post_init__(self) -> None:
        if self.VALIDATE_ON_INIT:
            self.validate()

    def validate(self: S) -> S:
        """Check every field's type, then :attr:`CHECKS` in order; raises :class:`ConfigError`."""
        hints = _field_types(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            check_type(self.SECTION, f.name, getattr(self, f.name), hints[f.name])
        for check in self.CHECKS:
            if not check.holds(self):
                raise ConfigError(f"{self.SECTION}.{check.message(self)}")
        return self

    def apply(self: S, values: Mapping[str, Any]) -> S:
        """Assign ``values`` (typed, :func:`apply_values`; unknown keys raise); does not validate."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"{self.SECTION} config must be a mapping, got {type(values).__name__}")
        apply_values(self, self.SECTION, values)
        return self

    @classmethod
    def from_dict(cls: type[S], raw: Mapping[str, Any], *more: Mapping[str, Any]) -> S:
        """The defaults, then ``raw`` and every mapping of ``more`` in turn (typed), validated."""
        cfg = cls()
        for values in (raw, *more):
            cfg.apply(values)
        return cfg.validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]
