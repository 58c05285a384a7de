"""Training losses: the :class:`Loss` protocol the trainer calls, and the pieces recipes' losses are made
of: contrastive (SiDR), distillation and FLOPS (inference-free); :class:`MatryoshkaLoss` trains any dense loss for
truncated embeddings."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from semiret.errors import SemiretError
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


def check_matryoshka(dims: Sequence[int], weights: Sequence[float] | None = None,
                     dimension: int | None = None, model: str = "the encoder") -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(``dims``, ``weights``, 1 each when None) of a :class:`MatryoshkaLoss`, or an error naming the flag: every
    dimension a distinct positive whole number, at most ``dimension`` (the encoder's width, where known), one finite
    positive weight per dimension."""
    dims, flag = list(dims), "--matryoshka-dims"
    if not dims:
        raise SemiretError(f"{flag} needs at least one dimension")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
            raise SemiretError(f"{flag}: every dimension is a positive whole number, got {d!r} in {dims}")
    if len(set(dims)) != len(dims):
        raise SemiretError(f"{flag}: each dimension once, got {dims}")
    if dimension is not None and max(dims) > dimension:
        raise SemiretError(f"{flag}: {model} embeds in {dimension} dimensions, fewer than {max(dims)} (the "
                           f"dimensions are the first N of its embeddings, N from 1 to {dimension})")
    weights = [1.0] * len(dims) if weights is None else list(weights)
    if len(weights) != len(dims):
        raise SemiretError(f"--matryoshka-weights: one weight per dimension of {flag} ({len(dims)}: {dims}), "
                           f"got {len(weights)}: {weights}")
    if not all(isinstance(w, (int, float)) and math.isfinite(w) and w > 0 for w in weights):
        raise SemiretError(f"--matryoshka-weights: every weight is a positive number, got {weights}")
    return tuple(int(d) for d in dims), tuple(float(w) for w in weights)


def embedding_prefix(vectors, width: int, normalize: bool):
    """``vectors`` [..., D] (a tensor or an array) cut to their first ``width`` dimensions and, ``normalize``,
    scaled to unit length again: what an encoder truncated to ``width`` gives (the same whether cut from its raw or
    its normalised embeddings); unchanged when no wider than ``width``. A loss that scores the model's embeddings
    against vectors of its own (centroids, a cached corpus embedding) cuts those to the embeddings' width with it,
    so that it works under :class:`MatryoshkaLoss` and with a truncated encoder."""
    if vectors.shape[-1] <= width:
        return vectors
    cut = vectors[..., :width]
    if not normalize:
        return cut
    if isinstance(vectors, torch.Tensor):
        return F.normalize(cut, dim=-1)
    norms = np.linalg.norm(cut, axis=-1, keepdims=True)
    return cut / np.maximum(norms, 1e-12)


class MatryoshkaLoss(Loss):
    """Matryoshka representation learning (Kusupati et al. 2022; sentence-transformers' ``MatryoshkaLoss``):
    ``sum_i weights[i] * loss`` with the model's dense embeddings cut to their first ``dims[i]`` dimensions, and
    re-normalised where the encoder normalises (what ``DenseEncoder(truncate_dim=dims[i])`` searches with).

    ``loss`` is called once per dimension on the same batch. Every :class:`~semiret.models.dense.DenseEncoder` in
    the model encodes once per step: in the first call each encoding is computed at the encoder's full width and
    kept; the later calls get the kept embeddings cut to their dimension when they encode the same inputs in the
    same order (as any loss does that draws from the batch's seed: the batch and its draws are the same at every
    call), so a step costs one forward and one backward pass whatever the number of dimensions. An input the first
    call did not encode at that point (negatives mined with the cut query vectors, say) is encoded afresh.
    Vectors a loss holds itself (trainable centroids, a cached corpus embedding) are the loss's to cut, with
    :func:`embedding_prefix`.

    Terms: ``loss@<dim>``, the inner loss at each dimension, and the inner loss's own terms summed over the
    dimensions with the weights (their weighted sum is the total where the inner terms sum to its total)."""

    def __init__(self, loss: Loss, dims: Sequence[int], weights: Sequence[float] | None = None,
                 dimension: int | None = None):
        self.loss = loss
        self.dims, self.weights = check_matryoshka(dims, weights, dimension)

    def __call__(self, model: torch.nn.Module, batch: SeededBatch, step: int) -> LossOutput:
        from semiret.models.dense import DenseEncoder

        encoders = [m for m in model.modules() if isinstance(m, DenseEncoder)]
        if not encoders:
            raise SemiretError("a Matryoshka loss trains dense encoders' embeddings: the model holds no dense encoder")
        for encoder in encoders:
            check_matryoshka(self.dims, self.weights, encoder.dim, encoder.name)
        kept = _KeptEncodings()
        total, terms, per_dimension = 0.0, {}, {}
        with kept.installed(encoders):
            for dim, weight in zip(self.dims, self.weights):
                kept.next_call(dim)
                output = self.loss(model, batch, step)
                total = total + weight * output.total
                for name, value in output.terms.items():
                    terms[name] = terms.get(name, 0.0) + weight * value
                per_dimension[f"loss@{dim}"] = float(output.total.detach())
        return LossOutput(total, {**terms, **per_dimension})


class _KeptEncodings:
    """The dense encoders' forward passes of a :class:`MatryoshkaLoss` step: the first call's, at full width, kept
    in order and replayed to the later calls; every call's embeddings cut to its dimension."""

    def __init__(self):
        self.kept: list[tuple[object, torch.Tensor, torch.Tensor, bool, bool, torch.Tensor]] = []
        self.position, self.dim, self.first = 0, 0, True

    def next_call(self, dim: int) -> None:
        self.first, self.position, self.dim = self.position == 0 and not self.kept, 0, dim

    @contextmanager
    def installed(self, encoders):
        for encoder in encoders:
            encoder.forward = self._forward_of(encoder, encoder.forward)  # shadows the class's for this step
        try:
            yield
        finally:
            for encoder in encoders:
                del encoder.forward

    def _forward_of(self, encoder, forward):
        def kept_forward(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            position, self.position = self.position, self.position + 1
            key = (encoder, input_ids, attention_mask, torch.is_grad_enabled(), encoder.training)
            if self.first:
                full = forward(input_ids, attention_mask)
                self.kept.append((*key, full))
            elif position < len(self.kept) and _same_inputs(self.kept[position][:5], key):
                full = self.kept[position][5]
            else:  # inputs the first call did not encode here
                full = forward(input_ids, attention_mask)
            return embedding_prefix(full, self.dim, encoder.normalize)
        return kept_forward


def _same_inputs(kept: tuple, key: tuple) -> bool:
    (encoder, ids, mask, grad, training), (encoder2, ids2, mask2, grad2, training2) = kept, key
    return (encoder is encoder2 and grad == grad2 and training == training2 and ids.shape == ids2.shape
            and mask.shape == mask2.shape and torch.equal(ids, ids2) and torch.equal(mask, mask2))


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
