"""GDR's training objective (Yuan et al. 2024, Eq. 9): ``L = L_inter + L_intra`` for a
:class:`~semiret.models.gdr.GDRModel`.

- ``L_inter`` (Eq. 2): ``-log p(CID(d+) | q)``, teacher-forced cross-entropy summed over the CID's tokens,
  averaged over the batch.
- ``L_intra`` (Eq. 8, cluster-adaptive negatives): an InfoNCE of ``r_q`` against E_D's frozen, precomputed
  vectors of the batch's documents: each example's positive, and up to ``intra_negatives`` documents drawn
  from the positive's own leaf cluster (the released code draws 10). For query ``q``, the documents of its
  positive's cluster ``N_a`` weigh ``gamma`` (2) in the denominator, the other in-batch documents ``N_r`` 1::

      L_intra = -log e^{s(q,d+)} / (e^{s(q,d+)} + gamma * sum_{N_a} e^{s(q,d)} + sum_{N_r} e^{s(q,d)})

  with ``s = <r_q, r_d> / tau`` (``tau`` = 0.05, the released code's; E_D's vectors are unit length, so
  ``s`` is a scaled cosine). The positive is in the denominator (Eq. 4; Eq. 8 as printed omits it, which
  would make the loss unbounded below). The query's other relevant documents are left out of it.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from semiret.errors import SemiretError
from semiret.training.data import SeededBatch
from semiret.training.hierarchy import HierarchyExample
from semiret.training.losses import Loss, LossOutput

GAMMA = 2.0
INTRA_NEGATIVES = 10
TEMPERATURE = 0.05


class GDRLoss(Loss):
    """``L_inter + L_intra`` of a batch of :class:`~semiret.training.hierarchy.HierarchyExample` (a query, its
    positive's row in ``document_vectors``, rows never used as its negatives)."""

    def __init__(self, document_vectors: np.ndarray, document_leaves: np.ndarray, gamma: float = GAMMA,
                 intra_negatives: int = INTRA_NEGATIVES, temperature: float = TEMPERATURE):
        if len(document_vectors) != len(document_leaves):
            raise SemiretError(f"{len(document_vectors)} document vectors for {len(document_leaves)} leaf numbers")
        if gamma <= 0 or temperature <= 0 or intra_negatives < 0:
            raise SemiretError("gamma and the temperature must be positive, the intra-cluster negatives >= 0")
        self.vectors = torch.from_numpy(np.ascontiguousarray(document_vectors, np.float32))
        self.leaves = np.asarray(document_leaves, np.int64)
        order = np.argsort(self.leaves, kind="stable")
        bounds = np.searchsorted(self.leaves[order], np.arange(self.leaves.max() + 2))
        self.members = [order[bounds[leaf]: bounds[leaf + 1]] for leaf in range(self.leaves.max() + 1)]
        self.gamma, self.intra_negatives, self.temperature = gamma, intra_negatives, temperature

    def __call__(self, model, batch: SeededBatch, step: int) -> LossOutput:
        examples: tuple[HierarchyExample, ...] = batch.items
        rows = np.asarray([e.document for e in examples], np.int64)
        states, attention_mask, queries = model.encode([e.query for e in examples])
        inter = self.inter(model, states, attention_mask, self.leaves[rows])
        intra = self.intra(queries, examples, batch.numpy_random())
        return LossOutput(inter + intra, {"inter": inter.item(), "intra": intra.item()})

    def inter(self, model, states: torch.Tensor, attention_mask: torch.Tensor, leaves: np.ndarray) -> torch.Tensor:
        """``-log p(CID)`` per example (token cross-entropies summed), averaged."""
        targets = model.cid_targets(leaves.tolist())
        logits = model.step_logits(model.token_ids(targets[:, :-1]), states, attention_mask)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-1,
                               reduction="sum") / len(leaves)

    def intra(self, queries: torch.Tensor, examples, rng: np.random.Generator) -> torch.Tensor:
        positives = [e.document for e in examples]
        drawn = [self.sample(e, rng) for e in examples]
        candidates = np.unique(np.concatenate([positives, *drawn]).astype(np.int64))
        column = {row: j for j, row in enumerate(candidates.tolist())}
        log_weights = torch.zeros(len(examples), len(candidates))
        same_cluster = self.leaves[candidates][None, :] == self.leaves[positives][:, None]
        log_weights[torch.from_numpy(same_cluster)] = math.log(self.gamma)
        targets = torch.tensor([column[p] for p in positives])
        for i, example in enumerate(examples):
            hidden = [column[r] for r in example.excluded if r in column]
            log_weights[i, hidden] = float("-inf")
            log_weights[i, targets[i]] = 0.0
        device = queries.device
        scores = queries @ self.vectors[candidates].to(device).T / self.temperature
        positive = scores.gather(1, targets[:, None].to(device)).squeeze(1)
        return (torch.logsumexp(scores + log_weights.to(device), dim=1) - positive).mean()

    def sample(self, example: HierarchyExample, rng: np.random.Generator) -> np.ndarray:
        """Up to ``intra_negatives`` other documents of the positive's leaf, none of the query's positives."""
        members = self.members[self.leaves[example.document]]
        excluded = {example.document, *example.excluded}
        members = np.asarray([m for m in members.tolist() if m not in excluded], np.int64)
        if len(members) <= self.intra_negatives:
            return members
        return rng.choice(members, self.intra_negatives, replace=False)
