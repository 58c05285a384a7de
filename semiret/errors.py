"""Exceptions raised for bad input: each message names the file, line or field at fault."""


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
