"""A folder of documents as a corpus, as RAG tools read one (LlamaIndex's ``SimpleDirectoryReader``): each text,
Markdown, reStructuredText, HTML or PDF file under it, at any depth (symbolic links followed, each folder once), is
one document whose id is its path under the folder (``guides/install.md``). A long file is best indexed as passages
(``--chunk-words``).

Each document's metadata holds its file's ``file_name``, ``file_type`` (the suffix, ``md``), ``file_size`` (bytes),
``modified`` (ISO 8601, UTC, so that ``{"modified": {"gte": "2026-01-01"}}`` filters by date) and ``file_hash`` (of
its bytes: a sync need not parse a file whose bytes have not changed), always, as a JSONL record's ``metadata``
object is kept; a Markdown file's front matter (YAML between ``---`` lines, or TOML between ``+++``) joins it when
``metadata_fields`` names its fields, as a JSONL record's other fields do. The title is the front matter's, the
first heading (Markdown, reST) or ``<title>`` (HTML), the PDF's own; else the file's name, its ``-`` and ``_`` read
as spaces (words a query may hold). Text that is not UTF-8 is read as UTF-16 or UTF-32 where a byte-order mark says
so, as the HTML page's declared charset, else as Windows-1252 (which Latin-1 text reads as too), named in a warning.

Hidden files and folders (``.git``) and semiret's indexes are left out, and so are files of other kinds (named in a
warning, by suffix) and what is not a file (a named pipe would be waited on forever).
A file that cannot be read as a document (one that cannot be opened, a broken or encrypted PDF, one with no text,
which needs OCR first; a path holding a control character, or a name that is not UTF-8) is skipped with a warning naming it: one bad file of
thousands should not stop an index of the rest. A folder that cannot be listed is an error: its documents would
otherwise be missed, and deleted by a sync.
"""

from __future__ import annotations

import codecs
import datetime
import hashlib
import html.parser
import io
import json
import logging
import math
import os
import re
import stat
from collections import Counter
from pathlib import Path
from typing import Callable, Container, Iterator

from semiret.data.ids import document_id_problem
from semiret.errors import DataFormatError

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 8_000_000
"""Bytes of a text file parsed at most (8 times the characters a document keeps: markup and front matter are dropped
from what is read), so that a huge log file is not held whole (all of its bytes are read, to hash them); a file cut
there is named in a warning."""
READER_VERSION = 1
"""What a file's hash is personalised with (with pypdf's version for a PDF): raised whenever a reader here parses the
same bytes otherwise, so that a sync parses every file again rather than keep what an older reader made of them."""


class _Skipped(Exception):
    """A file that cannot be read as a document; the message says why (``an encrypted PDF``)."""


class _Notes:
    """What reading a folder's files found worth a warning, each file named by its id (``current``: the one read)."""

    def __init__(self):
        self.current = ""
        self.skipped: list[str] = []
        self.cut: list[str] = []
        self.recoded: list[str] = []
        self.unparsed: list[str] = []


def file_bytes(path: Path, whole: bool = False) -> tuple[bytes, str]:
    """A file's bytes (its first :data:`MAX_FILE_BYTES` and one more unless ``whole``) and the hash of all of them
    (BLAKE2b, 128 bits, hex, personalised by :func:`_reader_tag`): what its document's ``file_hash`` holds, so that a
    sync knows an unchanged file without parsing it; the bytes parsed are the bytes hashed."""
    digest, kept = hashlib.blake2b(digest_size=16, person=_reader_tag(path.suffix.lower())), bytearray()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
            if whole or len(kept) <= MAX_FILE_BYTES:
                kept += chunk
    return bytes(kept if whole else kept[:MAX_FILE_BYTES + 1]), digest.hexdigest()


HASH_CHUNK = 1 << 20


def _reader_tag(suffix: str) -> bytes:
    """What reads a file of this kind (:data:`READER_VERSION`, and pypdf's version for a PDF), at most 16 bytes:
    BLAKE2b's personalisation of its hash."""
    tag = f"semiret{READER_VERSION}"
    if suffix == ".pdf":
        try:
            import pypdf

            tag = f"r{READER_VERSION}pypdf{pypdf.__version__}"
        except ImportError:  # (parsing it will say pypdf is needed)
            pass
    return tag.encode()[:16]


