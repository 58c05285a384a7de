"""Late interaction (ColBERT, Khattab & Zaharia 2020; ColBERTv2, Santhanam et al. 2022): a query and a document each
encoded alone into one vector per token, the document scored by MaxSim, the sum over the query's tokens of its best
cosine with any of the document's. A second stage here (:mod:`semiret.search.rerank` re-ranks a first stage's best
hits with it, RAGatouille's and PyLate's ``rerank``): cheaper than a cross-encoder, which reads every pair together,
and sharper than one vector per text.

Three kinds of checkpoints load, told apart by their files:

- PyLate's (``modules.json`` naming a ``pylate`` Dense module: ``lightonai/GTE-ModernColBERT-v1``,
  ``colbert-ir/colbertv2.0`` as PyLate saves it): its projection, its ``[Q] ``/``[D] `` prefixes, lengths, query
  expansion and skip list, from ``config_sentence_transformers.json``;
- Stanford ColBERT's (``config.json`` naming ``HF_ColBERT``, weights with ``linear.weight``; ``colbert-ir/colbertv2.0``):
  its ``[unused0]``/``[unused1]`` markers, lengths and punctuation mask from ``artifact.metadata``;
- any other encoder (``minilm``): its last layer's token vectors as they are, no markers, no expansion, no projection:
  untrained late interaction (on SciFact's training queries, BM25's best 100 re-ranked by MiniLM's token vectors beat
  BM25 by 0.03 nDCG@10; docs/results.md).

A marker is a token inserted after ``[CLS]``, as both implementations insert theirs; a query shorter than its length
is padded with ``[MASK]`` tokens (query augmentation) that the others do not attend to unless the model says so, and
whose vectors count in MaxSim; a document's vectors leave out padding and its skip list's tokens (punctuation).
"""

from __future__ import annotations

import hashlib
import json
import string
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import torch

from semiret.data.packaged import located, model_directory
from semiret.errors import SemiretError
from semiret.models.base import position_limit, torch_threads
from semiret.models.devices import module_device, to_encoding_device
from semiret.models.checkpoints import ENCODER_FILE
from semiret.models.loading import load_encoder_model, load_tokenizer

PLAIN_QUERY_LENGTH = 64
"""Tokens of a query an encoder without a ColBERT configuration reads, at most."""
PLAIN_DOCUMENT_LENGTH = 256
"""Tokens of a document such an encoder reads, at most (all-MiniLM-L6-v2's own limit)."""
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
DEFAULT_CACHE_MB = 256
"""Documents' vectors kept between searches (float16, the least recently used dropped first): a document among the
best hits of several queries is encoded once."""


@dataclass
class LateInteractionConfig:
    """How a late-interaction model reads queries and documents."""

    query_marker: str | None = None
    """A token inserted after ``[CLS]`` in every query (ColBERT's ``[unused0]``, PyLate's ``[Q] ``); None: none."""
    document_marker: str | None = None
    query_length: int = PLAIN_QUERY_LENGTH
    document_length: int = PLAIN_DOCUMENT_LENGTH
    query_expansion: bool = False
    """Pad each query with ``[MASK]`` tokens to :attr:`query_length` (ColBERT's query augmentation)."""
    attend_to_expansion: bool = False
    skiplist: list[str] = field(default_factory=list)
    """Words whose tokens a document's vectors leave out (ColBERT's punctuation)."""
    kind: str = "encoder"
    """``pylate``, ``colbert`` (Stanford's) or ``encoder`` (token vectors of any encoder, untrained)."""


def checkpoint_kind(path: Path) -> str:
    """``pylate``, ``colbert`` or ``encoder``, from a model folder's files."""
    modules = path / "modules.json"
    if modules.is_file() and any("pylate" in str(module.get("type", "")) for module in json.loads(modules.read_text())):
        return "pylate"
    config = path / "config.json"
    if config.is_file() and "HF_ColBERT" in (json.loads(config.read_text()).get("architectures") or []):
        return "colbert"
    return "encoder"


