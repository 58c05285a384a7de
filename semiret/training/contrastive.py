"""Contrastive training losses over batches of (query, positive) pairs: the plain in-batch loss any bi-encoder
trains with (sentence-transformers' MultipleNegativesRankingLoss); SiDR's semi-parametric loss with in-batch
negatives, negatives retrieved during training from a fixed index, and any given with the data; and NAIL's
in-batch softmax over token-set queries with pooled hard negatives."""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from semiret.errors import SemiretError
from semiret.models.devices import module_device
from semiret.models.sidr import sparse_queries
from semiret.training.data import SeededBatch
from semiret.training.distillation import InBatchDistillation
from semiret.training.distributed import encode_rows
from semiret.training.losses import Loss, LossOutput, multi_hot_cross_entropy, multi_hot_similarities, sidr_loss
from semiret.training.miners import PooledNegatives, RetrievedNegativeMiner


class InBatchContrastiveLoss(Loss):
    """Any bi-encoder on batches of :class:`~semiret.training.data.TrainingPair`: each query against its positive,
    the batch's other positives and the pairs' given negatives (and, ``symmetric``, each positive against the
    batch's queries, the two directions' losses summed), inner products divided by ``temperature``: with
    ``symmetric=False``, sentence-transformers' MultipleNegativesRankingLoss. The model is one encoder for both sides (a dense, SPLADE or VDR
    :class:`~semiret.models.base.TextEncoder`) or a module with a ``query_encoder`` and a ``document_encoder``.
    0.05 suits normalised embeddings (a cosine's range); unnormalised or sparse vectors want 1."""

    def __init__(self, temperature: float = 0.05, symmetric: bool = True):
        if not temperature > 0:
            raise SemiretError(f"the temperature must be positive, got {temperature}")
        self.temperature, self.symmetric = temperature, symmetric

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        pairs = batch.items
        device = module_device(model)

        def encode(encoder, texts, side):
            return encode_rows(lambda share: encoder(*encoder.inputs.padded(encoder.prompted(share, side), device)),
                               texts)

        queries = encode(getattr(model, "query_encoder", model), [p.query for p in pairs], "query")
        passages = encode(getattr(model, "document_encoder", model),
                          [p.positive.full_text for p in pairs] + [n.full_text for p in pairs for n in p.negatives],
                          "document")
        scores = queries @ passages.T / self.temperature
        targets = torch.arange(len(pairs), device=scores.device)
        forward = F.cross_entropy(scores, targets)
        if not self.symmetric:
            return LossOutput(forward, {"query_to_passage": forward.item()})
        backward = F.cross_entropy(scores.T[: len(pairs)], targets)
        return LossOutput(forward + backward, {"query_to_passage": forward.item(), "passage_to_query": backward.item()})


class SemiParametricLoss(Loss):
    """Encode a batch of :class:`~semiret.training.data.TrainingPair` with a
    :class:`~semiret.models.sidr.SiDRModel` and return :func:`~semiret.training.losses.sidr_loss`.

    Passages are the positives, then one negative per query retrieved by ``miner`` (if any) with the current
    queries, drawn with the batch's seed, then the pairs' given negatives. ``form="paper"`` encodes top-k
    vectors only (gradients for kept entries); ``"code"`` encodes full vectors and sparsifies them. Queries and
    passages are encoded through :func:`~semiret.training.distributed.encode_rows` (shared between processes).
    ``distillation`` (optional) adds its term over the full index's scores (the top-k vectors) of every query
    against every passage of the batch."""

    def __init__(self, form: str = "paper", semi_parametric: bool = True,
                 miner: RetrievedNegativeMiner | None = None, distillation: InBatchDistillation | None = None):
        self.form, self.semi_parametric, self.miner = form, semi_parametric, miner
        self.distillation = distillation

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        pairs = batch.items
        query_encoder, document_encoder = model.query_encoder, model.document_encoder
        dense = self.form == "code"
        device = module_device(model)

        def vectors_and_bags(encoder, texts):
            ids, mask = encoder.inputs.padded(texts, device)
            return encoder(ids, mask, sparse=not dense), encoder.bag_of_tokens(ids, mask)

        q, q_bot = encode_rows(partial(vectors_and_bags, query_encoder), [p.query for p in pairs])
        q_sparse = query_encoder.sparsify(q) if dense else q
        documents = [p.positive for p in pairs]
        if self.miner is not None:
            queries = sparse_queries(query_encoder, q_sparse)
            mined = self.miner.mine([p.query_id for p in pairs], queries, batch.random())
            documents += [d for negatives in mined for d in negatives]
        documents += [n for p in pairs for n in p.negatives]
        p, p_bot = encode_rows(partial(vectors_and_bags, document_encoder), [d.full_text for d in documents])
        p_sparse = document_encoder.sparsify(p) if dense else p
        output = sidr_loss(q, p, q_bot, p_bot, q_sparse, p_sparse, form=self.form, semi_parametric=self.semi_parametric)
        if self.distillation is None:
            return output
        distilled = self.distillation(q_sparse @ p_sparse.T, [p.query_id for p in pairs], [d.id for d in documents])
        return LossOutput(output.total + distilled.total, {**output.terms, **distilled.terms})


class TokenSetContrastiveLoss(Loss):
    """NAIL's loss (:func:`~semiret.training.losses.multi_hot_softmax_loss`) over batches of
    :class:`~semiret.training.data.TrainingPair`: queries are their distinct non-special tokens (``vocabulary``),
    passages the positives, then ``negatives``' draws for each query (if any), then the pairs' given negatives;
    every passage of the batch competes for every query. Only the vocabulary columns of the batch's query tokens
    are computed: the loss reads no other. ``distillation`` (optional) adds its term over the same scores of every
    query against every passage of the batch."""

    def __init__(self, vocabulary, temperature: float = 1.0, negatives: PooledNegatives | None = None,
                 distillation: InBatchDistillation | None = None):
        if not temperature > 0:
            raise SemiretError(f"the temperature must be positive, got {temperature}")
        self.vocabulary, self.temperature, self.negatives = vocabulary, temperature, negatives
        self.distillation = distillation

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        pairs = batch.items
        tokens = [torch.from_numpy(np.unique(np.asarray(self.vocabulary.encode(p.query), np.int64))) for p in pairs]
        columns = torch.unique(torch.cat(tokens))
        passages = [p.positive for p in pairs]
        if self.negatives is not None:
            passages += [d for drawn in self.negatives.sample([p.query_id for p in pairs], batch.random()) for d in drawn]
        passages += [n for p in pairs for n in p.negatives]
        device = module_device(model)

        def scores_of(texts):
            return model(*model.inputs.padded(texts, device), columns.to(device))

        scores = encode_rows(scores_of, [d.full_text for d in passages])
        similarities = multi_hot_similarities(tokens, scores, columns)
        loss = multi_hot_cross_entropy(similarities, torch.arange(len(pairs)), self.temperature)
        if self.distillation is None:
            return LossOutput(loss)
        distilled = self.distillation(similarities, [p.query_id for p in pairs], [d.id for d in passages])
        return LossOutput(loss + distilled.total, {"contrastive": loss.item(), **distilled.terms})
