"""The NAIL document model (Soares et al., EMNLP 2023): φ_d(d), one score per vocabulary token per document.

An encoder from the registry (default ``splade-tiny``'s BERT) reads the document; a non-autoregressive
decoder whose only inputs are ``positions`` learned position embeddings (initialised from the encoder's first
position embeddings) cross-attends to it, all positions in one pass; each position scores the whole vocabulary
through the encoder's MLM head (its transform, then the tied word embeddings); the document's score of a token
is its maximum over positions. Queries are only tokenized (the query side is a multi-hot token set), so
``score(q, d) = sum of φ_d(d)[t] over the query's distinct tokens``.

Choices the paper leaves open (``nail.digest.md`` §11), each a :class:`NailConfig` field:

- ``score``: ``log1p-relu`` (default: ``log(1 + ReLU(logit))``, non-negative, so keeping a document's top-k
  tokens in an impact index loses nothing but the dropped tokens), ``logits`` (the paper's plain reading) or
  ``log-softmax`` (per position, a query-likelihood-like sum);
- ``attention``: the decoder's self-attention over positions, ``full`` (default) or ``causal``;
- ``decoder_layers``: fresh transformer decoder layers of the encoder's width (default 2);
- ``residual`` (beyond the paper; default on for new models): the decoder's max-pooled scores are added to the
  encoder's own masked-LM logits max-pooled over the document's tokens (SPLADE's document vector), before the
  score function. The decoder's output goes through a zero-initialised linear map before the tied word
  embeddings, so an untrained model scores documents exactly as the encoder's MLM head does (for
  ``splade-tiny``: SPLADE-tiny's document vectors) and training starts from a working lexical model instead of
  random vocabulary scores, which on our CPU budget never leave chance (docs/results.md). Off, φ_d is the
  paper's: the decoder's positions alone, through the MLM head. Not combined with ``log-softmax``.

A saved model is a directory holding the encoder (transformers format, with its tokenizer), the decoder's
weights (``nail-decoder.safetensors``) and ``nail.json`` (the config), written in one rename.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from semiret.errors import SemiretError
from semiret.models.base import _half_precision, load_own_weights, save_model_directory
from semiret.models.checkpoints import NAIL
from semiret.models.inputs import TextBatcher
from semiret.models.loading import load_masked_lm, load_tokenizer
from semiret.models.mlm import mlm_head_parts

SCORE_TYPES = ("log1p-relu", "logits", "log-softmax")
ATTENTION_MASKS = ("full", "causal")
DECODER_FILE = "nail-decoder.safetensors"
ENCODER_SCORE_ELEMENTS = 1 << 25
"""Largest [documents, tokens, vocabulary] block of MLM logits computed at once (128 MB in float32); above it,
one document at a time."""


@dataclass
class NailConfig:
    """The architecture of a NAIL model (saved in ``nail.json``)."""

    positions: int = 16
    """Decoder positions P: learned position embeddings, the decoder's only inputs."""
    decoder_layers: int = 2
    """Transformer decoder layers (fresh, the encoder's width)."""
    score: str = "log1p-relu"
    """Token score: log1p-relu (log(1 + ReLU(logit))), logits or log-softmax (per position)."""
    attention: str = "full"
    """Decoder self-attention over positions: full or causal."""
    max_length: int = 256
    """Document tokens the encoder reads."""
    residual: bool = True
    """Add the decoder's scores to the encoder's max-pooled MLM logits (decoder output zero-initialised), beyond
    the paper; False: the paper's decoder-only scores. Models saved before this option load with False."""

    def validate(self) -> None:
        if self.positions < 1:
            raise SemiretError(f"NAIL needs at least 1 decoder position, got {self.positions}")
        if self.decoder_layers < 1:
            raise SemiretError(f"NAIL needs at least 1 decoder layer, got {self.decoder_layers}")
        if self.score not in SCORE_TYPES:
            raise SemiretError(f"score must be one of {', '.join(SCORE_TYPES)}, not {self.score!r}")
        if self.attention not in ATTENTION_MASKS:
            raise SemiretError(f"attention must be one of {', '.join(ATTENTION_MASKS)}, not {self.attention!r}")
        if self.max_length < 2:
            raise SemiretError(f"max_length must be at least 2 tokens, got {self.max_length}")
        if self.residual and self.score == "log-softmax":
            raise SemiretError("the residual document model adds logits: use score log1p-relu or logits "
                               "(or --no-residual for log-softmax)")