def _pylate(path: Path) -> tuple[LateInteractionConfig, list[Path]]:
    """The configuration and Dense modules' folders (applied in order) of a PyLate checkpoint, a setting left out or
    null read as PyLate reads it (``value or default``, pylate/models/colbert.py)."""
    settings = json.loads((path / "config_sentence_transformers.json").read_text()) \
        if (path / "config_sentence_transformers.json").is_file() else {}
    dense = [path / module["path"] for module in json.loads((path / "modules.json").read_text())
             if "pylate" in str(module.get("type", ""))]
    expansion = settings.get("do_query_expansion")
    return LateInteractionConfig(
        query_marker=settings.get("query_prefix") or "[Q] ", document_marker=settings.get("document_prefix") or "[D] ",
        query_length=int(settings.get("query_length") or 32), document_length=int(settings.get("document_length")
                                                                                   or 180),
        query_expansion=True if expansion is None else bool(expansion),
        attend_to_expansion=bool(settings.get("attend_to_expansion_tokens")),
        skiplist=list(settings.get("skiplist_words") or string.punctuation), kind="pylate"), dense


def _stanford(path: Path) -> tuple[LateInteractionConfig, Path]:
    metadata = json.loads((path / "artifact.metadata").read_text()) if (path / "artifact.metadata").is_file() else {}
    return LateInteractionConfig(
        query_marker=metadata.get("query_token_id", "[unused0]"), document_marker=metadata.get("doc_token_id",
                                                                                                 "[unused1]"),
        query_length=int(metadata.get("query_maxlen", 32)), document_length=int(metadata.get("doc_maxlen", 180)),
        query_expansion=True, attend_to_expansion=bool(metadata.get("attend_to_mask_tokens", False)),
        skiplist=list(string.punctuation) if metadata.get("mask_punctuation", True) else [], kind="colbert"), [path]


def _projection(folder: Path, name: str) -> torch.nn.Linear:
    """The ``linear.weight`` (and bias, if any) a ColBERT checkpoint keeps in ``folder``'s weights (those tensors
    alone read from a safetensors file)."""
    for file in WEIGHT_FILES:
        if (folder / file).is_file():
            if file.endswith(".safetensors"):
                from safetensors import safe_open

                with safe_open(str(folder / file), framework="pt") as opened:
                    weights = {key: opened.get_tensor(key) for key in opened.keys()
                               if key.endswith(("linear.weight", "linear.bias"))}
            else:
                weights = torch.load(folder / file, map_location="cpu", weights_only=True)
            break
    else:
        raise SemiretError(f"{name!r}: no weights in {folder} ({' or '.join(WEIGHT_FILES)})")
    weight = next((value for key, value in weights.items() if key.endswith("linear.weight")), None)
    if weight is None:
        raise SemiretError(f"{name!r} is a ColBERT checkpoint without its projection (linear.weight in {folder})")
    bias = next((value for key, value in weights.items() if key.endswith("linear.bias")), None)
    linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(weight.float())
        if bias is not None:
            linear.bias.copy_(bias.float())
    return linear.eval()


