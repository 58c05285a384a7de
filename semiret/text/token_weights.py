"""Token weights over a vocabulary's ids: Lucene IDF, IDF computed from a corpus, and ``{token: weight}``
JSON tables (e.g. the MS MARCO IDF).

Lucene's IDF of token indexes, the query sides that only tokenize (``idf``, ``inference-free``), the
inference-free model's frozen query weights and the BM25 teacher; BM25 indexes weigh words with their variant's IDF
(:meth:`semiret.text.bm25.BM25Parameters.idf`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from semiret.errors import DataFormatError, SemiretError
from semiret.text.wordpiece import WordPieceVocabulary

MIN_VOCABULARY_OVERLAP = 0.5


def lucene_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Lucene's BM25 IDF, ``log(1 + (N - df + 0.5) / (df + 0.5))``, always positive."""
    return np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)


def corpus_idf(texts: list[str], vocabulary: WordPieceVocabulary) -> np.ndarray:
    """Lucene IDF of every token over ``texts`` (a token counts once per text), as the inference-free paper's
    ``get_idf.py``; tokens absent from the corpus get 1 (the paper's rule for unseen tokens), excluded ids 0."""
    flat, offsets = vocabulary.encode_batch(texts)
    doc_of = np.repeat(np.arange(len(texts)), np.diff(offsets))
    pairs = np.unique(doc_of.astype(np.int64) * vocabulary.size + flat)
    df = np.bincount(pairs % vocabulary.size, minlength=vocabulary.size)
    idf = lucene_idf(df, len(texts))
    idf[df == 0] = 1.0
    idf[vocabulary.excluded_mask] = 0.0
    return idf


def resolve_table(spec: str | Path) -> str:
    """``msmarco`` -> the shared MS MARCO IDF table; anything else unchanged."""
    if str(spec) == "msmarco":
        from semiret.data.paths import msmarco_idf

        return str(msmarco_idf())
    return str(spec)


def check_weights(weights: np.ndarray, size: int, what: str) -> np.ndarray:
    """``weights`` as float32 over a vocabulary of ``size`` ids, finite and non-negative, or a clear error."""
    weights = np.asarray(weights, np.float32)
    if weights.shape != (size,):
        raise SemiretError(f"the {what} vector has {weights.shape} entries; the vocabulary has {size}")
    if not np.isfinite(weights).all() or (weights < 0).any():
        raise SemiretError(f"{what} weights must be finite and non-negative")
    return weights


def weights_table(weights: np.ndarray, vocabulary: WordPieceVocabulary) -> dict[str, float]:
    """The non-zero ``weights`` as a ``{token: weight}`` table (what :func:`load_token_weights` reads)."""
    return {vocabulary.token(i): round(float(weights[i]), 5) for i in np.flatnonzero(weights > 0)}


def load_token_weights(path: str | Path, vocabulary: WordPieceVocabulary) -> np.ndarray:
    """A ``{token: weight}`` JSON table (or ``msmarco``) as an array over ``vocabulary`` ids (missing tokens weigh 0).

    Rejects tables written for another vocabulary (under half of their tokens known) and
    negative or non-finite weights, naming the offending token.
    """
    path = Path(resolve_table(path))
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataFormatError("token-weight table not found", path) from None
    except json.JSONDecodeError as exc:
        raise DataFormatError(f"malformed JSON ({exc.msg}, line {exc.lineno})", path) from None
    if not isinstance(table, dict) or not table:
        raise DataFormatError("expected a non-empty JSON object {token: weight}", path)
    weights = np.zeros(vocabulary.size, np.float32)
    token_ids = vocabulary.token_ids()
    known = 0
    for token, weight in table.items():
        if not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise DataFormatError(f"weight of token {token!r} must be a finite non-negative number, got {weight!r}", path)
        token_id = token_ids.get(token)
        if token_id is not None:
            weights[token_id] = weight
            known += 1
    if known < MIN_VOCABULARY_OVERLAP * len(table):
        raise DataFormatError(
            f"only {known} of {len(table)} tokens belong to the {vocabulary.name} vocabulary: "
            "this table was made for another tokenizer", path)
    weights[vocabulary.excluded_mask] = 0.0
    return weights
