"""Dense bi-encoders: a transformer, mean or CLS pooling, optional L2 normalisation.

Defaults come from a sentence-transformers model directory when there is one (pooling mode,
``Normalize`` module, ``max_seq_length``, query and document prompts, a cosine similarity), so ``minilm``, E5 or
BGE encode as sentence-transformers' ``encode_query`` and ``encode_document`` do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from semiret.errors import SemiretError
from semiret.models.base import TextEncoder
from semiret.models.checkpoints import sentence_transformers_normalizes
from semiret.models.inputs import Batch
from semiret.models.pooling import POOLINGS
from semiret.data.packaged import model_directory
from semiret.models.loading import load_encoder_model, load_tokenizer
from semiret.models.vocabulary import native_bfloat16

PRECISIONS = ("float32", "bfloat16", "auto")


class DenseEncoder(TextEncoder):
    family = "dense"

    def __init__(self, backbone, tokenizer, name: str, max_length: int | None = None, pooling: str = "mean",
                 normalize: bool = True, precision: str = "float32", query_prompt: str = "",
                 document_prompt: str = "", truncate_dim: int | None = None,
                 matryoshka_dims: list[int] | None = None):
        if pooling not in POOLINGS:
            raise SemiretError(f"unknown pooling {pooling!r} (known: {', '.join(POOLINGS)})")
        if precision not in PRECISIONS:
            raise SemiretError(f"unknown precision {precision!r} (known: {', '.join(PRECISIONS)})")
        for side, prompt in (("query", query_prompt), ("document", document_prompt)):
            if not isinstance(prompt, str):
                raise SemiretError(f"the {side} prompt is a string (put before each {side} text), got {prompt!r}")
        hidden = backbone.config.hidden_size
        if truncate_dim is not None and (isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int)
                                         or not 1 <= truncate_dim <= hidden):
            raise SemiretError(f"truncate_dim (--truncate-dim) keeps the first dimensions of {name}'s "
                               f"{hidden}-dimensional embeddings: a whole number from 1 to {hidden}, got "
                               f"{truncate_dim!r}")
        super().__init__(backbone, tokenizer, name, max_length)
        self.pooling, self.normalize, self.truncate_dim = pooling, normalize, truncate_dim
        # the first dimensions the model was trained to be searched at (Matryoshka training, --matryoshka-dims: the
        # --truncate-dim settings meant for it), saved with it; None for a model not trained so
        self.matryoshka_dims = [int(d) for d in matryoshka_dims] if matryoshka_dims else None
        self.prompts = {"query": query_prompt, "document": document_prompt}
        self.requested_precision = precision  # what is saved: "auto" is decided again on each machine
        self.precision = ("bfloat16" if native_bfloat16() else "float32") if precision == "auto" else precision

    @classmethod
    def from_pretrained(cls, model: str = "minilm", max_length: int | None = None, pooling: str | None = None,
                        normalize: bool | None = None, precision: str = "auto", query_prompt: str | None = None,
                        document_prompt: str | None = None, truncate_dim: int | None = None,
                        matryoshka_dims: list[int] | None = None) -> "DenseEncoder":
        """``model`` with the settings given, the others as its sentence-transformers files say (prompts: ``""``
        for none); ``truncate_dim``: embeddings cut to their first dimensions (a Matryoshka model's, as
        sentence-transformers' ``truncate_dim``), then normalised where the model normalises;
        ``matryoshka_dims``: the dimensions a saved model was trained for (a record, it changes no vector)."""
        defaults = sentence_transformers_defaults(model_directory(model))
        return cls(load_encoder_model(model), load_tokenizer(model), model,
                   defaults.get("max_length") if max_length is None else max_length,
                   pooling or defaults.get("pooling", "mean"),
                   defaults.get("normalize", False) if normalize is None else normalize, precision,
                   defaults.get("query_prompt", "") if query_prompt is None else query_prompt,
                   defaults.get("document_prompt", "") if document_prompt is None else document_prompt,
                   truncate_dim, matryoshka_dims)

    def config(self) -> dict:
        return {**super().config(), "pooling": self.pooling, "normalize": self.normalize,
                "precision": self.requested_precision, "query_prompt": self.prompts["query"],
                "document_prompt": self.prompts["document"],
                **({"truncate_dim": self.truncate_dim} if self.truncate_dim is not None else {}),
                **({"matryoshka_dims": self.matryoshka_dims} if self.matryoshka_dims else {})}

    @property
    def dim(self) -> int:
        return self.truncate_dim or self.backbone.config.hidden_size

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pooled (and normalised) float32 embeddings [B, dim] (differentiable), the transformer computed in the
        encoder's precision (bfloat16 halves training time on CPUs that have it; the weights stay float32)."""
        return self.states_and_embeddings(input_ids, attention_mask)[1]

    def states_and_embeddings(self, input_ids: torch.Tensor,
                              attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the token states [B, L, dim], the pooled embeddings [B, dim] :meth:`forward` returns), float32."""
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision == "bfloat16"):
            states = self.backbone(input_ids=input_ids, attention_mask=attention_mask)[0].float()
        pooled = POOLINGS[self.pooling](states, attention_mask)[:, :self.dim]  # (Matryoshka: the first dimensions)
        return states, F.normalize(pooled, dim=-1) if self.normalize else pooled

    def _encode_batch(self, batch: Batch, side: str, prepared) -> np.ndarray:
        return self(batch.input_ids, batch.attention_mask).cpu().numpy()

    def _empty_outputs(self, n: int) -> np.ndarray:
        return np.zeros((n, self.dim), np.float32)

    def _store(self, outputs, positions, encoded) -> None:
        outputs[positions] = encoded

    def _single(self, encoded: np.ndarray) -> np.ndarray:
        return encoded[0]


ST_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                    "pooling_mode_max_tokens": "max"}
"""sentence-transformers' pooling flags (its configs before 3.x, and beside ``pooling_mode`` after) and the pooling
semiret computes for each; others (``mean_sqrt_len_tokens``, ``weightedmean``, ``lasttoken``) it does not."""


NO_LIMIT = 10**6
"""A tokenizer's ``model_max_length`` from here on is transformers' "no limit" (``1e30``), not a length."""


def _st_pooling(config: dict, path: Path) -> str:
    """The pooling a sentence-transformers ``Pooling`` config names: its ``pooling_mode`` or its one flag set."""
    modes = {config["pooling_mode"]} if config.get("pooling_mode") else set()
    modes |= {key.removeprefix("pooling_mode_") for key, value in config.items()
              if key.startswith("pooling_mode_") and value is True}
    named = {ST_POOLING_FLAGS.get(f"pooling_mode_{mode}", mode) for mode in modes}
    if len(named) != 1 or not named <= set(POOLINGS):
        raise SemiretError(f"{path}: pooling {' + '.join(sorted(named)) or 'none'} is not one semiret computes "
                           f"({', '.join(POOLINGS)})")
    return named.pop()


def sentence_transformers_defaults(directory: Path) -> dict:
    """Pooling, normalisation and length limit of a sentence-transformers directory ({} for others). A module semiret
    does not compute (a ``Dense`` projection, a pooling of another kind or of several kinds) is an error: the vectors
    would not be the model's (a CLS model saved by sentence-transformers 6 was read as mean-pooled)."""
    normalizes = sentence_transformers_normalizes(directory)
    if normalizes is None:
        return {}
    modules_file = directory / "modules.json"
    modules = json.loads(modules_file.read_text())
    defaults = {"normalize": normalizes}
    for module in modules:
        kind = module.get("type", "")
        config_file = directory / module.get("path", "") / "config.json"
        if kind.endswith("Pooling") and config_file.is_file():
            pooling = json.loads(config_file.read_text())
            defaults["pooling"] = _st_pooling(pooling, config_file)
            defaults["pooling_leaves_out_prompt"] = pooling.get("include_prompt") is False
        elif not kind.endswith(("Transformer", "Pooling", "Normalize")):
            raise SemiretError(f"{modules_file}: its module {kind} is not one semiret computes (a transformer, "
                               "mean, CLS or max pooling, normalisation): its vectors would not be this model's")
    leaves_out_prompt = defaults.pop("pooling_leaves_out_prompt", False)
    defaults.update(_st_prompts_and_similarity(directory / "config_sentence_transformers.json", leaves_out_prompt))
    settings, tokenizer = directory / "sentence_bert_config.json", directory / "tokenizer_config.json"
    length = json.loads(settings.read_text()).get("max_seq_length") if settings.is_file() else None
    if length is None and tokenizer.is_file():  # sentence-transformers 6 keeps it as the tokenizer's
        length = json.loads(tokenizer.read_text()).get("model_max_length")
    if isinstance(length, int) and length < NO_LIMIT:
        defaults["max_length"] = length
    return defaults


DOCUMENT_PROMPT_NAMES = ("document", "passage", "corpus")
"""The prompts sentence-transformers' ``encode_document`` looks for, in this order (``encode_query``: ``"query"``)."""


def _st_prompts_and_similarity(path: Path, pooling_leaves_out_prompt: bool) -> dict:
    """The query and document prompts a ``config_sentence_transformers.json`` names (its ``prompts``; where it has
    none for a side, its ``default_prompt_name``'s, as sentence-transformers reads them), and normalisation where
    its ``similarity_fn_name`` is ``cosine`` (an inner product of normalised vectors ranks alike). A pooling that
    leaves the prompts' tokens out (``include_prompt`` false) is not one semiret computes."""
    if not path.is_file():
        return {}
    settings = json.loads(path.read_text())
    prompts = settings.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) or v is None for v in prompts.values()):
        raise SemiretError(f"{path}: prompts must map names to strings, got {prompts!r}")
    prompts = {name: text or "" for name, text in prompts.items()}
    fallback = prompts.get(settings.get("default_prompt_name") or "", "")
    found = {"query_prompt": prompts.get("query", fallback),
             "document_prompt": next((prompts[n] for n in DOCUMENT_PROMPT_NAMES if n in prompts), fallback)}
    if (found["query_prompt"] or found["document_prompt"]) and pooling_leaves_out_prompt:
        raise SemiretError(f"{path.parent}: its pooling leaves the prompts' tokens out (include_prompt false), which "
                           "semiret does not compute: its vectors would not be this model's")
    if settings.get("similarity_fn_name") == "cosine":
        found["normalize"] = True
    return found
