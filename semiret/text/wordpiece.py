"""A WordPiece (or any Hugging Face fast tokenizer) vocabulary space for bag-of-tokens and learned-sparse indexes.

Index dimensions are the tokenizer's own ids. Ids that carry no meaning for retrieval are excluded
explicitly: special tokens, ``[unusedN]`` placeholders, and every id below ``min_id`` when given
(SiDR drops ids below 999 of bert-base-uncased, which are exactly those).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from functools import cached_property, lru_cache
from itertools import chain
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from semiret.errors import SemiretError

UNUSED_TOKEN = re.compile(r"^\[unused\d+\]$|^<unused\d+>$")
WORD_BOUNDARY = re.compile(r"[ \t\n\r]+")
"""Characters every BERT-style tokenizer splits words on (Python's ``str.split()`` splits on more, such as
``\\x1c``, which BERT's normalizer deletes instead)."""
WORD_CACHE_SIZE = 500_000
"""Distinct query words kept by :meth:`WordPieceVocabulary.encode`; the cache starts over when full."""
WORD_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC", "StripAccents"}
WORD_LOCAL_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}


def resolve_tokenizer_file(name_or_path: str) -> Path:
    """Find ``tokenizer.json`` for a registry name, a model directory or the file itself."""
    from semiret.data.packaged import resolve_model_path

    path = Path(name_or_path)
    if path.is_file():
        return path
    directory = resolve_model_path(name_or_path, tokenizer_only=True)
    candidate = directory / "tokenizer.json"
    if not candidate.is_file():
        raise SemiretError(f"{directory} has no tokenizer.json (a Hugging Face fast tokenizer is required)")
    return candidate


def document_tokenizer(model: str) -> str:
    """Where the tokenizer a model reads documents with is: its own folder (or name), or, for a model of two encoders
    (SiDR's), its document encoder's folder (``document/``)."""
    documents = Path(model) / "document"
    return str(documents) if (documents / "tokenizer.json").is_file() else model


def tokenizer_fingerprint(name_or_path: str) -> str:
    """A short hash of a tokenizer's ``tokenizer.json``: an index records the one it was built with, so a query
    side can refuse to tokenize with another."""
    return hashlib.sha1(resolve_tokenizer_file(name_or_path).read_bytes()).hexdigest()[:16]


def _file_key(path: Path) -> tuple[str, int, int]:
    """A tokenizer file named with its modification time and size: what the caches below are keyed on, so a file
    changed in place is read again."""
    status = path.stat()
    return str(path.resolve()), status.st_mtime_ns, status.st_size


# Reading tokenizer.json and listing its vocabulary for the excluded ids were nearly all the time an index took to
# open (a bag-of-tokens index of 100 documents, opened and searched once: 103 ms, 3-6 ms with these caches;
# bench/open_index.py), and a process opens the indexes of one tokenizer again and again (the server after each
# write, a query side and a document side, every test). A Tokenizer configured once is only read from afterwards
# (encoding takes it immutably, from any thread), so one per file and length limit is shared.
@lru_cache(maxsize=32)
def _loaded_tokenizer(file: tuple[str, int, int], max_length: int | None) -> Tokenizer:
    tokenizer = Tokenizer.from_file(file[0])
    tokenizer.no_padding()
    if max_length:
        tokenizer.enable_truncation(max_length)
    else:
        tokenizer.no_truncation()
    return tokenizer


@lru_cache(maxsize=32)
def _special_and_unused(file: tuple[str, int, int]) -> np.ndarray:
    """Mask over the ids of the special and ``[unusedN]`` tokens (read-only: callers copy it)."""
    tokenizer = _loaded_tokenizer(file, None)
    mask = np.zeros(tokenizer.get_vocab_size(), dtype=bool)
    for token, token_id in tokenizer.get_vocab(with_added_tokens=True).items():
        if UNUSED_TOKEN.match(token):
            mask[token_id] = True
    for added in tokenizer.get_added_tokens_decoder().values():
        if added.special:
            mask[tokenizer.token_to_id(added.content)] = True
    mask.setflags(write=False)
    return mask


@lru_cache(maxsize=32)
def _word_local(file: tuple[str, int, int]) -> bool:
    """See :attr:`WordPieceVocabulary.word_local`."""
    spec = json.loads(_loaded_tokenizer(file, None).to_str())

    def types(component) -> set[str]:
        if not component:
            return set()
        inner = component.get("normalizers") or component.get("pretokenizers")
        return set().union(*map(types, inner)) if inner else {component["type"]}

    pre_tokenizers = types(spec.get("pre_tokenizer"))
    return (types(spec.get("normalizer")) <= WORD_LOCAL_NORMALIZERS
            and bool(pre_tokenizers) and pre_tokenizers <= WORD_LOCAL_PRE_TOKENIZERS
            and not any(WORD_BOUNDARY.search(t["content"]) for t in spec.get("added_tokens", [])))


