"""Loss objects and their shared pieces: the sampled FLOPS estimate against the plain regularizer, the
recipes' losses and their named terms, candidate pools and draws, batch seeds, and inputs in input order."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from helpers import MSMARCO_IDF, TINY_DOCS, write_beir

from semiret.data import Collection
from semiret.errors import SemiretError
from semiret.training.data import PairBatches, SeededBatch, TrainingSet, seeded
from semiret.training.losses import VocabularySample, flops_regularizer
from semiret.training.miners import negative_pool, sample_negatives


# ------------------------------------------------------------------ FLOPS
def test_sampled_flops_without_sampling_is_the_plain_regularizer():
    torch.manual_seed(0)
    weights = torch.relu(torch.randn(6, 40))
    exact = np.array([3, 17, 30])
    sample = VocabularySample.draw(exact, 40, size=100, rng=np.random.default_rng(0))
    assert sample.rate == 1.0 and sorted(sample.columns.tolist()) == list(range(40))
    assert sample.columns[:3].tolist() == [3, 17, 30] and sample.exact == 3
    assert torch.allclose(flops_regularizer(weights[:, sample.columns], sample), flops_regularizer(weights))


def test_sampled_flops_is_an_unbiased_estimate_of_the_plain_regularizer_and_its_gradient():
    torch.manual_seed(0)
    weights = torch.relu(torch.randn(6, 60)).requires_grad_(True)
    full = flops_regularizer(weights)
    (full_gradient,) = torch.autograd.grad(full, weights)
    rng = np.random.default_rng(1)
    exact = np.array([0, 5, 9])
    estimates, gradient = [], torch.zeros_like(weights)
    for _ in range(4000):
        sample = VocabularySample.draw(exact, 60, size=8, rng=rng)
        assert sample.rate == 57 / 8
        estimate = flops_regularizer(weights[:, sample.columns], sample)
        gradient += torch.autograd.grad(estimate, weights)[0]
        estimates.append(estimate.item())
    assert np.mean(estimates) == pytest.approx(full.item(), rel=0.02)
    assert np.std(estimates) > 0.01 * full.item()  # it is an estimate, not the sum itself
    assert torch.allclose(gradient / 4000, full_gradient, rtol=0.15, atol=1e-3)
    assert torch.allclose(gradient[:, exact] / 4000, full_gradient[:, exact], rtol=1e-4)  # exact columns: exact


# ------------------------------------------------------------------ candidates
def test_negative_pool_interleaves_rankings_and_skips_positives():
    rankings = [[5, 1, 2, 7], [1, 3, 5], [9]]
    assert negative_pool(rankings, excluded={2}) == [5, 1, 9, 3, 7]
    assert negative_pool(rankings, excluded={5}, size=2) == [1, 9]
    assert negative_pool([["a", "b", "c"]], excluded=set(), keep=lambda d: d != "b") == ["a", "c"]


def test_sample_negatives_draws_from_the_pool_or_pads_it_without_positives():
    rng = random.Random(0)
    drawn = sample_negatives([4, 5, 6, 7], 2, rng, range(10), excluded={0})
    assert len(set(drawn)) == 2 and set(drawn) <= {4, 5, 6, 7}
    for _ in range(20):
        padded = sample_negatives([4], 3, rng, range(5), excluded={0, 1, 2})
        assert padded[0] == 4 and set(padded[1:]) <= {3, 4}
    with pytest.raises(Exception, match="every document"):
        sample_negatives([], 1, rng, range(2), excluded={0, 1})


def test_batches_carry_seeds_drawn_in_order():
    first, second = seeded([["a"], ["b"]], random.Random(3)), seeded([["a"], ["b"]], random.Random(3))
    assert first == second and first[0].seed != first[1].seed
    assert first[0].random().random() == first[0].random().random()


def test_no_batch_holds_a_query_s_own_positive_as_another_pair_s():
    """Pairs sharing a positive, or one judged relevant to the other's query, went into one batch (SciFact train,
    batch 32: 174 columns of five epochs were the row's own positive, 34 another positive of its query): in-batch
    negatives that are positives. Such pairs wait for another batch; every pair is trained on once an epoch."""
    from semiret.data import Document
    from semiret.training.data import TrainingPair

    documents = {f"d{i}": Document(f"d{i}", f"text {i}") for i in range(12)}
    judged = {f"q{q}": {f"d{q % 6}", f"d{(q * 5 + 1) % 12}"} for q in range(30)}
    pairs = [TrainingPair(q, f"query {q}", documents[d]) for q, ds in judged.items() for d in sorted(ds)]
    training = TrainingSet(pairs, judged, documents)
    for seed in range(5):
        batches = training.batches(8, random.Random(seed))
        assert sorted(id(p) for b in batches for p in b) == sorted(id(p) for p in pairs)
        for batch in batches:
            for row in batch:
                columns = [p.positive.id for p in batch if p is not row]
                assert not judged[row.query_id] & set(columns), (seed, row.query_id, columns)
        assert max(map(len, batches)) > 1


def test_pairs_kept_apart_still_fill_their_batches():
    """Pairs that wait for a later batch were taken in the shuffled order, so the most shared positives were left to
    the end, a tiny batch each (SciFact train, batch 32: 35 batches of 1 or 2 pairs in 100 epochs). They go first
    among those waiting now: as few batches as the pairs need."""
    from semiret.data import Document
    from semiret.training.data import TrainingPair

    documents = {f"d{i}": Document(f"d{i}", f"text {i}") for i in range(40)}
    shared = [(f"s{q}", f"d{q % 6}") for q in range(36)]  # six positives of six queries each
    alone = [(f"a{q}", f"d{6 + q}") for q in range(34)]
    pairs = [TrainingPair(q, f"query {q}", documents[d]) for q, d in shared + alone]
    training = TrainingSet(pairs, {q: {d} for q, d in shared + alone}, documents)
    for seed in range(20):
        sizes = sorted(map(len, training.batches(10, random.Random(seed))))
        assert len(sizes) == 7 and sizes[0] == 10, (seed, sizes)


def test_the_learning_rate_decays_to_0_on_the_last_step_whatever_each_epoch_s_count(training_set, tmp_path):
    """The decay's length was the batches of one order times the epochs, where pairs kept apart make each order's
    count differ: a last step trained at 0, or the rate stopped short of it. It is the count of the epochs drawn."""
    from semiret.training.config import Schedule, TrainingConfig
    from semiret.training.losses import Loss, LossOutput
    from semiret.training.trainer import Trainer

    class Counts(PairBatches):  # an epoch of 2, 3, 4 ... batches by its draw
        def epoch(self, rng):
            return seeded([[pair] for pair in self.training_set.pairs[:rng.randrange(2, 6)]], rng)

    class RateOfEachStep(Loss):
        def __call__(self, model, batch, step):
            rates.append(trainer.optimizer.param_groups[0]["lr"])
            return LossOutput((model.weight ** 2).sum())

    rates = []
    trainer = Trainer(torch.nn.Linear(2, 1), RateOfEachStep(), Counts(training_set, 1), TrainingConfig(seed=3),
                      Schedule(epochs=3, learning_rate=0.1, warmup_epochs=0), tmp_path / "run")
    history = trainer.train(resume=False)
    assert len(rates) == sum(h.steps for h in history) == trainer.total_steps
    assert rates[-1] > 0 and rates == sorted(rates, reverse=True)
    assert trainer.optimizer.param_groups[0]["lr"] == 0.0  # after the last step


# ------------------------------------------------------------------ the recipes' losses
@pytest.fixture(scope="module")
def training_set(tmp_path_factory):
    return TrainingSet.from_collection(Collection(write_beir(tmp_path_factory.mktemp("c") / "c", split="train")))


def test_batches_of_no_pairs_are_refused(training_set):
    with pytest.raises(SemiretError, match="the batch size must be at least 1, got 0"):
        PairBatches(training_set, 0)


@pytest.mark.parametrize("prompts", [("", ""), ("query: ", "passage: ")])
def test_in_batch_contrastive_loss_is_multiple_negatives_ranking(training_set, tiny_bert, prompts):
    """Each query's cross-entropy against its positive among the batch's passages, and back, over scaled inner
    products: computed here from the encoder's own vectors, of the texts after its prompts (E5's) where it has
    them, as it reads them when searched."""
    import torch.nn.functional as F

    from semiret.models.encoders import load_encoder
    from semiret.training.contrastive import InBatchContrastiveLoss

    encoder = load_encoder(str(tiny_bert), "dense", query_prompt=prompts[0], document_prompt=prompts[1])
    batch = PairBatches(training_set, 3).epoch(random.Random(0))[0]
    output = InBatchContrastiveLoss(temperature=0.1)(encoder, batch, 0)
    with torch.no_grad():
        q = encoder(*encoder.inputs.padded([prompts[0] + p.query for p in batch.items]))
        d = encoder(*encoder.inputs.padded([prompts[1] + p.positive.full_text for p in batch.items]))
    scores, targets = q @ d.T / 0.1, torch.arange(len(batch.items))
    assert output.terms["query_to_passage"] == pytest.approx(F.cross_entropy(scores, targets).item(), rel=1e-5)
    assert output.terms["passage_to_query"] == pytest.approx(F.cross_entropy(scores.T, targets).item(), rel=1e-5)
    assert output.total.requires_grad
    one_way = InBatchContrastiveLoss(temperature=0.1, symmetric=False)(encoder, batch, 0)
    assert set(one_way.terms) == {"query_to_passage"}
    with pytest.raises(SemiretError, match="temperature must be positive"):
        InBatchContrastiveLoss(temperature=0)


def test_semi_parametric_loss_terms(training_set, tiny_bert):
    from semiret.models.sidr import SiDRModel
    from semiret.training.contrastive import SemiParametricLoss

    torch.manual_seed(0)
    model = SiDRModel.initialise(str(tiny_bert), top_k=50, query_max_length=16, document_max_length=32)
    batch = PairBatches(training_set, 3).epoch(random.Random(0))[0]
    full = SemiParametricLoss()(model, batch, 0)
    assert set(full.terms) == {"parametric", "semi_parametric"}
    assert full.total.item() == pytest.approx(full.terms["parametric"] + full.terms["semi_parametric"], rel=1e-5)
    ablation = SemiParametricLoss(semi_parametric=False)(model, batch, 0)
    assert set(ablation.terms) == {"parametric"} and ablation.total.item() == pytest.approx(full.terms["parametric"])
    full.total.backward()
    assert next(model.query_encoder.parameters()).grad is not None


@pytest.fixture(scope="module")
def distillation_set(training_set):
    from semiret.data.packaged import model_directory
    from semiret.text.wordpiece import WordPieceVocabulary
    from semiret.training.distillation import DistillationSet
    from semiret.training.teachers import BM25Teacher

    vocabulary = WordPieceVocabulary(str(model_directory("splade-tiny")))
    return DistillationSet.from_training_set("tiny", training_set, [BM25Teacher()], None, 4, vocabulary)


def _inference_free_model(tiny_bert):
    from semiret.methods.inference_free import load_idf
    from semiret.models.inference_free import InferenceFreeModel
    from semiret.models.splade import SpladeEncoder

    encoder = SpladeEncoder.from_pretrained(str(tiny_bert), max_length=32)
    return InferenceFreeModel(encoder, load_idf(str(MSMARCO_IDF), "splade-tiny")[0])


def test_distillation_loss_terms_and_flops_warm_up(distillation_set, tiny_bert):
    from semiret.training.distillation import DistillationBatches, DistillationLoss

    model = _inference_free_model(tiny_bert)
    batch = DistillationBatches([distillation_set], batch_size=2).epoch(random.Random(0))[0]
    options = dict(candidates=3, scale=10.0, flops_weight=0.5, flops_ramp_steps=10, flops_sample=64)
    loss = DistillationLoss([distillation_set], **options)
    start, ramped = loss(model, batch, 0), loss(model, batch, 10)
    assert set(start.terms) == {"kl", "flops", "nnz", "student_scale", "documents_per_query"}
    assert start.terms["documents_per_query"] == 3 and start.terms["flops"] > 0 and start.terms["nnz"] > 0
    assert start.total.item() == pytest.approx(start.terms["kl"], rel=1e-6)  # weight 0 at step 0
    assert ramped.total.item() == pytest.approx(ramped.terms["kl"] + 0.5 * ramped.terms["flops"], rel=1e-5)
    assert ramped.terms["kl"] == pytest.approx(start.terms["kl"], rel=1e-6)  # the batch's seed fixes its draws
    in_batch = DistillationLoss([distillation_set], **options, in_batch_negatives=True)(model, batch, 0)
    assert in_batch.terms["documents_per_query"] == len(batch.items[1]) * 3


def test_the_distillation_flops_term_is_the_plain_regularizer_when_nothing_is_sampled(distillation_set, tiny_bert):
    """With a sample as large as the vocabulary, the loss's FLOPS is the regularizer over full vectors."""
    from semiret.training.distillation import DistillationLoss

    model = _inference_free_model(tiny_bert)
    batch = SeededBatch((0, [0, 1]), 0.25)
    output = DistillationLoss([distillation_set], candidates=3, scale=10.0, flops_weight=0.0, flops_ramp_steps=0,
                              flops_sample=10**6)(model, batch, 0)
    rng = batch.random()
    rows = [distillation_set.candidates(i, 3, rng) for i in [0, 1]]
    ids, mask = model.encoder.inputs.padded([distillation_set.documents[r].full_text for rs in rows for r in rs])
    with torch.no_grad():
        full = model.document_vectors(ids, mask)
    assert output.terms["flops"] == pytest.approx(flops_regularizer(full).item(), rel=1e-5)
    assert output.terms["nnz"] == pytest.approx((full > 0).sum(dim=1).float().mean().item())


# ------------------------------------------------------------------ inputs
def test_padded_inputs_come_back_in_input_order(tiny_bert):
    from semiret.models.splade import SpladeEncoder

    batcher = SpladeEncoder.from_pretrained(str(tiny_bert), max_length=32).inputs
    texts = [d.full_text for d in TINY_DOCS] + ["short"]
    ids, mask = batcher.padded(texts)
    for row, tokens in enumerate(batcher.tokenize(texts)):
        assert ids[row, : len(tokens)].tolist() == tokens and int(mask[row].sum()) == len(tokens)


def test_a_query_without_text_is_left_out_of_training_with_a_warning(tmp_path, caplog):
    """A blank query was trained on silently (a query of no tokens to every model)."""
    from helpers import TINY_QRELS, TINY_QUERIES

    root = write_beir(tmp_path / "c", queries={**TINY_QUERIES, "q2": "  "}, qrels=TINY_QRELS, split="train")
    with caplog.at_level("WARNING"):
        training = TrainingSet.from_collection(Collection(root))
    assert "1 query without text left out of training ('q2')" in caplog.text
    assert {pair.query_id for pair in training.pairs} == {"q1", "q3"}
