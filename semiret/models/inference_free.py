"""Inference-free learned sparse retrieval: SPLADE on the document side; queries are only tokenized,
each distinct token weighted by a frozen IDF vector (no neural network on the query path)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from semiret.errors import SemiretError
from semiret.models.base import BATCH_SIZE
from semiret.models.inputs import check_texts
from semiret.models.registry import load_masked_lm, load_tokenizer, model_directory
from semiret.models.sparse import SparseVectors
from semiret.models.splade import SpladeEncoder
from semiret.text.token_weights import load_token_weights
from semiret.text.wordpiece import WordPieceVocabulary


class InferenceFreeEncoder(SpladeEncoder):
    """``encode_document``: SPLADE vectors. ``encode_query``: ``idf[t]`` for each distinct query token ``t``
    (special and ``[unusedN]`` tokens excluded), as in the inference-free paper's Eq. 5."""

    family = "inference-free"

    def __init__(self, masked_lm, tokenizer, name: str, max_length: int | None = None,
                 idf: np.ndarray | torch.Tensor | None = None):
        super().__init__(masked_lm, tokenizer, name, max_length)
        self.vocabulary = WordPieceVocabulary(str(model_directory(name)))
        idf = torch.ones(self.vocab_size) if idf is None else torch.as_tensor(np.asarray(idf, np.float32))
        if idf.shape != (self.vocab_size,):
            raise SemiretError(f"the IDF vector has {tuple(idf.shape)} entries; {name} has {self.vocab_size} tokens")
        self.register_buffer("idf", idf.float().clone())

    @classmethod
    def from_pretrained(cls, model: str = "splade-tiny", max_length: int | None = None,
                        idf: str | Path | np.ndarray | None = None) -> "InferenceFreeEncoder":
        """``idf``: an array over the vocabulary, or a ``{token: weight}`` JSON table; default all ones."""
        if isinstance(idf, (str, Path)):
            idf = load_token_weights(idf, WordPieceVocabulary(str(model_directory(model))))
        return cls(load_masked_lm(model), load_tokenizer(model), model, max_length, idf)

    def query_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Training-side queries [B, V]: one-hot of the distinct (non-excluded) tokens times IDF."""
        present = torch.zeros(len(input_ids), self.vocab_size, device=input_ids.device)
        present.scatter_(1, input_ids * attention_mask, 1.0)
        excluded = torch.as_tensor(self.vocabulary.excluded_mask, device=input_ids.device)
        return present * self.idf * ~excluded

    def encode_query(self, texts: str | Sequence[str], batch_size: int = BATCH_SIZE,
                     show_progress: bool = False) -> SparseVectors:
        idf = self.idf.numpy()
        rows = []
        for text in check_texts(texts, "query texts"):
            terms = np.unique(np.asarray(self.vocabulary.encode(text), np.int32))
            weights = idf[terms]
            rows.append((terms[weights > 0], weights[weights > 0]))
        return SparseVectors.from_rows(rows, self.vocab_size)
