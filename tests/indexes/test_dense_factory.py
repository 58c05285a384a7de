"""Dense indexes built from FAISS factory strings (``ann="faiss:FACTORY"``): compressed codes, exact re-scoring,
deletions, segments too small to train, reopening, bad strings, and the retrievers that take them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from semiret.data.collection import Document
from semiret.errors import IndexFormatError, SemiretError
from semiret.indexes.dense import RESCORE, DenseIndex
from semiret.search import DenseRetriever, VectorsRetriever, open_retriever
from semiret.search.vectors import VectorDocuments
from semiret.types import Embeddings

DIM = 16
N_DOCS = 600
FACTORIES = ("faiss:IVF8,PQ4", "faiss:HNSW16,SQ4", "faiss:OPQ4,IVF8,PQ4")


def clustered(n: int, seed: int, groups: int = 20) -> np.ndarray:
    """Unit vectors around ``groups`` random centers (the same centers for every seed)."""
    centers = np.random.default_rng(100).standard_normal((groups, DIM))
    rng = np.random.default_rng(seed)
    vectors = centers[rng.integers(0, groups, n)] + 0.4 * rng.standard_normal((n, DIM))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def embeddings(vectors: np.ndarray, prefix: str = "d") -> Embeddings:
    ids = [f"{prefix}{i}" for i in range(len(vectors))]
    return Embeddings(ids, vectors, [Document(i, f"text of {i}") for i in ids])


def recall(found: list[list[str]], vectors: np.ndarray, queries: np.ndarray, k: int, prefix: str = "d") -> float:
    best = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :k]
    return float(np.mean([len(set(f) & {f"{prefix}{i}" for i in row}) / k for f, row in zip(found, best)]))


def exact_scores(index: DenseIndex, queries: np.ndarray, found: list[list[str]]) -> list[np.ndarray]:
    return [np.array([index.get_vector(doc_id) @ query for doc_id in ids]) for query, ids in zip(queries, found)]


@pytest.fixture
def corpus():
    return clustered(N_DOCS, seed=0)


@pytest.fixture
def queries():
    return clustered(30, seed=1)


@pytest.mark.parametrize("ann", FACTORIES)
def test_a_factory_index_finds_what_exact_search_finds_and_rescoring_makes_its_scores_exact(tmp_path, corpus,
                                                                                            queries, ann):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann=ann)
    assert index.segments[0].ann is not None and index.segments[0].rescore == RESCORE  # lossy codes
    rescored, approximate = index.search(queries, k=10), index.search(queries, k=10, rescore=1)
    assert recall(rescored.ids, corpus, queries, 10) >= 0.95
    assert recall(rescored.ids, corpus, queries, 10) >= recall(approximate.ids, corpus, queries, 10)
    for scores, exact in zip(rescored.scores, exact_scores(index, queries, rescored.ids)):
        np.testing.assert_allclose(scores, exact, atol=1e-5)
        assert np.all(np.diff(scores) <= 0)
    errors = [np.abs(np.array(s) - e).max() for s, e in zip(approximate.scores,
                                                            exact_scores(index, queries, approximate.ids))]
    assert max(errors) > 1e-3  # faiss's own scores are the codes' approximations


def test_meta_and_describe_record_the_factory_and_an_index_reopens(tmp_path, corpus, queries):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus)], dim=DIM, analyzer={},
                             ann="faiss:IVF8,PQ4")
    assert index.meta["ann"] == "faiss" and index.meta["parameters"]["factory"] == "IVF8,PQ4"
    described = index.describe()
    assert described["ann"] == "faiss" and described["factory"] == "IVF8,PQ4"
    assert "segments_searched_exactly" not in described
    assert described["memory_bytes"] < corpus.nbytes  # codes (4 bytes a vector), ids and codebooks, not the vectors
    reopened = DenseIndex.open(tmp_path / "idx")
    before, after = index.search(queries, k=5, nprobe=2), reopened.search(queries, k=5, nprobe=2)
    assert before.ids == after.ids and before.scores == after.scores
    ann_file = tmp_path / "idx" / "seg-000000" / "ann.faiss"
    ann_file.write_bytes(ann_file.read_bytes()[:60])
    with pytest.raises(IndexFormatError, match="damaged index file .*ann.faiss"):
        DenseIndex.open(tmp_path / "idx")


@pytest.mark.parametrize("ann", FACTORIES[:2])  # (OPQ's training, 17 s here, adds nothing to what deletions test)
def test_deleted_documents_are_never_returned_and_a_short_search_widens(tmp_path, corpus, queries, ann):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus)], dim=DIM, analyzer={}, ann=ann)
    best = index.search(queries, k=5)
    doomed = sorted({doc_id for ids in best.ids for doc_id in ids})
    index.delete(doomed)
    for breadth in ({}, {"nprobe": 1, "ef_search": 1}, {"rescore": 1}):
        assert not set(doomed) & {d for ids in index.search(queries, k=20, **breadth).ids for d in ids}
    live = [f"d{i}" for i in range(N_DOCS) if f"d{i}" not in doomed]
    index.delete(live[3:])  # three documents left, somewhere in the lists or graph: found however narrow the search
    hits = index.search(queries, k=10, nprobe=1, ef_search=1)
    assert all(sorted(ids) == sorted(live[:3]) for ids in hits.ids)


def test_a_segment_too_small_to_train_is_searched_exactly_until_a_merge(tmp_path, corpus, caplog):
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus[:400])], dim=DIM, analyzer={},
                             ann="faiss:IVF8,PQ4")
    with caplog.at_level(logging.WARNING, logger="semiret.indexes.dense"):
        index.add(embeddings(corpus[400:410], "new"))  # 10 vectors: fewer than PQ4's 256 codewords
    assert caplog.text.count("do not train faiss:IVF8,PQ4") == 1
    reopened = DenseIndex.open(tmp_path / "idx")
    small = reopened.segments[1]
    assert small.ann is None and reopened.meta["segments"][1]["ann"] is False
    assert not (small.path / "ann.faiss").exists()
    assert reopened.describe()["segments_searched_exactly"] == 1
    for position in range(400, 410):
        hits = reopened.search(corpus[position: position + 1], k=1, rescore=1)
        assert hits.ids == [[f"new{position - 400}"]]
        np.testing.assert_allclose(hits.scores[0], [corpus[position] @ corpus[position]], atol=1e-5)
    reopened.merge()
    merged = DenseIndex.open(tmp_path / "idx")
    assert len(merged.segments) == 1 and merged.segments[0].ann is not None
    assert "segments_searched_exactly" not in merged.describe()


@pytest.mark.parametrize("ann,refusal", [
    ("faiss:Nonsense42", "could not parse index string"),
    ("faiss:IVF8,PQ5", "multiple of the number of subquantizers"),
    ("faiss:", "needs a FAISS index_factory string"),
    ("faiss:PQ4", "IndexPQ is not a structure semiret searches"),
    ("faiss:IDMap,Flat", "IndexIDMap is not a structure"),
    ("faiss:HNSW8_PQ4", "IndexHNSWPQ is not a structure"),
    ("faiss:HNSW1", "HNSW1 is no structure faiss can build"),  # (faiss itself crashed the process on the first add)
    ("faiss:IVF0,Flat", "IVF0 is no structure faiss can build"),
    ("faiss:PCA0,Flat", "PCA0 is no structure"),
    ("faiss:IVF16,PQ4x0", "0-bit codes"),
    ("annoy", "unknown dense search structure 'annoy'"),
])
def test_a_bad_factory_string_is_refused_before_any_vector_is_read(tmp_path, corpus, ann, refusal):
    DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus[:300])], dim=DIM, analyzer={}, ann="ivf")
    before = (tmp_path / "idx" / "meta.json").read_bytes()
    read = []

    def batches():
        read.append(True)
        yield embeddings(corpus)

    with pytest.raises(SemiretError, match=refusal):
        DenseIndex.build(tmp_path / "idx", "dense", batches(), dim=DIM, analyzer={}, ann=ann, overwrite=True)
    assert not read and (tmp_path / "idx" / "meta.json").read_bytes() == before
    assert DenseIndex.open(tmp_path / "idx").search(corpus[7:8], k=1).ids == [["d7"]]


def test_the_vectors_retriever_takes_a_factory_and_its_search_options(tmp_path, corpus, queries, monkeypatch):
    documents = [Document(f"d{i}", f"text {i}", metadata={"even": i % 2 == 0}, vector=vector)
                 for i, vector in enumerate(corpus)]
    retriever = VectorsRetriever.build(documents, tmp_path / "v", ann="faiss:IVF4,PQ4")
    assert retriever.index.describe()["factory"] == "IVF4,PQ4"
    hits = retriever.search(queries, k=10)
    assert recall(hits.ids, corpus, queries, 10) >= 0.95
    filtered = retriever.search(queries, k=10, filter={"even": True})
    assert all(int(doc_id[1:]) % 2 == 0 for ids in filtered.ids for doc_id in ids)
    narrow = open_retriever(tmp_path / "v", rescore=1, nprobe=1)
    assert narrow.query_side.options.rescore == 1
    assert recall(narrow.search(queries, k=10).ids, corpus, queries, 10) < recall(hits.ids, corpus, queries, 10)
    with pytest.raises(SemiretError, match="rescore .* at least 1"):
        open_retriever(tmp_path / "v", rescore=0)

    encoded = []
    monkeypatch.setattr(VectorDocuments, "encode", lambda self, batch: encoded.append(batch))
    with pytest.raises(SemiretError, match="faiss makes no index of 'IVF4,Nonsense'.*could not parse"):
        VectorsRetriever.build(documents, tmp_path / "v", ann="faiss:IVF4,Nonsense", overwrite=True)
    assert not encoded and open_retriever(tmp_path / "v").index.describe()["factory"] == "IVF4,PQ4"


def test_the_dense_retriever_takes_a_factory(tmp_path, tiny_docs, tiny_bert, caplog):
    retriever = DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(tiny_bert), ann="faiss:IVF2,SQ8")
    assert retriever.index.segments[0].ann is not None
    vectors = retriever.document_side.encoder.encode_document([d.full_text for d in tiny_docs], show_progress=False)
    hits = retriever.search([tiny_docs[2].full_text], k=3)
    expected = np.argsort(-(vectors @ vectors[2]), kind="stable")[:3]
    assert hits.ids == [[tiny_docs[i].id for i in expected]]
    reopened = open_retriever(tmp_path / "dense")
    assert isinstance(reopened, DenseRetriever) and reopened.index.meta["parameters"]["factory"] == "IVF2,SQ8"
    reopened.add([Document("d7", "a brand new text")])  # one vector: too few for IVF2's lists, searched exactly
    assert "1 vectors do not train faiss:IVF2,SQ8" in caplog.text
    assert reopened.search(["a brand new text"], k=1).ids == [["d7"]]


def test_rescoring_is_bounded_and_read_in_blocks(tmp_path, corpus, queries, monkeypatch):
    import semiret.indexes.dense as dense
    from semiret.search.neural import AnnSearchOptions

    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(corpus)], dim=DIM, analyzer={},
                             ann="faiss:IVF8,SQ8")
    whole = index.search(queries, k=5, rescore=50)  # (more candidates than the segment holds: all of them)
    monkeypatch.setattr(dense, "RESCORED_ROWS", 7)  # a block of one query at a time
    assert index.search(queries, k=5, rescore=50).ids == whole.ids
    with pytest.raises(SemiretError, match="at most 100"):
        AnnSearchOptions(rescore=101)


def test_binary_codes_find_what_exact_search_finds_rescored_exactly_with_deletions_and_merges(tmp_path, corpus,
                                                                                               queries):
    wide = np.concatenate([corpus, -corpus], axis=1) / np.sqrt(2)  # (32 dimensions: 4 bytes of signs a vector)
    wide_queries = np.concatenate([queries, -queries], axis=1) / np.sqrt(2)
    index = DenseIndex.build(tmp_path / "idx", "dense", [embeddings(wide.astype(np.float32))], dim=2 * DIM,
                             analyzer={}, ann="binary")
    described = index.describe()
    assert described["ann"] == "binary" and described["memory_bytes"] < wide.nbytes / 16  # 1 bit against 32
    codes = np.unpackbits(np.asarray(index.segments[0].ann.reconstruct_n(0, 3)), axis=1)
    assert (codes == (wide[:3] > 0)).all()  # each component's sign, first dimension in the highest bit
    found = index.search(wide_queries, k=10, rescore=10)
    assert recall(found.ids, wide, wide_queries, 10) >= 0.9
    for scores, exact in zip(found.scores, exact_scores(index, wide_queries, found.ids)):
        np.testing.assert_allclose(scores, exact, atol=1e-5)  # inner products, not Hamming distances
    narrow = index.search(wide_queries, k=10, rescore=1)  # binary's best 10 alone, still scored exactly
    for scores, exact in zip(narrow.scores, exact_scores(index, wide_queries, narrow.ids)):
        np.testing.assert_allclose(scores, exact, atol=1e-5)
    doomed = sorted({doc_id for ids in found.ids for doc_id in ids[:3]})
    index.delete(doomed)
    assert not set(doomed) & {d for ids in index.search(wide_queries, k=20).ids for d in ids}
    index.add(embeddings(wide[:5].astype(np.float32), prefix="new"))
    index.merge()
    reopened = DenseIndex.open(tmp_path / "idx")
    assert reopened.segments[0].binary and reopened.n_docs == N_DOCS - len(doomed) + 5
    assert reopened.search(wide[:1], k=1).ids[0][0] in {"d0", "new0"}
    with pytest.raises(SemiretError, match="do not fill whole bytes"):
        DenseIndex.build(tmp_path / "odd", "dense", [embeddings(corpus[:, :12].copy())], dim=12, analyzer={},
                         ann="binary")
    assert not (tmp_path / "odd").exists()
