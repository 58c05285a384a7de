"""Inference-free learned sparse retrieval: the IDF-aware loss, ensemble teachers, pseudo-queries, the
thresholded projection, two-phase search, bad inputs and a tiny end-to-end training run."""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from semiret.data import Collection, Document
from semiret.errors import SemiretError
from semiret.indexes.inverted import InvertedIndex, TwoPhase
from semiret.types import SparseQuery
from semiret.indexes.sparsity import sparsity_report
from semiret.methods.inference_free import InferenceFreeTrainingConfig, load_idf, train_inference_free
from semiret.models.inference_free import InferenceFreeModel
from semiret.models.pooled_projection import thresholded_max_pooled_projection
from semiret.models.pooling import log_saturation, masked_max
from semiret.data.packaged import model_directory
from semiret.models.sparse import SparseVectors
from semiret.training.losses import (
    ensemble_teacher_scores, fitted_student_scale, grouped_scores, kl_distillation, minmax_normalize,
)
from semiret.training.pseudo_queries import generate_pseudo_queries, independent_crop, inverse_cloze
from semiret.text.wordpiece import WordPieceVocabulary
from semiret.training.teachers import BM25Teacher, Teacher, TeacherScores, model_identity, parse_teachers
from helpers import MSMARCO_IDF, recording_loss, write_beir


# ------------------------------------------------------------------ losses
def test_idf_aware_gradient_scales_with_idf():
    """d L / d d_{i,t} = idf(t) q_t (softmax(s)_i - softmax(teacher)_i): doubling a token's IDF doubles it."""
    docs = torch.rand(1, 3, 5, requires_grad=True)
    q = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0]])
    idf = torch.tensor([1.0, 2.0, 3.0, 3.0, 3.0])
    teacher = torch.tensor([[3.0, 0.0, -1.0]])
    loss = kl_distillation(grouped_scores(q * idf, docs.view(3, 5)), teacher)
    loss.backward()
    grad = docs.grad[0]
    assert torch.allclose(grad[:, 1], 2 * grad[:, 0], atol=1e-6)
    assert torch.all(grad[:, 2:] == 0)  # tokens absent from the query get no ranking gradient
    plain = docs.detach().clone().requires_grad_(True)
    kl_distillation(grouped_scores(q, plain.view(3, 5)), teacher).backward()
    assert torch.allclose(plain.grad[0][:, 0], plain.grad[0][:, 1])  # plain score: uniform over tokens


def test_fitted_student_scale_makes_the_loss_blind_to_score_size():
    """A student scoring 4x the teacher gets a factor near 1/4; shrinking the student no longer lowers the loss,
    while the plain KL rewards it (what pruned our students' expansion)."""
    torch.manual_seed(0)
    teacher = torch.randn(16, 8) * 3
    student = 4 * teacher + 0.1 * torch.randn(16, 8)
    scale = fitted_student_scale(student, teacher)
    assert 0.25 / 1.16 < scale < 0.25 * 1.16
    fitted = kl_distillation(scale * student, teacher).item()
    assert fitted < 0.01 < kl_distillation(student, teacher).item()
    shrunk = 0.5 * student
    assert kl_distillation(shrunk, teacher) < kl_distillation(student, teacher)  # plain KL: shrinking pays
    assert abs(kl_distillation(fitted_student_scale(shrunk, teacher) * shrunk, teacher).item() - fitted) < 0.01


def test_ensemble_normalization_versus_simply_add():
    dense = torch.tensor([[0.9, 0.8, 0.7]])
    sparse = torch.tensor([[10.0, 30.0, 20.0]])
    normalized = ensemble_teacher_scores([dense, sparse], scale=10)
    expected = 10 * (minmax_normalize(dense) + minmax_normalize(sparse)) / 2
    assert torch.allclose(normalized, expected)
    assert float(normalized.max()) <= 10 + 1e-6 and float(normalized.min()) >= 0
    simply = ensemble_teacher_scores([dense, sparse], scale=10, normalize=False)
    assert torch.allclose(simply, dense + sparse)  # the raw sum: the sparse teacher's scale dominates
    assert simply.argmax() == sparse.argmax()
    with pytest.raises(ValueError, match="at least one teacher is needed"):
        ensemble_teacher_scores([], scale=10)


def test_thresholded_projection_equals_naive_values_and_gradients():
    torch.manual_seed(0)
    states = torch.randn(3, 7, 6, requires_grad=True)
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[2, 3:] = 0
    weight = torch.randn(50, 6, requires_grad=True)
    bias = torch.randn(50, requires_grad=True)
    naive = log_saturation(masked_max(torch.nn.functional.linear(states, weight, bias), mask))
    naive.pow(2).sum().backward()
    expected = [t.grad.clone() for t in (states, weight, bias)]
    for t in (states, weight, bias):
        t.grad = None
    fast = thresholded_max_pooled_projection(states, mask, weight, bias, log_saturation, exact=True)
    assert torch.allclose(fast, naive, atol=1e-5)
    fast.pow(2).sum().backward()
    for t, e in zip((states, weight, bias), expected):
        assert torch.allclose(t.grad, e, atol=1e-4)


