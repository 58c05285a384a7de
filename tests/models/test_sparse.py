"""Sparse vectors: CSR rows, pruning, hand-over to the inverted index, and the FLOPS statistic."""

from __future__ import annotations

import numpy as np
import pytest

from semiret.errors import SemiretError
from semiret.indexes.inverted import InvertedIndex
from semiret.indexes.sparsity import query_term_counts, sparsity_report
from semiret.models.sparse import SparseVectors
from semiret.types import SparseQuery

DENSE = np.array([[0.0, 3.0, 0.5, 2.0, 0.0],
                  [0.0, 0.0, 0.0, 0.0, 0.0],
                  [1.0, 0.2, 4.0, 0.0, 0.3]], np.float32)


def test_rows_round_trip_and_sorting():
    vectors = SparseVectors.from_dense(DENSE)
    assert vectors.nnz().tolist() == [3, 0, 4]
    np.testing.assert_array_equal(vectors.to_dense(), DENSE)
    unsorted = SparseVectors.from_rows([(np.array([3, 1]), np.array([2.0, 3.0])), (np.array([]), np.array([]))], 5)
    assert unsorted.row(0)[0].tolist() == [1, 3] and unsorted.row(0)[1].tolist() == [3.0, 2.0]



def test_csr_round_trip_and_arithmetic():
    vectors = SparseVectors.from_dense(DENSE)
    matrix = vectors.to_csr()
    np.testing.assert_array_equal(matrix.toarray(), DENSE)
    matrix.data[:] = 0  # the matrix shares nothing with the vectors
    np.testing.assert_array_equal(vectors.to_dense(), DENSE)
    doubled = SparseVectors.from_csr(vectors.to_csr() + vectors.to_csr())
    np.testing.assert_array_equal(doubled.to_dense(), 2 * DENSE)
    assert doubled.terms.dtype == np.int32 and doubled.offsets.dtype == np.int64 and doubled.dim == 5


def test_prune_top_k_and_threshold():
    vectors = SparseVectors.from_dense(DENSE)
    top2 = vectors.prune(top_k=2).to_dense()
    np.testing.assert_array_equal(top2, [[0, 3, 0, 2, 0], [0, 0, 0, 0, 0], [1, 0, 4, 0, 0]])
    above = vectors.prune(threshold=0.5).to_dense()
    np.testing.assert_array_equal(above, np.where(DENSE >= 0.5, DENSE, 0))
    both = vectors.prune(top_k=1, threshold=3.5).to_dense()
    np.testing.assert_array_equal(both, [[0, 0, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 4, 0, 0]])
    with pytest.raises(SemiretError, match="top_k"):
        vectors.prune(top_k=0)
    with pytest.raises(SemiretError, match="threshold"):
        vectors.prune(threshold=-1)


@pytest.mark.parametrize("quantize_bits", [None, 8])
def test_vectors_into_impact_index(tmp_path, quantize_bits):
    vectors = SparseVectors.from_dense(DENSE)
    index = InvertedIndex.build(tmp_path / "idx", "impact", [vectors.to_postings(["a", "b", "c"])], vocab_size=5,
                                analyzer={"type": "test"}, quantize_bits=quantize_bits)
    queries = SparseVectors.from_dense(np.array([[0, 1, 1, 0, 0]], np.float32)).to_queries()
    hits = index.search(queries, k=3)
    assert hits.ids[0] == ["c", "a"]
    np.testing.assert_allclose(hits.scores[0], [4.2, 3.5], rtol=0.02 if quantize_bits else 1e-6)
    with pytest.raises(SemiretError, match="2 ids for 3 vectors"):
        vectors.to_postings(["a", "b"])


def test_flops_of_an_index(tmp_path):
    index = InvertedIndex.build(tmp_path / "idx", "impact", [SparseVectors.from_dense(DENSE).to_postings(list("abc"))],
                                vocab_size=5, analyzer={"type": "test"})
    queries = [SparseQuery.from_pairs([1, 2]), SparseQuery.from_pairs([2, 4], [0.5, 0.0])]
    counts, avg_terms = query_term_counts(queries, index.vocab_size)  # zero-weight terms do not count
    assert counts.tolist() == [0, 1, 2, 0, 0] and avg_terms == 1.5
    # p_d = [1, 2, 2, 1, 1] / 3 ; p_q = [0, .5, 1, 0, 0]
    report = sparsity_report(index, queries)
    assert report["flops"] == pytest.approx(0.5 * 2 / 3 + 1 * 2 / 3, abs=1e-4)
    assert report["postings_per_query"] == pytest.approx((1 * 2 + 2 * 2) / 2)
    assert report["avg_nnz_per_doc"] == pytest.approx(7 / 3, abs=0.01)
    assert "flops" not in sparsity_report(index, [])
