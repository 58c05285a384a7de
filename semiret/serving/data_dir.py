"""``semiret serve --data-dir DIR``: a directory of indexes the server owns, created and deleted over HTTP (Qdrant's
collections, OpenSearch's ``PUT``/``DELETE`` of an index).

Each index is the folder ``DIR/NAME``. Creating one builds it empty in a staging folder and renames it into place;
deleting one renames it out of the way while its write lock is held (no write is half-done in it), then removes
it. Both happen under ``DIR/.lock``, so that the processes of ``--workers N`` never create one name twice or race a
delete; each process finds indexes the others created, and forgets those they deleted, when a request names them.
Folders whose names begin with a dot are the server's own (staging, deleted, the lock) and never served.

Aliases (Qdrant's collection aliases, OpenSearch's index aliases) are names that stand for an index, kept in
``DIR/.aliases.json``: a client searches and writes through ``live`` while ``live-v2`` is built beside it, then
points ``live`` at ``live-v2`` in one atomic switch, every worker process seeing it at its next request. An alias
never shares its name with an index, and deleting an index removes the aliases that point to it.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from pathlib import Path

from semiret.errors import IndexFormatError, SemiretError
from semiret.files import (
    STAGING_MARK, atomic_write_json, exclusive_lock, exclusive_lock_while_linked, fsync_directory, lock_if_free,
    remove_abandoned_staging,
)
from semiret.indexes.segments import build_of
from semiret.indexes.storage import META_FILE, read_meta
from semiret.options import OptionValueError

INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""An index name a client may give: a letter or digit, then up to 63 letters, digits, ``_``, ``.`` or ``-`` (no
path, nothing hidden)."""
LOCK = ".lock"
ALIASES = ".aliases.json"
STAGING_PREFIX = ".staging-"
DELETED_PREFIX = ".deleted-"
MODEL_OPTIONS = ("model", "tokenizer", "rerank_model", "query_tokenizer")
"""Build options that name a model: a client may name only the models ``semiret models`` lists as installed, never
a path of the server or a hub id (a download)."""


class IndexExists(SemiretError):
    """Creating an index under a name that is taken (the server answers 409)."""


class IndexGone(SemiretError):
    """Deleting an index another request deleted first (the server answers 404)."""


class UnknownAlias(SemiretError):
    """Removing an alias that is not there (the server answers 404)."""