# ------------------------------------------------------------------ pseudo-queries and teachers
def test_pseudo_queries_are_deterministic_spans_of_their_documents(tiny_docs):
    queries = generate_pseudo_queries(tiny_docs, per_document=2, seed=3)
    assert queries == generate_pseudo_queries(tiny_docs, per_document=2, seed=3)
    texts = {d.id: d.full_text for d in tiny_docs}
    assert len(queries) == 2 * len(tiny_docs)
    for q in queries:
        assert q.text and q.text in texts[q.document_id] and q.kind in ("crop", "ict")
    rng = random.Random(0)
    words = "a b c d e f g h i j k l m n".split()
    crop = independent_crop(words, rng, 4, 6).split()
    assert 4 <= len(crop) <= 6 and " ".join(crop) in " ".join(words)
    assert inverse_cloze("One two three four. Five six seven eight nine.", rng) in (
        "One two three four.", "Five six seven eight nine.")
    assert inverse_cloze("too short", rng) is None
    # a one-sentence text has no context left for its sentence: cropping stands in for it
    unpunctuated = Document("u", "a physics abstract without any punctuation at all in its many words")
    assert inverse_cloze(unpunctuated.text, rng) is None
    assert {q.kind for q in generate_pseudo_queries([unpunctuated], per_document=4, seed=1)} == {"crop"}
    with pytest.raises(SemiretError, match=r"pseudo-query kinds must be among crop, ict, got \['doc2query'\]"):
        generate_pseudo_queries(tiny_docs, kinds=("doc2query",))


def test_bm25_teacher_scores_and_mining(tiny_docs):
    teacher = BM25Teacher()
    scores = TeacherScores(teacher, tiny_docs, ["q"], ["statins cancer"])
    top = scores.top(2)
    assert set(top[0].tolist()) == {2, 5}  # d3 and d6 mention statins/cancer
    s = scores.scores(["q"], np.array([[2, 0]]))
    assert s[0, 0] > 0 and s[0, 1] == 0


def test_teacher_list_is_checked():
    assert parse_teachers("dense@128,sparse:splade-tiny,bm25") == [("dense", "minilm", 128),
                                                                  ("sparse", "splade-tiny", None), ("bm25", "bm25", None)]
    with pytest.raises(SemiretError, match="token length"):
        parse_teachers("dense@x")
    with pytest.raises(SemiretError, match="empty"):
        parse_teachers("")
    with pytest.raises(SemiretError, match="empty"):
        parse_teachers([])
    with pytest.raises(SemiretError, match="unknown teacher"):
        parse_teachers("cross-encoder")


# ------------------------------------------------------------------ bad token-weight tables
def test_bad_token_weight_tables_fail_before_compute(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({f"▁tok{i}": 1.0 for i in range(50)}))
    with pytest.raises(SemiretError, match="another tokenizer"):
        load_idf(str(other), "splade-tiny")
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({"the": 1.0, "cat": -2.0}))
    with pytest.raises(SemiretError, match="non-negative"):
        load_idf(str(negative), "splade-tiny")
    nan = tmp_path / "nan.json"
    nan.write_text('{"the": 1.0, "cat": NaN}')
    with pytest.raises(SemiretError, match="non-negative"):
        load_idf(str(nan), "splade-tiny")
    with pytest.raises(SemiretError, match="entries"):
        load_idf(np.ones(10, np.float32), "splade-tiny")
    with pytest.raises(SemiretError, match="IDF weights must be finite and non-negative"):
        load_idf(np.full(30522, np.nan, np.float32), "splade-tiny")


def test_training_rejects_bad_inputs_before_loading_models(tmp_path, monkeypatch):
    root = write_beir(tmp_path / "c", split="train")
    import semiret.models.splade as splade

    monkeypatch.setattr(splade.SpladeEncoder, "from_pretrained", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(SemiretError, match="empty"):
        train_inference_free(InferenceFreeTrainingConfig(data=str(root), output=str(tmp_path / "o"), teachers=""))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"the": float("inf")}))
    with pytest.raises(SemiretError, match="non-negative"):
        train_inference_free(InferenceFreeTrainingConfig(data=str(root), output=str(tmp_path / "o"), idf=str(bad),
                                                         teachers="bm25"))
    with pytest.raises(SemiretError, match="needs --idf-aware"):
        train_inference_free(InferenceFreeTrainingConfig(data=str(root), output=str(tmp_path / "o"), teachers="bm25",
                                                         idf_aware=False, learn_query_weights=True))
    with pytest.raises(SemiretError, match="no file or folder 'no-such-corpus' here, and no dataset"):
        train_inference_free(InferenceFreeTrainingConfig(data=str(root), output=str(tmp_path / "o"),
                                                         idf="corpus:no-such-corpus", teachers="bm25"))


def test_a_packaged_model_is_a_base_by_its_name(tmp_path):
    root = write_beir(tmp_path / "c", split="train")
    resolved = InferenceFreeTrainingConfig(data=str(root), base="inference-free-scifact").resolved()
    assert (Path(resolved.base) / "inference-free.json").is_file()


