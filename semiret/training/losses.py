"""Training losses: the :class:`Loss` protocol the trainer calls, and the pieces recipes' losses are made
of: contrastive (SiDR), distillation and FLOPS (inference-free)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from semiret.training.data import SeededBatch


@dataclass
class LossOutput:
    """A step's loss: the tensor to minimise and its named terms (floats), which the trainer shows on the
    progress bar and averages per epoch into the run's JSON."""

    total: torch.Tensor
    terms: dict[str, float] = field(default_factory=dict)


class Loss(ABC):
    """A training objective over the batches of a batch source.

    A call sees the model, one batch (its items and its seed) and the global step, nothing else: no state
    carries from one call to the next and nothing outside the batch is read, so any process can compute any
    batch, and a resumed run computes what an uninterrupted one would."""

    @abstractmethod
    def __call__(self, model: torch.nn.Module, batch: SeededBatch, step: int) -> LossOutput: ...


def symmetric_info_nce(queries: torch.Tensor, passages: torch.Tensor) -> torch.Tensor:
    """In-batch InfoNCE in both directions, temperature 1, inner-product scores (SiDR's ``L``).

    ``queries`` is [N, D]; ``passages`` is [M, D] with the N positives first (row i pairs with query i)
    and any negatives after them. Query-to-passage rows compete over all M passages; passage-to-query
    rows (positives only as anchors) compete over the N queries. Mean reduction, as the authors' code.
    """
    n = queries.shape[0]
    scores = queries @ passages.T
    targets = torch.arange(n, device=scores.device)
    return F.cross_entropy(scores, targets) + F.cross_entropy(scores.T[:n], targets)


def sidr_loss(q: torch.Tensor, p: torch.Tensor, q_bot: torch.Tensor, p_bot: torch.Tensor,
              q_sparse: torch.Tensor | None = None, p_sparse: torch.Tensor | None = None,
              form: str = "paper", semi_parametric: bool = True) -> LossOutput:
    """SiDR's semi-parametric contrastive loss, with its ``parametric`` and ``semi_parametric`` terms.

    ``form="paper"``: ``L(q, p) + [L(q, p_bot) + L(q_bot, p)] / 2`` with the top-k vectors ``*_sparse`` as V_theta.
    ``form="code"`` (the authors' 4-term code): ``[L(q_topk, p) + L(q, p_topk) + L(q_bot, p) + L(q, p_bot)] / 4``,
    where ``q``/``p`` are un-sparsified and ``*_sparse`` their top-k (OR lexical) versions.
    ``semi_parametric=False`` keeps only the parametric term(s) (the paper's "w/o SP objective" ablation).
    """
    if form == "paper":  # V_theta includes the top-k in every term
        q_theta = q_sparse if q_sparse is not None else q
        p_theta = p_sparse if p_sparse is not None else p
        parametric = symmetric_info_nce(q_theta, p_theta)
        if not semi_parametric:
            return LossOutput(parametric, {"parametric": parametric.item()})
        semi = (symmetric_info_nce(q_theta, p_bot) + symmetric_info_nce(q_bot, p_theta)) / 2
        return LossOutput(parametric + semi, {"parametric": parametric.item(), "semi_parametric": semi.item()})
    if form == "code":
        if q_sparse is None or p_sparse is None:
            raise ValueError("form='code' needs the sparsified q_sparse and p_sparse")
        terms = [symmetric_info_nce(q_sparse, p), symmetric_info_nce(q, p_sparse)]
        if semi_parametric:
            terms += [symmetric_info_nce(q_bot, p), symmetric_info_nce(q, p_bot)]
        named = {"parametric": (terms[0] + terms[1]).item() / len(terms)}
        if semi_parametric:
            named["semi_parametric"] = (terms[2] + terms[3]).item() / len(terms)
        return LossOutput(sum(terms) / len(terms), named)
    raise ValueError(f"unknown SiDR loss form {form!r} (paper, code)")


def kl_distillation(student_scores: torch.Tensor, teacher_scores: torch.Tensor) -> torch.Tensor:
    """``KL(softmax(teacher) || softmax(student))`` over each query's candidates, averaged over queries."""
    return F.kl_div(F.log_softmax(student_scores, dim=-1), F.softmax(teacher_scores, dim=-1),
                    reduction="batchmean")


SCALE_GRID = torch.logspace(-3, 3, 97)
"""Candidate student score scales for :func:`fitted_student_scale` (16 per decade, 15% apart)."""


@torch.no_grad()
def fitted_student_scale(student_scores: torch.Tensor, teacher_scores: torch.Tensor) -> float:
    """The factor ``a`` minimising ``KL(softmax(teacher) || softmax(a * student))`` over a batch (a log grid).

    Distilling with ``a * student`` (``a`` fitted per step, no gradient) makes the loss blind to the overall
    size of the student's scores. Without it, a student whose raw scores spread wider than the teacher's
    lowers the KL fastest by shrinking every document weight, which prunes expansion terms: the ranking
    loss then does the FLOPS regularizer's job, uncontrolled. The KL is convex in ``a``, so the grid
    minimum is within 15% of the best scale.
    """
    target = F.softmax(teacher_scores, dim=-1)
    scaled = SCALE_GRID.to(student_scores)[:, None, None] * student_scores.detach()  # [G, Q, C]
    cross_entropy = -(target * F.log_softmax(scaled, dim=-1)).sum(dim=-1).mean(dim=-1)  # [G]
    return float(SCALE_GRID[int(cross_entropy.argmin())])


