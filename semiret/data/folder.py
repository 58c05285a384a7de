"""A folder of documents as a corpus, as RAG tools read one (LlamaIndex's ``SimpleDirectoryReader``): each text,
Markdown, reStructuredText, HTML or PDF file under it, at any depth, is one document whose id is its path under the
folder (``guides/install.md``). A long file is best indexed as passages (``--chunk-words``).

Each document's record also holds its file's ``file_name``, ``file_type`` (the suffix, ``md``), ``file_size``
(bytes) and ``modified`` (ISO 8601, UTC, so that ``{"modified": {"gte": "2026-01-01"}}`` filters by date), and a
Markdown file's front matter (``title: ...`` between ``---`` lines): kept as metadata when ``metadata_fields`` names
them, as a JSONL record's other fields are. The title is the front matter's, the first heading (Markdown, reST) or
``<title>`` (HTML), the PDF's own; else the file's name, its ``-`` and ``_`` read as spaces (words a query may hold).

Hidden files and folders (``.git``) are left out, and so are files of other kinds (named in a warning, by suffix).
A file that cannot be read as a document (a broken or encrypted PDF, one with no text, which needs OCR first; a
path holding a control character) is skipped with a warning naming it: one bad file of thousands should not stop
an index of the rest.
"""

from __future__ import annotations

import datetime
import html.parser
import logging
import os
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

from semiret.errors import DataFormatError

log = logging.getLogger(__name__)

MAX_FILE_CHARS = 1_000_001
"""Characters read from a text file at most: one more than a document keeps (the corpus reader cuts it there, with
its warning), so that a huge log file is not read whole."""
FILE_FIELDS = ("file_name", "file_type", "file_size", "modified")
"""The fields every document of a folder has (besides a Markdown file's front matter)."""
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain_text(path: Path) -> tuple[str, str | None, dict]:
    return _read_text(path), None, {}


def _markdown(path: Path) -> tuple[str, str | None, dict]:
    """Text, title (front matter's, else a first line that is a level-1 heading: left out of the text) and front
    matter of a Markdown file."""
    text, front_matter = _front_matter(_read_text(path), path)
    title = front_matter.pop("title", None)
    if title is None:
        text, title = _leading_heading(text, atx=True)
    return text, None if title is None else str(title), front_matter


def _restructured_text(path: Path) -> tuple[str, str | None, dict]:
    text, title = _leading_heading(_read_text(path), atx=False)
    return text, title, {}


def _html(path: Path) -> tuple[str, str | None, dict]:
    reader = _HtmlText()
    reader.feed(_read_text(path))
    reader.close()
    return reader.text(), reader.title(), {}


def _pdf(path: Path) -> tuple[str, str | None, dict]:
    try:
        import pypdf
    except ImportError:
        raise _Skipped("a PDF: reading PDFs needs pypdf (pip install 'semiret[files]' or pip install pypdf)") from None
    try:
        reader = pypdf.PdfReader(path)
        if reader.is_encrypted:
            raise _Skipped("an encrypted PDF")
        text = "\n\n".join(page.extract_text() or "" for page in reader.pages)
        title = (reader.metadata or {}).get("/Title")
    except _Skipped:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files: each one is this file's problem
        raise _Skipped(f"an unreadable PDF ({type(exc).__name__}: {exc})") from None
    return text, (str(title).strip() or None) if title else None, {}


READERS: dict[str, Callable[[Path], tuple[str, str | None, dict]]] = {
    ".txt": _plain_text, ".text": _plain_text, ".md": _markdown, ".markdown": _markdown, ".rst": _restructured_text,
    ".html": _html, ".htm": _html, ".xhtml": _html, ".pdf": _pdf}
"""How each kind of file (by suffix, in any case) reads as (text, title or None, other fields)."""
DOCUMENT_KINDS = ", ".join(sorted(READERS))


class _Skipped(Exception):
    """A file that cannot be read as a document; the message says why (``an encrypted PDF``)."""


def _read_text(path: Path) -> str:
    """A text file's characters (UTF-8, a byte-order mark left out, undecodable bytes replaced), line ends as ``\\n``,
    at most :data:`MAX_FILE_CHARS`."""
    with open(path, encoding="utf-8-sig", errors="replace", newline=None) as handle:
        return handle.read(MAX_FILE_CHARS)


def _front_matter(text: str, path: Path) -> tuple[str, dict]:
    """A Markdown text without its YAML front matter (``---`` lines around it, at the very start), and its fields
    as JSON values (dates as ISO strings); a front matter that is not a YAML mapping is left in the text."""
    match = re.match(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|$)", text, re.DOTALL)
    if match is None:
        return text, {}
    import yaml

    try:
        fields = yaml.safe_load(match.group(1) or "")
    except yaml.YAMLError as exc:
        log.warning("%s: its front matter is not YAML (%s): read as text", path, str(exc).splitlines()[0])
        return text, {}
    if not isinstance(fields, dict):
        return text, {}
    return text[match.end():], {str(name): _json_value(value) for name, value in fields.items()}


