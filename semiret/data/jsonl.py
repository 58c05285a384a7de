"""Line-oriented JSON reading with errors that name the file and line."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from semiret.data.folder import READERS
from semiret.errors import DataFormatError


GZIP_MAGIC = b"\x1f\x8b"
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")
FORMATS = "JSONL (.jsonl, .json, .ndjson), TSV (.tsv, .tab, .txt) or CSV (.csv), either gzipped (.gz) or not"
"""What the data readers take, for messages."""


def open_data_file(path: str | Path) -> BinaryIO:
    """A data file opened for reading bytes, decompressed when it is gzipped (by its first bytes, whatever its
    name): ``corpus.jsonl.gz`` reads as ``corpus.jsonl``."""
    path = Path(path)
    if not path.is_file():
        raise DataFormatError("file not found", path)
    handle = open(path, "rb")
    if handle.read(2) == GZIP_MAGIC:
        handle.close()
        return _GzippedData(path, "rb")
    handle.seek(0)
    return handle


class _GzippedData(gzip.GzipFile):
    """A gzipped data file whose damage is a :class:`DataFormatError` naming it: a truncated file raised
    ``EOFError``, which the command line took for Ctrl-C (it printed "Aborted." and nothing else), and a corrupt one
    an error naming no file."""

    def _checked(self, read, *args):
        try:
            return read(*args)
        except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
            raise DataFormatError(f"truncated or damaged gzip data ({exc}): compress the file again, or "
                                  "give it uncompressed", self.name) from None

    def read(self, size=-1):
        return self._checked(super().read, size)

    def read1(self, size=-1):
        return self._checked(super().read1, size)

    def peek(self, n):
        return self._checked(super().peek, n)

    def readline(self, size=-1):
        return self._checked(super().readline, size)


def format_suffix(path: str | Path) -> str:
    """A data file's format suffix, lower case, a ``.gz`` after it left out (``corpus.tsv.gz``: ``.tsv``)."""
    path = Path(path)
    if path.suffix.lower() == ".gz":
        path = path.with_suffix("")
    return path.suffix.lower()


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, int, dict]]:
    """Yield ``(line_number, byte_offset, record)`` for each non-blank line of a JSONL file (gzipped or not; the
    offset is in the decompressed text).

    Invalid UTF-8, invalid JSON and non-object lines raise :class:`DataFormatError` naming the line; on the first
    line of a file whose name does not say JSON, the message also names the formats read.
    """
    path = Path(path)
    offset = 0
    seen_record = False
    hint = "" if format_suffix(path) in JSON_SUFFIXES else f" (is this JSONL? semiret reads {FORMATS})"
    if format_suffix(path) in READERS:
        hint = (f" (a {format_suffix(path)} file is a document of a folder of documents: give the folder holding it, "
                "each file under it one document)")
    with open_data_file(path) as handle:
        for line_number, raw in enumerate(handle, start=1):
            line_offset = offset
            offset += len(raw)
            if not raw.strip():
                continue
            first = "" if seen_record else hint
            if not seen_record and raw.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"["):  # a JSON array
                first = f" (a JSON array: semiret reads JSON Lines, one object a line; convert it with {_to_lines(path)})"
            seen_record = True
            try:
                text = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # tolerate a BOM
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"invalid UTF-8 at byte {exc.start} of the line{first}", path,
                                      line_number) from None
            try:
                record = json.loads(text.rstrip("\r\n"))  # an error at the end then points at the line's end
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"invalid JSON: {json_error(exc)}{first}", path, line_number) from None
            if not isinstance(record, dict):
                raise DataFormatError(f"expected a JSON object, got {type(record).__name__}{first}", path,
                                      line_number)
            yield line_number, line_offset, record


def _to_lines(path: Path) -> str:
    """A command writing the JSON array in ``path`` as JSON Lines beside it, never over it."""
    stem = path.name.removesuffix(".gz")
    stem = stem[: -len(Path(stem).suffix)] if Path(stem).suffix else stem
    read = f"gzip -dc {path.name} | jq -c '.[]'" if path.name.endswith(".gz") else f"jq -c '.[]' {path.name}"
    return f"{read} > {stem}{'-lines' if format_suffix(path) == '.jsonl' else ''}.jsonl"


def json_error(exc: json.JSONDecodeError) -> str:
    """A decoding error as a phrase: ``Expecting value at column 1``. Some of Python's messages already end in
    "at" (``Invalid control character at``, ``Unterminated string starting at``): the column follows it."""
    message = exc.msg.rstrip()
    return f"{message} column {exc.colno}" if message.endswith(" at") else f"{message} at column {exc.colno}"