@dataclass(frozen=True)
class VocabularySample:
    """The vocabulary columns a step computes: ``columns[:exact]`` in full (those its ranking loss needs), then
    a uniform sample of the other entries, each standing for ``rate`` of them; a sum over the vocabulary is
    estimated without bias (value and gradient) by scaling the sampled part by ``rate``."""

    columns: torch.Tensor
    exact: int
    rate: float

    @classmethod
    def draw(cls, exact_ids: np.ndarray, vocab_size: int, size: int, rng: np.random.Generator) -> VocabularySample:
        """``exact_ids`` (sorted, distinct) and ``size`` other entries drawn without replacement."""
        others = np.setdiff1d(np.arange(vocab_size), exact_ids)
        sampled = np.sort(rng.choice(others, min(size, len(others)), replace=False))
        return cls(torch.from_numpy(np.concatenate([exact_ids, sampled])), len(exact_ids),
                   len(others) / max(len(sampled), 1))

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The estimated sum over the whole vocabulary of ``values`` [..., len(columns)] (last dimension)."""
        return values[..., : self.exact].sum(dim=-1) + self.rate * values[..., self.exact:].sum(dim=-1)


def flops_regularizer(document_weights: torch.Tensor, sample: VocabularySample | None = None) -> torch.Tensor:
    """SPLADE's FLOPS: ``sum_j (mean_i |w_ij|)^2`` over a batch of document vectors [N, V]; with ``sample``,
    the vectors hold its columns only and the sum over the vocabulary is its unbiased estimate."""
    per_token = document_weights.abs().mean(dim=0).pow(2)
    return per_token.sum() if sample is None else sample.sum(per_token)


def quadratic_warmup(weight: float, step: int, ramp_steps: int) -> float:
    """``weight * min(1, (step / ramp_steps)^2)``: the usual SPLADE schedule for the FLOPS weight."""
    if ramp_steps <= 0:
        return weight
    return weight * min(1.0, (step / ramp_steps) ** 2)


def minmax_normalize(scores: torch.Tensor) -> torch.Tensor:
    """Scale each query's candidate scores [Q, C] to [0, 1] (teachers on one scale before ensembling)."""
    low = scores.min(dim=-1, keepdim=True).values
    high = scores.max(dim=-1, keepdim=True).values
    return (scores - low) / (high - low).clamp_min(1e-9)


def ensemble_teacher_scores(teacher_scores: list[torch.Tensor], scale: float, normalize: bool = True,
                            weights: list[float] | None = None) -> torch.Tensor:
    """The inference-free paper's ensemble teacher (Eqs. 8-9): ``scale * sum_j w_j * minmax(s_j)`` with equal
    weights ``w_j = 1/J`` unless given. ``normalize=False`` is the paper's "simply add" ablation: the plain sum
    of the raw teacher scores (no normalization, no averaging, no scale)."""
    if not teacher_scores:
        raise ValueError("at least one teacher is needed")
    if not normalize:
        return torch.stack(list(teacher_scores)).sum(dim=0)
    if weights is None:
        weights = [1.0 / len(teacher_scores)] * len(teacher_scores)
    if len(weights) != len(teacher_scores):
        raise ValueError(f"{len(weights)} weights for {len(teacher_scores)} teachers")
    combined = sum(w * minmax_normalize(s) for w, s in zip(weights, teacher_scores))
    return combined * scale


def grouped_scores(queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """Each query against its own candidates: queries [N, V], documents [N * C, V] (query-major) -> [N, C]."""
    n = queries.shape[0]
    return torch.bmm(documents.view(n, -1, documents.shape[-1]), queries.unsqueeze(-1)).squeeze(-1)


def multi_hot_similarities(query_tokens: list[torch.Tensor], document_scores: torch.Tensor,
                           columns: torch.Tensor) -> torch.Tensor:
    """``s(q, d)`` [m, N], the sum of d's scores at q's distinct tokens (the query a multi-hot vector), for every
    query against every passage: ``document_scores`` [N, C] over vocabulary ids ``columns`` (ascending, at least
    every query token)."""
    device = document_scores.device
    multi_hot = torch.zeros(len(query_tokens), len(columns), dtype=document_scores.dtype, device=device)
    for row, tokens in enumerate(query_tokens):
        multi_hot[row, torch.searchsorted(columns, tokens).to(device)] = 1.0
    return multi_hot @ document_scores.T


def multi_hot_softmax_loss(query_tokens: list[torch.Tensor], document_scores: torch.Tensor, columns: torch.Tensor,
                           positives: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """NAIL's Eq. 3: ``-s(q, d+) + log sum_{d' in batch} exp(s(q, d'))``, summed over the queries, with ``s``
    :func:`multi_hot_similarities` divided by ``temperature`` (the paper: 1); ``positives`` [m] the row of each
    query's positive."""
    similarities = multi_hot_similarities(query_tokens, document_scores, columns)
    return multi_hot_cross_entropy(similarities, positives, temperature)


def multi_hot_cross_entropy(similarities: torch.Tensor, positives: torch.Tensor, temperature: float) -> torch.Tensor:
    """Eq. 3 over similarities already computed (:func:`multi_hot_softmax_loss`)."""
    return F.cross_entropy(similarities / temperature, positives.to(similarities.device), reduction="sum")
