"""Run directories: who owns one, and checks made before any work starts.

A run owns its directory ``<logdir>/<run_name>``:

* a new run creates it exclusively (:func:`claim`): it never writes into an existing directory;
  a default name (:func:`default_run_name`) carries a random suffix, and is drawn again in the
  rare case it is taken, so runs started at the same moment never collide; an explicit
  ``train.run_name`` that is taken is refused;
* every process of the run holds an exclusive lock on ``<run_dir>/.lock`` while it works, so two
  processes never train into one directory (a second ``--resume`` of a running run is refused);
  the file is deleted when the process ends its work (:class:`RunLock`);
* every checkpoint and ``config.yaml`` record the run's id (:data:`RUN_ID`); ``--resume`` continues
  in the checkpoint's directory only when that directory's ``config.yaml`` has the same id (the
  file sits in its own run), and adopts only a ``best.pt`` of the same id. A shipped or copied
  file starts a new run directory under ``--logdir`` that carries its history on;
* ``train.run_name`` is one plain path component, so a run cannot leave ``--logdir``;
* a new run that fails or is stopped before its first ``last.pt`` leaves nothing: its directory
  holds nothing to resume, so :func:`remove_unstarted` deletes it.

:func:`claim` makes the checks of :mod:`agents.output_dirs` before any simulator or network is
built (an unwritable directory, a file in the way, a full disk).
"""

from __future__ import annotations

import os
import secrets
import shutil
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Mapping

import yaml

from envs.config import ConfigError

from ..output_dirs import check_free_space, check_output_dir, release_lock, take_lock

#: the resolved configs of the run, in its directory (written by :func:`~agents.training.prepare.write_config`)
CONFIG_FILE = "config.yaml"
#: the key of the run's id in checkpoint counters and in ``config.yaml``'s ``meta`` section
RUN_ID = "run_id"
#: the lock file every process of a run holds while it works
LOCK_FILE = ".lock"
#: partial checkpoint files that a killed process can leave behind (``last.pt<random>.tmp``)
STALE_TMP_GLOB = "*.pt*.tmp"


def new_run_id() -> str:
    """A fresh, unguessable run id."""
    return secrets.token_hex(8)


def default_run_name(scenario: str, variant: str, seed: int) -> str:
    """``<scenario>-<variant>-s<seed>-<time>-<random>``: unique even for runs started in the same second."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{scenario}-{variant}-s{seed}-{stamp}-{secrets.token_hex(3)}"


def check_run_name(name: str | None) -> None:
    """ConfigError unless ``name`` is None or one plain path component (no separator, not ``.``/``..``)."""
    if name is None:
        return
    if not name.strip() or name in (".", "..") or "/" in name or "\\" in name or os.sep in name or "\0" in name:
        raise ConfigError(f"train.run_name must be a plain directory name inside --logdir, got {name!r}")


def read_run_id(run_dir: Path) -> str | None:
    """The run id in ``<run_dir>/config.yaml`` (None: no such file, or a run from before run ids)."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        return None
    try:
        doc = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, OSError):
        return None
    meta = doc.get("meta") if isinstance(doc, dict) else None
    return meta.get(RUN_ID) if isinstance(meta, dict) else None


def checkpoint_run_id(ckpt: Mapping[str, Any]) -> str | None:
    """The run id recorded in a checkpoint's counters (None: a shipped file or one from before run ids)."""
    counters = ckpt.get("counters")
    return counters.get(RUN_ID) if isinstance(counters, Mapping) else None


def owns(ckpt: Mapping[str, Any], run_dir: Path) -> bool:
    """The checkpoint belongs to the run in ``run_dir``: that directory's ``config.yaml`` carries
    the checkpoint's run id (for a run from before run ids: both carry none)."""
    if not (run_dir / CONFIG_FILE).is_file():
        return False
    return read_run_id(run_dir) == checkpoint_run_id(ckpt)


class RunLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock`` while the process works; ConfigError if another
    process holds it.

    :meth:`release` deletes the file before it lets go of the lock, so a run that ends (normally,
    by Ctrl-C or SIGTERM, or by an error) leaves none. A process killed outright leaves its file,
    but the kernel drops its lock: the next process takes that file over. A lock taken on a file
    that its holder deleted meanwhile is dropped and taken again on the file now at the path, so two
    processes never both hold the run."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOCK_FILE
        self._file: IO[str] | None = take_lock(self.path, lambda: ConfigError(
            f"run directory {str(run_dir)!r} is in use by another training process; wait for it to finish or stop it first"))

    def release(self) -> None:
        """Delete the lock file, then let go of the lock (closing the descriptor); no-op once released."""
        if self._file is not None:
            release_lock(self.path, self._file)
            self._file = None


def remove_stale_tmp(run_dir: Path) -> list[Path]:
    """Delete partial checkpoint files a killed process left in the run directory (the lock is held)."""
    removed = []
    for path in run_dir.glob(STALE_TMP_GLOB):
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
    return removed


def claim(run_dir: Path, fresh: bool, default_name: bool, retry_name: Any = None) -> tuple[Path, RunLock]:
    """Take the run directory for this process: create it exclusively for a new run (``fresh``),
    or lock the existing one of a resumed run; returns the directory (a default name taken by
    another run is drawn again with ``retry_name()``) and the held lock."""
    parent = check_output_dir(run_dir.parent, "--logdir")
    check_free_space(parent, "--logdir")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create --logdir {str(parent)!r}: {exc.strerror or exc}") from None
    if fresh:
        for _ in range(8):
            try:
                run_dir.mkdir()
                break
            except FileExistsError:
                if not default_name or retry_name is None:
                    raise ConfigError(
                        f"run directory {str(run_dir)!r} already exists: a run never writes into another's "
                        f"directory; choose another train.run_name, or continue that run with "
                        f"--resume {run_dir / 'last.pt'}") from None
                run_dir = parent / retry_name()
            except OSError as exc:
                raise ConfigError(f"cannot create the run directory {str(run_dir)!r}: {exc.strerror or exc}") from None
        else:  # pragma: no cover - eight random names taken
            raise ConfigError(f"could not find a free run directory name under {str(parent)!r}")
    try:
        lock = RunLock(run_dir)
    except BaseException:
        if fresh:  # created just now, empty: nobody else can have written into it
            run_dir.rmdir()
        raise
    if not fresh:
        remove_stale_tmp(run_dir)
    return run_dir, lock


def remove_unstarted(run_dir: Path) -> bool:
    """Delete a new run's directory that holds no ``last.pt`` (the run failed or was stopped before
    its first save: nothing in it can be resumed); True when it was removed. Takes the run's lock
    first, so a directory another process works in is never touched."""
    from .checkpoints import LAST  # torch: imported when a run is cleaned up, not with this module

    if not run_dir.is_dir() or (run_dir / LAST).exists():
        return False
    try:
        lock = RunLock(run_dir)
    except (ConfigError, OSError):
        return False
    try:
        if (run_dir / LAST).exists():
            return False
        shutil.rmtree(run_dir, ignore_errors=True)
        return not run_dir.exists()
    finally:
        lock.release()
