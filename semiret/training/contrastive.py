"""SiDR's training loss over batches of (query, positive) pairs: the semi-parametric contrastive loss with
in-batch negatives, negatives retrieved during training from a fixed index, and any given with the data."""

from __future__ import annotations

from semiret.models.sidr import sparse_queries
from semiret.training.data import SeededBatch
from semiret.training.losses import Loss, LossOutput, sidr_loss
from semiret.training.miners import RetrievedNegativeMiner


class SemiParametricLoss(Loss):
    """Encode a batch of :class:`~semiret.training.data.TrainingPair` with a
    :class:`~semiret.models.sidr.SiDRModel` and return :func:`~semiret.training.losses.sidr_loss`.

    Passages are the positives, then one negative per query retrieved by ``miner`` (if any) with the current
    queries, drawn with the batch's seed, then the pairs' given negatives. ``form="paper"`` encodes top-k
    vectors only (gradients for kept entries); ``"code"`` encodes full vectors and sparsifies them."""

    def __init__(self, form: str = "paper", semi_parametric: bool = True,
                 miner: RetrievedNegativeMiner | None = None):
        self.form, self.semi_parametric, self.miner = form, semi_parametric, miner

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        pairs = batch.items
        query_encoder, document_encoder = model.query_encoder, model.document_encoder
        dense = self.form == "code"
        q_ids, q_mask = query_encoder.inputs.padded([p.query for p in pairs])
        q = query_encoder(q_ids, q_mask, sparse=not dense)
        q_sparse = query_encoder.sparsify(q) if dense else q
        documents = [p.positive for p in pairs]
        if self.miner is not None:
            queries = sparse_queries(query_encoder, q_sparse)
            mined = self.miner.mine([p.query_id for p in pairs], queries, batch.random())
            documents += [d for negatives in mined for d in negatives]
        documents += [n for p in pairs for n in p.negatives]
        d_ids, d_mask = document_encoder.inputs.padded([d.full_text for d in documents])
        p = document_encoder(d_ids, d_mask, sparse=not dense)
        p_sparse = document_encoder.sparsify(p) if dense else p
        q_bot = query_encoder.bag_of_tokens(q_ids, q_mask)
        p_bot = document_encoder.bag_of_tokens(d_ids, d_mask)
        return sidr_loss(q, p, q_bot, p_bot, q_sparse, p_sparse, form=self.form, semi_parametric=self.semi_parametric)
