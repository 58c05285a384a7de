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

The decoder-only variant (``architecture="decoder-only"``, :class:`NailDecoderOnlyModel`; the paper claims it
but never ran it, digest §3.1): a causal LM from the registry (``smollm2-135m``) or any Llama-style HF causal LM
reads the document's tokens followed by P placeholder positions; the LM head's logits at those positions over the
LM's own vocabulary, through the same ``score`` transform and max-pooled over positions, are φ_d; the LM's own
tokenizer is the query side. Its choices:

- placeholders: the tokenizer's end-of-sequence token (``placeholder``, else its SEP or pad token) at every one
  of the P positions, after the document's last token (rotary positions continue the document's), plus a learned
  per-position vector added to their hidden states where the trainable layers start (zero-initialised: an
  untrained model is the plain LM). The placeholders' input is a frozen token so nothing below the trainable
  layers needs gradients: training costs one forward pass plus the backward pass of the trainable layers;
- training updates only the last ``trainable_layers`` transformer layers, the final norm, the LM head and the
  per-position vectors; the embeddings and every layer below stay frozen. Tied input/output embeddings are untied
  first: the head becomes its own (trainable) copy, the input embeddings stay frozen, so the document the frozen
  layers read is unchanged;
- ``precision``: the LM's arithmetic, bfloat16 autocast where the CPU multiplies bfloat16 natively (``auto``,
  3x faster than float32 on an AMX Xeon for SmolLM2-135M), else float32; the head's logits are float32.