class NailModel(nn.Module):
    """Encoder + non-autoregressive decoder -> max-pooled vocabulary scores [B, V]."""

    def __init__(self, masked_lm, tokenizer, config: NailConfig, name: str):
        super().__init__()
        config.validate()
        self.config, self.name = config, name
        self.lm = masked_lm
        self.tokenizer = tokenizer
        self._transform, self._projection = mlm_head_parts(masked_lm)
        if self._projection.weight.shape[0] != len(tokenizer):
            raise SemiretError(f"{name}: the output layer scores {self._projection.weight.shape[0]} tokens but the "
                               f"tokenizer has {len(tokenizer)}")
        lm_config = masked_lm.config
        width = lm_config.hidden_size
        self.position_embeddings = nn.Parameter(self._initial_positions(config.positions, width,
                                                                        lm_config.initializer_range))
        layer = nn.TransformerDecoderLayer(width, lm_config.num_attention_heads, lm_config.intermediate_size,
                                           dropout=lm_config.hidden_dropout_prob, activation="gelu",
                                           batch_first=True)
        self.decoder = nn.TransformerDecoder(layer, config.decoder_layers)
        causal = nn.Transformer.generate_square_subsequent_mask(config.positions)
        self.register_buffer("self_attention_mask", causal if config.attention == "causal" else None,
                             persistent=False)
        if config.residual:  # the decoder's contribution starts at exactly 0 (see the module's docstring)
            self.residual_projection = nn.Linear(width, width, bias=False)
            nn.init.zeros_(self.residual_projection.weight)
        self.inputs = TextBatcher(tokenizer, config.max_length, getattr(lm_config, "max_position_embeddings", None),
                                  name)
        self.eval()

    def _initial_positions(self, positions: int, width: int, std: float) -> torch.Tensor:
        """The encoder's first ``positions`` position embeddings ("standard position embeddings"), else N(0, std)."""
        table = getattr(getattr(self.lm.base_model, "embeddings", None), "position_embeddings", None)
        if table is not None and table.weight.shape[0] >= positions:
            return table.weight.detach()[:positions].clone()
        return torch.randn(positions, width) * std

    @property
    def vocab_size(self) -> int:
        return self._projection.weight.shape[0]

    @property
    def tokenizer_source(self) -> str:
        """A directory with this model's ``tokenizer.json`` (for the torch-free query side)."""
        return self.name

    @classmethod
    def initialise(cls, base: str = "splade-tiny", config: NailConfig | None = None) -> "NailModel":
        """A fresh decoder on a registry (or saved) masked LM; bad configs fail before the model loads."""
        config = config or NailConfig()
        config.validate()
        return cls(load_masked_lm(base), load_tokenizer(base), config, base)

    # ------------------------------------------------------------------ forward
    def position_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        encoded: torch.Tensor | None = None) -> torch.Tensor:
        """Decoder outputs after the MLM transform, [B, P, H]: every position in one pass."""
        if encoded is None:
            encoded = self.lm.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
        queries = self.position_embeddings.unsqueeze(0).expand(len(input_ids), -1, -1)
        decoded = self.decoder(queries, encoded, tgt_mask=self.self_attention_mask,
                               memory_key_padding_mask=~attention_mask.bool())
        return self._transform(decoded)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                columns: torch.Tensor | None = None) -> torch.Tensor:
        """φ_d for a batch, [B, V] (or [B, len(columns)] over vocabulary ids ``columns``: all a ranking loss over
        those tokens needs; log-softmax still normalises over the whole vocabulary)."""
        if self.config.residual:
            return self._residual_forward(input_ids, attention_mask, columns)
        states = self.position_states(input_ids, attention_mask)
        weight, bias = self._projection.weight, self._projection.bias
        if self.config.score == "log-softmax":
            log_probabilities = torch.log_softmax(states @ weight.T + bias, dim=-1)
            chosen = log_probabilities if columns is None else log_probabilities[..., columns]
            return chosen.amax(dim=1)
        if columns is not None:
            weight, bias = weight[columns], bias[columns]
        return self._score((states @ weight.T + bias).amax(dim=1))

    def _score(self, pooled: torch.Tensor) -> torch.Tensor:
        return torch.log1p(torch.relu(pooled)) if self.config.score == "log1p-relu" else pooled

    def _residual_forward(self, input_ids, attention_mask, columns) -> torch.Tensor:
        """score(max over document tokens of the MLM logits + max over positions of the decoder's logits)."""
        encoded = self.lm.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]
        weight, bias = self._projection.weight, self._projection.bias
        if columns is not None:
            weight, bias = weight[columns], bias[columns]
        decoded = self.residual_projection(self.position_states(input_ids, attention_mask, encoded))
        decoder_scores = (decoded @ weight.T).amax(dim=1)
        return self._score(self.encoder_scores(encoded, attention_mask, weight, bias) + decoder_scores)

    def encoder_scores(self, encoded: torch.Tensor, attention_mask: torch.Tensor, weight: torch.Tensor,
                       bias: torch.Tensor) -> torch.Tensor:
        """The MLM head's logits of every document token, max-pooled over the (unpadded) tokens, [B, C]. When the
        [B, L, C] logits would exceed ``ENCODER_SCORE_ELEMENTS`` (the whole vocabulary at index time), one
        document at a time over its own tokens."""
        states = self._transform(encoded)
        keep = attention_mask.bool()
        if states.shape[0] * states.shape[1] * weight.shape[0] <= ENCODER_SCORE_ELEMENTS:
            logits = (states @ weight.T + bias).masked_fill(~keep.unsqueeze(-1), float("-inf"))
            return logits.amax(dim=1)
        return torch.stack([(row[mask] @ weight.T).amax(dim=0) + bias for row, mask in zip(states, keep)])

    @torch.inference_mode()
    def score_documents(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """φ_d of ``texts`` as a float32 [N, V] array (inference: no dropout, no gradients)."""
        was_training = self.training
        self.eval()
        out = np.empty((len(texts), self.vocab_size), np.float32)
        try:
            for batch in self.inputs.batches(list(texts), batch_size):
                out[batch.positions] = self(batch.input_ids, batch.attention_mask).numpy()
        finally:
            self.train(was_training)
        return out

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path, training: dict | None = None, fp16: bool = True) -> Path:
        """Write the model directory (fp16 weights by default), published in one rename."""
        target = Path(path)
        if target.exists() and any(target.iterdir()) and not (target / NAIL.marker).is_file():
            raise SemiretError(f"{target} exists and is not a saved NAIL model: refusing to overwrite it")

        def write(staged: Path) -> None:
            with _half_precision(self, fp16):
                self.lm.save_pretrained(staged)
                self.tokenizer.save_pretrained(staged)
                decoder = {k: v.detach().contiguous() for k, v in self.state_dict().items()
                           if not k.startswith("lm.")}
                save_file(decoder, str(staged / DECODER_FILE))
            NAIL.write_marker(staged, config=dataclasses.asdict(self.config), training=training or {})

        return save_model_directory(target, write)

    @classmethod
    def load(cls, name_or_path: str) -> "NailModel":
        path, meta = NAIL.read(name_or_path)
        config = NailConfig(**{"residual": False, **meta["config"]})  # saved before the option: the paper's
        model = cls(load_masked_lm(str(path)).float(), load_tokenizer(str(path)), config, str(path))
        return load_own_weights(model, path / DECODER_FILE, "lm.", NAIL.marker)
