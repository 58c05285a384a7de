"""Writing files and directories so that a crash never leaves a half-written one: every index, model and
checkpoint is staged beside its target and published by one rename, durably: what was published survives a
crash of the process (``kill -9``) or of the machine, because the files are fsynced before the rename and the
directory holding the new name after it.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import functools
import glob
import json
import os
import re
import secrets
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from semiret.errors import IndexFormatError, SemiretError

FSYNC_THREADS = 16
"""Files synced at once by :func:`fsync_tree` (the syscalls wait on the disk, not on a core)."""


def atomic_write_json(path: Path, data: dict) -> None:
    """Replace ``path`` with ``data`` in one rename; durable once this returns."""
    atomic_write_text(path, json.dumps(data, indent=2))


def atomic_write_text(path: Path, text: str | Iterable[str]) -> None:
    """Replace ``path`` with ``text`` (or its pieces, written as they come) in one rename (an interrupted write
    leaves the old file or none, never half of one); durable once this returns. The new file is modified later than
    the one it replaces (:func:`_modified_after`)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text) if isinstance(text, str) else handle.writelines(text)
            handle.flush()
            os.fsync(handle.fileno())
        _modified_after(tmp, path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def _modified_after(new: Path, replaced: Path) -> None:
    """Give ``new`` a modification time later than ``replaced``'s, to the nanosecond. Readers tell an index's commits
    apart by the ``meta.json``'s inode, size and modification time (:func:`~semiret.indexes.storage.commit_stamp`);
    where the file system's clock ticks coarsely (a few milliseconds on many kernels), two commits of one size within
    a tick, the second on the inode the first one's rename freed, gave the stamp of the commit before them: a reader
    refreshed onto neither (two deletes a server had acknowledged, unseen by its searches)."""
    try:
        before = os.stat(replaced).st_mtime_ns
    except FileNotFoundError:
        return
    later = max(time.time_ns(), before + 1)
    os.utime(new, ns=(later, later))


def check_output_file(path: str | Path, what: str = "output file",
                      inputs: Iterable[str | Path | None] = ()) -> None:
    """Refuse, before any work, an output file path that cannot be written: a directory, or one under a file; or
    one of the command's ``inputs`` (the same file, through any link or spelling: writing it would replace what
    the command reads, ``fuse a.trec b.trec -o a.trec``). ``-`` (standard output), devices and pipes are fine
    (:func:`write_output_text`)."""
    if str(path) == "-":
        return
    path = Path(path)
    if path.is_dir():
        raise SemiretError(f"{path} is a directory: give a file name for the {what}")
    check_parent_folders(path)
    for given in inputs:
        if given is not None and str(given) != "-" and _same_file(path, Path(given)):
            spelled = "" if Path(given) == path else f" (as {given})"
            raise SemiretError(f"{path} is also an input of this command{spelled}: the {what} would replace it; "
                               "give another file")


def _same_file(output: Path, given: Path) -> bool:
    """Whether ``output`` is the regular file ``given`` names (devices and pipes, ``/dev/stdin`` and
    ``/dev/stdout`` on one terminal, are not refused)."""
    try:
        return output.is_file() and given.is_file() and os.path.samefile(output, given)
    except OSError:
        return False


def check_parent_folders(path: Path) -> None:
    """Refuse a path to make under a file (``notes.txt/index``): making it would fail late, saying "File exists" or
    naming a temporary file."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise SemiretError(f"{path} cannot be written: {parent} is a file, not a directory")
            break


def write_output_text(path: str | Path, text: str | Iterable[str]) -> None:
    """Write a file a user named for output (``text`` whole, or its pieces as they come): ``-`` is standard output;
    a symbolic link is written through (its target replaced, the link kept); a device or a pipe (``/dev/stdout``)
    is written to as it is; any other path is replaced atomically (:func:`atomic_write_text`)."""
    pieces = [text] if isinstance(text, str) else text
    if str(path) == "-":
        sys.stdout.writelines(pieces)
        sys.stdout.flush()
        return
    check_output_file(path)
    if os.path.exists(path) and not os.path.isfile(path):  # a device or a pipe, through any link
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(pieces)
        return
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text)


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (instant, no space: for files that never change once written), or a
    copy where the two lie on different file systems or the file system has no hard links."""
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP,
                             errno.ENOSYS):  # (a FUSE or SMB mount may answer ENOSYS or EACCES)
            raise
        shutil.copy2(source, target)