class DataDirectory:
    """The indexes under one directory: their names, and creating and deleting them safely across processes."""

    def __init__(self, path: str | Path):
        self.path = Path(path).resolve()
        if self.path.exists() and not self.path.is_dir():
            raise SemiretError(f"--data-dir {self.path} is not a directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        self._aliases: tuple[tuple | None, dict[str, str]] = (None, {})  # the file's stat, and what it said

    def _remove_leftovers(self) -> None:
        """Remove what a process killed mid-create or mid-delete left: deleted indexes, and staging folders no
        build holds (another worker may be building one right now: its lock is held)."""
        for leftover in self.path.glob(f"{DELETED_PREFIX}*"):
            shutil.rmtree(leftover, ignore_errors=True)
        for staged in self.path.glob(f".{STAGING_PREFIX}*{STAGING_MARK}*"):  # what a build staged for its staging
            remove_abandoned_staging(self.path / staged.name[1:].split(STAGING_MARK)[0])  # (a restore's copy)
        for staging in self.path.glob(f"{STAGING_PREFIX}*"):
            lock = staging if staging.name.endswith(LOCK) else _build_lock(staging)
            with lock_if_free(lock) as free:
                if free:  # no build holds it (a build checks, once it holds its lock, that the file is still there)
                    shutil.rmtree(lock.with_name(lock.name[: -len(LOCK)]), ignore_errors=True)
                    lock.unlink(missing_ok=True)

    def _locked(self):
        return exclusive_lock(self.path / LOCK)

    def names(self) -> list[str]:
        """The indexes there now, by name."""
        return sorted(p.name for p in self.path.iterdir()
                      if INDEX_NAME.fullmatch(p.name) and (p / META_FILE).is_file())

    def holds(self, name: str) -> bool:
        return bool(INDEX_NAME.fullmatch(name)) and (self.path / name / META_FILE).is_file()

    def path_of(self, name: str) -> Path:
        return self.path / name

    def create(self, name: str, build) -> Path:
        """Run ``build(staging_path)`` (which writes an index there) and move the index into place as ``name``;
        :class:`IndexExists` if the name is taken (checked first and again once built). Nothing is left behind when
        ``build`` fails."""
        check_name(name)
        target = self.path / name
        if target.exists():
            raise IndexExists(f"index {name!r} exists already")
        self._check_not_alias(name)
        staging = self.path / f"{STAGING_PREFIX}{name}-{uuid.uuid4().hex}"
        try:
            with exclusive_lock_while_linked(_build_lock(staging)):  # held while building: not a leftover to remove
                try:
                    build(staging)
                    with self._locked():
                        if target.exists():
                            raise IndexExists(f"index {name!r} exists already")
                        self._check_not_alias(name)
                        staging.rename(target)
                        fsync_directory(self.path)  # (a build syncs its files) the name on disk before the answer
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
        finally:
            _build_lock(staging).unlink(missing_ok=True)
        return target

    def delete(self, name: str, index) -> None:
        """Remove the index ``name``, open here as ``index``: under its write lock, so that no write is half-done in
        it when it goes (a write under way is waited for, holding nothing else). :class:`IndexGone` when it went
        meanwhile, or was made anew (another request deleted it first)."""
        target = self.path / name
        trash = self.path / f"{DELETED_PREFIX}{name}-{uuid.uuid4().hex}"
        build = build_of(index.meta)
        try:
            with index.writing():
                with self._locked():
                    if not self._holds_build(name, build):
                        raise IndexGone(f"no index {name!r}: deleted meanwhile")
                    target.rename(trash)
                    fsync_directory(self.path)  # gone for good once answered, power cut or not
                    aliases = self.aliases()
                    if name in aliases.values():  # an alias of no index would answer 404 one day, 200 the next
                        self._write_aliases({alias: index for alias, index in aliases.items() if index != name})
        except (IndexFormatError, OSError):  # its folder went (or was made anew) while this waited for its lock
            if not self._holds_build(name, build):
                raise IndexGone(f"no index {name!r}: deleted meanwhile") from None
            raise
        shutil.rmtree(trash, ignore_errors=True)

    def aliases(self) -> dict[str, str]:
        """Each alias and the index it stands for, as ``DIR/.aliases.json`` says now (read again only when the file
        changed: one ``stat`` a call)."""
        path = self.path / ALIASES
        try:
            status = path.stat()
        except FileNotFoundError:
            return {}
        stamp = (status.st_ino, status.st_mtime_ns, status.st_size)
        known, aliases = self._aliases
        if stamp != known:
            try:
                aliases = json.loads(path.read_text(encoding="utf-8"))
            except FileNotFoundError:  # replaced between the stat and the read: the next call reads the new one
                return self._aliases[1]
            except (json.JSONDecodeError, UnicodeDecodeError):
                aliases = None
            if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
                raise IndexFormatError(f"{path} is not the JSON object of aliases this server writes: restore it or "
                                       "remove it")
            self._aliases = (stamp, aliases)
        return dict(aliases)

    def set_alias(self, alias: str, index: str, exists) -> str | None:
        """Point ``alias`` at the index ``index`` (made, or switched from another index at once); ``exists(name)``
        says whether the server serves an index of that name. Returns the index it stood for before, if any."""
        check_name(alias)
        with self._locked():
            if alias == index:
                raise SemiretError(f"alias {alias!r} cannot stand for itself")
            if exists(alias):
                raise IndexExists(f"{alias!r} is an index: an alias takes a name no index has")
            if not exists(index):
                raise IndexGone(f"no index {index!r} for the alias {alias!r} to stand for")
            aliases = self.aliases()
            before = aliases.get(alias)
            aliases[alias] = index
            self._write_aliases(aliases)
        return before

    def remove_alias(self, alias: str) -> str:
        """Remove ``alias``; returns the index it stood for."""
        with self._locked():
            aliases = self.aliases()
            if alias not in aliases:
                raise UnknownAlias(f"no alias {alias!r}")
            index = aliases.pop(alias)
            self._write_aliases(aliases)
        return index

    def _write_aliases(self, aliases: dict[str, str]) -> None:
        atomic_write_json(self.path / ALIASES, dict(sorted(aliases.items())))

    def _check_not_alias(self, name: str) -> None:
        if name in self.aliases():
            raise IndexExists(f"{name!r} is an alias (of {self.aliases()[name]!r}): an index takes a name no alias has")

    def _holds_build(self, name: str, build: str | None) -> bool:
        """Whether ``name`` is still the index of that build (not deleted, nor deleted and made again)."""
        try:
            return self.holds(name) and build_of(read_meta(self.path / name, None)) == build
        except (IndexFormatError, OSError):
            return False


def _build_lock(staging: Path) -> Path:
    return staging.with_name(staging.name + LOCK)


def check_name(name: str) -> None:
    if not INDEX_NAME.fullmatch(name):
        raise SemiretError(f"index name {name!r}: a letter or digit, then at most 63 letters, digits, '_', '.' or '-'")


def check_model_options(options: dict, retriever: str | None = None) -> None:
    """Refuse a build option naming a model that ``semiret models`` does not list as installed (a path of the
    server, a hub id): what a client may build an index with is the server's installed models (those the
    ``retriever`` takes, named in the error)."""
    named = {name: value for name, value in options.items() if name in MODEL_OPTIONS and value is not None}
    if not named:
        return
    from semiret.search.catalog import available_models

    entries = [entry for entry in available_models() if entry.installed]
    installed = {entry.name for entry in entries}
    for name, value in named.items():
        if value not in installed:
            suitable = sorted(entry.name for entry in entries  # a tokenizer may be any model's
                              if retriever is None or name != "model" or retriever in entry.retrievers)
            raise OptionValueError(name, f"option {name!r}: {value!r} is not a model this server has installed (it "
                                         f"may name one of: {', '.join(suitable) or 'none'})")