def test_idf_of_another_corpus_than_the_fine_tuning_one(tmp_path):
    """``corpus:<collection>`` weights query tokens by an unlabelled target corpus's IDF."""
    from semiret.methods.inference_free import idf_corpus

    source = write_beir(tmp_path / "source", split="train")
    target = tmp_path / "target"
    target.mkdir()
    (target / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": str(i), "text": text}) for i, text in
                                                   enumerate(["cat cat dog", "cat fish", "cat bird"])))
    assert idf_corpus("corpus", str(source)) == str(source)
    assert idf_corpus(f"corpus:{target}", str(source)) == str(target)
    assert idf_corpus("msmarco", str(source)) is None
    weights, description = load_idf(f"corpus:{target}", "splade-tiny", list(Collection(target).corpus()))
    assert description == f"corpus:{target}"
    ids = WordPieceVocabulary(str(model_directory("splade-tiny"))).token_ids()
    assert weights[ids["cat"]] < weights[ids["dog"]]  # cat is in every target document, dog in one
    assert weights[ids["fish"]] == weights[ids["dog"]]


# ------------------------------------------------------------------ two-phase search
@pytest.fixture(scope="module")
def impact_index(tmp_path_factory):
    rng = np.random.default_rng(0)
    n, vocab = 400, 60
    dense = (rng.random((n, vocab)) < 0.15) * rng.random((n, vocab)).astype(np.float32)
    dense[:, :5] = (rng.random((n, 5)) < 0.8) * rng.random((n, 5))  # common, low-IDF terms
    vectors = SparseVectors.from_dense(dense)
    postings = vectors.to_postings([f"d{i}" for i in range(n)])
    path = tmp_path_factory.mktemp("two-phase") / "index"
    index = InvertedIndex.build(path, "impact", [postings], vocab_size=vocab, analyzer={"type": "test"},
                                store_texts=False)
    queries = []
    for _ in range(30):
        terms = np.unique(np.concatenate([rng.choice(5, 2, replace=False), rng.choice(np.arange(5, vocab), 3)]))
        weights = np.where(terms < 5, 0.2, 2.0 + rng.random(len(terms))).astype(np.float32)
        queries.append(SparseQuery(terms.astype(np.int32), weights))
    return index, queries


def test_two_phase_equals_exhaustive_when_nothing_is_pruned(impact_index):
    index, queries = impact_index
    exact = index.search(queries, k=10)
    two = index.search(queries, k=10, two_phase=TwoPhase(prune_ratio=0.0, expansion=1.0))
    assert two.ids == exact.ids
    assert np.allclose(np.array(two.scores), np.array(exact.scores), atol=1e-5)


def test_two_phase_approximates_exhaustive_search(impact_index):
    index, queries = impact_index
    exact = index.search(queries, k=10)
    two = index.search(queries, k=10, two_phase=TwoPhase(prune_ratio=0.4, expansion=5.0, adaptive=False))
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact.ids, two.ids)])
    assert overlap >= 0.8
    exact_scores = {(qi, d): s for qi, (ids, ss) in enumerate(zip(exact.ids, exact.scores)) for d, s in zip(ids, ss)}
    for qi, (ids, ss) in enumerate(zip(two.ids, two.scores)):  # rescored candidates carry their full score
        assert all(abs(exact_scores[(qi, d)] - s) < 1e-4 for d, s in zip(ids, ss) if (qi, d) in exact_scores)
        assert ss == sorted(ss, reverse=True)
    many = index.search(queries, k=10, two_phase=TwoPhase(0.4, 5.0, adaptive=False), n_threads=2)
    assert many.ids == two.ids


def test_two_phase_rescoring_reads_short_lists_whole_and_searches_long_ones(impact_index):
    """Phase two gives every candidate its full score both ways: with a window of 1 the common terms' lists
    (about 320 postings) are binary-searched, with a window of 100 they are read whole."""
    index, queries = impact_index
    exact = index.search(queries, k=400)
    full = [dict(zip(ids, scores)) for ids, scores in zip(exact.ids, exact.scores)]
    for k, expansion in ((1, 1.0), (20, 5.0)):
        two = index.search(queries, k=k, two_phase=TwoPhase(prune_ratio=0.4, expansion=expansion, adaptive=False))
        for q, (ids, scores) in enumerate(zip(two.ids, two.scores)):
            assert ids and all(abs(full[q][d] - s) < 1e-4 for d, s in zip(ids, scores))
        assert all(v > 0 for v in two.postings_visited)


def test_two_phase_follows_segments_and_deletions(tmp_path):
    """Documents added as new segments are found, deleted ones never come back through rescoring, and a
    window larger than a segment is fine."""
    rng = np.random.default_rng(3)
    vocab = 30
    dense = (rng.random((60, vocab)) < 0.3) * rng.random((60, vocab)).astype(np.float32)
    ids = [f"d{i}" for i in range(60)]
    index = InvertedIndex.build(tmp_path / "index", "impact", [SparseVectors.from_dense(dense[:50]).to_postings(ids[:50])],
                                vocab_size=vocab, analyzer={"type": "test"}, store_texts=False)
    index.add(SparseVectors.from_dense(dense[50:]).to_postings(ids[50:]))  # a second segment of 10 documents
    index.delete(["d3", "d55"])
    queries = [SparseQuery(np.array([0, 1, 2, 7], np.int32), np.array([0.1, 3.0, 2.5, 0.2], np.float32)),
               SparseQuery(np.array([4, 9], np.int32), np.array([1.0, 1.0], np.float32))]
    exact = index.search(queries, k=20)
    unpruned = index.search(queries, k=20, two_phase=TwoPhase(prune_ratio=0.0, expansion=5.0))
    assert unpruned.ids == exact.ids
    pruned = index.search(queries, k=20, two_phase=TwoPhase(prune_ratio=0.5, expansion=5.0, adaptive=False))
    for hits in pruned.ids:
        assert "d3" not in hits and "d55" not in hits
    assert any(i.startswith("d5") and len(i) == 3 for hits in pruned.ids for i in hits)  # the added segment
    scores = dense @ np.bincount(queries[0].terms, queries[0].weights, vocab)
    expected = {ids[i]: scores[i] for i in range(60)}
    assert all(abs(expected[d] - s) < 1e-5 for d, s in zip(pruned.ids[0], pruned.scores[0]))