def fsync_directory(path: Path) -> None:
    """Make the names in a directory durable (a rename or a new file is not, until its directory is synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: Path) -> None:
    """Flush every file under ``path`` to disk, then every directory (deepest first).

    The files are synced in parallel threads: the filesystem then writes them in one journal commit or a few,
    where one after the other costs a commit each (12 files: 4-7 ms instead of 25-45 on our virtual disk)."""
    walk = list(os.walk(path, topdown=False))
    files = [os.path.join(root, name) for root, _, names in walk for name in names]
    list(_fsync_pool().map(_fsync_file, files))
    for root, _, _ in walk:
        fsync_directory(Path(root))


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.cache
def _fsync_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(FSYNC_THREADS, thread_name_prefix="semiret-fsync")


os.register_at_fork(after_in_child=_fsync_pool.cache_clear)  # a forked child has none of the pool's threads


@contextmanager
def exclusive_lock(path: Path, reading: bool = False) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created if missing) while the block runs.

    It excludes other processes and other open descriptions of the file in this process, and the kernel
    drops it when its holder dies, even by ``kill -9``, so no stale lock is ever left to clean up. (Written
    here rather than taken from ``filelock``/``portalocker``: the few lines of ``fcntl`` are the whole of it
    on Linux and macOS, and a dependency would add nothing semiret uses.) ``reading``: for a reader that keeps
    writers out (a backup) where it may not write: the file opened read-only (``flock`` needs no more), and no
    lock at all where there is none and none can be made (no writer ever took it).
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        if not reading or exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        if not os.path.exists(path):  # no writer ever took it (a writer makes it): nothing to wait for
            yield
            return
        fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        _release(fd)


def _release(fd: int) -> None:
    """Let go of ``fd``'s lock, then close it: closing alone keeps the lock while a process forked meanwhile (a
    multiprocessing pool) holds a copy of the descriptor, and every writer waited for that process to end."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def exclusive_lock_while_linked(path: Path) -> Iterator[None]:
    """:func:`exclusive_lock` on a lock file that others remove when they find it free (:func:`lock_if_free`, a
    sweep of leftovers): one removed between this opening it and locking it holds nothing, so the lock is taken
    again on the file now at ``path``."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                still_there = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                still_there = False
            if still_there:
                yield
                return
        finally:
            _release(fd)


@contextmanager
def lock_if_free(path: Path) -> Iterator[bool]:
    """Hold ``path``'s lock if no process holds it (yield True), else yield False at once."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        _release(fd)


def vacant_directory(path: Path) -> bool:
    """An empty directory of its own (not a link, not a mount point), made beforehand to take an index: a build
    goes there without ``overwrite``, as into no directory."""
    return path.is_dir() and not path.is_symlink() and not os.path.ismount(path) and not any(path.iterdir())


