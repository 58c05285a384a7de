"""Token-weight tables (IDF) for query sides that only tokenize: from the corpus or from a JSON file.

The table loader lives in :mod:`semiret.text.token_weights` (encoders use it too); it is re-exported here.
"""

from semiret.text.token_weights import MIN_VOCABULARY_OVERLAP, load_token_weights

__all__ = ["MIN_VOCABULARY_OVERLAP", "load_token_weights"]
