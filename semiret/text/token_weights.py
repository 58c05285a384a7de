"""Token-weight tables (``{token: weight}`` JSON, e.g. MS MARCO IDF) as arrays over a vocabulary's ids.

Shared by the query sides that only tokenize (the ``idf`` and ``inference-free`` retrievers) and by the
inference-free encoder's frozen IDF vector."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from semiret.errors import DataFormatError
from semiret.text.wordpiece import WordPieceVocabulary

MIN_VOCABULARY_OVERLAP = 0.5


def load_token_weights(path: str | Path, vocabulary: WordPieceVocabulary) -> np.ndarray:
    """A ``{token: weight}`` JSON table as an array over ``vocabulary`` ids (missing tokens weigh 0).

    Rejects tables written for another vocabulary (under half of their tokens known) and
    negative or non-finite weights, naming the offending token.
    """
    path = Path(path)
    try:
        table = json.loads(Path(path).read_text(encoding="utf-8"))
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