def test_two_phase_searches_exactly_where_deferring_spares_less_than_the_window_costs(impact_index, tmp_path):
    """On a small index deferring the light terms spares a few hundred postings, less than the window's extra
    candidates cost: the adaptive rule searches exactly (same hits, same postings as exhaustive search).
    Where a light term's list is long, the rule keeps two-phase search (a tenth of the postings read)."""
    index, queries = impact_index
    exact = index.search(queries, k=10)
    adaptive = index.search(queries, k=10, two_phase=TwoPhase(0.4, 1.5))
    assert adaptive.ids == exact.ids and adaptive.postings_visited == exact.postings_visited
    forced = index.search(queries, k=10, two_phase=TwoPhase(0.4, 1.5, adaptive=False))
    spared = np.array(exact.postings_visited) - np.array(forced.postings_visited)
    assert (spared > 0).all() and (spared < 250 * 5).all()  # fewer postings than 5 more candidates cost

    rng = np.random.default_rng(5)
    n, vocab = 6000, 40
    dense = (rng.random((n, vocab)) < 0.01) * (1.0 + rng.random((n, vocab))).astype(np.float32)
    dense[:, 0] = 0.1 + 0.1 * rng.random(n)  # in every document: a long list with a light weight
    big = InvertedIndex.build(tmp_path / "big", "impact", [SparseVectors.from_dense(dense).to_postings(
        [f"d{i}" for i in range(n)])], vocab_size=vocab, analyzer={"type": "test"}, store_texts=False)
    long_query = [SparseQuery(np.array([0, 7, 9], np.int32), np.array([0.5, 3.0, 2.0], np.float32))]
    full = big.search(long_query, k=2)
    two = big.search(long_query, k=2, two_phase=TwoPhase(0.4, 2.0))
    assert two.postings_visited[0] < full.postings_visited[0] / 10
    assert two.postings_visited == big.search(long_query, k=2, two_phase=TwoPhase(0.4, 2.0, adaptive=False)).postings_visited


