"""Passages' budgets in tokens (``--chunk-tokens``): a :class:`~semiret.data.chunking.Chunking` given the count of a
tokenizer, the one it names, else (a new index) the one the index's model reads documents with; the chunking then
records that tokenizer and its fingerprint, so that documents added later, and passages joined again, are counted by
the same tokenizer."""

from __future__ import annotations

import dataclasses
from functools import cached_property
from pathlib import Path
from typing import Callable

from semiret.data.chunking import Chunking
from semiret.data.packaged import located
from semiret.errors import SemiretError
from semiret.text.wordpiece import WordPieceVocabulary, document_tokenizer, tokenizer_fingerprint


def recorded_chunking(record: dict) -> Chunking:
    """The chunking an index's ``meta.json`` records, counting its tokens where its budget is in tokens."""
    return counting(Chunking.recorded(record))


def counting(chunking: Chunking) -> Chunking:
    """``chunking`` given the count of the tokenizer it names (none needed for a budget in words)."""
    if chunking.tokenizer is None:
        return chunking
    return dataclasses.replace(chunking, count_tokens=TokenCount(chunking.tokenizer, chunking.tokenizer_fingerprint))


class TokenCount:
    """The tokens a named tokenizer cuts each of a list of words into. The tokenizer is found, and its
    ``tokenizer.json`` checked against the fingerprint recorded, on the first count (an index's chunking is read
    wherever its passages are, mostly to count none)."""

    def __init__(self, tokenizer: str, fingerprint: str | None):
        self.tokenizer, self.fingerprint = tokenizer, fingerprint

    def __call__(self, words: list[str]) -> list[int]:
        return self._vocabulary.token_counts(words)

    @cached_property
    def _vocabulary(self) -> WordPieceVocabulary:
        where = document_tokenizer(located(self.tokenizer))
        now = tokenizer_fingerprint(where)
        if self.fingerprint is not None and now != self.fingerprint:
            raise SemiretError(f"the passages were cut counting the tokens of {self.tokenizer}, whose tokenizer.json "
                               f"has changed since (fingerprint {self.fingerprint} then, {now} now): documents added "
                               "now would be cut otherwise; give it its tokenizer back, or rebuild the index")
        return WordPieceVocabulary(where)


def counted_for_index(chunking: Chunking, index_config: Callable[[], dict], retriever: str) -> Chunking:
    """``chunking`` as a new index records it: a budget in tokens counted by the tokenizer it names, else by the one
    its documents are read with (what the document side's ``index_config()`` records: its WordPiece analyzer's, its
    encoder's model's; a hybrid's parts'), with that tokenizer's fingerprint."""
    if chunking.tokens is None:
        return chunking
    tokenizer = chunking.tokenizer
    if tokenizer is None:
        found = list(dict.fromkeys(_tokenizers(index_config())))
        if len(found) != 1:
            read = f"reads documents with several tokenizers ({', '.join(found)})" if found else "has no tokenizer"
            raise SemiretError(f"--chunk-tokens counts the tokens of the index's model, and a {retriever} index {read}:"
                               " name the tokenizer that counts (--chunk-tokenizer; Chunking(tokenizer=...)), or give "
                               "--chunk-words")
        tokenizer = found[0]
    else:
        tokenizer = recorded_tokenizer(tokenizer)
    try:
        fingerprint = tokenizer_fingerprint(document_tokenizer(located(tokenizer)))
    except SemiretError as exc:
        raise SemiretError(f"--chunk-tokens cannot count with the tokenizer of {tokenizer}: {exc}; name one that "
                           "counts (--chunk-tokenizer)") from None
    return counting(dataclasses.replace(chunking, tokenizer=tokenizer, tokenizer_fingerprint=fingerprint))


def recorded_tokenizer(tokenizer: str) -> str:
    """The name an index records of a tokenizer given to it: a path made absolute (a relative one would name another
    file wherever the index is opened from), a registry name as given."""
    return str(Path(tokenizer).resolve()) if Path(tokenizer).exists() else tokenizer


def _tokenizers(index_config: dict) -> list[str]:
    """The tokenizers an index's documents are read with, as its ``index_config`` records them (a model by the name
    the index keeps of it); none for words (BM25) or vectors given with the documents."""
    analyzer = index_config.get("analyzer") or {}
    kind = analyzer.get("type")
    own = analyzer.get("tokenizer") if kind == "wordpiece" else analyzer.get("model") if kind == "encoder" else None
    parts = [name for part in (index_config.get("parts") or {}).values() for name in _tokenizers(part)]
    return ([own] if own else []) + parts
