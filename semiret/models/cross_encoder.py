"""Cross-encoders: a query and a document read together by one transformer with a classification head, one score
per pair (sentence-transformers' ``CrossEncoder``, MS MARCO's MiniLM and BERT re-rankers). Far slower than any
first stage, as it reads every pair, and the strongest second stage: :mod:`semiret.search.rerank` scores a first
stage's best hits with one."""

from __future__ import annotations

import numpy as np
import torch

from semiret.errors import SemiretError
from semiret.models.base import position_limit, torch_threads
from semiret.models.devices import module_device, to_encoding_device
from semiret.models.loading import load_sequence_classifier, load_tokenizer

DEFAULT_MAX_LENGTH = 512
"""Tokens of a query and a document read together, at most (fewer where the model's positions are fewer)."""


class CrossEncoder:
    """``score(query, texts)``: the model's relevance of each text to the query (a one-label head's logit; a
    two-label head's log-probability of its second label, "relevant"), higher for more relevant."""

    def __init__(self, model, tokenizer, name: str, max_length: int | None = None):
        labels = model.config.num_labels
        if labels not in (1, 2):
            raise SemiretError(f"{name!r} classifies into {labels} labels: a cross-encoder's head gives one score "
                               "(1 label) or not relevant / relevant (2)")
        limit = position_limit(model.config) or DEFAULT_MAX_LENGTH
        length = min(DEFAULT_MAX_LENGTH, limit) if max_length is None else max_length
        if not 2 < length <= limit:
            raise SemiretError(f"max_length must be more than 2 tokens and at most the {limit} {name} reads, "
                               f"got {length}")
        self.model, self.tokenizer, self.name, self.max_length = to_encoding_device(model), tokenizer, name, length

    @classmethod
    def from_pretrained(cls, name: str, max_length: int | None = None) -> "CrossEncoder":
        """A cross-encoder folder or hub id (``cross-encoder/ms-marco-MiniLM-L-6-v2``)."""
        return cls(load_sequence_classifier(name), load_tokenizer(name), name, max_length)

    def score(self, query: str, texts: list[str], batch_size: int = 32, threads: int | None = None) -> np.ndarray:
        """float32 [len(texts)]: each text's score for ``query``, read together, cut to :attr:`max_length` tokens
        (the longer of the two first, as sentence-transformers cuts them)."""
        if batch_size < 1:
            raise SemiretError(f"the batch size must be at least 1, got {batch_size}")
        scores = np.empty(len(texts), np.float32)
        with torch.inference_mode(), torch_threads(threads):
            for start in range(0, len(texts), batch_size):
                batch = texts[start: start + batch_size]
                inputs = self.tokenizer([query] * len(batch), batch, padding=True, truncation="longest_first",
                                        max_length=self.max_length, return_tensors="pt")
                device = module_device(self.model)
                logits = self.model(**{name: value.to(device) for name, value in inputs.items()}).logits.float().cpu()
                scores[start: start + len(batch)] = (logits[:, 0] if logits.shape[1] == 1
                                                     else torch.log_softmax(logits, dim=-1)[:, 1]).numpy()
        return scores