def test_two_phase_searches_exactly_a_query_whose_heavy_terms_leave_fewer_than_k_live_candidates(tmp_path):
    """Phase one draws candidates from the heavy terms only: a query whose heavy term holds 5 documents (or 30, 25
    of them deleted) found 5 hits, though 1,000 documents hold its light term. Such a query is searched exactly (its
    work: phase one's postings plus the exact search's); a query with candidates enough keeps two-phase search."""
    rng = np.random.default_rng(11)
    n, vocab = 1000, 10
    dense = np.zeros((n, vocab), np.float32)
    dense[:, 1] = 0.1 + rng.random(n)                      # light: in every document
    dense[:5, 0] = 1.0 + rng.random(5)                     # heavy, in 5 documents
    dense[:30, 2] = 1.0 + rng.random(30)                   # heavy, in 30 documents (25 deleted below)
    dense[::2, 3] = 1.0 + rng.random(n // 2)               # heavy, in 500 documents
    index = InvertedIndex.build(tmp_path / "index", "impact", [SparseVectors.from_dense(dense).to_postings(
        [f"d{i}" for i in range(n)])], vocab_size=vocab, analyzer={"type": "test"}, store_texts=False)
    index.delete([f"d{i}" for i in range(5, 30)])
    queries = [SparseQuery(np.array([0, 1], np.int32), np.array([3.0, 0.2], np.float32)),
               SparseQuery(np.array([1, 2], np.int32), np.array([0.2, 3.0], np.float32)),
               SparseQuery(np.array([1, 3], np.int32), np.array([0.2, 3.0], np.float32))]
    exact = index.search(queries, k=10)
    two = index.search(queries, k=10, two_phase=TwoPhase(prune_ratio=0.4, expansion=2.0, adaptive=False))
    assert [len(hits) for hits in two.ids] == [10, 10, 10]
    assert two.ids[:2] == exact.ids[:2]
    assert np.allclose(np.array(two.scores[:2]), np.array(exact.scores[:2]), atol=1e-6)
    assert all(v > e for v, e in zip(two.postings_visited[:2], exact.postings_visited[:2]))  # phase one counts too
    assert two.postings_visited[2] < exact.postings_visited[2]  # 20 candidates: two-phase search kept
    assert all(h.startswith("d") and not 5 <= int(h[1:]) < 30 for hits in two.ids for h in hits)


def test_two_phase_under_a_narrow_filter_finds_k_hits_as_exact_search(tmp_path):
    """A filter hides the documents failing it as deleted ones: few of the documents holding the query's rare
    (heavy) word pass it, yet k of those holding its common words do, and are found, ranked as by exact search."""
    from semiret.search import IDFRetriever

    rng = random.Random(5)
    filler = "morning garden birds river mountain snow rain letter".split()
    documents = [Document(f"d{i}", " ".join(["heart"] + ["blood"] * (i % 2) + ["statins"] * (i % 10 == 0)
                                              + rng.sample(filler, 3)),
                          metadata={"source": "web" if i % 3 == 0 else "pubmed"}) for i in range(60)]
    two_phase = IDFRetriever.build(documents, tmp_path / "index", min_idf=0, two_phase="0.4,5,always")
    exact = IDFRetriever.open(tmp_path / "index", min_idf=0)
    for spec in ({"source": "web"}, {"source": "pubmed"}):
        found = two_phase.search(["statins heart blood"], k=5, filter=spec)
        expected = exact.search(["statins heart blood"], k=5, filter=spec)
        assert len(found.ids[0]) == 5 and found.ids == expected.ids
        assert np.allclose(found.scores, expected.scores)
    assert len(two_phase.search(["statins heart blood"], k=5).ids[0]) == 5  # unfiltered: 6 hold statins


def test_two_phase_options_are_checked():
    assert TwoPhase.parse("off") is None and TwoPhase.parse(None) is None
    assert TwoPhase.parse("on") == TwoPhase()
    assert TwoPhase.parse("0.3,4") == TwoPhase(0.3, 4.0)
    assert TwoPhase.parse("0.3,4,always") == TwoPhase(0.3, 4.0, adaptive=False)
    assert TwoPhase.parse("always") == TwoPhase(adaptive=False) and TwoPhase.parse("on,always") == TwoPhase(adaptive=False)
    ratio, expansion = r"prune_ratio must be in \[0, 1\]", "expansion must be at least 1"
    form, too_many = "expected 'on', 'off', 'RATIO'", r"expected at most RATIO,EXPANSION\[,always\]"
    for bad, message in (("2", ratio), ("-0.1", ratio), ("0.4,0.5", expansion), ("x", form),
                         ("0.1,2,3", too_many), ("0.1,2,3,always", too_many), ("always,0.4", form)):
        with pytest.raises(SemiretError, match=f"^two-phase:? {message}"):
            TwoPhase.parse(bad)


def test_threshold_sweep_prunes_and_stops_at_the_first_loss(impact_index):
    from semiret.evaluation.pruning import largest_safe_threshold, threshold_sweep

    index, queries = impact_index
    rng = np.random.default_rng(1)
    vectors = SparseVectors.from_dense(rng.random((40, 60)).astype(np.float32) * (rng.random((40, 60)) < 0.3))
    ids = [f"d{i}" for i in range(40)]
    qrels = {f"q{j}": {f"d{j}": 1} for j in range(len(queries))}
    rows = threshold_sweep(vectors, ids, list(qrels), queries, qrels, thresholds=(0.5, 0.2, 0.9))
    assert [r["threshold"] for r in rows] == [None, 0.2, 0.5, 0.9]
    assert rows[0]["avg_nnz_per_doc"] == pytest.approx(vectors.nnz().mean(), abs=0.05)
    assert rows[0]["avg_nnz_per_doc"] > rows[1]["avg_nnz_per_doc"] > rows[2]["avg_nnz_per_doc"]
    assert rows[0]["postings_per_query"] > rows[3]["postings_per_query"]
    # the walk stops at the first threshold that loses more than the tolerance, even if a later one recovers,
    # then backs off `margin` steps
    made_up = [{"threshold": t, "m": m} for t, m in [(None, 0.5), (0.1, 0.499), (0.2, 0.499), (0.3, 0.49),
                                                      (0.4, 0.5)]]
    assert largest_safe_threshold(made_up, "m", tolerance=0.002, margin=0) == 0.2
    assert largest_safe_threshold(made_up, "m", tolerance=0.002, margin=1) == 0.1
    assert largest_safe_threshold(made_up, "m", tolerance=0.002, margin=2) is None
    assert largest_safe_threshold(made_up, "m", tolerance=0.0, margin=0) is None
    assert largest_safe_threshold(made_up, "m", tolerance=0.1, margin=1) == 0.3
    nothing_found = [{"threshold": t, "m": 0.0} for t in (None, 0.1, 0.2, 0.3)]
    assert largest_safe_threshold(nothing_found, "m", tolerance=0.1, margin=0) is None


def test_sparsity_report(impact_index):
    index, queries = impact_index
    report = sparsity_report(index, queries)
    df = index.document_frequencies()
    assert report["avg_nnz_per_doc"] == pytest.approx(df.sum() / index.n_stored, abs=0.01)
    manual = np.mean([sum(df[t] / index.n_stored for t in q.terms) for q in queries])
    assert report["flops"] == pytest.approx(manual, rel=1e-3)
    assert report["avg_query_terms"] == pytest.approx(np.mean([len(q.terms) for q in queries]), abs=0.01)


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_bert):  # noqa: F811
    root = write_beir(tmp_path_factory.mktemp("if") / "tiny", split="train")
    output = tmp_path_factory.mktemp("if-run") / "run"
    config = InferenceFreeTrainingConfig(
        data=str(root), output=str(output), base=str(tiny_bert), idf=str(MSMARCO_IDF),
        teachers=f"dense:{tiny_bert},sparse:{tiny_bert},bm25", pretrain_corpora=[str(root)],
        pseudo_queries_per_document=2, pretrain_queries_per_epoch=8, pretrain_epochs=1, finetune_epochs=1,
        batch_size=2, candidates=3, mining_depth=4, flops_sample=64, pretrain_max_length=24,
        finetune_max_length=32)
    return root, output, config, train_inference_free(config)