class WordPieceVocabulary:
    """Batched tokenization into vocabulary ids, with the excluded-id rule applied."""

    def __init__(self, tokenizer: str = "bert-base-uncased", max_length: int | None = None,
                 min_id: int | None = None):
        self.name = tokenizer
        self.max_length = max_length
        self.min_id = min_id
        self._file = _file_key(resolve_tokenizer_file(tokenizer))
        self._tokenizer = _loaded_tokenizer(self._file, max_length)
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

    @property
    def size(self) -> int:
        return self._tokenizer.get_vocab_size()

    @cached_property
    def excluded_mask(self) -> np.ndarray:
        """Boolean mask over ids: True for ids that never enter an index."""
        mask = _special_and_unused(self._file).copy()
        if self.min_id:
            mask[: self.min_id] = True
        return mask

    def token_ids(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def token(self, token_id: int) -> str:
        return self._tokenizer.id_to_token(int(token_id))

    def encode_batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize texts (in parallel, in Rust) into flat ids and per-text offsets (CSR layout).

        Excluded ids are kept here: callers drop them with :attr:`excluded_mask` (:meth:`encode` does, for one text).
        """
        encodings = self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)
        id_lists = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
        offsets = np.zeros(len(id_lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(offsets[-1]))
        return flat, offsets

    def encode(self, text: str) -> list[int]:
        """Ids of one text with excluded ids removed (the query path).

        Tokenizers that cut words at whitespace and handle each word alone (BERT's WordPiece) go through a
        cache from words to ids: a Rust call per query costs more than the search of a small index, and
        query words repeat. The result is what tokenizing the whole text gives (fuzz-tested; also checked on every
        SciFact text).
        """
        if not self.word_local:
            return self._filtered(self._tokenizer.encode(text, add_special_tokens=False).ids)
        cache, ids = self._word_cache, []
        for word in WORD_BOUNDARY.split(text):
            word_ids = cache.get(word)
            if word_ids is None:
                if len(cache) >= WORD_CACHE_SIZE:
                    cache.clear()
                word_ids = cache[word] = self._tokenizer.encode(word, add_special_tokens=False).ids
            ids += word_ids
        return self._filtered(ids[: self.max_length] if self.max_length else ids)

    def token_counts(self, words: list[str]) -> list[int]:
        """The number of tokens each word is cut into (no special tokens added; every id counted, as the model reads
        them all): a passage's size in tokens is its words' sum (``--chunk-tokens``), exactly so for tokenizers that
        read each word alone (:attr:`word_local`), closely for the others. Each distinct word is tokenized once (the
        new ones of a call in one batch, in Rust) and its count kept."""
        counts = self._count_cache
        known = [counts.get(word) for word in words]
        missing = list(dict.fromkeys(word for word, count in zip(words, known) if count is None))
        if not missing:
            return known
        new = {word: len(encoding.ids) for word, encoding in
               zip(missing, self._tokenizer.encode_batch_fast(missing, add_special_tokens=False))}
        if len(counts) + len(new) > WORD_CACHE_SIZE:
            counts.clear()
        counts.update(new)
        return [new[word] if count is None else count for word, count in zip(words, known)]

    @cached_property
    def _count_cache(self) -> dict[str, int]:
        return {}

    def _filtered(self, ids: list[int]) -> list[int]:
        excluded = self._excluded_ids  # a set: indexing the numpy mask per id costs more than the search
        return [i for i in ids if i not in excluded]

    @cached_property
    def _excluded_ids(self) -> frozenset[int]:
        return frozenset(np.flatnonzero(self.excluded_mask).tolist())

    @cached_property
    def word_local(self) -> bool:
        """Whether the tokenizer splits at ``[ \\t\\n\\r]`` and tokenizes each word independently of its
        neighbours (its normalizer and pre-tokenizer are BERT-style, no added token spans a space), so
        :meth:`encode` may tokenize word by word."""
        return _word_local(self._file)

    @cached_property
    def _word_cache(self) -> dict[str, list[int]]:
        return {}

    def config(self) -> dict:
        return {"type": "wordpiece", "tokenizer": self.name, "max_length": self.max_length, "min_id": self.min_id}