def _decoded(raw: bytes, notes: _Notes, charset: Callable[[bytes], str | None] = lambda raw: None) -> str:
    """A text file's characters from its bytes (``raw``: its first :data:`MAX_FILE_BYTES` and one more): UTF-8 (a
    byte-order mark left out), UTF-16 or UTF-32 where a byte-order mark says so, else the ``charset`` its bytes
    declare, else Windows-1252; line ends as ``\\n``."""
    cut = len(raw) > MAX_FILE_BYTES
    if cut:
        raw = raw[:MAX_FILE_BYTES]
        notes.cut.append(notes.current)
    marked = next((encoding for mark, encoding in _BYTE_ORDER_MARKS if raw.startswith(mark)), None)
    if marked is not None:
        return _lines(raw.decode(marked, errors="replace").lstrip("\ufeff"))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        if cut and error.start > len(raw) - 4:  # a character cut where the reading stopped
            text = raw[:error.start].decode("utf-8-sig")
        else:
            declared = charset(raw) or "cp1252"
            try:
                text = raw.decode(declared, errors="replace")
            except LookupError:  # a charset Python does not know
                declared, text = "cp1252", raw.decode("cp1252", errors="replace")
            notes.recoded.append(f"{notes.current} ({declared})")
    return _lines(text)


_BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
                     (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
"""The byte-order marks that say how a text file is encoded (UTF-32's first: they begin as UTF-16's do)."""


def _lines(text: str) -> str:
    """``text``, its line ends ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _plain_text(raw: bytes, notes: _Notes) -> tuple[str, str | None, dict]:
    return _decoded(raw, notes), None, {}


def _markdown(raw: bytes, notes: _Notes) -> tuple[str, str | None, dict]:
    """Text, title (front matter's, else a first line that is a heading: left out of the text) and front matter of
    a Markdown file."""
    text, front_matter = _front_matter(_decoded(raw, notes), notes)
    title = front_matter.pop("title", None)
    if title is None:
        text, title = _leading_heading(text, markdown=True)
    return text, _title_text(title), front_matter


def _restructured_text(raw: bytes, notes: _Notes) -> tuple[str, str | None, dict]:
    text, title = _leading_heading(_decoded(raw, notes), markdown=False)
    return text, title, {}


def _html(raw: bytes, notes: _Notes) -> tuple[str, str | None, dict]:
    reader = _HtmlText()
    reader.feed(_decoded(raw, notes, _declared_charset))
    reader.close()
    return reader.text(), reader.title(), {}


def _pdf(raw: bytes, notes: _Notes) -> tuple[str, str | None, dict]:
    try:
        import pypdf
    except ImportError:  # an error, not a file skipped: a sync would delete every PDF's document
        raise DataFormatError("reading PDF files needs pypdf (pip install 'semiret[files]' or pip install pypdf)",
                              notes.current) from None
    pypdf_log = logging.getLogger("pypdf")
    level = pypdf_log.level
    pypdf_log.setLevel(logging.ERROR)  # its warnings name no file; a file it cannot read is named in ours
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):  # an owner password alone still lets it be read
            raise _Skipped("an encrypted PDF")
        text = "\n\n".join(page.extract_text() or "" for page in reader.pages)
        title = (reader.metadata or {}).get("/Title")
    except _Skipped:
        raise
    except Exception as exc:  # pypdf raises many kinds on damaged files: each one is this file's problem
        raise _Skipped(f"an unreadable PDF ({type(exc).__name__}: {exc})") from None
    finally:
        pypdf_log.setLevel(level)
    return text, _title_text(title), {}


READERS: dict[str, Callable[[bytes, _Notes], tuple[str, str | None, dict]]] = {
    ".txt": _plain_text, ".text": _plain_text, ".md": _markdown, ".markdown": _markdown, ".rst": _restructured_text,
    ".html": _html, ".htm": _html, ".xhtml": _html, ".pdf": _pdf}
"""How each kind of file (by suffix, in any case) reads, from its bytes, as (text, title or None, other fields)."""
WHOLE = frozenset({".pdf"})
"""The kinds read from all of a file's bytes (a PDF's index is at its end), not its first :data:`MAX_FILE_BYTES`."""
DOCUMENT_KINDS = ", ".join(sorted(READERS))


def _title_text(title) -> str | None:
    """A title as a string, or None for none (a list's items joined)."""
    if isinstance(title, list):
        title = " ".join(map(str, title))
    return (str(title).strip() or None) if title is not None else None


def _declared_charset(raw: bytes) -> str | None:
    """The charset an HTML page's ``<meta>`` declares in its first 4 KB, or None."""
    match = re.search(rb"<meta[^>]+charset\s*=\s*[\"']?([\w.:-]+)", raw[:4096], re.IGNORECASE)
    return match.group(1).decode("ascii") if match else None


def _front_matter(text: str, notes: _Notes) -> tuple[str, dict]:
    """A Markdown text without its front matter (YAML between ``---`` lines, or TOML between ``+++`` lines, at the
    very start), and its fields as JSON values (dates as ISO strings); a front matter that does not parse as a
    mapping is left in the text, noted."""
    opener = text[:3]
    if opener not in ("---", "+++"):
        return text, {}
    closer = r"(?:---|\.\.\.)" if opener == "---" else r"\+\+\+"  # YAML's end of a document, "...", closes one too
    match = re.match(rf"{re.escape(opener)}[ \t]*\n(.*?\n)?{closer}[ \t]*(?:\n|$)", text, re.DOTALL)
    if match is None:
        return text, {}
    body = match.group(1) or ""
    try:
        if opener == "+++":
            import tomllib

            fields = tomllib.loads(body)
        else:
            import yaml

            fields = yaml.safe_load(body)
    except Exception as exc:  # yaml.YAMLError, tomllib.TOMLDecodeError: the front matter is not what it says
        notes.unparsed.append(f"{notes.current} ({str(exc).splitlines()[0]})")
        return text, {}
    if fields is None:  # an empty front matter
        fields = {}
    if not isinstance(fields, dict):  # a list or a lone value (a rule and a list in Markdown, maybe): text, noted
        notes.unparsed.append(f"{notes.current} (not a mapping of fields)")
        return text, {}
    try:
        return text[match.end():], {str(name): _json_value(value) for name, value in fields.items()}
    except RecursionError:  # a YAML anchor inside itself (``a: &x [*x]``), or nesting past Python's stack
        notes.unparsed.append(f"{notes.current} (a value that holds itself, or nested too deeply)")
        return text, {}


def _json_value(value):
    """A YAML or TOML value as a JSON one: dates and times as ISO strings, a non-finite number as its text, anything
    else JSON cannot hold as its string."""
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(name): _json_value(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


_UNDERLINE = re.compile(r"([=\-~^\"'`#*+:._])\1*[ \t]*")
_RST_LABEL = re.compile(r"\.\. _[^:]*:.*")


def _leading_heading(text: str, markdown: bool) -> tuple[str, str | None]:
    """(the text without its heading, the heading) when its first line of text is a title: ``# Title``
    (``markdown``), or a line underlined (and perhaps overlined) by one repeated punctuation mark (Markdown's ``===``
    or ``---`` of any length; reST's at least as long as the title, after any ``.. _label:`` lines); else (the text,
    None)."""
    lines = text.split("\n")
    first = next((i for i, line in enumerate(lines) if line.strip() and (markdown or not _RST_LABEL.fullmatch(
        line.strip()))), None)
    if first is None:
        return text, None
    line = lines[first].strip()
    if markdown:
        heading = re.fullmatch(r"#[ \t]+(.*?)(?:[ \t]+#+)?", line)
        if heading and heading.group(1).strip():
            return "\n".join(lines[first + 1:]).lstrip("\n"), heading.group(1).strip()
    overlined = not markdown and _UNDERLINE.fullmatch(line) is not None
    title_at = first + 1 if overlined else first
    title = lines[title_at].strip() if title_at < len(lines) else ""
    under = lines[title_at + 1].strip() if title_at + 1 < len(lines) else ""
    if title and _UNDERLINE.fullmatch(title) is None and _UNDERLINE.fullmatch(under):
        if (under[0] in "=-") if markdown else len(under) >= len(title):
            return "\n".join(lines[title_at + 2:]).lstrip("\n"), title
    return text, None


class _HtmlText(html.parser.HTMLParser):
    """An HTML page's visible text, a line break at each block element, and its ``<title>`` (else its first
    ``<h1>``). Written on the standard library's parser: text is all a search index needs of a page, and a parsing
    library (BeautifulSoup, lxml) would be a dependency for it."""

    HIDDEN = frozenset({"script", "style", "noscript", "template", "svg", "title"})
    BLOCKS = frozenset({"p", "div", "br", "li", "ul", "ol", "tr", "table", "section", "article", "header", "footer",
                        "nav", "aside", "main", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "hr", "dt",
                        "dd", "figcaption", "td", "th"})
    HEAD = frozenset({"title", "meta", "link", "base", "style", "script", "noscript", "template"})
    """What a ``<head>`` holds: any other element starts the body, as browsers read a page whose ``</head>`` is
    missing."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self._parts: list[str] = []
        self._hidden = 0
        self._in_head = False
        self._in: dict[str, list[str] | tuple | None] = {"title": None, "h1": None}

    def handle_starttag(self, tag, attrs):
        if tag == "head":
            self._in_head = True
        elif self._in_head and tag not in self.HEAD:
            self._in_head = False
        if tag in self._in and self._in[tag] is None and not self._hidden:  # an <svg>'s <title> is no page's
            self._in[tag] = []
        if tag in self.HIDDEN:  # (a <title> too: it is the title, wherever it stands, not text)
            self._hidden += 1
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_endtag(self, tag):
        if tag == "head":
            self._in_head = False
        if tag in self.HIDDEN and self._hidden:
            self._hidden -= 1
        if tag in self._in and isinstance(self._in[tag], list):
            self._in[tag] = tuple(self._in[tag])  # done: the first one only
        if tag in self.BLOCKS:
            self._parts.append("\n")

    def handle_data(self, data):
        for gathered in self._in.values():
            if isinstance(gathered, list):
                gathered.append(data)
        if not self._hidden and not self._in_head:
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


def _walk(folder: Path) -> Iterator[tuple[str, list[str]]]:
    """``(folder, file names)`` under ``folder``, hidden ones and semiret's indexes (one built beside its documents)
    left out, links followed (each real folder once); a folder that cannot be listed is an error naming it."""

    def unlisted(error: OSError):
        raise DataFormatError(f"cannot list this folder ({error.strerror or error}): its documents would be missed",
                              error.filename)

    visited: set[str] = set()
    for root, folders, names in os.walk(folder, onerror=unlisted, followlinks=True):
        real = os.path.realpath(root)
        if real in visited:  # a link back up the tree, or a second link to one folder
            folders[:] = []
            continue
        visited.add(real)
        folders[:] = sorted(name for name in folders if not _hidden(name) and not _is_index(Path(root) / name))
        yield root, [name for name in names if not _hidden(name)]


def _is_index(folder: Path) -> bool:
    """Whether ``folder`` holds a semiret index (a ``meta.json`` naming a semiret format: another tool's
    ``meta.json`` beside a user's documents leaves them in)."""
    meta = folder / "meta.json"
    if not meta.is_file():
        return False
    try:
        record = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and str(record.get("format", "")).startswith("semiret.")


def document_files(folder: Path) -> tuple[list[Path], Counter]:
    """The files under ``folder`` that read as documents (:data:`READERS`), in the order of their paths, and how
    many other files each suffix has."""
    found, others = [], Counter()
    for root, names in _walk(folder):
        for name in names:
            suffix = Path(name).suffix.lower()
            if suffix in READERS and _regular(Path(root) / name):
                found.append(Path(root) / name)
            else:
                others["(not a file)" if suffix in READERS else suffix or "(no suffix)"] += 1
    return sorted(found, key=lambda path: path.relative_to(folder).parts), others


def _regular(path: Path) -> bool:
    """Whether ``path`` is a file (a link to one too), not a named pipe or a device: reading one would wait forever.
    A broken link counts as a file (its reading says why it is skipped)."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return True


def holds_documents(folder: Path) -> bool:
    """Whether any file under ``folder`` (hidden ones aside) reads as a document."""
    return any(Path(name).suffix.lower() in READERS for _, names in _walk(folder) for name in names)


def folder_documents(folder: Path, skip_ids: Container[str] = ()) -> Iterator[tuple[int, str, str, str, dict, dict]]:
    """``(position, id, text, title, file fields, front matter)`` for each document file under ``folder``
    (:func:`document_files`) but those ``skip_ids`` names, which are not read; what was skipped, cut or read as
    another encoding is named in warnings at the end."""
    files, others = document_files(folder)
    if others:
        log.warning("%s: %d file%s of other kinds left out (%s); semiret reads %s files as documents", folder,
                    sum(others.values()), "s" * (sum(others.values()) > 1),
                    ", ".join(f"{suffix} {count}" for suffix, count in others.most_common(6))
                    + (", ..." if len(others) > 6 else ""), DOCUMENT_KINDS)
    notes = _Notes()
    for position, path in enumerate(files, 1):
        doc_id = notes.current = path.relative_to(folder).as_posix()
        if doc_id in skip_ids:
            continue
        try:
            problem = document_id_problem(doc_id)
            if problem is not None:
                raise _Skipped(f"its path cannot be a document id: {problem}")
            raw, digest = file_bytes(path, path.suffix.lower() in WHOLE)
            text, title, front_matter = READERS[path.suffix.lower()](raw, notes)
            if not text.strip() and not title:
                raise _Skipped("a file with no text" + (" (a scanned PDF needs OCR first)" if path.suffix.lower()
                                                        == ".pdf" else ""))
            fields = _file_fields(path, path.stat()) | {"file_hash": digest}
        except _Skipped as why:
            notes.skipped.append(f"{doc_id!r} ({why})")
            continue
        except OSError as error:
            notes.skipped.append(f"{doc_id!r} (cannot be read: {error.strerror or error})")
            continue
        yield position, doc_id, text, title or _title_of_name(path), fields, front_matter
    for kind, names in (("skipped", notes.skipped), (f"parsed only as far as their first {MAX_FILE_BYTES:,} bytes",
                                                              notes.cut),
                        ("not UTF-8, read as the encoding named", notes.recoded),
                        ("with a front matter that does not parse, read as text", notes.unparsed)):
        if names:
            log.warning("%s: %d file%s %s: %s", folder, len(names), "s" * (len(names) > 1), kind,
                        "; ".join(names[:5]) + ("; ..." if len(names) > 5 else ""))


def folder_hashes(folder: Path) -> dict[str, str]:
    """``{id: file_hash}`` of each document file under ``folder`` (:func:`file_bytes`; those that cannot be read
    left out): every file read, none parsed."""
    hashes = {}
    for path in document_files(folder)[0]:
        try:
            hashes[path.relative_to(folder).as_posix()] = file_bytes(path)[1]
        except OSError:
            continue  # read, and skipped with the reason, by folder_documents
    return hashes


def _file_fields(path: Path, status: os.stat_result) -> dict:
    """A file's fields, the metadata of every document of a folder: its name, type (suffix), size and modification
    time (ISO 8601, UTC, to the second)."""
    modified = datetime.datetime.fromtimestamp(int(status.st_mtime), datetime.timezone.utc)
    return {"file_name": path.name, "file_type": path.suffix.lower().lstrip("."), "file_size": status.st_size,
            "modified": modified.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _title_of_name(path: Path) -> str:
    """A file's name as a title: ``vacation_policy-2024.md`` reads ``vacation policy 2024``."""
    return " ".join(re.split(r"[-_\s]+", path.stem)).strip()
