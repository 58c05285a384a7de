"""HCE's hierarchy-aware loss (Chen et al. 2025, Eqs. 5-6 and Appendix A) over a corpus tree
(:class:`~semiret.clustering.EqualDepthTree`), and the module it trains: the encoder plus the centroids of
the tree's upper levels as parameters.

For a query ``q`` and its positive document ``d+`` (depth L in the tree):

- levels t = 1..M: a softmax of ``q`` against the centroid of ``d+``'s depth-t ancestor and those of all its
  siblings (the other children of its depth t-1 ancestor), ``S = cos(q, c) / tau``: the centroids are
  trainable (initialised from k-means, their own learning rate) and scored by cosine, so training turns
  them and never merely grows them;
- levels t = M+1..L: a bidirectional in-batch contrastive loss (Eq. 8) in which each query also meets
  ``n_NS`` documents sampled from the subtree of ``d+``'s depth t-1 ancestor (for t = L: its sibling
  documents). The batch shares its sampled documents, as DPR shares hard negatives: every query meets the
  others' as well (the paper's Eq. 8 gives each query only its own).

A subtree too small to sample from (fewer than ``n_NS`` documents besides ``d+`` and the query's other
positives) gives all it has, and the rest is drawn from the next wider subtree (its parent's), up to the
whole corpus: every query gets ``n_NS`` negatives, the closest available. Negatives never include a
positive of the batch, so no query meets its own document as a negative.

A batch holds supervised examples (HCE-S), unsupervised ones (HCE-U, pseudo-queries), or both (HCE-J:
``L_S + alpha L_U``); the terms are named per group and level kind (``S.hierarchy``, ``U.contrastive``...).
``levels=0, negatives=0`` is plain in-batch contrastive fine-tuning (the baseline HCE is measured against);
``mined_from`` (the corpus as the starting encoder embeds it) replaces the tree's samples by mined hard
negatives: ``n_NS`` drawn from each query's top ``mining_depth`` documents, positives of the batch excluded (the
second baseline).

``cached_negatives``: the sampled (or mined) negatives' vectors are read from a corpus embedding the recipe
refreshes between epochs (:meth:`HierarchyLoss.refresh_negatives`) instead of encoded at every step, as ANCE
reads its negatives from an index refreshed asynchronously (Xiong et al. 2021): targets without gradients in
either case, here up to an epoch stale, for less compute per step on a CPU (no forward pass for them).

Under :class:`~semiret.training.losses.MatryoshkaLoss` (or with a truncated encoder) the loss is computed on the
embeddings cut to their first dimensions; the vectors it holds itself are cut to the same width
(:func:`~semiret.training.losses.embedding_prefix`): each centroid by its prefix (re-normalised: the centroids are
scored by cosine; they stay trainable in the full dimension, every prefix's term training its own first
dimensions), the cached negatives' and the mining vectors by theirs (re-normalised where the encoder normalises), so
mined negatives are the hardest at that prefix.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from semiret.clustering import EqualDepthTree
from semiret.errors import SemiretError
from semiret.models.devices import module_device
from semiret.models.inputs import TextBatcher
from semiret.training.data import SeededBatch
from semiret.training.distributed import encode_rows
from semiret.training.losses import Loss, LossOutput, embedding_prefix, symmetric_info_nce

TEMPERATURE = 0.01
SAMPLED_NEGATIVES = 4
MINING_DEPTH = 30
"""Mined negatives are drawn from this many top documents (RocketQA and DPR-style mining use 30-100)."""


@dataclass(frozen=True)
class HierarchyExample:
    """A query and its positive (a row of the clustered corpus); ``excluded``: rows never drawn as its
    negatives (the query's other relevant documents)."""

    query: str
    document: int
    excluded: tuple[int, ...] = ()

    @classmethod
    def labelled(cls, pair, rows: dict[str, int], positives: dict[str, set[str]]) -> "HierarchyExample":
        """A training pair's query and positive, the query's other judged documents excluded (``rows``: the row of
        each document id in the clustered corpus; ``positives``: each query's judged documents)."""
        others = tuple(rows[d] for d in positives[pair.query_id] if d != pair.positive.id)
        return cls(pair.query, rows[pair.positive.id], others)


@dataclass(frozen=True)
class HierarchyBatch:
    supervised: tuple[HierarchyExample, ...] = ()
    unsupervised: tuple[HierarchyExample, ...] = ()


class HierarchyModel(nn.Module):
    """The dense encoder being trained (one for queries and documents, queries cut to ``query_max_length``
    tokens, documents to the encoder's length) and the trainable centroids of tree depths 1..``levels``
    (``centroids.<t-1>``, thrown away after training)."""

    def __init__(self, encoder: nn.Module, query_max_length: int | None = None, tree: EqualDepthTree | None = None,
                 levels: int = 0):
        super().__init__()
        self.encoder = encoder
        self.query_inputs = TextBatcher(encoder.tokenizer, query_max_length or encoder.max_length,
                                        getattr(encoder.backbone.config, "max_position_embeddings", None),
                                        encoder.name)
        self.centroids = nn.ParameterList()
        if levels:
            self.set_tree(tree, levels)

    def encode_queries(self, texts: list[str]) -> torch.Tensor:
        """Query vectors, the rows shared between processes (:func:`~semiret.training.distributed.encode_rows`)."""
        return encode_rows(lambda share: self.encoder(*self.query_inputs.padded(self.encoder.prompted(share, "query"),
                                                                                self.device)), texts)

    def encode_documents(self, texts: list[str]) -> torch.Tensor:
        """Document vectors, the rows shared between processes."""
        return encode_rows(lambda share: self.encoder(*self.encoder.inputs.padded(
            self.encoder.prompted(share, "document"), self.device)), texts)

    @property
    def device(self) -> torch.device:
        return module_device(self.encoder)

    def set_tree(self, tree: EqualDepthTree, levels: int) -> None:
        """Reset the centroids to ``tree``'s k-means ones (in place: the optimizer keeps the same parameters)."""
        if not 0 <= levels < tree.depth:
            raise SemiretError(f"the hierarchy loss covers levels 1..M with M < L = {tree.depth}, got M = {levels}")
        for t in range(levels):
            values = torch.from_numpy(np.array(tree.centroids[t], np.float32))
            if t < len(self.centroids):
                self.centroids[t].data = values.to(self.centroids[t].device)
            else:
                self.centroids.append(nn.Parameter(values))


class HierarchyLoss(Loss):
    """:math:`L_{HCE}` (Eq. 6) of every example of a :class:`HierarchyBatch`, for a
    :class:`HierarchyModel`; ``documents`` are the texts of the clustered corpus, row by row."""

    def __init__(self, documents: list[str], tree: EqualDepthTree | None = None, levels: int = 0,
                 negatives: int = SAMPLED_NEGATIVES, temperature: float = TEMPERATURE,
                 unsupervised_weight: float = 0.5, negative_gradients: bool = True,
                 mined_from: np.ndarray | None = None, mining_depth: int = MINING_DEPTH,
                 cached_negatives: bool = False):
        if negatives < 0 or temperature <= 0:
            raise SemiretError("the loss needs a non-negative number of negatives and a positive temperature")
        if (levels or (negatives and mined_from is None)) and tree is None:
            raise SemiretError("the hierarchy loss and sampled negatives need a corpus tree")
        if mined_from is not None and (len(mined_from) != len(documents) or mining_depth < negatives):
            raise SemiretError(f"mining needs one vector per document ({len(mined_from)} for {len(documents)}) "
                               f"and a mining depth of at least {negatives}, got {mining_depth}")
        if negatives and len(documents) < negatives + 2:
            raise SemiretError(f"{len(documents)} documents are too few to sample {negatives} negatives from")
        if cached_negatives and (negative_gradients or not negatives):
            raise SemiretError("cached negatives need sampled negatives without gradients (negatives > 0, "
                               "no negative gradients)")
        self.documents, self.levels, self.negatives = documents, levels, negatives
        self.cached_negatives = cached_negatives
        self.negative_vectors: np.ndarray | None = None
        self.temperature, self.unsupervised_weight = temperature, unsupervised_weight
        self.negative_gradients = negative_gradients
        self.mined_from, self.mining_depth = mined_from, mining_depth
        self.tree: EqualDepthTree | None = None
        self._subtrees: list[tuple[np.ndarray, np.ndarray]] = []
        if tree is not None:
            self.set_tree(tree)

    def set_tree(self, tree: EqualDepthTree) -> None:
        """Train against ``tree`` from now on (the co-training's re-clustering)."""
        if len(tree.parents[-1]) != len(self.documents):
            raise SemiretError(f"a tree of {tree.n_documents} documents for a corpus of {len(self.documents)}")
        if not 0 <= self.levels < tree.depth:
            raise SemiretError(f"the hierarchy loss covers levels 1..M with M < L = {tree.depth}, got {self.levels}")
        self.tree = tree
        self._subtrees = [tree.documents_under(depth) for depth in range(tree.depth)]

    def refresh_negatives(self, vectors: np.ndarray) -> None:
        """``cached_negatives``: the corpus embedding (row by row) the negatives' vectors are read from now on."""
        if vectors.shape[0] != len(self.documents):
            raise SemiretError(f"{vectors.shape[0]} cached vectors for a corpus of {len(self.documents)}")
        self.negative_vectors = np.ascontiguousarray(vectors, np.float32)

    @property
    def sampled_levels(self) -> range:
        """The levels t whose term is contrastive with sampled negatives (none without negatives)."""
        return range(self.levels + 1, self.tree.depth + 1) if self.negatives else range(0)

    def __call__(self, model: HierarchyModel, batch: SeededBatch, step: int) -> LossOutput:
        rng = batch.numpy_random()
        groups = [("S", batch.items.supervised, 1.0),
                  ("U", batch.items.unsupervised, self.unsupervised_weight if batch.items.supervised else 1.0)]
        total, terms = 0.0, {}
        in_batch = {e.document for _, examples, _ in groups for e in examples}
        for name, examples, weight in groups:
            if not examples:
                continue
            hierarchy, contrastive = self._group(model, examples, in_batch, rng)
            total = total + weight * (hierarchy + contrastive)
            if self.levels:
                terms[f"{name}.hierarchy"] = hierarchy.item()
            terms[f"{name}.contrastive"] = contrastive.item()
        return LossOutput(total, terms)

    def _group(self, model: HierarchyModel, examples, in_batch: set[int], rng: np.random.Generator):
        rows = np.asarray([e.document for e in examples], np.int64)
        queries = model.encode_queries([e.query for e in examples])
        positives = model.encode_documents([self.documents[r] for r in rows])
        normalize = getattr(getattr(model, "encoder", None), "normalize", True)
        hierarchy = sum((self._level_loss(queries, model.centroids[t - 1], rows, t)
                         for t in range(1, self.levels + 1)), torch.zeros(()))
        contrastive = []
        for sampled in self._negative_rounds(examples, queries, in_batch, rng, normalize):
            negatives = embedding_prefix(self._negatives(model, np.concatenate(sampled)), queries.shape[-1],
                                         normalize).to(queries.device)
            contrastive.append(symmetric_info_nce(queries / self.temperature, torch.cat([positives, negatives])))
        if not contrastive:  # in-batch negatives only
            contrastive.append(symmetric_info_nce(queries / self.temperature, positives))
        return hierarchy, sum(contrastive)

    def _negatives(self, model: HierarchyModel, rows: np.ndarray) -> torch.Tensor:
        """The vectors of the sampled documents ``rows``: read from the cache, or encoded."""
        if self.cached_negatives:
            if self.negative_vectors is None:
                raise SemiretError("cached negatives: no corpus embedding yet (refresh_negatives before training)")
            return torch.from_numpy(self.negative_vectors[rows])
        texts = [self.documents[r] for r in rows]
        if self.negative_gradients:
            return model.encode_documents(texts)
        with torch.no_grad(), _evaluation_mode(model):  # fixed targets of this step: encoded as at inference
            return model.encode_documents(texts)

    def _negative_rounds(self, examples, queries: torch.Tensor, in_batch: set[int], rng: np.random.Generator,
                         normalize: bool = True):
        """Each round's negatives per example: one round per sampled tree level, or one of mined negatives."""
        if self.mined_from is not None:
            if self.negatives:
                yield self.mine(examples, queries.detach().float().cpu().numpy(), in_batch, rng, normalize)
            return
        for t in self.sampled_levels:
            yield [self.sample(e.document, t - 1, in_batch | set(e.excluded), rng) for e in examples]

    def mine(self, examples, queries: np.ndarray, in_batch: set[int], rng: np.random.Generator,
             normalize: bool = True) -> list[np.ndarray]:
        """``negatives`` of each query's top ``mining_depth`` documents by the mining vectors (cut to the queries'
        width), none a positive of the batch or one of the query's excluded documents."""
        scores = queries @ embedding_prefix(self.mined_from, queries.shape[-1], normalize).T
        reach = self.mining_depth + len(in_batch) + max(len(e.excluded) for e in examples)
        tops = np.argsort(-scores, axis=1)[:, :reach]
        chosen = []
        for example, top in zip(examples, tops):
            taken = in_batch | set(example.excluded)
            candidates = [r for r in top.tolist() if r not in taken][: self.mining_depth]
            chosen.append(rng.choice(candidates, self.negatives, replace=False).astype(np.int64))
        return chosen

    def _level_loss(self, queries: torch.Tensor, centroids: torch.Tensor, rows: np.ndarray, t: int) -> torch.Tensor:
        """Eq. 5 at depth ``t``: each query's softmax over the children of its positive's depth t-1 ancestor."""
        ancestors = self.tree.ancestors[rows]
        # a Matryoshka prefix (or a truncated encoder) scores the centroids' prefixes
        scores = queries @ F.normalize(centroids[:, : queries.shape[-1]], dim=-1).T / self.temperature  # [B, nodes]
        parents = torch.from_numpy(self.tree.parents[t - 1]).to(scores.device)
        siblings = parents[None, :] == torch.from_numpy(ancestors[:, t - 1]).to(scores.device)[:, None]
        return F.cross_entropy(scores.masked_fill(~siblings, float("-inf")),
                               torch.from_numpy(ancestors[:, t]).to(scores.device))

    def sample(self, row: int, depth: int, excluded: set[int], rng: np.random.Generator) -> np.ndarray:
        """``negatives`` documents of the subtree of ``row``'s depth-``depth`` ancestor, none in ``excluded`` nor
        ``row``; a subtree with too few gives all and the next wider subtree the rest (see the module)."""
        chosen: list[int] = []
        for level in range(depth, -1, -1):
            offsets, members = self._subtrees[level]
            node = self.tree.ancestors[row, level]
            taken = excluded | set(chosen) | {row}
            candidates = [m for m in members[offsets[node]: offsets[node + 1]].tolist() if m not in taken]
            need = self.negatives - len(chosen)
            if len(candidates) <= need:
                chosen += candidates
            else:
                chosen += rng.choice(candidates, need, replace=False).tolist()
            if len(chosen) == self.negatives:
                return np.asarray(chosen, np.int64)
        raise SemiretError(f"cannot sample {self.negatives} negatives: too few documents outside the batch's "
                           f"positives")


@contextmanager
def _evaluation_mode(module: nn.Module):
    """``module`` in evaluation mode (no dropout) inside the block, in its previous mode after it."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)