def _json_value(value):
    """A YAML value as a JSON one: dates and times as ISO strings, anything else JSON cannot hold as its string."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(name): _json_value(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


_UNDERLINE = re.compile(r"([=\-~^\"'`#*+:._])\1*[ \t]*")


def _leading_heading(text: str, atx: bool) -> tuple[str, str | None]:
    """(the text without its heading, the heading) when its first non-blank line is a title: ``# Title`` (``atx``,
    Markdown), or a line underlined (and perhaps overlined) by one repeated punctuation mark at least as long
    (Markdown's ``===``, reST's section titles); else (the text, None)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return text, None
    line = lines[first].strip()
    if atx:
        heading = re.fullmatch(r"#[ \t]+(.*?)(?:[ \t]+#+)?", line)
        if heading and heading.group(1).strip():
            return "\n".join(lines[first + 1:]).lstrip("\n"), heading.group(1).strip()
    overlined = _UNDERLINE.fullmatch(line) is not None and first + 2 < len(lines)
    title_at = first + 1 if overlined else first
    title = lines[title_at].strip()
    under = lines[title_at + 1].strip() if title_at + 1 < len(lines) else ""
    if title and _UNDERLINE.fullmatch(title) is None and _UNDERLINE.fullmatch(under) and len(under) >= len(title) \
            and (not atx or under[0] in "=-"):
        return "\n".join(lines[title_at + 2:]).lstrip("\n"), title
    return text, None


class _HtmlText(html.parser.HTMLParser):
    """An HTML page's visible text, a line break at each block element, and its ``<title>`` (else its first
    ``<h1>``). Written on the standard library's parser: text is all a search index needs of a page, and a parsing
    library (BeautifulSoup, lxml) would be a dependency for it."""

    HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "head"})
    BLOCKS = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer",
                        "nav", "aside", "main", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "hr", "dt",
                        "dd", "figcaption", "td", "th"})

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._hidden = 0
        self._in: dict[str, list[str] | None] = {"title": None, "h1": None}

    def handle_starttag(self, tag, attrs):
        if tag in self.HIDDEN:
            self._hidden += 1
        if tag in self._in and self._in[tag] is None:
            self._in[tag] = []
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self.HIDDEN and self._hidden:
            self._hidden -= 1
        if tag in self._in and isinstance(self._in[tag], list):
            self._in[tag] = tuple(self._in[tag])  # done: the first one only
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_data(self, data):
        for name, gathered in self._in.items():
            if isinstance(gathered, list):
                gathered.append(data)
        if not self._hidden:
            self._parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self._parts).split("\n"))
        return "\n".join(line for line in lines if line)

    def title(self) -> str | None:
        for name in ("title", "h1"):
            words = " ".join("".join(self._in[name] or ()).split())
            if words:
                return words
        return None


def _hidden(name: str) -> bool:
    return name.startswith(".")


def document_files(folder: Path) -> tuple[list[Path], Counter]:
    """The files under ``folder`` that read as documents (:data:`READERS`), in the order of their paths (hidden
    files and folders left out), and how many other files each suffix has."""
    found, others = [], Counter()
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(name for name in folders if not _hidden(name))
        for name in sorted(names):
            if _hidden(name):
                continue
            suffix = Path(name).suffix.lower()
            if suffix in READERS:
                found.append(Path(root) / name)
            else:
                others[suffix or "(no suffix)"] += 1
    return sorted(found, key=lambda path: path.relative_to(folder).parts), others


def holds_documents(folder: Path) -> bool:
    """Whether any file under ``folder`` (hidden ones aside) reads as a document."""
    for root, folders, names in os.walk(folder):
        folders[:] = [name for name in folders if not _hidden(name)]
        if any(not _hidden(name) and Path(name).suffix.lower() in READERS for name in names):
            return True
    return False


def folder_records(folder: Path) -> Iterator[tuple[int, str, str, str, dict]]:
    """``(position, id, text, title, other fields)`` for each document file under ``folder``
    (:func:`document_files`); skipped files are named in a warning at the end."""
    files, others = document_files(folder)
    if others:
        log.warning("%s: %d file%s of other kinds left out (%s); semiret reads %s files as documents", folder,
                    sum(others.values()), "s" * (sum(others.values()) > 1),
                    ", ".join(f"{suffix} {count}" for suffix, count in others.most_common(6))
                    + (", ..." if len(others) > 6 else ""), DOCUMENT_KINDS)
    skipped: list[str] = []
    for position, path in enumerate(files, 1):
        doc_id = path.relative_to(folder).as_posix()
        try:
            if _CONTROL_CHARACTER.search(doc_id):
                raise _Skipped("a path holding a control character (a document id may not)")
            text, title, fields = READERS[path.suffix.lower()](path)
            if not text.strip():
                raise _Skipped("a file with no text" + (" (a scanned PDF needs OCR first)" if path.suffix.lower()
                                                        == ".pdf" else ""))
            status = path.stat()
        except _Skipped as why:
            skipped.append(f"{doc_id!r} ({why})")
            continue
        except OSError as exc:
            raise DataFormatError(f"cannot read it ({exc.strerror or exc})", path) from None
        modified = datetime.datetime.fromtimestamp(int(status.st_mtime), datetime.timezone.utc)
        yield position, doc_id, text, title or _title_of_name(path), fields | {
            "file_name": path.name, "file_type": path.suffix.lower().lstrip("."), "file_size": status.st_size,
            "modified": modified.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if skipped:
        log.warning("%s: %d file%s skipped: %s", folder, len(skipped), "s" * (len(skipped) > 1),
                    "; ".join(skipped[:5]) + ("; ..." if len(skipped) > 5 else ""))


def _title_of_name(path: Path) -> str:
    """A file's name as a title: ``vacation_policy-2024.md`` reads ``vacation policy 2024``."""
    return " ".join(re.split(r"[-_\s]+", path.stem)).strip()
