"""The segmented inverted index: formats, exact top-k against brute force, add/delete/merge, crash safety."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes import BM25Parameters, InvertedIndex
from semiret.indexes import segments as segments_module
from semiret.indexes import storage
from semiret.types import Postings, SparseQuery

from helpers import leftovers

VOCAB = 60
ANALYZER = {"type": "test"}


# ---------------------------------------------------------------------------- random data and brute force
def random_postings(rng, n_docs, first_id=0, vocab=VOCAB, kind="impact", empty_every=0, term_p=None,
                    max_terms=12) -> Postings:
    """Doc-major rows over ``vocab`` terms (drawn with probabilities ``term_p``, uniform by default):
    counts for bm25/binary, float weights for impact."""
    offsets, terms, values, lengths, docs = [0], [], [], [], []
    for i in range(n_docs):
        n = 0 if empty_every and i % empty_every == 0 else int(rng.integers(1, max_terms))
        row = rng.choice(vocab, size=n, replace=False, p=term_p)
        vals = rng.integers(1, 6, size=n).astype(np.float32) if kind != "impact" else rng.uniform(0.05, 3, n)
        terms.extend(row.tolist())
        values.extend(vals.tolist())
        lengths.append(int(vals.sum()) + int(rng.integers(0, 4)) if kind == "bm25" else n)
        offsets.append(len(terms))
        doc_id = f"doc{first_id + i}"
        docs.append(Document(doc_id, f"text of {doc_id}", f"title {first_id + i}"))
    return Postings(ids=[d.id for d in docs], offsets=np.asarray(offsets, np.int64),
                    terms=np.asarray(terms, np.int32), values=np.asarray(values, np.float32),
                    lengths=np.asarray(lengths, np.int32), documents=docs)


def dense(postings: Postings, vocab=VOCAB) -> np.ndarray:
    matrix = np.zeros((len(postings), vocab), np.float64)
    for d in range(len(postings)):
        s, e = postings.offsets[d], postings.offsets[d + 1]
        matrix[d, postings.terms[s:e]] = postings.values[s:e]
    return matrix


def bm25_matrix(tf: np.ndarray, lengths: np.ndarray, k1=1.5, b=0.75) -> tuple[np.ndarray, np.ndarray]:
    """(document-side saturation matrix, idf per term), the textbook Lucene formulas in float64."""
    avgdl = lengths.mean()
    norm = k1 * (1 - b + b * lengths[:, None] / avgdl)
    sat = np.where(tf > 0, tf / (tf + norm), 0.0)  # Lucene's BM25 (no (k1+1) factor)
    df = (tf > 0).sum(0)
    idf = np.log(1 + (len(tf) - df + 0.5) / (df + 0.5))
    return sat, idf


def random_queries(rng, n, vocab=VOCAB) -> list[SparseQuery]:
    out = []
    for _ in range(n):
        m = int(rng.integers(1, 6))
        out.append(SparseQuery.from_pairs(rng.choice(vocab, size=m, replace=False), rng.uniform(0.1, 2, m)))
    return out


def query_vector(query: SparseQuery, vocab=VOCAB) -> np.ndarray:
    v = np.zeros(vocab)
    v[query.terms] = query.weights
    return v


def assert_exact_topk(hits_ids, hits_scores, expected: np.ndarray, ids: list[str], k: int, live=None, rtol=1e-5):
    """Top-k equal to brute force up to ties: same score list, and every returned id has its true score."""
    live = np.ones(len(expected), bool) if live is None else live
    candidates = np.flatnonzero((expected > 0) & live)
    best = np.sort(expected[candidates])[::-1][:k]
    assert len(hits_ids) == len(best) == len(set(hits_ids))
    np.testing.assert_allclose(hits_scores, best, rtol=rtol, atol=1e-6)
    assert all(a >= b for a, b in zip(hits_scores, hits_scores[1:]))
    position = {doc_id: i for i, doc_id in enumerate(ids)}
    for doc_id, score in zip(hits_ids, hits_scores):
        assert live[position[doc_id]]
        assert score == pytest.approx(expected[position[doc_id]], rel=rtol, abs=1e-6)


def build(path, kind, postings, quantize_bits=None, **kwargs) -> InvertedIndex:
    return InvertedIndex.build(path, kind, [postings] if postings is not None else [], vocab_size=VOCAB,
                               analyzer=ANALYZER, quantize_bits=quantize_bits, **kwargs)


# ---------------------------------------------------------------------------- formats
@pytest.mark.parametrize("kind,bits", [("binary", None), ("impact", None), ("impact", 8), ("bm25", None)])
def test_build_open_round_trip(tmp_path, kind, bits):
    rng = np.random.default_rng(1)
    postings = random_postings(rng, 80, kind=kind)
    built = build(tmp_path / "idx", kind, postings, quantize_bits=bits)
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.kind == kind and reopened.n_docs == 80 and len(reopened.segments) == 1
    assert reopened.meta["analyzer"] == ANALYZER and reopened.vocab_size == VOCAB
    assert (reopened.meta["quantization"] or {}).get("bits") == bits
    seg = reopened.segments[0]
    assert seg.docs.dtype == np.int32 and seg.indptr.dtype == np.int64
    if kind == "binary":
        assert seg.values is None and not (seg.path / "postings.values.npy").exists()
    else:
        assert seg.values.dtype == (np.uint8 if bits else np.float32)
    assert not isinstance(seg.docs, np.memmap) and not seg.docs.flags.writeable  # a small file: read, read-only
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(storage, "SMALL_ARRAY_BYTES", 0)
        mapped = InvertedIndex.open(tmp_path / "idx").segments[0]
    assert isinstance(mapped.docs, np.memmap) and not mapped.docs.flags.writeable  # larger: mapped, not read
    assert "doc17" in reopened and "doc80" not in reopened
    assert reopened.get_document("doc17") == postings.documents[17]
    queries = random_queries(rng, 10)
    a, b = built.search(queries, k=7), reopened.search(queries, k=7)
    assert a.ids == b.ids and a.scores == b.scores
    assert reopened.describe()["documents"] == 80 and reopened.describe()["size_bytes"] > 0
    assert leftovers(tmp_path) == []


def test_store_texts_false_keeps_no_texts(tmp_path):
    postings = random_postings(np.random.default_rng(0), 10)
    index = build(tmp_path / "idx", "impact", postings, store_texts=False)
    assert "doc3" in index and index.get_document("doc3") is None
    assert not list((tmp_path / "idx").rglob("texts.*"))


def test_unknown_kind_and_quantization(tmp_path):
    with pytest.raises(SemiretError, match="unknown index kind 'dense'"):
        build(tmp_path / "a", "dense", None)
    with pytest.raises(SemiretError, match="only 8-bit"):
        build(tmp_path / "b", "impact", None, quantize_bits=4)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


# ---------------------------------------------------------------------------- exact top-k
@pytest.mark.parametrize("k", [1, 3, 10, 50, 500])
def test_impact_topk_equals_brute_force(tmp_path, k):
    rng = np.random.default_rng(k)
    postings = random_postings(rng, 300)
    index = build(tmp_path / "idx", "impact", postings)
    queries = random_queries(rng, 20)
    hits = index.search(queries, k=k)
    matrix = dense(postings)
    for q, query in enumerate(queries):
        assert_exact_topk(hits.ids[q], hits.scores[q], matrix @ query_vector(query), postings.ids, k)


@pytest.mark.parametrize("k", [1, 5, 40])
def test_quantized_impact_topk_equals_brute_force_on_dequantized_weights(tmp_path, k):
    rng = np.random.default_rng(10 + k)
    postings = random_postings(rng, 250)
    index = build(tmp_path / "idx", "impact", postings, quantize_bits=8)
    scale = postings.values.max() / 255.0
    assert index.meta["quantization"]["scale"] == pytest.approx(scale)
    quantized = postings.values.copy()
    quantized[:] = np.clip(np.rint(postings.values / scale), 1, 255) * scale
    dequantized = dense(Postings(postings.ids, postings.offsets, postings.terms, quantized, postings.lengths))
    assert np.abs(dequantized - dense(postings)).max() <= scale / 2 + 1e-6
    queries = random_queries(rng, 20)
    hits = index.search(queries, k=k)
    for q, query in enumerate(queries):
        assert_exact_topk(hits.ids[q], hits.scores[q], dequantized @ query_vector(query), postings.ids, k, rtol=1e-4)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_binary_topk_equals_brute_force(tmp_path, k):
    rng = np.random.default_rng(20 + k)
    postings = random_postings(rng, 300, kind="binary")
    index = build(tmp_path / "idx", "binary", postings)
    queries = random_queries(rng, 20)
    hits = index.search(queries, k=k)
    matrix = (dense(postings) > 0).astype(float)
    for q, query in enumerate(queries):
        assert_exact_topk(hits.ids[q], hits.scores[q], matrix @ query_vector(query), postings.ids, k)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_bm25_topk_equals_brute_force(tmp_path, k):
    rng = np.random.default_rng(30 + k)
    postings = random_postings(rng, 300, kind="bm25")
    index = build(tmp_path / "idx", "bm25", postings)
    sat, idf = bm25_matrix(dense(postings), postings.lengths.astype(float))
    queries = random_queries(rng, 20)
    hits = index.search(queries, k=k)
    for q, query in enumerate(queries):
        expected = sat @ (query_vector(query) * idf)
        assert_exact_topk(hits.ids[q], hits.scores[q], expected, postings.ids, k)


@pytest.mark.parametrize("k", [5, 60, 400])
@pytest.mark.parametrize("n_terms", [2, 25])
def test_topk_order_with_ties_and_deletions(tmp_path, k, n_terms):
    """Binary scores tie everywhere: the hits are exactly brute force's best k, equal scores in document order,
    deleted documents left out, whether the best k are kept in a heap (small k) or selected from a buffer of
    candidates (k >= DEEP_K), for short queries (documents tracked one by one) and long ones (the whole score
    buffer scanned)."""
    from semiret.indexes.kernels import DEEP_K

    assert 5 < DEEP_K <= 60
    rng = np.random.default_rng(k + n_terms)
    postings = random_postings(rng, 700, kind="binary")
    index = build(tmp_path / "idx", "binary", postings)
    gone = set(rng.choice(postings.ids, size=60, replace=False).tolist())
    index.delete(sorted(gone))
    live = np.array([i not in gone for i in postings.ids])
    matrix = (dense(postings) > 0).astype(float)
    queries = [SparseQuery.from_pairs(rng.choice(VOCAB, size=n_terms, replace=False), np.ones(n_terms))
               for _ in range(8)]
    hits = index.search(queries, k=k)
    for q, query in enumerate(queries):
        expected = matrix @ query_vector(query)
        ranked = [d for d in np.lexsort((np.arange(len(expected)), -expected)) if expected[d] > 0 and live[d]]
        assert hits.ids[q] == [postings.ids[d] for d in ranked[:k]]
        np.testing.assert_allclose(hits.scores[q], expected[ranked[:k]])


@pytest.mark.parametrize("kind,bits", [("impact", None), ("impact", 8), ("binary", None), ("bm25", None)])
def test_pruned_search_is_exact_and_skips_postings(tmp_path, kind, bits):
    """Zipf-like terms and long, IDF-weighted queries (where pruning pays): the pruned search returns the
    brute-force top-k, the same as the unpruned one, with deletions and two segments, and reads fewer postings."""
    rng = np.random.default_rng(7)
    vocab = 1000
    term_p = np.full(vocab, 0.5 / (vocab - 10))
    term_p[:10] = 0.05  # ten "stopwords" in nearly every document, the rest rare
    first = random_postings(rng, 1500, vocab=vocab, kind=kind, term_p=term_p, max_terms=40)
    second = random_postings(rng, 400, first_id=1500, vocab=vocab, kind=kind, term_p=term_p, max_terms=40)
    index = InvertedIndex.build(tmp_path / "idx", kind, [first], vocab_size=vocab, analyzer=ANALYZER,
                                quantize_bits=bits)
    index.add(second)
    gone = [f"doc{i}" for i in rng.choice(1900, size=150, replace=False)]
    index.delete(gone)
    index = InvertedIndex.open(tmp_path / "idx")
    df = np.bincount(np.concatenate([first.terms, second.terms]), minlength=vocab)
    idf = np.log(1 + (1900 - df + 0.5) / (df + 0.5))  # Lucene IDF: common terms weigh little
    queries = []
    for _ in range(30):  # a few rare terms and several common ones, like a tokenized question
        terms = np.concatenate([rng.choice(10, size=int(rng.integers(3, 9)), replace=False),
                                rng.choice(np.arange(10, vocab), size=int(rng.integers(1, 4)), replace=False)])
        queries.append(SparseQuery.from_pairs(terms, idf[terms] * rng.uniform(0.5, 1.5, len(terms))))
    ids = first.ids + second.ids
    matrix = dense(Postings(ids, np.concatenate([first.offsets, second.offsets[1:] + first.offsets[-1]]),
                            np.concatenate([first.terms, second.terms]), np.concatenate([first.values, second.values]),
                            np.concatenate([first.lengths, second.lengths])), vocab)
    if kind == "binary":
        matrix = (matrix > 0).astype(float)
    elif bits:
        scale = index.meta["quantization"]["scale"]
        matrix = np.where(matrix > 0, np.clip(np.rint(matrix / scale), 1, 255) * scale, 0.0)
    live = np.array([i not in set(gone) for i in ids])
    for k in (1, 10):
        pruned, full = index.search(queries, k=k, prune=True), index.search(queries, k=k, prune=False)
        for q, query in enumerate(queries):
            if kind != "bm25":  # bm25 (per-segment avgdl): against the unpruned search, checked by brute force above
                assert_exact_topk(pruned.ids[q], pruned.scores[q], matrix @ query_vector(query, vocab), ids, k,
                                  live=live, rtol=1e-4)
            np.testing.assert_allclose(pruned.scores[q], full.scores[q], rtol=1e-5)
            assert sorted(pruned.ids[q]) == sorted(full.ids[q]) or len(set(full.scores[q])) < len(full.scores[q])
        assert sum(pruned.postings_visited) < 0.5 * sum(full.postings_visited)


def test_term_maxima_are_written_and_recomputed_for_old_segments(tmp_path):
    rng = np.random.default_rng(8)
    postings = random_postings(rng, 200)
    index = build(tmp_path / "idx", "impact", postings)
    segment = index.segments[0]
    stored = np.load(segment.path / "postings.maxima.npy")
    indptr, values = np.asarray(segment.indptr), np.asarray(segment.values)
    np.testing.assert_array_equal(stored, [values[a:b].max() for a, b in zip(indptr[:-1], indptr[1:])])
    (segment.path / "postings.maxima.npy").unlink()  # an index written before the file existed
    reopened = InvertedIndex.open(tmp_path / "idx")
    np.testing.assert_array_equal(reopened.segments[0].term_maxima(), stored)
    query = random_queries(rng, 1)[0]
    assert reopened.search([query], k=5).ids == index.search([query], k=5).ids


def test_bm25_parameters_are_used(tmp_path):
    rng = np.random.default_rng(3)
    postings = random_postings(rng, 100, kind="bm25")
    index = build(tmp_path / "idx", "bm25", postings, bm25=BM25Parameters(k1=0.9, b=0.4))
    assert InvertedIndex.open(tmp_path / "idx").bm25 == BM25Parameters(0.9, 0.4)
    sat, idf = bm25_matrix(dense(postings), postings.lengths.astype(float), k1=0.9, b=0.4)
    query = random_queries(rng, 1)[0]
    hits = index.search([query], k=10)
    assert_exact_topk(hits.ids[0], hits.scores[0], sat @ (query_vector(query) * idf), postings.ids, 10)


def test_multithreaded_search_equals_single_thread(tmp_path):
    rng = np.random.default_rng(4)
    postings = random_postings(rng, 300)
    index = build(tmp_path / "idx", "impact", postings)
    index.add(random_postings(rng, 50, first_id=300))
    queries = random_queries(rng, 37)
    one, many = index.search(queries, k=9), index.search(queries, k=9, n_threads=4)
    assert one.ids == many.ids and one.scores == many.scores


def test_search_validates_queries(tmp_path):
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 20))
    with pytest.raises(SemiretError, match="k must be at least 1"):
        index.search([SparseQuery.from_pairs([1])], k=0)
    with pytest.raises(SemiretError, match="finite and non-negative"):
        index.search([SparseQuery.from_pairs([1, 2], [1.0, -1.0])])
    with pytest.raises(SemiretError, match="finite and non-negative"):
        index.search([SparseQuery.from_pairs([1], [float("nan")])])
    with pytest.raises(SemiretError, match="2 terms but 1 weights"):
        index.search([SparseQuery(np.array([1, 2], np.int32), np.array([1.0], np.float32))])


def test_out_of_vocabulary_and_empty_queries_return_nothing(tmp_path):
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 20))
    hits = index.search([SparseQuery.from_pairs([VOCAB + 5, -1]), SparseQuery.from_pairs([]),
                         SparseQuery.from_pairs([3], [0.0])], k=5)
    assert hits.ids == [[], [], []] and hits.scores == [[], [], []]
    assert index.search([], k=5).ids == []


def test_impact_weights_must_be_finite_and_non_negative(tmp_path):
    postings = random_postings(np.random.default_rng(0), 5)
    postings.values[2] = -0.5
    with pytest.raises(SemiretError, match="impact weights must be finite and non-negative"):
        build(tmp_path / "idx", "impact", postings)
    assert not (tmp_path / "idx").exists() and leftovers(tmp_path) == []


def test_zero_impact_weights_never_duplicate_hits(tmp_path):
    """A posting with weight 0 must not make a document count twice (or at all, for that term)."""
    postings = Postings(ids=["a", "b", "c"], offsets=np.array([0, 2, 4, 5], np.int64),
                        terms=np.array([1, 2, 1, 2, 2], np.int32),
                        values=np.array([0.0, 1.0, 0.0, 0.5, 0.0], np.float32),
                        lengths=np.array([2, 2, 1], np.int32))
    index = build(tmp_path / "idx", "impact", postings)
    hits = index.search([SparseQuery.from_pairs([1, 2])], k=5)
    assert hits.ids == [["a", "b"]] and hits.scores == [[1.0, 0.5]]
    hits = index.search([SparseQuery.from_pairs([1])], k=5)
    assert hits.ids == [[]]


def test_term_ids_outside_the_vocabulary_are_rejected(tmp_path):
    postings = random_postings(np.random.default_rng(0), 5)
    postings.terms[0] = VOCAB
    with pytest.raises(SemiretError, match=f"term id {VOCAB} is outside the vocabulary"):
        build(tmp_path / "idx", "impact", postings)
    postings.terms[0] = -1
    with pytest.raises(SemiretError, match="term id -1 is outside the vocabulary"):
        build(tmp_path / "idx", "impact", postings)


# ---------------------------------------------------------------------------- empty documents and empty indexes
def test_empty_documents_are_indexed_but_never_retrieved(tmp_path):
    rng = np.random.default_rng(5)
    postings = random_postings(rng, 50, kind="bm25", empty_every=5)
    index = build(tmp_path / "idx", "bm25", postings)
    assert index.n_docs == 50 and "doc0" in index and "doc5" in index
    empty = {f"doc{i}" for i in range(0, 50, 5)}
    hits = index.search([SparseQuery.from_pairs(range(VOCAB))], k=50)
    assert len(hits.ids[0]) == 50 - len(empty) and not empty & set(hits.ids[0])


def test_empty_index_can_be_searched_and_grown(tmp_path):
    index = build(tmp_path / "idx", "bm25", None)
    assert index.n_docs == 0 and index.segments == []
    assert index.search([SparseQuery.from_pairs([1])], k=3).ids == [[]]
    index.add(random_postings(np.random.default_rng(0), 10, kind="bm25"))
    assert InvertedIndex.open(tmp_path / "idx").n_docs == 10


# ---------------------------------------------------------------------------- add / delete / merge
def test_add_is_searchable_at_once_and_after_reopening(tmp_path):
    rng = np.random.default_rng(6)
    first = random_postings(rng, 100)
    index = build(tmp_path / "idx", "impact", first)
    second = random_postings(rng, 40, first_id=100)
    assert index.add(second) == 40
    assert index.n_docs == 140 and len(index.segments) == 2
    all_ids = first.ids + second.ids
    matrix = np.vstack([dense(first), dense(second)])
    queries = random_queries(rng, 15)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        hits = current.search(queries, k=12)
        for q, query in enumerate(queries):
            assert_exact_topk(hits.ids[q], hits.scores[q], matrix @ query_vector(query), all_ids, 12)
        assert current.get_document("doc120") == second.documents[20]


def test_add_duplicate_id_is_an_error_unless_replace(tmp_path):
    postings = Postings(["a", "b"], np.array([0, 1, 2]), np.array([1, 2], np.int32),
                        np.array([1.0, 1.0], np.float32), np.array([1, 1], np.int32))
    index = build(tmp_path / "idx", "impact", postings)
    again = Postings(["c", "b"], np.array([0, 1, 2]), np.array([3, 3], np.int32),
                     np.array([2.0, 5.0], np.float32), np.array([1, 1], np.int32))
    with pytest.raises(SemiretError, match="document 'b' is already in"):
        index.add(again)
    assert index.n_docs == 2 and "c" not in index and len(index.segments) == 1
    assert InvertedIndex.open(tmp_path / "idx").n_docs == 2
    assert index.add(again, replace=True) == 2
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert current.n_docs == 3
        assert current.search([SparseQuery.from_pairs([2])]).ids == [[]]  # old 'b' is gone
        assert current.search([SparseQuery.from_pairs([3])]).ids == [["b", "c"]]


def test_duplicate_ids_within_one_batch(tmp_path):
    postings = Postings(["a", "a"], np.array([0, 1, 2]), np.array([1, 2], np.int32),
                        np.array([1.0, 1.0], np.float32), np.array([1, 1], np.int32))
    with pytest.raises(SemiretError, match="duplicate document id 'a'"):
        build(tmp_path / "idx", "impact", postings)
    index = build(tmp_path / "idx2", "impact", random_postings(np.random.default_rng(0), 3))
    with pytest.raises(SemiretError, match="duplicate document id 'a'"):
        index.add(postings, replace=True)
    assert index.n_docs == 3


def test_rejected_replace_keeps_the_old_documents(tmp_path):
    """add(replace=True) with bad input must fail before deleting the versions it would replace."""
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 3))
    twice = Postings(["doc1", "doc1"], np.array([0, 1, 2]), np.array([1, 2], np.int32),
                     np.array([1.0, 1.0], np.float32), np.array([1, 1], np.int32))
    negative = Postings(["doc2"], np.array([0, 1]), np.array([1], np.int32), np.array([-1.0], np.float32),
                        np.array([1], np.int32))
    outside = Postings(["doc0"], np.array([0, 1]), np.array([VOCAB], np.int32), np.array([1.0], np.float32),
                       np.array([1], np.int32))
    for bad, message in ((twice, "duplicate document id 'doc1'"), (negative, "weights must be finite and non-negative"),
                         (outside, rf"term id {VOCAB} is outside the vocabulary")):
        with pytest.raises(SemiretError, match=message):
            index.add(bad, replace=True)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert current.n_docs == 3 and all(f"doc{i}" in current for i in range(3))


def test_delete_is_seen_at_once_and_after_reopening(tmp_path):
    rng = np.random.default_rng(7)
    postings = random_postings(rng, 120)
    index = build(tmp_path / "idx", "impact", postings)
    gone = [f"doc{i}" for i in range(0, 120, 3)]
    assert index.delete(gone) == len(gone)
    live = np.array([i % 3 != 0 for i in range(120)])
    queries = random_queries(rng, 15)
    matrix = dense(postings)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert current.n_docs == 80 and current.n_stored == 120
        assert "doc3" not in current and current.get_document("doc3") is None and "doc4" in current
        hits = current.search(queries, k=20)
        for q, query in enumerate(queries):
            assert_exact_topk(hits.ids[q], hits.scores[q], matrix @ query_vector(query), postings.ids, 20, live)


def test_delete_unknown_or_already_deleted_id_is_an_error(tmp_path):
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 5))
    with pytest.raises(SemiretError, match="cannot delete 'nope'"):
        index.delete(["doc1", "nope"])
    assert index.n_docs == 5 and InvertedIndex.open(tmp_path / "idx").n_docs == 5  # nothing half-done
    index.delete(["doc1"])
    with pytest.raises(SemiretError, match="cannot delete 'doc1'"):
        index.delete(["doc1"])
    assert index.delete(["doc1", "nope"], missing_ok=True) == 0


def test_repeated_id_in_one_delete_call(tmp_path):
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 5))
    assert index.delete(["doc1", "doc1"]) == 1
    assert index.delete(["doc2"]) == 1
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.n_docs == 3 and "doc1" not in reopened and "doc2" not in reopened


def test_delete_then_add_same_id_in_a_later_segment(tmp_path):
    index = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 5))
    index.delete(["doc2"])
    new = Postings(["doc2"], np.array([0, 1]), np.array([7], np.int32), np.array([9.0], np.float32),
                   np.array([1], np.int32), [Document("doc2", "new text")])
    index.add(new)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert current.n_docs == 5 and current.get_document("doc2").text == "new text"
        assert current.search([SparseQuery.from_pairs([7])], k=1).ids == [["doc2"]]
        assert current.search([SparseQuery.from_pairs([7])], k=1).scores[0][0] >= 9.0


def test_merge_drops_deleted_and_keeps_results(tmp_path):
    rng = np.random.default_rng(8)
    parts = [random_postings(rng, 60, first_id=60 * i) for i in range(3)]
    index = build(tmp_path / "idx", "impact", parts[0])
    index.add(parts[1])
    index.add(parts[2])
    index.delete([f"doc{i}" for i in range(0, 180, 4)])
    queries = random_queries(rng, 10)
    before = index.search(queries, k=15)
    old_dirs = {s.path for s in index.segments}
    index.merge()
    assert len(index.segments) == 1 and index.n_docs == index.n_stored == 135
    assert not any(p.exists() for p in old_dirs)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        after = current.search(queries, k=15)
        for q in range(len(queries)):
            np.testing.assert_allclose(after.scores[q], before.scores[q], rtol=1e-6)
        assert current.get_document("doc5") == parts[0].documents[5] and "doc4" not in current
    assert leftovers(tmp_path) == []


def test_bm25_segments_are_rewritten_when_adds_move_the_average_length(tmp_path):
    """Each BM25 segment kept the average length of its write: 80 short documents, then 40 long ones, ranked
    otherwise than a fresh build until a merge. An add that moves the average more than 1% now rewrites the older
    segments with it in the same commit (the searches then equal a fresh build's, deletions alike); a small move
    rewrites nothing."""
    from semiret.indexes.inverted import AVGDL_TOLERANCE

    rng = np.random.default_rng(4)
    short = random_postings(rng, 80, kind="bm25", max_terms=4)
    long = random_postings(rng, 40, first_id=80, kind="bm25", max_terms=12)
    deleted = [f"doc{i}" for i in range(0, 80, 8)]
    index = build(tmp_path / "idx", "bm25", short)
    index.delete(deleted)
    first = index.segments[0].path.name
    index.add(long)
    # rewritten in place with its documents and deletion marks: a hybrid's parts stay aligned
    assert [(s.n_docs, s.n_deleted) for s in index.segments] == [(80, 10), (40, 0)]
    assert index.segments[0].path.name != first and index.n_docs == 110
    fresh = build(tmp_path / "fresh", "bm25", Postings.concatenate([short, long]))
    fresh.delete(deleted)  # deleted documents count in the statistics until a merge, in both
    queries = random_queries(rng, 25)
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert [s.avgdl for s in current.segments] == pytest.approx([fresh.segments[0].avgdl] * 2)
        hits, expected = current.search(queries, k=20), fresh.search(queries, k=20)
        for q in range(len(queries)):
            np.testing.assert_allclose(hits.scores[q], expected.scores[q], rtol=1e-5)
            assert hits.ids[q] == expected.ids[q]
    assert sorted(p.name for p in (tmp_path / "idx").iterdir() if p.name.startswith("seg-")) == sorted(
        s.path.name for s in index.segments)  # the rewritten segment's old folder is gone
    names = [s.path.name for s in index.segments]
    typical = Postings(["typical"], np.array([0, 2]), np.array([0, 1], np.int32), np.array([5.0, 6.0], np.float32),
                       np.array([11], np.int32))  # a document of about the average length: it barely moves
    assert abs(index._average_length(typical.lengths) / index.segments[0].avgdl - 1) < AVGDL_TOLERANCE
    index.add(typical)
    assert [s.path.name for s in index.segments[:2]] == names and len(index.segments) == 3


def test_merge_bm25_equals_fresh_build_of_live_documents(tmp_path):
    rng = np.random.default_rng(9)
    parts = [random_postings(rng, 80, first_id=80 * i, kind="bm25") for i in range(3)]
    index = build(tmp_path / "idx", "bm25", parts[0])
    index.add(parts[1])
    index.add(parts[2])
    deleted = {f"doc{i}" for i in rng.choice(240, size=70, replace=False)}
    index.delete(sorted(deleted))
    index.merge()
    everything = Postings.concatenate(parts)
    keep = [i for i, doc_id in enumerate(everything.ids) if doc_id not in deleted]
    live = Postings(ids=[everything.ids[i] for i in keep],
                    offsets=np.concatenate([[0], np.cumsum([everything.offsets[i + 1] - everything.offsets[i]
                                                            for i in keep])]).astype(np.int64),
                    terms=np.concatenate([everything.terms[everything.offsets[i]:everything.offsets[i + 1]] for i in keep]),
                    values=np.concatenate([everything.values[everything.offsets[i]:everything.offsets[i + 1]] for i in keep]),
                    lengths=everything.lengths[keep])
    fresh = build(tmp_path / "fresh", "bm25", live)
    assert index.segments[0].avgdl == pytest.approx(fresh.segments[0].avgdl)
    np.testing.assert_allclose(index.idf(), fresh.idf(), rtol=1e-6)
    queries = random_queries(rng, 25)
    merged_hits, fresh_hits = index.search(queries, k=30), fresh.search(queries, k=30)
    sat, idf = bm25_matrix(dense(live), live.lengths.astype(float))
    for q, query in enumerate(queries):
        np.testing.assert_allclose(merged_hits.scores[q], fresh_hits.scores[q], rtol=1e-5, atol=1e-5)
        assert_exact_topk(merged_hits.ids[q], merged_hits.scores[q], sat @ (query_vector(query) * idf), live.ids, 30)


@pytest.mark.parametrize("parameters", [{"k1": 0.9}, {"b": 0.3}, {"k1": 2.0, "b": 1.0, "variant": "bm25l"},
                                        {"variant": "bm25+", "delta": 0.8}, {"variant": "atire", "k1": 0.4}])
def test_bm25_parameters_set_in_place_weigh_as_an_index_built_with_them(tmp_path, parameters):
    """Every segment weighed again from the term counts it holds, deletions kept: the same weights, bit for bit, as
    the same adds and deletes made with those parameters from the start; the index reopens with them."""
    rng = np.random.default_rng(4)
    parts = [random_postings(rng, 60, first_id=60 * i, kind="bm25") for i in range(3)]
    deleted = ["doc3", "doc70", "doc150"]

    def grown(path, bm25=None):
        index = build(path, "bm25", parts[0], bm25=bm25)
        index.add(parts[1])
        index.add(parts[2])
        index.delete(deleted)
        return index

    index = grown(tmp_path / "idx")
    expected = grown(tmp_path / "expected", BM25Parameters(**parameters))
    assert index.set_bm25(**parameters) is True
    for reopened in (index, InvertedIndex.open(tmp_path / "idx")):
        assert reopened.bm25 == expected.bm25
        for ours, theirs in zip(reopened.segments, expected.segments):
            np.testing.assert_array_equal(np.asarray(ours.values), np.asarray(theirs.values))
            np.testing.assert_array_equal(ours.term_maxima(), theirs.term_maxima())
            assert ours.n_deleted == theirs.n_deleted == np.asarray(ours.deleted).sum()
        queries = random_queries(rng, 10)
        ours, theirs = reopened.search(queries, k=20), expected.search(queries, k=20)
        assert ours.ids == theirs.ids
        assert ours.scores == theirs.scores  # the same weights: the same sums
    assert index.set_bm25(**parameters) is False  # as they are: no commit
    assert index.set_bm25(variant="lucene", k1=1.5, b=0.75) is True  # and back: a variant's delta goes with it
    assert index.meta["bm25"] == {"k1": 1.5, "b": 0.75}
    assert not leftovers(tmp_path / "idx")


def test_bm25_parameters_refused_before_anything_is_written(tmp_path):
    rng = np.random.default_rng(5)
    index = build(tmp_path / "idx", "bm25", random_postings(rng, 20, kind="bm25"))
    before = sorted(p.name for p in (tmp_path / "idx").iterdir())
    for wrong, message in (({"b": 1.5}, "between 0 and 1"), ({"delta": 0.2}, "lucene has none"),
                           ({"k2": 1.0}, "not k2"), ({"k1": -1.0}, "at least 0")):
        with pytest.raises(SemiretError, match=message):
            index.set_bm25(**wrong)
    assert sorted(p.name for p in (tmp_path / "idx").iterdir()) == before and index.meta["bm25"] == {"k1": 1.5,
                                                                                                     "b": 0.75}
    flat = build(tmp_path / "flat", "bm25", random_postings(rng, 20, kind="bm25"), bm25=BM25Parameters(k1=0.0))
    with pytest.raises(SemiretError, match="no term counts"):
        flat.set_bm25(k1=1.2)
    assert flat.set_bm25(b=0.5) is True  # k1 = 0 weighs every count alike, whatever b
    impact = build(tmp_path / "impact", "impact", random_postings(rng, 20))
    with pytest.raises(SemiretError, match="only a BM25 index"):
        impact.set_bm25(k1=1.2)


def test_document_frequencies_follow_every_commit_in_any_order(tmp_path):
    """Each snapshot's frequencies are the last one's plus what its commit added minus what it dropped: they
    must equal a sum over its segments after adds, deletions and merges, seen by the writer, by another handle
    refreshing, and for an older pinned snapshot asked after a newer one."""
    from semiret.indexes.inverted import InvertedIndex as Index

    def summed(snapshot):
        df = np.zeros(VOCAB, np.int64)
        for segment in snapshot.segments:
            terms, counts = segment.term_document_counts()
            df[terms] += counts
        return df

    rng = np.random.default_rng(4)
    index = build(tmp_path / "idx", "bm25", random_postings(rng, 60, kind="bm25"))
    reader = Index.open(tmp_path / "idx")
    pinned = []
    for step in range(8):
        index.add(random_postings(rng, int(rng.integers(1, 6)), first_id=1000 + 10 * step, kind="bm25"))
        if step % 3 == 1:
            index.delete([f"doc{1000 + 10 * step}"])
        if step % 3 == 2:
            index.merge(tail=2)
        reader.refresh()
        pinned.append(reader.pinned())
        for handle in (index, reader):
            snapshot = handle.snapshot
            np.testing.assert_array_equal(handle.document_frequencies(snapshot), summed(snapshot))
    oldest = pinned[0].snapshot
    oldest.derived.clear()  # asked again after every newer one
    np.testing.assert_array_equal(reader.document_frequencies(oldest), summed(oldest))
    everything = [s for s in reader.segments]
    n = sum(s.n_docs for s in everything)
    expected_idf = np.log1p((n - summed(reader.snapshot) + 0.5) / (summed(reader.snapshot) + 0.5)).astype(np.float32)
    np.testing.assert_array_equal(reader.idf(), expected_idf)
    query = random_queries(rng, 1)[0]
    fresh = Index.open(tmp_path / "idx")  # a new handle computes them from nothing
    assert reader.search([query], k=20).scores == fresh.search([query], k=20).scores


def test_merge_of_a_fully_deleted_index(tmp_path):
    index = build(tmp_path / "idx", "bm25", random_postings(np.random.default_rng(0), 4, kind="bm25"))
    index.delete(["doc0", "doc1", "doc2", "doc3"])
    index.merge()
    for current in (index, InvertedIndex.open(tmp_path / "idx")):
        assert current.n_docs == 0 and current.search([SparseQuery.from_pairs(range(VOCAB))]).ids == [[]]


def test_merge_quantized_keeps_scale(tmp_path):
    rng = np.random.default_rng(11)
    index = build(tmp_path / "idx", "impact", random_postings(rng, 50), quantize_bits=8)
    index.add(random_postings(rng, 50, first_id=50))
    index.delete(["doc3", "doc77"])
    queries = random_queries(rng, 10)
    before = index.search(queries, k=10)
    index.merge()
    after = InvertedIndex.open(tmp_path / "idx").search(queries, k=10)
    for q in range(len(queries)):
        np.testing.assert_allclose(after.scores[q], before.scores[q], rtol=1e-5)


# ---------------------------------------------------------------------------- never half-written
def test_an_empty_directory_made_beforehand_takes_the_index(tmp_path):
    """``mkdir out && semiret index --out out``: an empty directory stands for none (no --overwrite needed); one
    holding anything still refuses."""
    (tmp_path / "idx").mkdir()
    built = build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(3), 5))
    assert built.n_docs == 5 and (tmp_path / "idx" / "meta.json").is_file()
    (tmp_path / "kept").mkdir()
    with pytest.raises(SemiretError):  # a build that fails leaves the directory as it was
        InvertedIndex.build(tmp_path / "kept", "impact", [random_postings(np.random.default_rng(3), 5)], vocab_size=0,
                            analyzer=ANALYZER)
    assert (tmp_path / "kept").is_dir() and not any((tmp_path / "kept").iterdir())
    (tmp_path / "link").symlink_to(tmp_path / "kept")
    with pytest.raises(IndexFormatError, match="already exists"):  # a link to an empty directory is no place
        build(tmp_path / "link", "impact", random_postings(np.random.default_rng(3), 5))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(IndexFormatError, match="not a semiret index"):
        build(tmp_path / "other", "impact", random_postings(np.random.default_rng(3), 5))
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_build_into_existing_path_without_overwrite(tmp_path):
    rng = np.random.default_rng(12)
    original = random_postings(rng, 30)
    build(tmp_path / "idx", "impact", original)
    meta_before = (tmp_path / "idx" / "meta.json").read_bytes()
    consumed = []

    def batches():
        consumed.append(True)
        yield random_postings(rng, 10, first_id=100)

    with pytest.raises(IndexFormatError, match="already exists"):
        InvertedIndex.build(tmp_path / "idx", "impact", batches(), vocab_size=VOCAB, analyzer=ANALYZER)
    assert consumed == []  # refused before reading any documents
    assert (tmp_path / "idx" / "meta.json").read_bytes() == meta_before
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.n_docs == 30 and "doc0" in reopened and "doc100" not in reopened
    assert leftovers(tmp_path) == []


def test_build_with_overwrite_replaces_the_index(tmp_path):
    rng = np.random.default_rng(13)
    build(tmp_path / "idx", "impact", random_postings(rng, 30))
    build(tmp_path / "idx", "bm25", random_postings(rng, 5, first_id=500, kind="bm25"), overwrite=True)
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.kind == "bm25" and reopened.n_docs == 5 and "doc0" not in reopened and "doc500" in reopened
    assert leftovers(tmp_path) == []


def test_overwrite_refuses_a_directory_that_is_not_an_index(tmp_path):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    with pytest.raises(IndexFormatError, match="not a semiret index"):
        build(precious, "impact", random_postings(np.random.default_rng(0), 3), overwrite=True)
    assert (precious / "thesis.tex").read_text() == "years of work"
    assert leftovers(tmp_path) == []
    (tmp_path / "empty").mkdir()
    assert build(tmp_path / "empty", "impact", random_postings(np.random.default_rng(0), 3), overwrite=True).n_docs == 3


def test_failure_during_build_leaves_nothing(tmp_path):
    rng = np.random.default_rng(14)

    def failing():
        yield random_postings(rng, 10)
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        InvertedIndex.build(tmp_path / "idx", "impact", failing(), vocab_size=VOCAB, analyzer=ANALYZER)
    assert not (tmp_path / "idx").exists()
    assert list(tmp_path.iterdir()) == []


def test_failure_during_overwrite_keeps_the_old_index(tmp_path):
    rng = np.random.default_rng(15)
    build(tmp_path / "idx", "impact", random_postings(rng, 30))

    def failing():
        yield random_postings(rng, 10, first_id=100)
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        InvertedIndex.build(tmp_path / "idx", "impact", failing(), vocab_size=VOCAB, analyzer=ANALYZER, overwrite=True)
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.n_docs == 30 and "doc100" not in reopened
    assert leftovers(tmp_path) == []


def _failing_commit(monkeypatch):
    def boom(path, data):
        raise OSError("simulated crash before the commit")

    monkeypatch.setattr(segments_module, "atomic_write_json", boom)


def test_interrupted_delete_is_invisible_and_later_deletes_stay_correct(tmp_path, monkeypatch):
    build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(16), 10))
    with monkeypatch.context() as patch:
        _failing_commit(patch)
        with pytest.raises(OSError):
            InvertedIndex.open(tmp_path / "idx").delete(["doc1"])
    index = InvertedIndex.open(tmp_path / "idx")
    assert index.n_docs == 10 and "doc1" in index  # the uncommitted delete never happened
    index.delete(["doc2"])
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert "doc1" in reopened and "doc2" not in reopened and reopened.n_docs == 9


def test_interrupted_add_is_invisible_and_later_adds_work(tmp_path, monkeypatch):
    terms = ["alpha", "beta"]
    first = Postings(["a"], np.array([0, 2]), np.array([0, 1], np.int32), np.array([1.0, 1.0], np.float32),
                     np.array([2], np.int32))
    InvertedIndex.build(tmp_path / "idx", "bm25", [first], vocab_size=0, analyzer=ANALYZER, vocab=terms)
    index = InvertedIndex.open(tmp_path / "idx")
    index.vocab.extend(["gamma", "delta"])
    lost = Postings(["b"], np.array([0, 2]), np.array([2, 3], np.int32), np.array([1.0, 1.0], np.float32),
                    np.array([2], np.int32))
    with monkeypatch.context() as patch:
        _failing_commit(patch)
        with pytest.raises(OSError):
            index.add(lost)
    index = InvertedIndex.open(tmp_path / "idx")
    assert index.vocab == ["alpha", "beta"] and index.n_docs == 1 and "b" not in index
    index.vocab.append("epsilon")
    index.add(Postings(["c"], np.array([0, 2]), np.array([0, 2], np.int32), np.array([1.0, 3.0], np.float32),
                       np.array([4], np.int32)))
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.vocab == ["alpha", "beta", "epsilon"] and reopened.n_docs == 2
    assert reopened.search([SparseQuery.from_pairs([2])]).ids == [["c"]]
    reopened.vocab.append("zeta")
    reopened.add(Postings(["d"], np.array([0, 1]), np.array([3], np.int32), np.array([1.0], np.float32),
                          np.array([1], np.int32)))
    reopened = InvertedIndex.open(tmp_path / "idx")
    assert reopened.vocab == ["alpha", "beta", "epsilon", "zeta"] and reopened.n_docs == 3
    assert (tmp_path / "idx" / "vocab.txt").read_text() == "alpha\nbeta\nepsilon\nzeta\n"
    assert leftovers(tmp_path) == []


# ---------------------------------------------------------------------------- opening
def test_opening_a_directory_that_is_not_an_index(tmp_path):
    with pytest.raises(IndexFormatError, match="is not a semiret index"):
        InvertedIndex.open(tmp_path)
    with pytest.raises(IndexFormatError, match="missing: no such index directory$"):
        InvertedIndex.open(tmp_path / "missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(IndexFormatError, match="file is a file, not an index directory"):
        InvertedIndex.open(tmp_path / "file")
    with pytest.raises(IndexFormatError, match=r"^collection: no such index directory \(a Milvus collection\? "
                                               r"add --backend milvus:URI\)"):
        InvertedIndex.open("collection")
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(IndexFormatError, match="malformed JSON"):
        InvertedIndex.open(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"format": "something.else"}))
    with pytest.raises(IndexFormatError, match="holds a 'something.else' index"):
        InvertedIndex.open(tmp_path)


def test_opening_an_index_with_missing_files_or_future_version(tmp_path):
    build(tmp_path / "idx", "impact", random_postings(np.random.default_rng(0), 5))
    meta = json.loads((tmp_path / "idx" / "meta.json").read_text())
    (tmp_path / "idx" / meta["segments"][0]["name"] / "postings.docs.npy").unlink()
    with pytest.raises(IndexFormatError, match="missing index file .*postings.docs.npy"):
        InvertedIndex.open(tmp_path / "idx")
    meta["version"] = 99
    (tmp_path / "idx" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(IndexFormatError, match="version 99, written by a newer semiret"):
        InvertedIndex.open(tmp_path / "idx")


def test_an_index_of_the_first_format_version_opens_and_is_marked_newer_by_a_write(tmp_path):
    """Version 1 (before metadata tables, passage records and merge buffers) reads as it was; the first commit of
    this code records its version (4), which an older semiret refuses rather than drop what it does not know of."""
    rng = np.random.default_rng(0)
    index = build(tmp_path / "idx", "impact", random_postings(rng, 6))
    meta_path = tmp_path / "idx" / "meta.json"
    assert json.loads(meta_path.read_text())["version"] == InvertedIndex.VERSION == 4
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "version": 1}))
    reader = InvertedIndex.open(tmp_path / "idx")
    query = SparseQuery.from_pairs([1, 2, 3])
    assert reader.search([query], k=3).ids == index.search([query], k=3).ids
    assert json.loads(meta_path.read_text())["version"] == reader.describe()["format_version"] == 1  # as read
    reader.delete([reader.live_ids()[0]])
    assert json.loads(meta_path.read_text())["version"] == reader.describe()["format_version"] == 4
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "version": 5}))  # a newer semiret's commit, seen by a refresh
    with pytest.raises(IndexFormatError, match="version 5, written by a newer semiret"):
        reader.refresh()


# ---------------------------------------------------------------------------- two indexes summed in one pass
def _same_documents(postings: Postings, rng, kind: str) -> Postings:
    """Other rows (terms and values) for the same documents: a second index of them."""
    other = random_postings(rng, len(postings), kind=kind)
    return Postings(postings.ids, other.offsets, other.terms, other.values, other.lengths, postings.documents)


def _term_bound(index: InvertedIndex, term: int, weight: float) -> float:
    hits = index.search([SparseQuery.from_pairs([term], [weight])], k=1)
    return hits.scores[0][0] if hits.scores[0] else 0.0


@pytest.mark.parametrize("kinds,bits,shares", [(("bm25", "impact"), 8, (0.5, 0.5)),
                                               (("binary", "impact"), None, (0.3, 0.7)),
                                               (("bm25", "binary"), None, (1.0, 0.0))])
def test_two_aligned_indexes_are_summed_over_their_bounds_in_one_pass(tmp_path, kinds, bits, shares):
    """``search_normalised_sum`` equals each index searched alone, its scores divided by the query's bound (each
    term's best single-term score, summed: deleted documents count until a merge), weighted and summed, over
    several segments with deletions (a document deleted from one index only counts as deleted); scored densely
    or document by document; on two threads as on one. Indexes whose segments differ give None."""
    from semiret.indexes.inverted import search_normalised_sum

    rng = np.random.default_rng(7)
    batches = [random_postings(rng, n, first_id=first, kind=kinds[0]) for first, n in ((0, 400), (400, 150))]
    indexes = [build(tmp_path / "a", kinds[0], batches[0]),
               build(tmp_path / "b", kinds[1], _same_documents(batches[0], rng, kinds[1]), quantize_bits=bits)]
    indexes[0].add(batches[1])
    indexes[1].add(_same_documents(batches[1], rng, kinds[1]))
    queries = [random_queries(rng, 30) for _ in indexes]
    bounds = [[sum(_term_bound(index, t, w) for t, w in zip(q.terms, q.weights)) for q in part_queries]
              for index, part_queries in zip(indexes, queries)]
    indexes[0].delete(["doc3", "doc401", "doc77"])
    indexes[1].delete(["doc3", "doc401", "doc120"])
    n_docs = 550
    ids = [f"doc{i}" for i in range(n_docs)]
    expected = np.zeros((30, n_docs))
    for index, part_queries, part_bounds, share in zip(indexes, queries, bounds, shares):
        alone = index.search(part_queries, k=n_docs)
        for q in range(30):
            for doc_id, score in zip(alone.ids[q], alone.scores[q]):
                expected[q, ids.index(doc_id)] += share * score / part_bounds[q]
    live = np.array([d not in ("doc3", "doc401", "doc77", "doc120") for d in ids])
    parts = [(index, part_queries, share) for index, part_queries, share in zip(indexes, queries, shares)]
    one, two = (search_normalised_sum(parts, k=9, n_threads=threads) for threads in (1, 2))
    assert one.ids == two.ids and one.scores == two.scores
    for q in range(30):
        assert_exact_topk(one.ids[q], one.scores[q], expected[q], ids, 9, live=live, rtol=1e-4)
    assert all(s <= 1.0 + 1e-5 for scores in one.scores for s in scores)
    indexes[1].merge()
    assert search_normalised_sum(parts, k=9) is None
