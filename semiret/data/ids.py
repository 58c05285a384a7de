"""Document ids: what makes one unusable, and a compact set of those a corpus reader has read, to refuse a repeated
one.

A set of the id strings costs about 100 bytes an id (a gigabyte for ten million documents), the one part of a
build's memory that grew with the corpus once builds were written in parts. This one keeps 64-bit hashes in an
open-addressing table filled by a compiled loop (Python's sets and dicts hold an object per entry; numpy has no hash
set): 16 to 32 bytes an id (the table kept at most half full; about 48 for a moment while it doubles). A hash met
again is reported for the caller to confirm, as two ids may share one (a few chances in a million over ten million
ids).
"""

from __future__ import annotations

import re

import numpy as np

from semiret.compiled import kernel

HASH_MASK = 2**64 - 1
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def document_id_problem(doc_id: str) -> str | None:
    """What makes ``doc_id`` unusable as a document id, or None: blank, holding a control character (a
    newline or a tab breaks TREC runs, TSV files and the URL that names the document) or a lone surrogate."""
    if not doc_id.strip():
        return "empty document id"
    control = _CONTROL_CHARACTER.search(doc_id)
    if control is not None:
        return (f"document id {doc_id!r} holds the control character {control.group()!r}: ids may not hold "
                "newlines, tabs or other control characters")
    return surrogate_problem(doc_id, "document id")


def surrogate_problem(text: str, what: str) -> str | None:
    """Why ``text`` cannot be stored, if it holds a lone UTF-16 surrogate (half an emoji cut in two, a JSON
    ``"\\ud800"``, a file name that is not UTF-8), or None: no file can hold it as UTF-8, so a write would fail
    half-way. ``what`` names ``text`` in the message."""
    if text.isascii():  # (a flag of the string: no scan)
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"{what} holds a lone surrogate ({text[exc.start]!r} at character {exc.start}): half of a character, "
                "which cannot be stored as UTF-8")
    return None

INITIAL_SLOTS = 1024


@kernel
def _insert(table, hashes, seen_before):
    """Insert ``hashes`` (never 0: the empty slot) into ``table`` (linear probing, its length a power of two);
    flag those found there already, also earlier in ``hashes``. Returns how many were new."""
    mask = table.shape[0] - 1
    added = 0
    for i in range(hashes.shape[0]):
        h = hashes[i]
        slot = h & mask
        while table[slot] != 0 and table[slot] != h:
            slot = (slot + 1) & mask
        if table[slot] == h:
            seen_before[i] = True
        else:
            table[slot] = h
            added += 1
    return added


class IdHashSet:
    """Ids as 64-bit hashes (Python's, so only within one process): :meth:`add_many` says which may repeat."""

    def __init__(self):
        self._table = np.zeros(INITIAL_SLOTS, np.uint64)
        self._count = 0

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return self._table.nbytes

    def add_many(self, ids: list[str]) -> np.ndarray:
        """Add ``ids``; the positions of those whose hash was there already (from earlier calls or earlier in
        ``ids``): repeated ids, or rarely another id's hash."""
        hashes = np.fromiter(((hash(i) & HASH_MASK) or 1 for i in ids), np.uint64, len(ids))
        slots = len(self._table)
        while 2 * (self._count + len(ids)) > slots:  # at most half full: probes stay short
            slots *= 2
        if slots != len(self._table):
            old, self._table = self._table, np.zeros(slots, np.uint64)
            _insert(self._table, old[old != 0], np.zeros(self._count, bool))
        seen_before = np.zeros(len(ids), bool)
        self._count += _insert(self._table, hashes, seen_before)
        return np.flatnonzero(seen_before)