def test_training_saves_loads_and_resumes(tiny_run, monkeypatch):
    from semiret.training.distillation import DistillationLoss

    root, output, config, summary = tiny_run
    assert [s["stage"] for s in summary["stages"]] == ["pretrain", "finetune"]
    model_dir = output / "model"
    meta = json.loads((model_dir / "inference-free.json").read_text())
    assert meta["query_weighting"] == "idf"
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        assert all(f.get_tensor(k).dtype == torch.float16 for k in f.keys())
    # the static-pruning threshold was chosen on the fine-tuning split and recorded with the model
    assert meta["document_threshold_sweep"]["split"] == "train"
    assert meta["document_threshold_sweep"]["rows"][0]["threshold"] is None
    assert meta["document_threshold"] in [None, *[r["threshold"] for r in meta["document_threshold_sweep"]["rows"]]]
    assert summary["document_threshold"] == meta["document_threshold"]
    loaded = InferenceFreeModel.load(str(model_dir))
    assert loaded.idf[loaded.vocabulary.token_ids()["cat"]] > 0
    assert (output / "teachers").is_dir() and any((output / "teachers").iterdir())  # cached teacher vectors
    # resuming a finished run trains nothing more: both stages are found complete
    steps = recording_loss(monkeypatch, DistillationLoss)
    again = train_inference_free(InferenceFreeTrainingConfig(**summary["config"]))
    assert steps == []
    assert again["stages"][-1]["loss_per_epoch"] == summary["stages"][-1]["loss_per_epoch"]
    # more fine-tuning epochs continue from the checkpoint: the second epoch's steps alone are trained
    more = train_inference_free(InferenceFreeTrainingConfig(**{**summary["config"], "finetune_epochs": 2}))
    assert len(steps) == summary["stages"][-1]["steps_per_epoch"] > 0
    assert len(more["stages"][-1]["loss_per_epoch"]) == 2
    assert more["stages"][-1]["loss_per_epoch"][0] == summary["stages"][-1]["loss_per_epoch"][0]
    # more pre-training epochs: the pre-training goes on, and the fine-tuning starts again from its new model (it
    # resumed the finished fine-tuning of the earlier pre-training, training nothing)
    steps.clear()
    longer = train_inference_free(InferenceFreeTrainingConfig(**{**summary["config"], "pretrain_epochs": 2,
                                                                 "finetune_epochs": 2}))
    pretrain, finetune = longer["stages"]
    assert len(steps) == pretrain["steps_per_epoch"] + 2 * finetune["steps_per_epoch"]
    assert len(pretrain["loss_per_epoch"]) == len(finetune["loss_per_epoch"]) == 2


def test_saved_models_index_at_the_fine_tuning_length_even_after_pre_training_alone(tiny_run, tmp_path):
    """Pre-training crops documents to ``pretrain_max_length``; the saved model must not truncate the
    documents it indexes to that (a pre-trained-only SciFact model lost 0.07 nDCG@10 that way)."""
    root, output, config, _ = tiny_run
    for model_dir in (output / "pretrain" / "model", output / "model"):
        assert json.loads((model_dir / "semiret-encoder.json").read_text())["max_length"] == 32
    only = train_inference_free(InferenceFreeTrainingConfig(**{**asdict(config), "output": str(tmp_path / "run"),
                                                              "finetune_epochs": 0}))
    assert [s["stage"] for s in only["stages"]] == ["pretrain"]
    assert InferenceFreeModel.load(str(tmp_path / "run" / "model")).encoder.max_length == 32


def test_trained_model_plugs_into_the_inference_free_retriever(tiny_run, tmp_path):
    from semiret.search.neural import InferenceFreeRetriever

    root, output, _, _ = tiny_run
    retriever = InferenceFreeRetriever.build(Collection(root).corpus(), tmp_path / "index",
                                             model=str(output / "model"))
    assert retriever.query_side.idf_source.endswith("idf.json")  # the table the model was trained with
    hits = retriever.search(["statins cancer risk"], k=3)
    assert len(hits.ids[0]) >= 1
    two = InferenceFreeRetriever.open(tmp_path / "index", two_phase="0.0")
    assert two.search(["statins cancer risk"], k=3).ids == hits.ids