"""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from semiret.data.packaged import model_directory
from semiret.errors import SemiretError
from semiret.models.base import _half_precision, load_own_weights, save_model_directory, save_own_weights
from semiret.models.checkpoints import NAIL
from semiret.models.devices import to_encoding_device
from semiret.models.inputs import TextBatcher
from semiret.models.loading import load_causal_lm, load_masked_lm, load_tokenizer
from semiret.models.mlm import mlm_head_parts
from semiret.models.vocabulary import native_bfloat16

SCORE_TYPES = ("log1p-relu", "logits", "log-softmax")
ARCHITECTURES = ("encoder-decoder", "decoder-only")
PRECISIONS = ("auto", "float32", "bfloat16")
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
    the paper; False: the paper's decoder-only scores. Models saved before this option load with False.
    Encoder-decoder only."""
    architecture: str = "encoder-decoder"
    """encoder-decoder (an MLM encoder and a non-autoregressive decoder) or decoder-only (a causal LM reading
    the document, then ``positions`` placeholders)."""
    trainable_layers: int = 2
    """Decoder-only: the last transformer layers trained (with the final norm, the LM head and the placeholders'
    vectors); every layer below and the embeddings stay frozen."""
    placeholder: str | None = None
    """Decoder-only: the token at every placeholder position (default: the tokenizer's end-of-sequence token)."""
    precision: str = "auto"
    """Decoder-only: the LM's arithmetic, float32, bfloat16 (autocast) or auto (bfloat16 where native)."""

    @property
    def decoder_only(self) -> bool:
        return self.architecture == "decoder-only"

    def validate(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise SemiretError(f"architecture must be one of {', '.join(ARCHITECTURES)}, not {self.architecture!r}")
        if self.positions < 1:
            what = "placeholder position" if self.decoder_only else "decoder position"
            raise SemiretError(f"NAIL needs at least 1 {what}, got {self.positions}")
        if self.decoder_only:
            if self.trainable_layers < 0:
                raise SemiretError(f"trainable_layers must be >= 0, got {self.trainable_layers}")
            if self.residual:
                raise SemiretError("the decoder-only NAIL model has no residual encoder scores (residual=False)")
            if self.precision not in PRECISIONS:
                raise SemiretError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
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
        """A fresh decoder on a registry (or saved) masked LM, or for ``architecture="decoder-only"`` a causal LM
        with fresh placeholders (:class:`NailDecoderOnlyModel`); bad configs fail before the model loads."""
        config = config or NailConfig()
        config.validate()
        if config.decoder_only:
            lm, tokenizer = load_causal_lm(base)
            return NailDecoderOnlyModel(lm, tokenizer, config, base)
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
        return self._pooled_scores(self.position_states(input_ids, attention_mask), self._projection.weight,
                                   self._projection.bias, columns)

    def _pooled_scores(self, states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       columns: torch.Tensor | None) -> torch.Tensor:
        """The positions' states [B, P, H] through the output layer, scored and max-pooled: [B, V or C]."""
        if self.config.score == "log-softmax":
            log_probabilities = torch.log_softmax(F.linear(states, weight, bias), dim=-1)
            chosen = log_probabilities if columns is None else log_probabilities[..., columns]
            return chosen.amax(dim=1)
        if columns is not None:
            weight, bias = weight[columns], None if bias is None else bias[columns]
        return self._score(F.linear(states, weight, bias).amax(dim=1))

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
        """φ_d of ``texts`` as a float32 [N, V] array (inference: no dropout, no gradients), computed on the
        device the model is on."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        out = np.empty((len(texts), self.vocab_size), np.float32)
        try:
            for batch in self.inputs.batches(list(texts), batch_size):
                batch = batch.to(device)
                out[batch.positions] = self(batch.input_ids, batch.attention_mask).float().cpu().numpy()
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
                save_own_weights(self, staged / DECODER_FILE, "lm.")
            NAIL.write_marker(staged, config=dataclasses.asdict(self.config), training=training or {})

        return save_model_directory(target, write)

    @classmethod
    def load(cls, name_or_path: str) -> "NailModel":
        """A saved NAIL model of either architecture (what its ``nail.json`` says)."""
        path, meta = NAIL.read(name_or_path)
        config = NailConfig(**{"residual": False, **meta["config"]})  # saved before the option: the paper's
        if config.decoder_only:
            lm, tokenizer = load_causal_lm(str(path))
            model = NailDecoderOnlyModel(lm.float(), tokenizer, config, str(path))
        else:
            model = NailModel(load_masked_lm(str(path)).float(), load_tokenizer(str(path)), config, str(path))
        return to_encoding_device(load_own_weights(model, path / DECODER_FILE, "lm.", NAIL.marker))


class NailDecoderOnlyModel(NailModel):
    """A causal LM reading the document, then P placeholders -> max-pooled vocabulary scores [B, V] (see the
    module's docstring). Saved, loaded and searched as every NAIL model: ``lm`` is the LM (its head untied),
    the placeholders' vectors are this model's own weights."""

    def __init__(self, causal_lm, tokenizer, config: NailConfig, name: str):
        nn.Module.__init__(self)
        config.validate()
        self.config, self.name = config, name
        self.lm, self.tokenizer = causal_lm, tokenizer
        body = causal_lm.base_model
        layers, norm = getattr(body, "layers", None), getattr(body, "norm", None)
        if layers is None or norm is None:
            raise SemiretError(f"{name}: the decoder-only NAIL model needs a Llama-style causal LM (a stack of "
                               f"`layers` and a final `norm`), not {type(causal_lm).__name__}")
        if config.trainable_layers > len(layers):
            raise SemiretError(f"{name} has {len(layers)} layers: cannot train the last {config.trainable_layers}")
        head = causal_lm.get_output_embeddings()
        if head.weight.shape[0] != len(tokenizer):
            raise SemiretError(f"{name}: the LM head scores {head.weight.shape[0]} tokens but the tokenizer has "
                               f"{len(tokenizer)}")
        self.placeholder_id = self._placeholder_id(tokenizer, config.placeholder, name)
        self._untie_head()
        width = causal_lm.config.hidden_size
        self.placeholder_vectors = nn.Parameter(torch.zeros(config.positions, width))
        # the vectors join the placeholders' hidden states where the trainable layers start
        first_trained = layers[len(layers) - config.trainable_layers] if config.trainable_layers else norm
        first_trained.register_forward_pre_hook(self._add_placeholder_vectors, with_kwargs=True)
        trained = [norm, causal_lm.get_output_embeddings(), *layers[len(layers) - config.trainable_layers:]]
        for parameter in causal_lm.parameters():
            parameter.requires_grad_(False)
        for module in trained:
            for parameter in module.parameters():
                parameter.requires_grad_(True)
        limit = getattr(causal_lm.config, "max_position_embeddings", None)
        self.inputs = TextBatcher(tokenizer, config.max_length, limit - config.positions if limit else None, name)
        self._tokenizer_directory = None
        self.eval()

    @staticmethod
    def _placeholder_id(tokenizer, placeholder: str | None, name: str) -> int:
        token = placeholder or tokenizer.eos_token or tokenizer.sep_token or tokenizer.pad_token
        token_id = tokenizer.convert_tokens_to_ids(token) if token else None
        if token_id is None or token_id == tokenizer.unk_token_id:
            what = f"{placeholder!r} is not in its vocabulary" if placeholder else \
                "the tokenizer has no end-of-sequence, SEP or pad token"
            raise SemiretError(f"{name}: no placeholder token ({what}): name one with placeholder=")
        return int(token_id)

    def _untie_head(self) -> None:
        """Give the LM head its own weights when they are the input embeddings' (and record it in the config, so
        the saved LM keeps both)."""
        head, embeddings = self.lm.get_output_embeddings(), self.lm.get_input_embeddings()
        if head.weight is embeddings.weight or head.weight.data_ptr() == embeddings.weight.data_ptr():
            head.weight = nn.Parameter(embeddings.weight.detach().clone())
        self.lm.config.tie_word_embeddings = False
        text_config = getattr(self.lm.config, "get_text_config", None)
        if text_config is not None:
            text_config().tie_word_embeddings = False

    def _add_placeholder_vectors(self, module, args, kwargs):
        positions = self.config.positions
        hidden = args[0] if args else kwargs["hidden_states"]
        vectors = self.placeholder_vectors.to(hidden.dtype)
        hidden = torch.cat([hidden[:, :-positions], hidden[:, -positions:] + vectors], dim=1)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    @property
    def vocab_size(self) -> int:
        return self.lm.get_output_embeddings().weight.shape[0]

    @property
    def bfloat16(self) -> bool:
        if self.config.precision == "auto":
            return native_bfloat16()
        return self.config.precision == "bfloat16"

    @property
    def tokenizer_source(self) -> str:
        """A directory with this model's ``tokenizer.json``: the model's own, or (a GGUF base ships none) a
        temporary copy written once."""
        if (model_directory(self.name) / "tokenizer.json").is_file():
            return self.name
        if self._tokenizer_directory is None:
            self._tokenizer_directory = tempfile.TemporaryDirectory(prefix="semiret-tokenizer-")
            self.tokenizer.save_pretrained(self._tokenizer_directory.name)
        return self._tokenizer_directory.name

    def position_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                        encoded: torch.Tensor | None = None) -> torch.Tensor:
        """The LM's final (normed) states at the P placeholders after each document, [B, P, H], float32."""
        positions = self.config.positions
        placeholders = input_ids.new_full((len(input_ids), positions), self.placeholder_id)
        ids = torch.cat([input_ids, placeholders], dim=1)
        mask = torch.cat([attention_mask, attention_mask.new_ones((len(input_ids), positions))], dim=1)
        position_ids = (mask.cumsum(dim=1) - 1).clamp(min=0)  # padding between a document and its placeholders
        with torch.autocast(ids.device.type, dtype=torch.bfloat16, enabled=self.bfloat16):
            states = self.lm.base_model(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                                        use_cache=False)[0]
        return states[:, -positions:].float()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                columns: torch.Tensor | None = None) -> torch.Tensor:
        head = self.lm.get_output_embeddings()
        return self._pooled_scores(self.position_states(input_ids, attention_mask), head.weight, head.bias, columns)
