"""BM25's document side, the one place it is computed: term-frequency saturation with length normalisation,
for the ``bm25`` index (over words), the BM25 teacher, and the lexical prior of inference-free models (over a
tokenizer's ids)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import typing

import numpy as np

from semiret.errors import SemiretError
from semiret.text.wordpiece import WordPieceVocabulary

if typing.TYPE_CHECKING:  # scipy is imported where a matrix is made: the command line starts without it
    import scipy.sparse as sp


BM25_VARIANTS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
"""The BM25 variants of Kamphuis et al. (ECIR 2020, "Which BM25 do you mean?"), as bm25s names and computes them."""
DELTA_VARIANTS = ("bm25l", "bm25+")
"""The variants with a delta."""
DEFAULT_DELTA = 0.5
BM25_PARAMETER_NAMES = ("k1", "b", "variant", "delta")
"""What :class:`BM25Parameters` holds: what a BM25 index's weights are computed with."""


@dataclass
class BM25Parameters:
    k1: float = 1.5
    b: float = 0.75
    variant: str = "lucene"
    """One of :data:`BM25_VARIANTS`: how the term frequency saturates and the IDF is computed."""
    delta: float = 0.5
    """BM25L's and BM25+'s lower bound of a term's part (the others have none)."""

    def __post_init__(self) -> None:
        for name in ("k1", "b", "delta"):  # (a grid's value as written, "abc" or true, failed deep in arithmetic)
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise SemiretError(f"BM25's {name} (--{name}) must be a number, got {value!r}")
        if not (math.isfinite(self.k1) and self.k1 >= 0):
            raise SemiretError(f"BM25's k1 (--k1) must be a finite number of at least 0, got {self.k1}")
        if not 0.0 <= self.b <= 1.0:
            raise SemiretError(f"BM25's b (--b) must be between 0 and 1, got {self.b}")
        if self.variant not in BM25_VARIANTS:
            raise SemiretError(f"BM25's variant (--variant) must be one of {', '.join(BM25_VARIANTS)}, got "
                               f"{self.variant!r}")
        if not (math.isfinite(self.delta) and self.delta >= 0):
            raise SemiretError(f"BM25's delta (--delta) must be a finite number of at least 0, got {self.delta}")
        if self.variant == "bm25l" and self.k1 == 0:
            raise SemiretError("BM25L with k1 = 0 weighs every term of a document as its absence: give k1 > 0")
        if self.delta != DEFAULT_DELTA and self.variant not in DELTA_VARIANTS:
            raise SemiretError(f"BM25's delta (--delta) is BM25L's and BM25+'s; {self.variant} has none (give "
                               f"--variant bm25l or bm25+, or leave delta out)")

    @property
    def variant_code(self) -> int:
        """The variant's position in :data:`BM25_VARIANTS`, as the search kernel reads it."""
        return BM25_VARIANTS.index(self.variant)

    def config(self) -> dict:
        """What an index records: the variant only when not Lucene's (indexes read as before), delta only where
        the variant has one."""
        recorded = {"k1": self.k1, "b": self.b}
        if self.variant != "lucene":
            recorded["variant"] = self.variant
        if self.variant in DELTA_VARIANTS:
            recorded["delta"] = self.delta
        return recorded

    def _length_norm(self, doclen: np.ndarray, avgdl: float) -> np.ndarray:
        return 1.0 - self.b + self.b * doclen / max(avgdl, 1e-9)

    def _absent(self) -> float:
        """BM25L's term part for a term a document lacks, which every document gets (see :meth:`saturation`)."""
        return (self.k1 + 1) * self.delta / (self.k1 + self.delta)

    def saturation(self, tf: np.ndarray, doclen: np.ndarray, avgdl: float) -> np.ndarray:
        """The document side of BM25, a term's part before its IDF, as bm25s computes it for the variant: Lucene's
        and Robertson's ``tf / (tf + k1 (1 - b + b dl/avgdl))`` (without the rank-preserving ``(k1+1)``), ATIRE's
        ``(k1+1) tf / (tf + k1 (...))``, BM25L's ``(k1+1) (c+delta) / (k1+c+delta)`` with ``c = tf / (1 - b + b
        dl/avgdl)``, BM25+'s ATIRE part plus delta. BM25L and BM25+ give a term a document lacks a part too, the
        same for every document (``tf = 0``): stored less that part, as bm25s stores them, so a search reads only
        the postings; the ranking is the variant's, each score lower by the same amount per query."""
        norm = self._length_norm(doclen, avgdl)
        if self.variant == "bm25l":
            c = tf / norm
            return ((self.k1 + 1) * (c + self.delta) / (self.k1 + c + self.delta) - self._absent()).astype(np.float32)
        scale = 1.0 if self.variant in ("lucene", "robertson") else self.k1 + 1  # BM25+'s delta: a part of absence
        return (scale * tf / (tf + self.k1 * norm)).astype(np.float32)

    def term_frequency(self, saturation: np.ndarray, doclen: np.ndarray, avgdl: float) -> np.ndarray:
        """Invert :meth:`saturation`, so merges need not re-read documents: exact for integer tf while float32
        still tells the weight from its ceiling; past that (a term tens of thousands of times in a document, with
        k1 near 0) the count is taken as at most the document's length, whose weight is the same to float32."""
        if self.k1 == 0:
            return np.ones_like(saturation)
        norm = self._length_norm(doclen, avgdl)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.variant == "bm25l":
                part = saturation + self._absent()  # (k1+1) x / (k1 + x), x = c + delta
                tf = (part * self.k1 / (self.k1 + 1 - part) - self.delta) * norm
            else:
                share = saturation if self.variant in ("lucene", "robertson") else saturation / (self.k1 + 1)
                tf = share * self.k1 * norm / (1.0 - share)
        longest = np.broadcast_to(np.asarray(doclen, np.float64), np.shape(tf))
        tf = np.where(np.isfinite(tf) & (tf >= 0), tf, longest)
        return np.rint(np.clip(tf, 1.0, np.maximum(longest, 1.0)))

    def idf(self, df: np.ndarray, n_docs: int) -> np.ndarray:
        """Each term's IDF over ``n_docs`` documents as the variant computes it (0 for terms no document holds; never
        negative: Robertson's is clipped at 0, as bm25s does)."""
        df = np.asarray(df, np.float64)
        held = np.maximum(df, 1.0)
        n = float(n_docs)
        if self.variant == "lucene":
            idf = np.log1p((n - df + 0.5) / (df + 0.5))
        elif self.variant == "robertson":
            idf = np.log(np.maximum((n - df + 0.5) / (df + 0.5), 1.0))
        elif self.variant == "atire":
            idf = np.log(n / held)
        elif self.variant == "bm25l":
            idf = np.log((n + 1) / (df + 0.5))
        else:
            idf = np.log((n + 1) / held)
        return np.where(df > 0, idf, 0.0).astype(np.float32)

    def weights(self, counts: sp.csr_matrix, avgdl: float | None = None,
                lengths: np.ndarray | None = None) -> sp.csr_matrix:
        """Lucene's ``(k1 + 1) tf / (tf + k1 (1 - b + b dl/avgdl))`` for every non-zero of a documents x terms count
        matrix (the BM25 teacher's); lengths default to the rows' sums, ``avgdl`` to their mean."""
        if self.variant != "lucene":
            raise SemiretError(f"weights are Lucene's BM25, not {self.variant}'s")
        if lengths is None:
            lengths = np.asarray(counts.sum(axis=1), np.float32).ravel()
        if avgdl is None:
            avgdl = float(lengths.mean()) if len(lengths) else 1.0
        import scipy.sparse as sp

        tf = counts.tocoo()
        values = (self.k1 + 1) * self.saturation(tf.data.astype(np.float32), lengths[tf.row], avgdl)
        return sp.csr_matrix((values, (tf.row, tf.col)), shape=counts.shape)


