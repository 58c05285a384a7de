"""Line-oriented JSON reading with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from semiret.errors import DataFormatError


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, int, dict]]:
    """Yield ``(line_number, byte_offset, record)`` for each non-blank line of a JSONL file.

    Invalid UTF-8, invalid JSON and non-object lines raise :class:`DataFormatError` naming the line.
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError("file not found", path)
    offset = 0
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            line_offset = offset
            offset += len(raw)
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8-sig" if line_number == 1 else "utf-8")  # tolerate a BOM
            except UnicodeDecodeError as exc:
                raise DataFormatError(f"invalid UTF-8 at byte {exc.start} of the line", path, line_number) from None
            try:
                record = json.loads(text.rstrip("\r\n"))  # an error at the end then points at the line's end
            except json.JSONDecodeError as exc:
                raise DataFormatError(f"invalid JSON: {json_error(exc)}", path, line_number) from None
            if not isinstance(record, dict):
                raise DataFormatError(f"expected a JSON object, got {type(record).__name__}", path, line_number)
            yield line_number, line_offset, record


def json_error(exc: json.JSONDecodeError) -> str:
    """A decoding error as a phrase: ``Expecting value at column 1``. Some of Python's messages already end in
    "at" (``Invalid control character at``, ``Unterminated string starting at``): the column follows it."""
    message = exc.msg.rstrip()
    return f"{message} column {exc.colno}" if message.endswith(" at") else f"{message} at column {exc.colno}"