def test_the_retriever_applies_the_threshold_recorded_with_a_model(tiny_run, tmp_path):
    import shutil

    from semiret.models.checkpoints import inference_free_document_threshold
    from semiret.search.neural import InferenceFreeRetriever

    root, output, _, _ = tiny_run
    model = tmp_path / "model"
    shutil.copytree(output / "model", model)
    docs = list(Collection(root).corpus())
    full = InferenceFreeRetriever.build(docs, tmp_path / "full", model=str(model), threshold=0.0)
    threshold = float(np.median(np.asarray(full.index.segments[0].values)))
    meta = json.loads((model / "inference-free.json").read_text())
    (model / "inference-free.json").write_text(json.dumps({**meta, "document_threshold": threshold}))
    assert inference_free_document_threshold(str(model)) == threshold
    pruned = InferenceFreeRetriever.build(docs, tmp_path / "pruned", model=str(model))
    assert pruned.index.meta["analyzer"]["threshold"] == threshold
    assert np.asarray(pruned.index.segments[0].values).min() >= threshold
    assert pruned.index.average_postings_per_document() < full.index.average_postings_per_document()
    # documents added later are pruned alike
    reopened = InferenceFreeRetriever.open(tmp_path / "pruned")
    reopened.add([Document("new", docs[0].text, docs[0].title)])
    assert np.asarray(reopened.index.segments[-1].values).min() >= threshold


def test_in_batch_negatives_score_every_query_against_the_whole_batch(tiny_run, tmp_path):
    """The paper's pre-training scores each query against all documents of its batch; the teachers score
    the same pairs (otherwise the KL would compare different lists)."""
    _, _, config, summary = tiny_run
    assert [s["terms_per_epoch"][-1]["documents_per_query"] for s in summary["stages"]] == [config.candidates] * 2
    in_batch = train_inference_free(InferenceFreeTrainingConfig(**{
        **asdict(config), "output": str(tmp_path / "run"), "pretrain_in_batch_negatives": True,
        "finetune_in_batch_negatives": True, "choose_document_threshold": False}))
    pretrain, finetune = (s["terms_per_epoch"][-1] for s in in_batch["stages"])
    assert pretrain["documents_per_query"] == config.batch_size * config.candidates  # 4 full batches of 2
    # fine-tuning's 3 queries come in batches of 2 and 1: 6 and 3 documents per query
    assert finetune["documents_per_query"] == (2 + 1) * config.candidates / 2
    assert np.isfinite(pretrain["kl"]) and np.isfinite(finetune["kl"])


def test_binary_variant_trains_and_saves_ones(tmp_path, tiny_bert):  # noqa: F811
    root = write_beir(tmp_path / "tiny", split="train")
    config = InferenceFreeTrainingConfig(
        data=str(root), output=str(tmp_path / "run"), base=str(tiny_bert), idf_aware=False, teachers="bm25",
        normalize_teachers=False, pretrain_corpora=["none"], finetune_epochs=1, batch_size=3, candidates=2,
        mining_depth=3, flops_sample=16, finetune_max_length=32)
    train_inference_free(config)
    table = json.loads((tmp_path / "run" / "model" / "idf.json").read_text())
    assert set(table.values()) == {1.0}


def test_learned_query_weights_get_gradients_for_the_query_tokens_alone(tiny_bert):  # noqa: F811
    from semiret.models.splade import SpladeEncoder

    model = InferenceFreeModel(SpladeEncoder.from_pretrained(str(tiny_bert)), load_idf(str(MSMARCO_IDF), "splade-tiny")[0])
    model.learn_query_weights()
    assert model.query_weighting == "learned" and np.array_equal(model.query_weights, model.idf.numpy())
    tokens = [np.array([2000, 2001]), np.array([2001, 3000])]
    q = model.query_vectors(tokens)
    assert torch.equal(q[0, [2000, 2001]], model.idf[[2000, 2001]])  # the factor starts at 1
    (q * torch.arange(q.shape[1], dtype=torch.float32)).sum().backward()
    grad = model.query_log_scale.grad
    assert set(torch.nonzero(grad).flatten().tolist()) == {2000, 2001, 3000}
    with torch.no_grad():
        model.query_log_scale[2000] = float(np.log(2.0))
    assert model.query_weights[2000] == pytest.approx(2 * float(model.idf[2000]))
    binary = InferenceFreeModel(SpladeEncoder.from_pretrained(str(tiny_bert)), model.idf.numpy(), "binary")
    with pytest.raises(SemiretError, match="IDF"):
        binary.learn_query_weights()


def test_learned_query_weights_train_save_and_search(tmp_path, tiny_bert):  # noqa: F811
    """Trained from the IDF, the table moves for the training queries' tokens only, is saved as the model's
    ``idf.json`` and is what the retriever weights queries with."""
    from semiret.search.neural import InferenceFreeRetriever

    root = write_beir(tmp_path / "tiny", split="train")
    config = InferenceFreeTrainingConfig(
        data=str(root), output=str(tmp_path / "run"), base=str(tiny_bert), idf=str(MSMARCO_IDF), teachers="bm25",
        pretrain_corpora=["none"], finetune_epochs=2, batch_size=2, candidates=2, mining_depth=3, flops_sample=16,
        finetune_max_length=32, learn_query_weights=True, query_weights_learning_rate=0.2,
        choose_document_threshold=False, lexical_prior=1.0)  # the prior: the tiny random model's own weights are ~0
    train_inference_free(config)
    model_dir = tmp_path / "run" / "model"
    assert json.loads((model_dir / "inference-free.json").read_text())["query_weighting"] == "learned"
    vocabulary = WordPieceVocabulary(str(tiny_bert))
    idf = load_idf(str(MSMARCO_IDF), "splade-tiny")[0]
    learned = InferenceFreeModel.load(str(model_dir)).query_weights
    asked = sorted({t for q in Collection(root).queries("train").values() for t in vocabulary.encode(q)})
    others = np.setdiff1d(np.flatnonzero(idf), asked)
    assert np.allclose(learned[others], idf[others], rtol=0, atol=1e-5)  # the JSON table keeps 5 decimals
    assert not np.allclose(learned[asked], idf[asked], rtol=1e-3)
    retriever = InferenceFreeRetriever.build(Collection(root).corpus(), tmp_path / "index", model=str(model_dir))
    query = retriever.encode_query("statins cancer risk")
    assert np.allclose(query.weights, learned[query.terms], rtol=0, atol=1e-5)