class LateInteraction:
    """``score(query, texts)``: MaxSim of each text for the query (:meth:`encode_query`, :meth:`encode_document`:
    unit vectors, one per token kept), the interface :class:`~semiret.search.rerank.Reranking` takes."""

    def __init__(self, model, tokenizer, name: str, config: LateInteractionConfig,
                 projections: list[torch.nn.Linear] | None = None, cache_mb: float = DEFAULT_CACHE_MB):
        architectures = getattr(model.config, "architectures", None) or []
        if getattr(model, "is_quantized", False) or not hasattr(model.config, "hidden_size") or \
                getattr(model.config, "is_decoder", False) or \
                any(kind.endswith(("ForCausalLM", "LMHeadModel")) for kind in architectures):
            raise SemiretError(f"{name!r} is no encoder whose token vectors late interaction can compare (a quantized "
                               "or decoder-only model): give a ColBERT checkpoint or an encoder (minilm)")
        if isinstance(cache_mb, bool) or not isinstance(cache_mb, (int, float)) or not cache_mb >= 0:
            raise SemiretError(f"the late-interaction cache must be a number of megabytes >= 0, got {cache_mb!r}")
        self._cache: OrderedDict[bytes, np.ndarray] = OrderedDict()  # a text's digest -> its vectors (float16)
        self._cache_bytes, self._cache_limit, self._cache_lock = 0, cache_mb * 1e6, threading.Lock()
        limit = position_limit(model.config)
        for what in ("query_length", "document_length"):
            length = getattr(config, what)
            if not (isinstance(length, int) and 3 <= length):
                raise SemiretError(f"{name!r}: its {what} must be a whole number of at least 3, got {length!r}")
            if limit:
                setattr(config, what, min(length, limit))
        self.markers = {}
        for side, marker in (("query", config.query_marker), ("document", config.document_marker)):
            if marker is not None:
                token_id = tokenizer.convert_tokens_to_ids(marker)
                if token_id is None or token_id == tokenizer.unk_token_id:
                    raise SemiretError(f"{name!r}: its {side} marker {marker!r} is not a token of its tokenizer")
                self.markers[side] = token_id
        if config.query_expansion and tokenizer.mask_token_id is None:
            raise SemiretError(f"{name!r} expands queries with [MASK] tokens, which its tokenizer lacks")
        if tokenizer.pad_token_id is None:
            raise SemiretError(f"{name!r}: its tokenizer has no padding token, which batches of texts need")
        # each skip-list word as one token, as PyLate and ColBERT read them (a word that is none is no token skipped)
        skipped = {tokenizer.convert_tokens_to_ids(word) for word in config.skiplist}
        self.skipped = torch.tensor(sorted(skipped - {None, tokenizer.unk_token_id}), dtype=torch.long)
        self._tokenizing = threading.Lock()  # a fast tokenizer keeps its truncation and padding as shared state
        self.store = None
        """A persistent store of documents' vectors by key (``get``, ``put``, ``flush``: an
        :class:`~semiret.indexes.embedding_cache.EmbeddingCache` of kind ``tokens``) read before the cache in memory;
        set by :class:`~semiret.search.rerank.Reranking` (``cache``)."""
        self.model, self.tokenizer, self.name, self.config = to_encoding_device(model.float()), tokenizer, name, config
        self.projections = [to_encoding_device(projection) for projection in projections or []]  # (--device)

    @classmethod
    def from_pretrained(cls, name: str, cache_mb: float = DEFAULT_CACHE_MB) -> "LateInteraction":
        """A ColBERT checkpoint (PyLate's or Stanford's) or any encoder (a folder, a hub id, ``minilm``); documents'
        vectors kept between searches up to ``cache_mb`` megabytes."""
        saved = Path(located(name))
        if (saved / ENCODER_FILE).is_file():  # an encoder semiret trained and saved (hce-scifact): its backbone's
            from semiret.models.encoders import load_encoder  # token vectors, untrained for late interaction

            encoder = load_encoder(str(saved))
            return cls(encoder.backbone, encoder.tokenizer, name, LateInteractionConfig(), [], cache_mb)
        path = model_directory(name)
        kind = checkpoint_kind(path)
        if kind == "pylate":
            config, folders = _pylate(path)
        elif kind == "colbert":
            config, folders = _stanford(path)
        else:
            config, folders = LateInteractionConfig(), []
        projections = [_projection(folder, name) for folder in folders]
        return cls(load_encoder_model(name), load_tokenizer(name), name, config, projections, cache_mb)

    def _inputs(self, texts: list[str], side: str) -> dict:
        """Token ids and attention masks, each with its side's marker after ``[CLS]``; queries padded with
        ``[MASK]`` to their length when the model expands them."""
        length = self.config.query_length if side == "query" else self.config.document_length
        marker = self.markers.get(side)
        expand = side == "query" and self.config.query_expansion
        with self._tokenizing:  # (queries and documents, from threads at once, set other lengths)
            inputs = self.tokenizer(texts, truncation=True, max_length=length - (marker is not None),
                                    padding="max_length" if expand else True, return_tensors="pt")
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        if marker is not None:
            ids = torch.cat([ids[:, :1], torch.full((len(texts), 1), marker), ids[:, 1:]], dim=1)
            mask = torch.cat([mask[:, :1], torch.ones((len(texts), 1), dtype=mask.dtype), mask[:, 1:]], dim=1)
        kept = mask.bool()
        if expand:
            padding = ~kept
            ids = ids.masked_fill(padding, self.tokenizer.mask_token_id)
            kept = torch.ones_like(kept)  # every position's vector counts, the expansion's too
            if self.config.attend_to_expansion:
                mask = torch.ones_like(mask)
        elif side == "document" and len(self.skipped):
            kept &= ~torch.isin(ids, self.skipped)
        return {"input_ids": ids, "attention_mask": mask, "kept": kept}

    def _encode(self, texts: list[str], side: str, batch_size: int, threads: int | None) -> list[np.ndarray]:
        if batch_size < 1:
            raise SemiretError(f"the batch size must be at least 1, got {batch_size}")
        encoded: list[np.ndarray] = []
        with torch.inference_mode(), torch_threads(threads):
            for start in range(0, len(texts), batch_size):
                inputs = self._inputs(texts[start: start + batch_size], side)
                kept = inputs.pop("kept")
                device = module_device(self.model)
                hidden = self.model(**{name: value.to(device) for name, value in inputs.items()}).last_hidden_state
                for projection in self.projections:  # (PyLate's Dense modules in order; Stanford's linear)
                    hidden = projection(hidden)
                vectors = torch.nn.functional.normalize(hidden.float(), dim=-1).cpu()
                encoded.extend(row[keep].numpy() for row, keep in zip(vectors, kept))
        return encoded

    def encode_query(self, texts: list[str], batch_size: int = 32, threads: int | None = None) -> list[np.ndarray]:
        """float32 [tokens, dim] unit vectors of each query."""
        return self._encode(texts, "query", batch_size, threads)

    def encode_document(self, texts: list[str], batch_size: int = 32,
                        threads: int | None = None) -> list[np.ndarray]:
        """float32 [tokens, dim] unit vectors of each document, skip list and padding left out."""
        return self._encode(texts, "document", batch_size, threads)

    def score(self, query: str, texts: list[str], batch_size: int = 32, threads: int | None = None) -> np.ndarray:
        """float32 [len(texts)]: each text's MaxSim for ``query`` (the texts' vectors from the cache where there)."""
        query_vectors = self.encode_query([query], threads=threads)[0]
        documents = self._cached_documents(texts, batch_size, threads)
        return np.array([maxsim(query_vectors, document) for document in documents], np.float32)

    def _cached_documents(self, texts: list[str], batch_size: int, threads: int | None) -> list[np.ndarray]:
        """:meth:`encode_document` of ``texts``, those encoded before (the same text) read from the cache."""
        if self.store is not None:
            return self._stored_documents(texts, batch_size, threads)
        keys = [hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest() for text in texts]
        with self._cache_lock:
            found = {key: self._cache[key] for key in keys if key in self._cache}
            for key in found:
                self._cache.move_to_end(key)
        missing = {key: text for key, text in zip(keys, texts) if key not in found}
        if missing:
            encoded = self.encode_document(list(missing.values()), batch_size, threads)
            found.update((key, vectors.astype(np.float16)) for key, vectors in zip(missing, encoded))
            with self._cache_lock:
                for key in missing:
                    if key not in self._cache and found[key].nbytes <= self._cache_limit:
                        self._cache[key] = found[key]
                        self._cache_bytes += found[key].nbytes
                while self._cache_bytes > self._cache_limit:
                    self._cache_bytes -= self._cache.popitem(last=False)[1].nbytes
        return [found[key] for key in keys]

    def _stored_documents(self, texts: list[str], batch_size: int, threads: int | None) -> list[np.ndarray]:
        """:meth:`encode_document` of ``texts`` through :attr:`store`: those stored read (memory-mapped), the others
        encoded, stored and flushed (one chunk a search)."""
        keys = [hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest() for text in texts]
        missing = {key: text for key, text in zip(keys, texts) if self.store.get(key) is None}
        if missing:
            encoded = self.encode_document(list(missing.values()), batch_size, threads)
            self.store.put(list(missing), [vectors.astype(np.float16) for vectors in encoded])
            self.store.flush()
        return [self.store.get(key) for key in keys]

    @property
    def identity(self) -> str:
        """The model's name and a hash of its weights (projections too): what a store of its vectors records."""
        return f"{self.name}@{self.weights_fingerprint}"

    @cached_property
    def weights_fingerprint(self) -> str:
        """A hash of the encoder's and projections' weights: what an index of its vectors records."""
        from semiret.models.base import weights_fingerprint

        return weights_fingerprint(torch.nn.ModuleList([self.model, *self.projections]))

    @property
    def dim(self) -> int:
        """The dimension of its token vectors: the last projection's output, else the encoder's hidden size."""
        return self.projections[-1].out_features if self.projections else self.model.config.hidden_size


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """The sum over ``query``'s vectors of the best inner product with any of ``document``'s (0 for a document
    with no vector kept)."""
    if not len(document):
        return 0.0
    return float((query @ document.T.astype(np.float32)).max(axis=1).sum())
