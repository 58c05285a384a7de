"""Exceptions raised for bad input: each message names the file, line or field at fault; and warnings of input that
is likely a mistake though not an error (a filter on a field no document holds), logged and told to the caller."""

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_TOLD: ContextVar[list[str] | None] = ContextVar("semiret_told_warnings", default=None)
"""The warnings collected for the caller of what runs now (:func:`told_warnings`), or None: none is collected."""


@contextmanager
def told_warnings() -> Iterator[list[str]]:
    """The warnings :func:`warn` and :func:`tell_caller` give within the block (and in threads running in its
    context: Starlette's thread pool copies it), each once, in order: what the service answers a request with (its
    ``warnings``), besides logging them."""
    collected: list[str] = []
    token = _TOLD.set(collected)
    try:
        yield collected
    finally:
        _TOLD.reset(token)


def warn(logger: logging.Logger, message: str) -> None:
    """Warn of ``message``: logged by ``logger``, and told to the caller (:func:`tell_caller`)."""
    logger.warning("%s", message)
    tell_caller(message)


def warn_once(logger: logging.Logger, message: str, said: set[str]) -> None:
    """Warn of ``message`` as :func:`warn` does, logged only where ``said`` (the messages logged already, kept by the
    caller: at most :data:`KEPT_SAID`, then forgotten) lacks it, told to the caller every time."""
    if message not in said:
        if len(said) >= KEPT_SAID:
            said.clear()
        said.add(message)
        logger.warning("%s", message)
    tell_caller(message)


KEPT_SAID = 1024
"""The most messages :func:`warn_once` remembers in one set (a server's clients may make up any number)."""


def tell_caller(message: str) -> None:
    """Add ``message`` to the warnings collected for the caller (:func:`told_warnings`), if any are: what a warning
    logged once per index (at its first search) tells every later caller too."""
    collected = _TOLD.get()
    if collected is not None and message not in collected:
        collected.append(message)


class SemiretError(Exception):
    """Base class for errors semiret reports to users (the CLI prints them without a traceback)."""


class DataFormatError(SemiretError, ValueError):
    """A data file is malformed: the message names the file and, where known, the line and field."""

    def __init__(self, message: str, path=None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line


class IndexFormatError(SemiretError, ValueError):
    """An index directory is missing, incomplete or of another kind than expected."""


class UnknownDocumentError(SemiretError, LookupError):
    """A document named by its id (``doc_id``) is not in the index (an example to recommend from, say)."""

    def __init__(self, message: str, doc_id: str | None = None, hint: str = ""):
        super().__init__(message)
        self.doc_id = doc_id
        self.hint = hint
        """What the index holds instead, said after the message (": it is indexed as passages, ..."), or ""."""

    def __reduce__(self):  # from a worker process with its id
        return type(self), (str(self), self.doc_id, self.hint)


class OptionError(SemiretError, ValueError):
    """An option given a value it does not take (an unknown stopword list, say): the message names the option."""
