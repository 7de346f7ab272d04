"""``evaluate.py``'s output directory: written whole or not at all, never replaced unasked.

:class:`StagedOutput` takes ``--out`` for one evaluation (or one ``--report``) before any episode
runs and gives it back when the work is written:

* **checks first**: not a file, writable, free space for the outputs
  (:mod:`agents.output_dirs`); an ``--out`` that already holds an evaluation (``summary.json``, or
  ``REPORT.md`` for a report) is refused unless ``overwrite``; one that holds anything else is
  refused always (it is not ours to replace);
* **one writer**: an exclusive ``flock`` on ``.<name>.lock`` beside ``--out`` for the life of the
  evaluation: a second evaluation writing the same ``--out`` is refused at once; the kernel releases
  the lock when a process dies, so a crash never blocks the next evaluation;
* **all or nothing**: everything is written into a staging directory beside ``--out``
  (``.<name>.tmp-<pid>-<random>``) and published by renames: the old directory aside
  (``.<name>.old-...``), the new one in, the old one deleted. A failure before the renames leaves
  the previous outputs untouched and no partial files; a process killed between the two renames
  leaves the previous outputs aside, and the next evaluation of that ``--out`` puts them back
  (:meth:`StagedOutput._recover`) before it looks at them.

By default (:meth:`StagedOutput.fresh`) every evaluation writes a new directory,
``results/<scenario>/<checkpoint stem or baselines>-<time>`` (a report ``results/report-<time>``),
so repeated evaluations never meet.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Sequence

from envs.config import ConfigError

from ..output_dirs import check_free_space, check_output_dir, fsync_dir, release_lock, take_lock

#: where default output directories go
RESULTS_DIR = Path("results")
#: the name of a default output directory of an evaluation without checkpoints
BASELINES_STEM = "baselines"
#: free space an evaluation needs besides its tasks.csv rows: the JSON, YAML and plot files
OUTPUT_BASE_BYTES = 16 * 2**20
#: bytes of one tasks.csv row (scheduler, seed, task, type, times, cluster, allocation)
CSV_ROW_BYTES = 96
#: the kinds of file an evaluation directory holds (summary, tasks, run metadata, scenario, plots)
EVALUATION_SUFFIXES = (".json", ".csv", ".yaml", ".png")


@dataclass(frozen=True)
class OutputKind:
    """What is written: ``marker`` names a finished output of this kind; ``what`` is for messages."""

    marker: str
    what: str
    #: subdirectories are evaluations of their own (a report's ``<scenario>/``)
    nested: bool = False


class OutputBusy(ConfigError):
    """Another evaluation is writing the same ``--out``."""


class OutputTaken(ConfigError):
    """``--out`` holds outputs or files this evaluation may not replace."""


EVALUATION = OutputKind("summary.json", "an evaluation")
REPORT = OutputKind("REPORT.md", "a report", nested=True)


def output_bytes(schedulers: int, seeds: int, tasks: int) -> int:
    """Free space one evaluation's outputs need: a tasks.csv row per task, seed and scheduler, plus the rest."""
    return OUTPUT_BASE_BYTES + schedulers * seeds * tasks * CSV_ROW_BYTES


def evaluation_name(checkpoints: Sequence[str | Path] = ()) -> str:
    """The stem of an evaluation's default directory: the checkpoints' file stems (joined by ``+``),
    or ``baselines``."""
    stems = [Path(c).stem for c in checkpoints]
    return "+".join(dict.fromkeys(stems))[:80] if stems else BASELINES_STEM


def default_out(name: str, under: Path, now: datetime | None = None) -> Path:
    """``<under>/<name>-<YYYYmmdd-HHMMSS>``, a name not taken yet (a taken one gets ``-2``, ``-3``,
    ...; the lock of :class:`StagedOutput` settles two evaluations that pick one name at once)."""
    base = under / f"{name}-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"
    path, n = base, 1
    while path.exists() or _sibling(path, "lock").exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _sibling(out: Path, role: str, token: str = "") -> Path:
    """``.<name>.<role>[-token]`` beside ``out``: its lock, staging and aside directories."""
    return out.parent / f".{out.name}.{role}{f'-{token}' if token else ''}"