@lru_cache(maxsize=4)  # built once per vocabulary object; indexing asks for it every batch and every add
def stem_families(vocabulary: WordPieceVocabulary) -> dict[str, list[int]]:
    """Snowball stem -> the vocabulary's whole-word tokens with that stem (``cell``, ``cells``, ``cellular``
    share none; ``liquid`` and ``liquids`` share one)."""
    from semiret.text.analyzer import WordAnalyzer

    analyzer, excluded = WordAnalyzer(stopwords="none", stemmer="english"), vocabulary.excluded_mask
    families: dict[str, list[int]] = {}
    for token, token_id in vocabulary.token_ids().items():
        if token.isalpha() and not excluded[token_id]:  # whole words only, never ## continuation pieces
            families.setdefault(analyzer.term(token), []).append(token_id)
    return families


def token_counts(vocabulary: WordPieceVocabulary, texts: list[str],
                 families: dict[str, list[int]] | None = None) -> tuple[sp.csr_matrix, np.ndarray]:
    """(documents x vocabulary counts of each text's whole tokenization, each text's length in tokens); no
    truncation, special and excluded tokens left out. With stem ``families`` each word also counts for the
    other whole-word tokens of its stem, so a query token meets its document's morphological variants."""
    from semiret.text.analyzer import WordAnalyzer

    analyzer = WordAnalyzer(stopwords="none", stemmer="english") if families is not None else None
    token_ids = vocabulary.token_ids() if analyzer is not None else {}
    rows, cols, lengths = [], [], []
    for i, text in enumerate(texts):
        ids = vocabulary.encode(text)
        lengths.append(len(ids))
        if analyzer is not None:
            for word in analyzer.words(text):
                own = token_ids.get(word)
                ids = ids + [v for v in families.get(analyzer.term(word), ()) if v != own]
        rows.append(np.full(len(ids), i, np.int64))
        cols.append(np.asarray(ids, np.int64))
    import scipy.sparse as sp

    row = np.concatenate(rows) if rows else np.empty(0, np.int64)
    col = np.concatenate(cols) if cols else np.empty(0, np.int64)
    counts = sp.csr_matrix((np.ones(len(row), np.float32), (row, col)), shape=(len(texts), vocabulary.size))
    counts.sum_duplicates()
    return counts, np.asarray(lengths, np.float32)


