"""Tables as lists of columns: one :class:`Column` per column, one :class:`Table` per table.

A column says where its value comes from (``get``, by default the row's field ``key``, or the
table's context: a value shared by every row, such as the page's validation rival) and how it reads
on a page (``text``, a :mod:`.formatting` function). The same entry gives

* the CSV column ``key``: the value itself, None (or a non-finite float) an empty cell, a float
  rounded to :data:`CSV_DECIMALS` decimals (:meth:`Table.write_csv`);
* the JSON field ``key``: the value itself (:meth:`Table.record`);
* the markdown column ``header``: ``text(value)``, a missing value read as
  :data:`~.formatting.MISSING` (:meth:`Table.markdown`).

A column without a ``key`` is markdown only (a cell composed of several fields); one without a
``header`` is CSV and JSON only. Adding a column to a page is one entry in its table. The pages'
JSON files hold their row dataclasses whole (every field, so that they read back), so a keyed
column is a field of its row or of the context.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Sequence

from .formatting import MISSING, fmt, missing

#: decimals a float keeps in a CSV cell
CSV_DECIMALS = 4
#: the context of a table whose cells need nothing beyond their row
NO_CONTEXT: Mapping[str, Any] = MappingProxyType({})


def field_value(row: Any, key: str, context: Mapping[str, Any]) -> Any:
    """The value of ``key`` for ``row``: from ``context`` (a value shared by every row of the table,
    such as the page's validation rival), else the row's field or mapping entry."""
    if key in context:
        return context[key]
    return row[key] if isinstance(row, Mapping) else getattr(row, key)


@dataclass(frozen=True)
class Column:
    """One column: its CSV and JSON field ``key``, its markdown ``header`` (``{name}`` fields are
    filled from the table's context), where its value comes from and how it reads."""

    key: str | None
    header: str | None = None
    get: Callable[[Any], Any] | None = None  # row -> value; default: the row's field ``key``
    text: Callable[[Any], str] = fmt  # value -> markdown cell

    def value(self, row: Any, context: Mapping[str, Any] = NO_CONTEXT) -> Any:
        """The column's value for ``row`` (``get``, else :func:`field_value`)."""
        if self.get is not None:
            return self.get(row)
        if self.key is None:
            raise ValueError(f"column {self.header!r} has neither a key nor a getter")
        return field_value(row, self.key, context)

    def cell(self, row: Any, context: Mapping[str, Any] = NO_CONTEXT) -> str:
        """The markdown cell: ``text`` of the value (:data:`~.formatting.MISSING` when the value is missing
        and ``text`` writes nothing)."""
        return self.text(self.value(row, context)) or MISSING


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: None (or a non-finite float) empty, a float rounded to :data:`CSV_DECIMALS`."""
    if missing(value):
        return ""
    return round(value, CSV_DECIMALS) if isinstance(value, float) else value


@dataclass(frozen=True)
class Table:
    """An ordered list of columns: the CSV and JSON fields are the keyed ones, the markdown columns the
    headed ones, each in list order."""

    columns: tuple[Column, ...]

    def __init__(self, *columns: Column) -> None:
        object.__setattr__(self, "columns", tuple(columns))

    @property
    def keys(self) -> list[str]:
        """The CSV header and the JSON fields."""
        return [c.key for c in self.columns if c.key is not None]

    def headed(self) -> list[Column]:
        return [c for c in self.columns if c.header is not None]

    def headers(self, context: Mapping[str, Any] = NO_CONTEXT) -> list[str]:
        return [c.header.format_map(context) if context else c.header for c in self.headed()]

    def record(self, row: Any, context: Mapping[str, Any] = NO_CONTEXT) -> dict[str, Any]:
        """One row's JSON object: every keyed column's value."""
        return {c.key: c.value(row, context) for c in self.columns if c.key is not None}

    def cells(self, row: Any, context: Mapping[str, Any] = NO_CONTEXT) -> list[str]:
        """One row's markdown cells."""
        return [c.cell(row, context) for c in self.headed()]

    def markdown(self, rows: Iterable[Any], context: Mapping[str, Any] = NO_CONTEXT) -> list[str]:
        """The markdown lines: header, separator, one line per row."""
        return markdown_lines(self.headers(context), (self.cells(r, context) for r in rows))

    def csv_rows(self, rows: Iterable[Any], context: Mapping[str, Any] = NO_CONTEXT) -> list[list[Any]]:
        """The CSV lines after the header (:func:`csv_cell` of each keyed column's value)."""
        return [[csv_cell(v) for v in self.record(r, context).values()] for r in rows]

    def write_csv(self, path: Path, rows: Iterable[Any], context: Mapping[str, Any] = NO_CONTEXT) -> Path:
        """``path``: the header :attr:`keys`, then :meth:`csv_rows` (the parent directory is created)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.keys)
            w.writerows(self.csv_rows(rows, context))
        return path


def markdown_lines(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table: ``| a | b |``, ``|---|---|``, then one line per row of cells."""
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
            *("| " + " | ".join(cells) + " |" for cells in rows)]

