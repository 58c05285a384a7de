"""GDR's model (Yuan et al. 2024, "Generative Dense Retrieval: Memory Can Be a Burden"): a query encoder E_Q and
a cluster decoder that generates cluster identifiers (CIDs) under a prefix tree of the valid ones.

- **E_Q** is a dense encoder initialised from the document encoder E_D (``minilm``), so its pooled vector
  ``r_q`` lives in E_D's space: the intra-cluster score is ``<r_q, r_d>`` against E_D's frozen vectors.
- **The cluster decoder** is a small randomly initialised transformer decoder cross-attending to E_Q's token
  states. A CID is a sequence of values (labels 1..k, then the terminal 0); value ``v`` at step ``t`` is the
  token ``t * (k + 1) + v + 2`` (position-aware tokens, as NCI; 0 starts the decoder, 1 is unused). A step
  scores only its own position's tokens, through the tied token embeddings.
- **The prefix-aware weight-adaptive head** (NCI's PAWA, ``adaptive_head``): a transformer decoder reads the
  prefix tokens (causally, a learned vector as its memory) and a linear map turns its state at step ``t``
  into ``ΔW_t``, added to the step's classification weights. It adapts only the current position's ``k + 1``
  rows (the others are masked anyway), which keeps it small on a CPU.
- **Inference**: constrained beam search over :class:`PrefixTree` (beam size, length penalty); the returned
  CIDs carry ``S_inter``, the probability of the path under the constrained step distributions (Eq. 1).

A saved model is a directory: ``gdr.json`` (config), ``query-encoder/`` (E_Q), ``gdr-decoder.safetensors``
and ``clusters.npz`` (the CIDs, each leaf's mean E_D vector, and the leaf of each training-corpus document).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from semiret.errors import SemiretError
from semiret.models.base import _half_precision, load_own_weights, save_model_directory, save_own_weights
from semiret.models.checkpoints import GDR
from semiret.models.devices import to_encoding_device
from semiret.models.inputs import TextBatcher, check_texts

TERMINAL = 0
FIRST_TOKEN = 2
"""Token 0 starts the decoder (and pads), 1 is the unused end-of-sequence: values start at 2."""
DECODER_FILE = "gdr-decoder.safetensors"
CLUSTERS_FILE = "clusters.npz"
QUERY_ENCODER = "query-encoder"


@dataclass
class GDRConfig:
    """The architecture of a GDR model (saved in ``gdr.json``)."""

    branching: int = 30
    """k: labels per level (values per step: 1..k and the terminal 0)."""
    decoder_layers: int = 2
    """Transformer decoder layers of the cluster decoder (E_Q's width)."""
    heads: int = 6
    """Attention heads of the decoder and the adaptive head."""
    adaptive_head: bool = True
    """The prefix-aware weight-adaptive head (PAWA); off: the tied token embeddings alone."""
    adaptor_layers: int = 1
    """Transformer decoder layers of the adaptive head."""
    dropout: float = 0.1
    query_max_length: int = 64
    """Query tokens E_Q reads."""
    document_encoder: str = "minilm"
    """E_D: the dense encoder whose frozen vectors the documents are scored (and clustered) by."""
    document_max_length: int | None = None
    """Document tokens E_D reads (default: the encoder's)."""
    query_base: str | None = None
    """The packaged model E_Q started from, if it is one: E_Q is saved as its weights that differ from it (the
    layers training changed), the rest read from that package."""

    def validate(self) -> None:
        if self.branching < 2:
            raise SemiretError(f"the branching factor must be at least 2, got {self.branching}")
        if self.decoder_layers < 1 or self.adaptor_layers < 1 or self.heads < 1:
            raise SemiretError("the decoder and its adaptive head need at least one layer and one head")
        if self.query_max_length < 2:
            raise SemiretError(f"queries need at least 2 tokens, got {self.query_max_length}")

    def check_width(self, width: int) -> None:
        """The decoder's attention splits E_Q's width among its heads: they must divide it."""
        if width % self.heads:
            raise SemiretError(f"--heads {self.heads} does not divide E_Q's width {width} (the decoder's attention "
                               f"splits it among the heads): choose a divisor of {width}")


class PrefixTree:
    """The valid CIDs as a trie: the values allowed after each prefix, and each CID's leaf number (its row)."""

    def __init__(self, cids: Sequence[Sequence[int]], branching: int):
        self.cids = [tuple(int(v) for v in cid) for cid in cids]
        if not self.cids:
            raise SemiretError("a prefix tree needs at least one cluster id")
        self.leaf = {cid: row for row, cid in enumerate(self.cids)}
        if len(self.leaf) != len(self.cids):
            raise SemiretError("cluster ids repeat: they must name one leaf each")
        self.children: dict[tuple[int, ...], list[int]] = {}
        for cid in self.cids:
            if not cid or cid[-1] != TERMINAL or TERMINAL in cid[:-1] or not all(0 <= v <= branching for v in cid):
                raise SemiretError(f"cluster id {cid} is not labels 1..{branching} ended by the terminal 0")
            for step in range(len(cid)):
                self.children.setdefault(cid[:step], set()).add(cid[step])
        self.children = {prefix: sorted(values) for prefix, values in self.children.items()}

    @property
    def max_length(self) -> int:
        return max(map(len, self.cids))

    def allowed(self, prefix: tuple[int, ...]) -> list[int]:
        return self.children.get(prefix, [])

    def prefixes_of(self, leaves: Iterable[int]) -> set[tuple[int, ...]]:
        """Every non-empty prefix of the CIDs of leaf numbers ``leaves``, the CIDs themselves included."""
        return {cid[:end] for cid in (self.cids[leaf] for leaf in leaves) for end in range(1, len(cid) + 1)}

    def fingerprint(self) -> str:
        """A hash of the CIDs in leaf order: an index records it, a model must match it."""
        return hashlib.sha256(json.dumps(self.cids).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Clusters:
    """What the model was trained against: the CIDs (leaf ``i`` is ``cids[i]``), each leaf's mean E_D vector
    (new documents join the nearest), and the leaf of each document of the training corpus, with each one's
    cache key (:func:`~semiret.indexes.embedding_cache.content_key`: id and text digest), so that a document
    keeps its trained leaf only with the text it was trained with (models saved before keys: by id alone)."""

    cids: list[tuple[int, ...]]
    leaf_means: np.ndarray
    document_ids: list[str]
    document_leaves: np.ndarray
    document_keys: list[str] | None = None

    def save(self, path: Path) -> None:
        lengths = np.asarray([len(c) for c in self.cids], np.int32)
        padded = np.full((len(self.cids), lengths.max()), -1, np.int32)
        for row, cid in enumerate(self.cids):
            padded[row, : len(cid)] = cid
        keys = {} if self.document_keys is None else {"document_keys": np.asarray(self.document_keys, dtype=str)}
        np.savez(path, cids=padded, lengths=lengths, leaf_means=self.leaf_means.astype(np.float32),
                 document_ids=np.asarray(self.document_ids, dtype=str), document_leaves=self.document_leaves, **keys)

    @classmethod
    def load(cls, path: Path) -> "Clusters":
        """The clusters a model saved; a file missing, cut short or lacking an array is an error naming it."""
        try:
            with np.load(path, allow_pickle=False) as data:
                cids = [tuple(row[:n].tolist()) for row, n in zip(data["cids"], data["lengths"])]
                keys = data["document_keys"].tolist() if "document_keys" in data.files else None
                return cls(cids, data["leaf_means"], data["document_ids"].tolist(), data["document_leaves"], keys)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise SemiretError(f"cannot read the clusters in {path}: {exc} (copy the model folder again)") from None

    def trained_leaves(self) -> dict[str, int]:
        """Each trained document's leaf, by its cache key (by id for models saved before keys)."""
        return dict(zip(self.document_keys or self.document_ids, self.document_leaves.tolist()))


def check_query_encoder(encoder, config: GDRConfig) -> None:
    """Refuse an E_Q the decoder cannot read: one whose embeddings are truncated (``truncate_dim``; the decoder
    cross-attends over its whole token states), or of a width the decoder's heads do not divide."""
    if getattr(encoder, "truncate_dim", None) is not None:
        raise SemiretError(f"{encoder.name} keeps the first {encoder.truncate_dim} dimensions of its embeddings "
                           "(truncate_dim): GDR's decoder reads its whole token states; give it the encoder saved "
                           "without truncate_dim")
    config.check_width(encoder.dim)


class GDRModel(nn.Module):
    """E_Q (a :class:`~semiret.models.dense.DenseEncoder`) and the cluster decoder over ``clusters``' CIDs."""

    def __init__(self, encoder: nn.Module, clusters: Clusters, config: GDRConfig):
        super().__init__()
        config.validate()
        check_query_encoder(encoder, config)
        self.config, self.clusters = config, clusters
        self.tree = PrefixTree(clusters.cids, config.branching)
        self.encoder = encoder
        self.query_inputs = TextBatcher(encoder.tokenizer, config.query_max_length,
                                        getattr(encoder.backbone.config, "max_position_embeddings", None),
                                        encoder.name)
        width = encoder.dim
        self.values = config.branching + 1
        self.steps = self.tree.max_length
        self.token_embeddings = nn.Embedding(FIRST_TOKEN + self.values * self.steps, width)
        nn.init.normal_(self.token_embeddings.weight, std=width ** -0.5)

        def decoder(layers: int) -> nn.TransformerDecoder:
            layer = nn.TransformerDecoderLayer(width, config.heads, 4 * width, dropout=config.dropout,
                                               activation="gelu", batch_first=True)
            return nn.TransformerDecoder(layer, layers)

        self.decoder = decoder(config.decoder_layers)
        if config.adaptive_head:
            self.adaptor = decoder(config.adaptor_layers)
            self.adaptor_memory = nn.Parameter(torch.randn(1, 1, width) * width ** -0.5)
            self.adaptor_weights = nn.Linear(width, self.values * width)
            nn.init.zeros_(self.adaptor_weights.weight)  # ΔW starts at 0: the head starts as the tied one
            nn.init.zeros_(self.adaptor_weights.bias)
        self.eval()

    # ------------------------------------------------------------------ forward
    @property
    def device(self) -> torch.device:
        return self.token_embeddings.weight.device

    def encode(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(E_Q's token states [B, L, d], their attention mask, r_q [B, d]) of query ``texts``."""
        input_ids, attention_mask = self.query_inputs.padded(self.encoder.prompted(texts, "query"), self.device)
        states, pooled = self.encoder.states_and_embeddings(input_ids, attention_mask)
        return states, attention_mask, pooled

    def token_ids(self, prefixes: torch.Tensor) -> torch.Tensor:
        """Decoder inputs of value prefixes [B, T] (-1 pads): the start token, then each value's token."""
        steps = torch.arange(prefixes.shape[1], device=prefixes.device)
        tokens = torch.where(prefixes >= 0, steps * self.values + prefixes + FIRST_TOKEN, 0)
        return torch.cat([torch.zeros(len(prefixes), 1, dtype=torch.long, device=prefixes.device), tokens], dim=1)

    def step_logits(self, inputs: torch.Tensor, states: torch.Tensor | None, attention_mask: torch.Tensor | None,
                    memory: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] | None = None) -> torch.Tensor:
        """Logits [B, T, k + 1] over each step's values, for decoder input tokens [B, T] (teacher forcing).
        ``memory``: instead of ``states`` and ``attention_mask``, one query's cross-attention keys and values
        (:meth:`cross_memory`), shared by all B rows (the beams of a search; inference only), and then only the
        last step's logits [B, 1, k + 1] are computed (the next value is all a beam search asks for: the
        adaptive head's weights for the earlier steps were a third of its cost)."""
        length = inputs.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(length, device=inputs.device)
        embedded = self.token_embeddings(inputs)
        if memory is None:
            hidden = self.decoder(embedded, states, tgt_mask=causal, tgt_is_causal=True,
                                  memory_key_padding_mask=~attention_mask.bool())
            first = 0
        else:
            first = length - 1
            hidden = self._decode_over_memory(embedded, causal, memory)[:, first:]
        rows = self.token_embeddings.weight[FIRST_TOKEN:].view(self.steps, self.values, -1)[first:length]
        logits = torch.einsum("btd,tvd->btv", hidden, rows)
        if self.config.adaptive_head:
            adaptor_memory = self.adaptor_memory.expand(len(inputs), -1, -1)
            prefix = self.adaptor(embedded, adaptor_memory, tgt_mask=causal, tgt_is_causal=True)[:, first:]
            delta = self.adaptor_weights(prefix).view(len(inputs), length - first, self.values, -1)
            logits = logits + torch.einsum("btd,btvd->btv", hidden, delta)
        return logits

    def cross_memory(self, states: torch.Tensor, attention_mask: torch.Tensor
                     ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Per decoder layer, the cross-attention's keys and values [1, heads, L, d / heads] of one query's token
        states [1, L, d], and the additive padding mask [1, 1, 1, L]. A beam search computes them once per
        query instead of for each of its beams at every step (with the last-step-only head: 83 -> 61 ms a query)."""
        padding = torch.zeros(attention_mask.shape, dtype=states.dtype, device=states.device)
        padding = padding.masked_fill(~attention_mask.bool(), float("-inf"))[:, None, None, :]
        memory = []
        for layer in self.decoder.layers:
            attention = layer.multihead_attn
            width = attention.embed_dim
            keys = F.linear(states, attention.in_proj_weight[width: 2 * width], attention.in_proj_bias[width: 2 * width])
            values = F.linear(states, attention.in_proj_weight[2 * width:], attention.in_proj_bias[2 * width:])
            memory.append((self._heads(keys, attention.num_heads), self._heads(values, attention.num_heads), padding))
        return memory

    @staticmethod
    def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
        """[B, T, d] -> [B, heads, T, d / heads]."""
        return x.view(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)

    def _decode_over_memory(self, x: torch.Tensor, causal: torch.Tensor,
                            memory: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``self.decoder(x, states, ...)`` in evaluation mode (post-norm layers, no dropout) with each layer's
        cross-attention keys and values given (:meth:`cross_memory`) and broadcast over the rows of ``x``:
        nn.TransformerDecoder cannot take them precomputed, so its layer is written out here."""
        if self.training:
            raise SemiretError("decoding over a precomputed memory is for inference (no dropout)")
        for layer, (keys, values, padding) in zip(self.decoder.layers, memory):
            x = layer.norm1(x + layer.self_attn(x, x, x, attn_mask=causal, is_causal=True, need_weights=False)[0])
            attention = layer.multihead_attn
            width = attention.embed_dim
            queries = self._heads(F.linear(x, attention.in_proj_weight[:width], attention.in_proj_bias[:width]),
                                  attention.num_heads)
            weights = torch.softmax(queries @ keys.transpose(-1, -2) / keys.shape[-1] ** 0.5 + padding, dim=-1)
            attended = (weights @ values).transpose(1, 2).reshape(x.shape)
            x = layer.norm2(x + attention.out_proj(attended))
            x = layer.norm3(x + layer.linear2(layer.activation(layer.linear1(x))))
        return x

    def cid_targets(self, leaves: Sequence[int]) -> torch.Tensor:
        """The CIDs of leaf numbers as values [B, T], -1 past each CID's end."""
        targets = torch.full((len(leaves), self.steps), -1, dtype=torch.long)
        for row, leaf in enumerate(leaves):
            cid = self.tree.cids[leaf]
            targets[row, : len(cid)] = torch.tensor(cid)
        return targets.to(self.device)

    # ------------------------------------------------------------------ inference
    @torch.inference_mode()
    def query_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """r_q [n, d] (float32) of query ``texts``, as inference computes them."""
        was_training = self.training
        self.eval()
        try:
            return self.encode(check_texts(list(texts), "queries"))[2].cpu().numpy()
        finally:
            self.train(was_training)

    @torch.inference_mode()
    def search_clusters(self, texts: Sequence[str], beams: int, length_penalty: float,
                        held: np.ndarray | None = None) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
        """Constrained beam search: per query the leaf numbers of at most ``beams`` CIDs, best first (ranked by
        log-probability / length ** ``length_penalty``), their ``S_inter`` (the path probability), and r_q
        [n, d] (float32). Fewer valid CIDs than beams: all of them.

        ``held``: a flag per leaf, whether it holds a document to find (an index's live ones). The beams then follow
        only the prefixes of held leaves: a corpus smaller than the one the tree was built on leaves most leaves
        empty (341 SciFact documents in gdr-scifact's 871 leaves: 100 beams found under 100 documents, and every
        query was decoded again with 400). A CID's ``S_inter`` stays its path's probability over the whole tree."""
        texts = check_texts(list(texts), "queries")
        if beams < 1:
            raise SemiretError(f"the beam size must be at least 1, got {beams}")
        if beams > len(self.tree.cids):
            raise SemiretError(f"{beams} beams for {len(self.tree.cids)} valid cluster ids: lower --beams")
        was_training = self.training
        self.eval()
        try:
            states, attention_mask, pooled = self.encode(texts)
            reachable = None if held is None else self.tree.prefixes_of(np.flatnonzero(held))
            leaves, scores = [], []
            for row in range(len(texts)):
                found = self._beam_search(states[row: row + 1], attention_mask[row: row + 1], beams, length_penalty,
                                          reachable)
                leaves.append(np.asarray([self.tree.leaf[cid] for cid, _ in found], np.int64))
                scores.append(np.exp(np.asarray([logp for _, logp in found], np.float32)))
        finally:
            self.train(was_training)
        return leaves, scores, pooled.cpu().numpy()

    def _beam_search(self, states: torch.Tensor, attention_mask: torch.Tensor, beams: int, length_penalty: float,
                     reachable: set[tuple[int, ...]] | None) -> list[tuple[tuple[int, ...], float]]:
        """(CID, log-probability) of the best ``beams`` CIDs; with ``reachable``, of those among its prefixes."""
        memory = self.cross_memory(states, attention_mask)
        live: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
        finished: list[tuple[tuple[int, ...], float]] = []
        for step in range(self.steps):
            if not live:
                break
            prefixes = torch.tensor([prefix for prefix, _ in live], dtype=torch.long,
                                    device=self.device).view(len(live), step)
            logits = self.step_logits(self.token_ids(prefixes), None, None, memory)[:, -1]
            allowed = torch.full_like(logits, float("-inf"))
            for row, (prefix, _) in enumerate(live):
                allowed[row, self.tree.allowed(prefix)] = 0.0
            log_probabilities = torch.log_softmax(logits + allowed, dim=-1).cpu()
            expansions = [(prefix + (value,), score + float(log_probabilities[row, value]))
                          for row, (prefix, score) in enumerate(live) for value in self.tree.allowed(prefix)
                          if reachable is None or prefix + (value,) in reachable]
            finished += [e for e in expansions if e[0][-1] == TERMINAL]
            open_ = sorted((e for e in expansions if e[0][-1] != TERMINAL), key=lambda e: -e[1])
            live = open_[:beams]
        finished.sort(key=lambda e: -e[1] / len(e[0]) ** length_penalty)
        return finished[:beams]

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path, training: dict | None = None, fp16: bool = True) -> Path:
        """Write the model directory (fp16 weights by default), published in one rename."""
        target = Path(path)
        if target.exists() and any(target.iterdir()) and not (target / GDR.marker).is_file():
            raise SemiretError(f"{target} exists and is not a saved GDR model: refusing to overwrite it")

        def write(staged: Path) -> None:
            (staged / QUERY_ENCODER).mkdir()
            self.encoder.write(staged / QUERY_ENCODER, fp16, self.config.query_max_length, self.config.query_base)
            with _half_precision(self, fp16):
                save_own_weights(self, staged / DECODER_FILE, "encoder.")
            self.clusters.save(staged / CLUSTERS_FILE)
            GDR.write_marker(staged, config=dataclasses.asdict(self.config), training=training or {})

        return save_model_directory(target, write)

    @classmethod
    def load(cls, name_or_path: str) -> "GDRModel":
        from semiret.models.encoders import load_encoder

        path, meta = GDR.read(name_or_path)
        encoder = load_encoder(str(path / QUERY_ENCODER), "dense")
        model = cls(encoder, Clusters.load(path / CLUSTERS_FILE), GDRConfig(**meta["config"]))
        return to_encoding_device(load_own_weights(model, path / DECODER_FILE, "encoder.", GDR.marker))


def read_clusters(name_or_path: str) -> tuple[Path, dict, Clusters]:
    """(directory, gdr.json, clusters) of a saved GDR model without loading any weights (for indexing)."""
    path, meta = GDR.read(name_or_path)
    return path, meta, Clusters.load(path / CLUSTERS_FILE)