def test_query_weights_learned_for_a_frozen_document_encoder_keep_its_indexes_valid(tiny_run, tmp_path):
    """``--freeze-document-encoder``: the document side is the base model's to the bit (so is its pruning
    threshold), so an index built with the base is searched with the new table alone."""
    from safetensors.numpy import load_file

    from semiret.search.neural import InferenceFreeRetriever

    root, output, _, _ = tiny_run
    base = output / "model"
    config = InferenceFreeTrainingConfig(
        data=str(root), output=str(tmp_path / "run"), base=str(base), idf=str(MSMARCO_IDF), teachers="bm25",
        pretrain_corpora=["none"], finetune_epochs=2, batch_size=2, candidates=2, mining_depth=3, flops_sample=16,
        finetune_max_length=32, learn_query_weights=True, query_weights_learning_rate=0.2, lexical_prior=1.0,
        freeze_document_encoder=True)
    train_inference_free(config)
    model_dir = tmp_path / "run" / "model"
    before, after = load_file(str(base / "model.safetensors")), load_file(str(model_dir / "model.safetensors"))
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)
    meta = json.loads((model_dir / "inference-free.json").read_text())
    assert meta["document_threshold"] == json.loads((base / "inference-free.json").read_text())["document_threshold"]
    learned = InferenceFreeModel.load(str(model_dir)).query_weights
    assert not np.allclose(learned, InferenceFreeModel.load(str(base)).query_weights, rtol=0, atol=1e-4)
    InferenceFreeRetriever.build(Collection(root).corpus(), tmp_path / "index", model=str(base),
                                lexical_prior=1.0)
    relearned = InferenceFreeRetriever.open(tmp_path / "index", idf=str(model_dir / "idf.json"))
    query = relearned.encode_query("statins cancer risk")
    assert np.allclose(query.weights, learned[query.terms], rtol=0, atol=1e-5)
    with pytest.raises(SemiretError, match="nothing to train"):
        train_inference_free(InferenceFreeTrainingConfig(**{**asdict(config), "learn_query_weights": False}))


def test_a_sidr_checkpoint_is_not_taken_for_an_inference_free_model(tmp_path):
    from semiret.models.checkpoints import resolve_inference_free

    sidr = tmp_path / "sidr-model"
    sidr.mkdir()
    (sidr / "sidr.json").write_text("{}")
    with pytest.raises(SemiretError, match="SiDR"):
        resolve_inference_free(str(sidr))


@pytest.mark.integration  # encodes with the packaged sidr-scifact
def test_the_sidr_teacher_scores_as_the_sidr_full_retriever(tiny_docs):
    from semiret.search.semiparametric import SiDRFullRetriever
    from semiret.training.teachers import SiDRTeacher

    assert parse_teachers("sidr,bm25")[0] == ("sidr", "sidr-scifact", None)
    teacher = SiDRTeacher()
    scores = TeacherScores(teacher, tiny_docs, ["q"], ["statins cancer risk"])
    hits = SiDRFullRetriever.build(tiny_docs, model="sidr-scifact").search("statins cancer risk", k=len(tiny_docs))
    row = {d.id: i for i, d in enumerate(tiny_docs)}
    ranked = [doc_id for doc_id, _ in hits]
    expected = scores.scores(["q"], np.array([[row[d] for d in ranked]]))[0]
    assert expected == pytest.approx([score for _, score in hits], rel=1e-4, abs=1e-4)


def test_a_retrained_teacher_under_the_same_name_is_not_read_from_the_cache(tmp_path, tiny_docs):
    """The cache key hashes a local model folder's weights: new weights at the same path are encoded again."""
    model = tmp_path / "teacher"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"first weights")
    first = model_identity(str(model))
    assert model_identity(str(model)) == first and model_identity("minilm") == "minilm"

    class CountingTeacher(Teacher):
        kind = "counting"
        encoded = 0

        def encode_documents(self, texts):
            return np.ones((len(texts), 2), np.float32)

        def encode_queries(self, texts):
            CountingTeacher.encoded += 1
            return np.ones((len(texts), 2), np.float32)

    teacher = CountingTeacher(str(model))
    teacher.query_matrix(["q"], ["statins"], tmp_path / "cache")
    teacher.query_matrix(["q"], ["statins"], tmp_path / "cache")
    assert CountingTeacher.encoded == 1  # the second read came from the cache
    (model / "model.safetensors").write_bytes(b"retrained weights")
    assert model_identity(str(model)) != first
    teacher = CountingTeacher(str(model))  # the next run's teacher
    teacher.query_matrix(["q"], ["statins"], tmp_path / "cache")
    assert CountingTeacher.encoded == 2
