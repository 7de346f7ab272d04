"""Output directories checked before any work starts: writable, not a file, room on the disk.

``train.py`` (``--logdir``, through :func:`agents.training.rundir.claim`) and ``evaluate.py``
(``--out``) call these before building a simulator or a network, so a bad location fails in a
second with one line instead of after the work, with a traceback. A write that fails once the
work is under way raises :class:`OutputWriteError` (an ``OSError``); the command lines exit with
:data:`EXIT_IO_ERROR` and one line.
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import IO, Callable

from envs.config import ConfigError

#: free disk space required before a run starts: room for a few checkpoints and event files
MIN_FREE_BYTES = 64 * 2**20
#: exit code of ``train.py`` and ``evaluate.py`` when writing an output failed (a full disk, an I/O
#: error): ``EX_IOERR`` of BSD's sysexits.h; bad input is 2
EXIT_IO_ERROR = 74


class OutputWriteError(OSError):
    """Writing an output (a checkpoint, ``config.yaml``, an evaluation's files) failed once the work
    was under way; the message is one line and says what was kept."""


def check_output_dir(path: str | Path, what: str) -> Path:
    """ConfigError unless ``path`` is, or can be created as, a directory this process can write:
    not a file, no file among its parents, writing allowed (checked by writing and deleting a
    probe file in it, or in its nearest existing parent when it does not exist yet). Nothing is
    left behind: a missing directory is created later by whoever writes there."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {str(path)!r} is a file, not a directory")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"{what} {str(path)!r}: {str(existing)!r} is a file, not a directory")
    probe = existing / f".write-test-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with probe.open("w") as f:
            f.write("ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{what} {str(path)!r} is not writable: {exc.strerror or exc}") from None
    return path


def check_free_space(path: str | Path, what: str, need: int = MIN_FREE_BYTES, purpose: str = "checkpoints") -> None:
    """ConfigError when the filesystem of ``path`` has less than ``need`` bytes free (for ``purpose``)."""
    existing = Path(path)
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    free = shutil.disk_usage(existing).free
    if free < need:
        raise ConfigError(f"{what} {str(path)!r}: only {free / 2**20:.1f} MiB free on its filesystem, "
                          f"{need / 2**20:.0f} MiB needed for {purpose}")


def fsync_dir(directory: str | Path) -> None:
    """Make a rename in ``directory`` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_mode() -> int:
    """The mode ``open()`` gives a new file: ``0o666`` less the process's umask."""
    try:  # Linux: read it without changing it (os.umask is process-wide, threads share it)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def temp_beside(path: str | Path, prefix: str | None = None) -> tuple[int, str]:
    """A new temporary file in ``path``'s directory, to be renamed onto ``path`` (an atomic write):
    its open descriptor and name. Named ``<prefix><random>.tmp`` (default prefix ``.<name>.``), with
    the mode of a file created by ``open()`` (:func:`file_mode`; ``tempfile.mkstemp`` alone gives
    0600), so every file a run or an evaluation writes has the same mode."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}." if prefix is None else prefix,
                               suffix=".tmp")
    try:
        os.fchmod(fd, file_mode())
    except OSError:
        os.close(fd)
        os.unlink(tmp)
        raise
    return fd, tmp


def take_lock(path: Path, busy: Callable[[], Exception]) -> IO[str]:
    """An exclusive ``flock`` on the file ``path`` (created if missing), holding this process's pid;
    raises ``busy()`` when another process holds it. Holders delete the file before they let go
    (:func:`release_lock`), so a lock taken on a file just deleted is dropped and taken again on the
    file now at ``path``: two processes never both hold it. A killed holder's file is taken over."""
    import fcntl

    while True:
        handle = path.open("a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise busy() from None
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            same = False
        if same:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            return handle
        handle.close()  # its holder deleted it between our open and our lock


def release_lock(path: Path, handle: IO[str]) -> None:
    """Delete the lock file ``path``, then let go of the lock by closing ``handle`` (see :func:`take_lock`)."""
    try:
        path.unlink()  # while still locked: a process that opened this file retries on a new one
    except OSError:  # gone with its directory, or left unlocked to be taken over
        pass
    handle.close()