class StagedOutput:
    """One evaluation's hold on ``out`` (module docstring): checks and lock on creation, the staging
    directory :attr:`staging` to write into, :meth:`publish` to put it in place, :meth:`close`
    (or the ``with`` block's end) to give everything up; whatever was not published is deleted."""

    def __init__(self, out: str | Path, kind: OutputKind = EVALUATION, overwrite: bool = False,
                 need: int = OUTPUT_BASE_BYTES, what: str = "--out") -> None:
        self.out = Path(out).resolve() if Path(out).is_symlink() else Path(out)  # the renames move the target
        self.kind = kind
        self.overwrite = overwrite
        self.what = what
        check_output_dir(self.out, what)
        if self.out.is_dir():  # the staging directory, the lock and the renames are beside it
            check_output_dir(self.out.parent, what)
        self._created = _make_parents(self.out.parent, what)
        self._lock: IO[str] | None = None
        try:
            self._lock = _take_lock(_sibling(self.out, "lock"), self.out, what)
            self._recover()
            self._check_existing()
            check_free_space(self.out.parent, what, need, purpose="the evaluation's outputs")
        except BaseException:
            self.close()
            raise
        self.staging = _sibling(self.out, "tmp", f"{os.getpid()}-{secrets.token_hex(4)}")
        self.published = False

    @classmethod
    def fresh(cls, name: str, under: Path, kind: OutputKind = EVALUATION,
              need: int = OUTPUT_BASE_BYTES) -> StagedOutput:
        """A new :func:`default_out` directory (the next name when another evaluation took one first)."""
        for _ in range(16):
            try:
                return cls(default_out(name, under), kind, need=need)
            except (OutputBusy, OutputTaken):
                continue
        raise ConfigError(f"no free output directory under {str(under)!r}; give --out")

    def __enter__(self) -> StagedOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ checks
    def _recover(self) -> None:
        """Put back outputs a killed publish left aside; delete staging directories of dead writers
        (the lock is held: nobody else writes here)."""
        aside = sorted(self.out.parent.glob(f".{self.out.name}.old-*"), key=lambda p: p.stat().st_mtime)
        if aside and not self.out.exists():
            os.rename(aside.pop(), self.out)
        for path in [*aside, *self.out.parent.glob(f".{self.out.name}.tmp-*")]:
            shutil.rmtree(path, ignore_errors=True)

    def _check_existing(self) -> None:
        """ConfigError unless ``out`` is missing, empty, or (with ``overwrite``) a previous output of this kind."""
        if not self.out.is_dir() or not any(self.out.iterdir()):
            return
        if not (self.out / self.kind.marker).is_file():
            raise OutputTaken(f"{self.what} {str(self.out)!r} exists and holds other files, not {self.kind.what}; "
                              "give a new or empty directory")
        foreign = _foreign(self.out, self.kind)
        if foreign:
            raise OutputTaken(f"{self.what} {str(self.out)!r} holds {self.kind.what} and files it did not write "
                              f"({', '.join(foreign[:3])}{' ...' if len(foreign) > 3 else ''}); move them, or give "
                              "another directory")
        if not self.overwrite:
            raise OutputTaken(f"{self.what} {str(self.out)!r} already holds {self.kind.what}; pass --overwrite to "
                              "replace it, or give another directory")

    # ------------------------------------------------------------------ publish / give up
    def publish(self) -> Path:
        """Put :attr:`staging` in place of ``out`` (module docstring); an ``OSError`` leaves the previous
        outputs where they were."""
        if not self.staging.is_dir():
            raise FileNotFoundError(errno.ENOENT, "nothing was written", str(self.staging))
        self._check_existing()  # still ours to replace
        _fsync_tree(self.staging)
        aside = None
        if self.out.is_dir() and any(self.out.iterdir()):
            aside = _sibling(self.out, "old", f"{os.getpid()}-{secrets.token_hex(4)}")
            os.rename(self.out, aside)
        elif self.out.is_dir():
            self.out.rmdir()
        try:
            os.rename(self.staging, self.out)
        except BaseException:
            if aside is not None:
                os.rename(aside, self.out)
            raise
        fsync_dir(self.out.parent)
        self.published = True
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
        return self.out

    def close(self) -> None:
        """Delete the staging directory if unpublished, parents this evaluation created and left
        empty, and give the lock up (the lock file too)."""
        staging = getattr(self, "staging", None)
        if staging is not None and not self.published:
            shutil.rmtree(staging, ignore_errors=True)
        if self._lock is not None:
            release_lock(_sibling(self.out, "lock"), self._lock)
            self._lock = None
        for parent in self._created:  # deepest first
            try:
                parent.rmdir()
            except OSError:
                break


def _make_parents(directory: Path, what: str) -> list[Path]:
    """Create ``directory`` and its missing parents; the ones created, deepest first."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    try:
        for path in reversed(missing):
            path.mkdir()
    except OSError as exc:
        raise ConfigError(f"cannot create {what} {str(missing[0])!r}: {exc.strerror or exc}") from None
    return missing


def _take_lock(path: Path, out: Path, what: str) -> IO[str]:
    """The output's writer lock (:func:`~agents.output_dirs.take_lock`); OutputBusy while another evaluation holds it."""
    return take_lock(path, lambda: OutputBusy(f"{what} {str(out)!r} is being written by another evaluation; "
                                              "wait for it to finish, or give another directory"))


def _foreign(directory: Path, kind: OutputKind) -> list[str]:
    """Entries of an output directory of ``kind`` that such an output never writes."""
    out = []
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and kind.nested and (entry / EVALUATION.marker).is_file():
            out += [f"{entry.name}/{name}" for name in _foreign(entry, EVALUATION)]
        elif not (entry.is_file() and (entry.name == kind.marker or entry.suffix in EVALUATION_SUFFIXES)):
            out.append(entry.name + ("/" if entry.is_dir() else ""))
    return out


def _fsync_tree(root: Path) -> None:
    """Flush every file under ``root`` to disk before the rename that publishes it."""
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())
    fsync_dir(root)

