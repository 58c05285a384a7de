"""The inference-free model (Geng et al., arXiv 2411.04403): a trainable SPLADE document encoder and a query side
of one weight per vocabulary token (IDF, or ones for the paper's binary variant; optionally learned from the IDF
during training, as Li-LSR does: Nardini et al., SIGIR 2025). At search time the query side is only a tokenizer
and this weight table (the ``inference-free`` retriever reads ``idf.json``).

A saved model is a directory that is at once a SPLADE encoder (``semiret-encoder.json``, fp16 safetensors) and
an inference-free model: ``inference-free.json`` (query weighting, IDF source, training summary) and
``idf.json``, the token-weight table it was trained with.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.models.base import save_model_directory
from semiret.models.checkpoints import IDF_FILE, INFERENCE_FREE
from semiret.text.bm25 import LexicalPrior
from semiret.text.token_weights import check_weights, load_token_weights, weights_table
from semiret.text.wordpiece import WordPieceVocabulary

QUERY_WEIGHTINGS = ("idf", "binary", "learned")
"""``learned``: a table trained from the IDF (:meth:`InferenceFreeModel.learn_query_weights`), used as the IDF is."""


class InferenceFreeModel(torch.nn.Module):
    """The trainable document encoder plus the query token weights [V] (IDF, or ones: binary; frozen unless
    :meth:`learn_query_weights`), and optionally a lexical prior: BM25 weights of each document's own tokens
    added to the learned ones, in training as at indexing (:class:`~semiret.text.bm25.LexicalPrior`)."""

    def __init__(self, encoder, token_weights: np.ndarray, query_weighting: str = "idf", idf_source: str = "",
                 lexical_prior: LexicalPrior | None = None):
        super().__init__()
        self.lexical_prior = lexical_prior
        if query_weighting not in QUERY_WEIGHTINGS:
            raise SemiretError(f"query weighting must be one of {', '.join(QUERY_WEIGHTINGS)}, not {query_weighting!r}")
        self.encoder = encoder
        self.vocabulary = WordPieceVocabulary(encoder.tokenizer_source)
        weights = check_weights(token_weights, encoder.vocab_size, "token-weight").copy()
        weights[self.vocabulary.excluded_mask] = 0.0
        self.query_weighting, self.idf_source = query_weighting, idf_source
        self.register_buffer("idf", torch.from_numpy(weights))
        self.query_log_scale: torch.nn.Parameter | None = None

    def learn_query_weights(self) -> None:
        """Make the query weights trainable: each token's weight is its IDF times ``exp(query_log_scale)``, the
        factor starting at 1. Only tokens of training queries receive gradients; the others keep their IDF, so
        the query side stays a lookup table that generalises as IDF does to words training never asked for."""
        if self.query_weighting == "binary":
            raise SemiretError("learned query weights start from the IDF: they need the IDF-aware score, not binary")
        if self.query_log_scale is None:
            self.query_log_scale = torch.nn.Parameter(torch.zeros_like(self.idf))
            self.query_weighting = "learned"

    def query_weight_tensor(self) -> torch.Tensor:
        """[V] what the query side multiplies each present token by (differentiable when learned)."""
        if self.query_log_scale is None:
            return self.idf
        return self.idf * torch.exp(self.query_log_scale)

    @property
    def query_weights(self) -> np.ndarray:
        """What the query side multiplies each present token by (IDF, learned weights; ones for binary)."""
        if self.query_weighting == "binary":
            return (~self.vocabulary.excluded_mask).astype(np.float32)
        return self.query_weight_tensor().detach().cpu().numpy()

    @classmethod
    def load(cls, name_or_path: str) -> "InferenceFreeModel":
        from semiret.models.encoders import load_encoder

        path, meta = INFERENCE_FREE.read(name_or_path)
        encoder = load_encoder(str(path), "splade")
        weights = load_token_weights(path / IDF_FILE, WordPieceVocabulary(str(path)))
        return cls(encoder, weights, meta.get("query_weighting", "idf"), meta.get("idf_source", ""),
                   LexicalPrior.from_config(meta.get("lexical_prior")))  # saved without a mean length: each corpus's own

    def save(self, path: str | Path, training: dict | None = None, fp16: bool = True,
             max_length: int | None = None) -> Path:
        """Write the directory (fp16 weights by default); ``max_length`` is what indexing will use (default:
        the length it was last trained with)."""
        def write(staged: Path) -> None:
            self.encoder.save(staged, fp16=fp16, max_length=max_length)
            atomic_write_json(staged / IDF_FILE, weights_table(self.query_weights, self.vocabulary))
            prior = ({k: v for k, v in self.lexical_prior.config().items() if k != "avgdl"}  # each corpus's own
                     if self.lexical_prior else None)
            INFERENCE_FREE.write_marker(staged, query_weighting=self.query_weighting, idf_source=self.idf_source,
                                        lexical_prior=prior, training=training or {})

        return save_model_directory(path, write)

    # ------------------------------------------------------------------ training forward
    def document_vectors(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         columns: torch.Tensor | None = None) -> torch.Tensor:
        """SPLADE vectors [B, V] (or [B, len(columns)] over vocabulary ids ``columns``) with gradients through
        the positive max-pooled logits only (fast on CPU)."""
        return self.encoder.training_vectors(input_ids, attention_mask, columns)

    def query_vectors(self, token_lists: list[np.ndarray], idf_aware: bool = True) -> torch.Tensor:
        """Training-side queries [N, V]: the distinct tokens, weighted by IDF (Eq. 5; or the learned weights) or
        1 (Eq. 2)."""
        device = self.idf.device
        out = torch.zeros(len(token_lists), self.encoder.vocab_size, device=device)
        if not idf_aware:
            weights = torch.ones(self.encoder.vocab_size, device=device)
        elif self.query_weighting == "binary":
            weights = torch.from_numpy(self.query_weights).to(device)
        else:
            weights = self.query_weight_tensor()  # with gradients when learned
        for i, tokens in enumerate(token_lists):
            ids = torch.from_numpy(np.asarray(tokens, np.int64)).to(device)
            out[i, ids] = weights[ids]
        return out