def replace_directory(staged: Path, target: Path, overwrite: bool) -> None:
    """Move a fully written ``staged`` directory to ``target``, durably; an old ``target`` is replaced only if
    allowed (or vacant: :func:`vacant_directory`)."""
    existed = target.exists()  # decided once: a target published meanwhile by another is never replaced unasked
    if existed and not overwrite and not vacant_directory(target):
        shutil.rmtree(staged, ignore_errors=True)
        raise IndexFormatError(f"{target} already exists (pass overwrite=True / --overwrite to replace it)")
    fsync_tree(staged)
    if existed:
        if _exchange(staged, target):  # one step: no moment without a target, whenever the process dies
            fsync_directory(target.parent)
            shutil.rmtree(staged, ignore_errors=True)  # now the old directory
            return
        trash = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, trash)
        os.replace(staged, target)
        fsync_directory(target.parent)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.replace(staged, target)
        except OSError as exc:  # another process or thread published a directory there meanwhile
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if not overwrite:
                shutil.rmtree(staged, ignore_errors=True)
                raise IndexFormatError(f"{target} already exists (pass overwrite=True / --overwrite to replace "
                                       "it)") from None
            replace_directory(staged, target, overwrite)  # replaced as any old target
            return
        fsync_directory(target.parent)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``, which neither ``os`` nor any library
    offers: called through ctypes); False where the system or filesystem cannot, for the caller to fall back."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_current_directory, rename_exchange = -100, 2
    if renameat2(at_current_directory, os.fsencode(a), at_current_directory, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV):
        return False
    raise OSError(code, os.strerror(code), str(b))


def directory_size(path: Path) -> int:
    """Bytes of the files under ``path``, counted while writers may work there: staging folders (``.NAME.tmp-*``,
    not yet part of anything) are left out, and a file removed meanwhile (a merge dropping a segment) counts 0."""
    total = 0
    for folder, subfolders, names in os.walk(path):  # a folder removed meanwhile: os.walk skips it
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in names:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


@contextmanager
def staged_directory(target: str | Path, overwrite: bool = True, locks: Sequence[Path] = ()) -> Iterator[Path]:
    """Write a directory in a staging folder beside ``target`` and publish it when the block ends; an
    exception removes the staging folder and leaves any old ``target`` untouched. ``locks``: files to hold
    exclusively (:func:`exclusive_lock`) while the old ``target`` is replaced (its writers' locks: a write to the
    old directory finishes first, and none starts on it meanwhile)."""
    target = Path(target)
    if target.exists() and not target.is_dir():  # refused before the work (replacing it failed after, obscurely)
        raise SemiretError(f"{target} is a file, not a folder: nothing was written there")
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_staging(target)
    # beside the target (same filesystem, so a rename publishes it), named before it is made: a signal that ends
    # the process (SIGTERM, Ctrl-C) as soon as the folder exists still finds the name to remove
    staged = target.parent / f".{target.name}{STAGING_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        staged.mkdir()
        yield staged
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    with ExitStack() as held:
        for lock in locks:
            if lock.parent.is_dir():
                held.enter_context(exclusive_lock(lock))
        replace_directory(staged, target, overwrite)


STAGING_MARK = ".tmp-"
"""What names a staging folder: ``.<target>.tmp-<pid>-<random>``."""


STAGED_NAME = re.compile(rf"\.(?P<target>.+){re.escape(STAGING_MARK)}(?P<pid>\d+)-[0-9a-f]+")
"""A staging folder's name (:func:`staged_directory`): its target's, its process id and a random part."""


ABANDONED_AFTER_S = 24 * 3600
"""How long a staging folder of another target must have been left alone before it counts as abandoned."""


def remove_abandoned_staging(target: Path) -> None:
    """Delete the staging folders beside ``target`` whose process is gone (one killed with SIGKILL, or by a power
    cut, never removes its own): each names its process id, and only those of no running process on this machine
    are removed. Those of other targets too (a server's backups, named by the time, leave ones no later backup of
    their name would find), once untouched for :data:`ABANDONED_AFTER_S` (a process on another machine sharing the
    folder may be writing one: its folder changes as it does)."""
    now = time.time()
    for entry in target.parent.glob(f".*{glob.escape(STAGING_MARK)}*"):
        named = STAGED_NAME.fullmatch(entry.name)
        if not named or not entry.is_dir() or _process_running(int(named["pid"])):
            continue
        try:
            if named["target"] == target.name or now - entry.stat().st_mtime > ABANDONED_AFTER_S:
                shutil.rmtree(entry, ignore_errors=True)
        except FileNotFoundError:
            continue


def _process_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return True