@dataclass
class LexicalPrior:
    """BM25 weights of a document's own tokens, times ``weight``, added to an inference-free model's learned
    document weights (beyond the paper; docs/results.md).

    The query side multiplies each query token by its IDF whatever the document weights are, so the score
    becomes ``learned + weight * BM25`` over the tokenizer's tokens: fusion with BM25 inside one sparse index,
    at no query cost. A small student trained on one collection keeps BM25's term-frequency saturation and
    length normalisation on corpora it has never seen, and learns only what it adds (expansion, reweighting).
    ``avgdl`` is the corpus's mean length in tokens, taken from the first batch an index is built from (and
    kept for documents added later)."""

    weight: float
    k1: float = 1.5
    b: float = 0.75
    avgdl: float | None = None
    stems: bool = False
    """Each document word also counts for the other whole-word tokens of its Snowball stem
    (:func:`stem_families`): what stemming gives BM25 over words."""

    def __post_init__(self):
        if not (np.isfinite(self.weight) and self.weight >= 0):
            raise SemiretError(f"the lexical prior's weight must be a number >= 0, got {self.weight}")

    @classmethod
    def from_config(cls, config: dict | None) -> "LexicalPrior | None":
        return cls(**config) if config and config.get("weight") else None

    def config(self) -> dict:
        return asdict(self)

    def fit(self, vocabulary: WordPieceVocabulary, texts: list[str]) -> "LexicalPrior":
        """Fix ``avgdl`` from these texts' lengths in tokens (a corpus's first batch), if unset."""
        if self.avgdl is None:
            self.avgdl = max(float(np.mean([len(vocabulary.encode(t)) for t in texts])) if texts else 1.0, 1.0)
        return self

    def vectors(self, vocabulary: WordPieceVocabulary, texts: list[str]) -> sp.csr_matrix:
        """``weight`` x BM25 weights, documents x vocabulary; fixes ``avgdl`` from these texts if unset."""
        families = stem_families(vocabulary) if self.stems else None
        counts, lengths = token_counts(vocabulary, texts, families)
        if self.avgdl is None:
            self.avgdl = max(float(lengths.mean()) if len(lengths) else 1.0, 1.0)  # what fit() gives
        weights = BM25Parameters(self.k1, self.b).weights(counts, self.avgdl, lengths)
        weights.data *= np.float32(self.weight)
        return weights
