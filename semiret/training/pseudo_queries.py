"""Pseudo-queries from a corpus alone, for pre-training without labels.

- **independent cropping** (Contriever, Izacard et al.): a random span of the document's words;
- **inverse cloze** (ICT, Lee et al.): one sentence of the document stands for a query about it.

:func:`generate_pseudo_pairs` makes (pseudo-query, pseudo-passage) pairs for contrastive pre-training (NAIL):
half inverse cloze with the span *removed* from the passage, half independent cropping (the passage another
span of the document, drawn independently of the query's).

Each pseudo-query remembers its source document (the "positive" of the candidate list). The document
itself is kept whole (ICT's sentence removal is not applied): the training target is the teachers'
score distribution over the candidates, and the teachers score the cached corpus vectors, so the
candidate texts must be the corpus texts.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Container, Iterable, Sequence

from semiret.data.collection import Document
from semiret.errors import SemiretError

KINDS = ("crop", "ict")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class PseudoQuery:
    id: str
    text: str
    document_id: str
    kind: str


def random_span(n_words: int, rng: random.Random, min_words: int, max_words: int) -> tuple[int, int]:
    """(start, end) of a random contiguous span of ``min_words``..``max_words`` of ``n_words`` (all when fewer)."""
    if n_words <= min_words:
        return 0, n_words
    length = rng.randint(min_words, min(max_words, n_words))
    start = rng.randint(0, n_words - length)
    return start, start + length


MIN_QUERY_WORDS = 4
"""Words a document needs to have a known-item pseudo-query cut from it."""


def independent_crop(words: Sequence[str], rng: random.Random, min_words: int = 4, max_words: int = 12) -> str:
    """A random contiguous span of ``min_words``..``max_words`` words (the whole text when shorter)."""
    start, end = random_span(len(words), rng, min_words, max_words)
    return " ".join(words[start:end])


def inverse_cloze(text: str, rng: random.Random, min_words: int = 4, max_words: int = 40) -> str | None:
    """A random sentence of ``min_words``..``max_words`` words (cut to ``max_words``), or None if there is none
    or the text is a single sentence: a query that is the whole document (Vaswani's abstracts have no
    punctuation at all) teaches nothing but exact self-matching."""
    sentences = [s.split() for s in SENTENCE_END.split(text)]
    usable = [s for s in sentences if len(s) >= min_words]
    if not usable or len(sentences) < 2:
        return None
    return " ".join(rng.choice(usable)[:max_words])


def generate_pseudo_queries(documents: Iterable[Document], per_document: int = 2, seed: int = 0,
                            kinds: Sequence[str] = KINDS, min_words: int = 4, max_words: int = 12,
                            prefix: str = "pq") -> list[PseudoQuery]:
    """``per_document`` pseudo-queries of each document, kinds alternating (ICT falls back to cropping when a
    document has no usable sentence). Deterministic for a seed. Documents with fewer than ``min_words`` words
    are skipped."""
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise SemiretError(f"pseudo-query kinds must be among {', '.join(KINDS)}, got {list(kinds)}")
    if per_document < 1:
        raise SemiretError(f"per_document must be at least 1, got {per_document}")
    rng = random.Random(seed)
    queries = []
    for doc in documents:
        words = doc.full_text.split()
        if len(words) < min_words:
            continue
        for j in range(per_document):
            kind = kinds[(j + rng.randrange(len(kinds))) % len(kinds)] if len(kinds) > 1 else kinds[0]
            text = inverse_cloze(doc.text or doc.full_text, rng, min_words) if kind == "ict" else None
            if text is None:
                kind, text = "crop", independent_crop(words, rng, min_words, max_words)
            queries.append(PseudoQuery(f"{prefix}-{doc.id}-{j}", text, doc.id, kind))
    return queries


def known_item_queries(documents: Sequence[Document], count: int, seed: int, prefix: str,
                       excluded: Container[str] = ()) -> list[PseudoQuery]:
    """One pseudo-query (crop or sentence) of each of ``count`` documents drawn with ``seed`` among those long enough
    to cut one from (an empty document gives none), each judged relevant to the document it was cut from: known-item
    queries where there are no labels (``semiret adapt``'s check and its training queries; ``excluded``: ids of
    documents not to draw, the check's when drawing the training's)."""
    usable = [d for d in documents if d.id not in excluded and len(d.full_text.split()) >= MIN_QUERY_WORDS]
    sample = random.Random(seed).sample(usable, min(count, len(usable)))
    return generate_pseudo_queries(sample, per_document=1, seed=seed, prefix=prefix, min_words=MIN_QUERY_WORDS)


@dataclass(frozen=True)
class PseudoPair:
    """A pseudo-query and the pseudo-passage it should retrieve, both cut from one document."""

    id: str
    query: str
    passage: str
    document_id: str
    kind: str


def inverse_cloze_pair(words: Sequence[str], rng: random.Random, min_words: int = 4,
                       max_words: int = 12) -> tuple[str, str]:
    """(a random span, the document with that span removed): ICT as NAIL pre-trains, removal always applied."""
    start, end = random_span(len(words), rng, min_words, max_words)
    return " ".join(words[start:end]), " ".join([*words[:start], *words[end:]])


def cropped_pair(words: Sequence[str], rng: random.Random, min_words: int = 4, max_words: int = 12) -> tuple[str, str]:
    """(a random span, another span of half to all the words, drawn independently: they may overlap)."""
    start, end = random_span(len(words), rng, max(min_words, len(words) // 2), len(words))
    return independent_crop(words, rng, min_words, max_words), " ".join(words[start:end])


def generate_pseudo_pairs(documents: Iterable[Document], per_document: int = 1, seed: int = 0, min_words: int = 4,
                          max_words: int = 12, prefix: str = "pp") -> list[PseudoPair]:
    """``per_document`` pairs of each document with at least ``2 * min_words`` words (inverse cloze needs words
    left over), kinds alternating over the whole list so half are inverse cloze and half cropping.
    Deterministic for a seed."""
    if per_document < 1:
        raise SemiretError(f"per_document must be at least 1, got {per_document}")
    rng = random.Random(seed)
    makers = {"ict": inverse_cloze_pair, "crop": cropped_pair}
    pairs = []
    for doc in documents:
        words = doc.full_text.split()
        if len(words) < 2 * min_words:
            continue
        for j in range(per_document):
            kind = ("ict", "crop")[len(pairs) % 2]
            query, passage = makers[kind](words, rng, min_words, max_words)
            pairs.append(PseudoPair(f"{prefix}-{doc.id}-{j}", query, passage, doc.id, kind))
    return pairs
