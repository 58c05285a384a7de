"""Token vectors brought by the user: the ``multivectors`` retriever (each document's own matrix of token vectors, made
by a late-interaction model elsewhere, Qdrant's multivectors), searched by each query's matrix by MaxSim."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data.collection import Document, iter_corpus, query_vectors, read_query_vectors
from semiret.errors import DataFormatError, SemiretError
from semiret.search import MultiVectorsRetriever, VectorsRetriever, open_retriever
from semiret.types import SyncCounts

from helpers import LocalClient, client_of, invoke_cli, write_jsonl

DIM = 16


def _documents(n=60, dim=DIM, seed=0) -> list[Document]:
    """Documents each bringing 2-8 random token vectors (a ColBERT encoding's shape, made elsewhere)."""
    rng = np.random.default_rng(seed)
    return [Document(f"d{i}", f"text {i}", metadata={"even": i % 2 == 0},
                     vector=rng.normal(size=(int(rng.integers(2, 9)), dim)).astype(np.float32)) for i in range(n)]


def _maxsim(documents, query, k, cosine=True) -> tuple[list[str], np.ndarray]:
    """The best ``k`` documents by MaxSim, by hand: each query vector's best similarity with a document's, summed."""
    def unit(m):
        return m / np.linalg.norm(m, axis=1, keepdims=True) if cosine else m

    q = unit(np.asarray(query, np.float64))
    scores = np.array([(q @ unit(d.vector.astype(np.float64)).T).max(axis=1).sum() for d in documents])
    order = np.argsort(-scores, kind="stable")[:k]
    return [documents[i].id for i in order], scores[order]


@pytest.mark.parametrize("similarity", ["cosine", "dot"])
def test_exact_search_is_maxsim_by_hand(tmp_path, similarity):
    documents = _documents()
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", ann="exact", similarity=similarity)
    query = np.random.default_rng(1).normal(size=(3, DIM))
    ids, scores = _maxsim(documents, query, 5, cosine=similarity == "cosine")
    hits = retriever.search(query, k=5)
    assert [h.id for h in hits] == ids
    np.testing.assert_allclose([h.score for h in hits], scores, rtol=2e-3)  # (stored in float16)
    meta = retriever.index.meta
    assert meta["kind"] == "multivector" and meta["dim"] == DIM and meta["analyzer"] == {
        "type": "multivectors", "similarity": similarity}


def test_plaid_finds_each_document_by_its_own_vectors_compressed_by_default(tmp_path):
    documents = _documents(300)
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m")
    described = retriever.index.describe()
    assert described["ann"] == "plaid" and described["nbits"] == 2 and described["centroids"] >= 2
    found = retriever.search([d.vector for d in documents[:20]], k=1)
    assert found.ids == [[d.id] for d in documents[:20]]
    whole = MultiVectorsRetriever.build(documents, tmp_path / "whole", nbits=0)
    assert whole.index.describe()["nbits"] is None
    assert whole.search(documents[5].vector, k=3)[0].id == "d5"
    dot = MultiVectorsRetriever.build(documents, tmp_path / "dot", similarity="dot")
    assert dot.index.describe()["nbits"] is None  # (residuals from unit centroids: the cosine's alone)
    with pytest.raises(SemiretError, match="--similarity dot the token vectors are kept whole"):
        MultiVectorsRetriever.build(documents, tmp_path / "refused", similarity="dot", nbits=2)


def test_queries_as_matrices_lists_and_batches(tmp_path):
    documents = _documents()
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", ann="exact")
    one = documents[3].vector
    assert retriever.search(one, k=1)[0].id == "d3"  # a matrix: one query's token vectors
    assert retriever.search(one.tolist(), k=1)[0].id == "d3"  # a list of lists: one query too
    assert retriever.search(one[:1].tolist(), k=1)[0].id == retriever.search(one[:1], k=1)[0].id  # one token
    batch = [documents[3].vector, documents[7].vector.tolist()]
    assert retriever.search(batch, k=1).ids == [["d3"], ["d7"]]
    stacked = np.stack([documents[3].vector[:2], documents[7].vector[:2]])  # a 3-D array: a batch
    assert retriever.search(stacked, k=1).ids == retriever.search(list(stacked), k=1).ids
    for bad, message in ((one[0].tolist(), "the query vector is one flat vector; .*multivectors retriever is "
                                           "searched by each query's token vectors"),
                         (one[0], r"one query's \[tokens, dim\] matrix or a batch of them, got shape \(16,\)"),
                         (np.ones((2, 3)), "holds 16-dimensional token vectors; query 0's are 3-dimensional"),
                         (np.zeros((1, 2, 2, 2)), "shape"), ([[1.0, "x"]], "must hold numbers only"),
                         ("a text", "no model to embed query texts")):
        with pytest.raises(SemiretError, match=message):
            retriever.search(bad)
    with pytest.raises(SemiretError, match="query vector 0 is one flat vector"):  # (a list of arrays: a batch)
        retriever.search([one[0], one[1]])
    assert query_vectors(np.ones((2, 4)), token_vectors=True)[1] is True
    assert query_vectors(np.ones((2, 4)))[1] is False  # (a dense index's batch)
    assert query_vectors(np.ones((3, 2, 4)), token_vectors=None)[1] is False  # (a client's: three deep)


def test_filters_recommend_adds_deletes_and_sync(tmp_path):
    documents = _documents()
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", ann="exact")
    query = documents[3].vector  # an odd document
    assert all(h.id in {d.id for d in documents[::2]} for h in retriever.search(query, k=5, filter={"even": True}))
    recommended = retriever.recommend(["d3"], k=3)
    assert [h.id for h in recommended] == [h.id for h in retriever.search(query, k=4)][1:]
    np.testing.assert_allclose(retriever.index.get_vector("d3"), documents[3].vector / np.linalg.norm(
        documents[3].vector, axis=1, keepdims=True), atol=1e-3)
    fresh = np.eye(DIM, dtype=np.float32)[:3]
    retriever.add([Document("fresh", "new", vector=fresh)])
    reopened = open_retriever(tmp_path / "m")
    assert reopened.name == "multivectors" and reopened.search(fresh, k=1)[0].id == "fresh"
    reopened.delete(["fresh"])
    assert "fresh" not in [h.id for h in reopened.search(fresh, k=5)]
    moved = Document("d2", documents[2].text, metadata=documents[2].metadata, vector=fresh)
    counts = reopened.sync([*documents[:2], moved, *documents[3:]])
    assert (counts.unchanged, counts.replaced, counts.added, counts.deleted) == (len(documents) - 1, 1, 0, 0)
    assert reopened.search(fresh, k=1)[0].id == "d2"
    compressed = MultiVectorsRetriever.build(_documents(300), tmp_path / "c")  # (held as codes: compared alike)
    assert compressed.sync(_documents(300)).unchanged == 300


def test_a_sync_after_merge_shards_of_a_compressed_index_adds_nothing_unchanged(tmp_path):
    """Each shard trains its own codec; merge-shards compresses the later shards' codes again by the first's. A sync
    compares each document with the fingerprint of its vectors as added, which merges keep; it compared codes, and
    the later shards' unchanged documents (their codes not those of their vectors compressed once) were added again."""
    documents = _documents(90, seed=4)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{**d.to_record(), "vector": d.vector.tolist()}
                                                     for d in documents])
    shards = [tmp_path / f"shard-{i}" for i in range(3)]
    for i, shard in enumerate(shards):
        invoke_cli("index", "-r", "multivectors", "--data", corpus, "--out", shard, "--shard", f"{i}/3")
    assert len({open_retriever(shard).index.segments[0].codec.id for shard in shards}) == 3  # (a codec each)
    invoke_cli("merge-shards", tmp_path / "merged", *shards)
    merged = open_retriever(tmp_path / "merged")
    assert merged.index.describe()["nbits"] == 2 and merged.index.n_docs == 90
    held = {d.id: merged.index.get_vector(d.id) for d in documents}
    segments = merged.index.meta["segments"]
    synced = invoke_cli("add", corpus, "--index", tmp_path / "merged", "--sync")
    assert "0 added, 0 replaced, 90 unchanged, 0 deleted" in synced.output
    reopened = open_retriever(tmp_path / "merged")
    assert reopened.index.meta["segments"] == segments and sorted(reopened.document_ids()) == sorted(held)
    assert all(np.array_equal(reopened.index.get_vector(doc_id), vectors) for doc_id, vectors in held.items())
    changed = documents[70].vector.copy()  # (a later shard's document)
    changed[0] += np.random.default_rng(5).normal(scale=0.5, size=DIM).astype(np.float32)
    scaled = documents[10].vector * 2  # (the same unit rows: the same document under the cosine)
    given = [Document(d.id, d.text, metadata=d.metadata, vector=changed if d.id == "d70" else scaled
                      if d.id == "d10" else d.vector) for d in documents]
    assert reopened.sync(given) == SyncCounts(added=0, replaced=1, unchanged=89, deleted=0)
    assert not np.array_equal(reopened.index.get_vector("d70"), held["d70"])
    assert all(np.array_equal(reopened.index.get_vector(doc_id), vectors)
               for doc_id, vectors in held.items() if doc_id != "d70")
    reopened.index.merge()  # (the fingerprints are carried as the codes are)
    assert reopened.sync(given) == SyncCounts(added=0, replaced=0, unchanged=90, deleted=0)
    for digests in shards[0].glob("seg-*/digests.npy"):  # an index written before semiret kept fingerprints:
        digests.unlink()  # its codes compared with the document's compressed by its codec, as before
    assert open_retriever(shards[0]).sync(given[:30]) == SyncCounts(added=0, replaced=0, unchanged=30, deleted=0)


def test_bad_documents_are_refused_naming_them_and_the_index_is_untouched(tmp_path):
    retriever = MultiVectorsRetriever.build(_documents(5), tmp_path / "m", ann="exact")
    for bad, message in (([Document("x", "no vector")], "'x' has no vector"),
                         ([Document("x", "", vector=np.ones(DIM))], "'x' brings a vector dense .*multivectors "
                                                                    "retriever holds token vectors.*with the vectors"),
                         ([Document("x", "", vector=np.ones((2, 3)))], "'x' has 3-dimensional token vectors"),
                         ([Document("x", "", vector=np.zeros((2, DIM)))], "'x'.s token vector 0 is zero"),
                         ([{"_id": "x", "vector": [[1.0] * DIM, [1.0]]}], "token vector 1 has 1 numbers"),
                         ([{"_id": "x", "vector": [[1.0] * DIM, "ab"]}], "holds lists .* and str at position 1"),
                         ([{"_id": "x", "vector": [np.ones((2, 2)), np.ones((2, 3))]}],
                          r"token vector 0 has shape \(2, 2\)")):
        with pytest.raises(SemiretError, match=message):
            retriever.add(bad)
    assert retriever.index.n_docs == 5
    dot = MultiVectorsRetriever.build(_documents(5), tmp_path / "dot", similarity="dot", ann="exact")
    with pytest.raises(SemiretError, match="'big' has a token vector value beyond float16's range"):
        dot.add([Document("big", "", vector=np.full((1, DIM), 1e6))])
    with pytest.raises(SemiretError, match="'t' brings a vector token vectors .*index such documents with the "
                                           "multivectors retriever"):
        VectorsRetriever.build([Document("t", "", vector=np.ones((2, 4)))])
    with pytest.raises(SemiretError, match="searched by query vectors dense .*these are token vectors"):
        VectorsRetriever.build([Document("d", "", vector=np.ones(4))]).search([np.ones((2, 4))])
    with pytest.raises(SemiretError, match="share that one vector"):
        MultiVectorsRetriever.build(_documents(5), tmp_path / "passages", chunking=2)


def test_extreme_values_keep_their_direction_under_the_cosine(tmp_path):
    documents = [Document("huge", "", vector=np.eye(DIM)[:2] * 1e20),
                 Document("tiny", "", vector=np.eye(DIM)[2:4] * 1e-30)]
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", ann="exact")
    assert retriever.search(np.eye(DIM)[:1], k=1)[0].id == "huge"
    assert retriever.search(np.eye(DIM)[2:3], k=1)[0].score == pytest.approx(1.0, abs=1e-3)
    with pytest.raises(SemiretError, match="centroid_threshold must be a number"):
        retriever.index.search([np.eye(DIM)[:1].astype(np.float32)], centroid_threshold="0.5")


def test_an_empty_index_takes_its_dimension_from_dim(tmp_path):
    with pytest.raises(SemiretError, match="dimension"):
        MultiVectorsRetriever.build([], tmp_path / "none")
    assert not (tmp_path / "none").exists()
    retriever = MultiVectorsRetriever.build([], tmp_path / "m", dim=3, ann="exact")
    retriever.add([Document("a", "", vector=[[0, 0, 1], [0, 1, 1]]), Document("b", "", vector=[[1, 0, 0]])])
    assert retriever.search([[0, 0.1, 1]], k=1)[0].id == "a"


def test_the_command_line_indexes_searches_and_exports_token_vectors(tmp_path):
    documents = _documents(30, seed=3)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{**d.to_record(), "vector": d.vector.tolist()}
                                                     for d in documents])
    assert [d.vector.shape for d in iter_corpus(corpus)] == [d.vector.shape for d in documents]
    asked = [documents[i].vector[:2] for i in range(3)]
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": f"q{i}", "vector": v.tolist()}
                                                       for i, v in enumerate(asked)])
    assert [v.shape for v in read_query_vectors(queries).values()] == [(2, DIM)] * 3
    invoke_cli("index", "-r", "multivectors", "--data", corpus, "--out", tmp_path / "m", "--ann", "exact")
    lines = [json.loads(line) for line in invoke_cli("search", "--index", tmp_path / "m", "--query-vectors", queries,
                                                  "-k", "3", "--json").stdout.splitlines()]
    for line, query in zip(lines, asked):
        assert [hit["id"] for hit in line["hits"]] == _maxsim(documents, query, 3)[0]
    invoke_cli("export", tmp_path / "m", "-o", tmp_path / "exported.jsonl")
    exported = [json.loads(line) for line in (tmp_path / "exported.jsonl").read_text().splitlines()]
    assert [np.asarray(r["vector"]).shape for r in exported] == [d.vector.shape for d in documents]
    invoke_cli("index", "-r", "multivectors", "--data", tmp_path / "exported.jsonl", "--out", tmp_path / "again",
            "--ann", "exact")
    assert [h.id for h in open_retriever(tmp_path / "again").search(asked[0], k=3)] == \
        [h.id for h in open_retriever(tmp_path / "m").search(asked[0], k=3)]
    flat = write_jsonl(tmp_path / "flat.jsonl", [{"_id": "q1", "vector": [1.0] * DIM}, {"_id": "q2",
                                                                                       "vector": [0.5] * DIM}])
    refused = invoke_cli("search", "--index", tmp_path / "m", "--query-vectors", flat, ok=False)
    assert refused.exit_code != 0 and "query vector 0 is one flat vector" in refused.output
    invoke_cli("index", "-r", "bm25", "--data", corpus, "--out", tmp_path / "words")
    refused = invoke_cli("search", "--index", tmp_path / "words", "--query-vectors", queries, ok=False)
    assert refused.exit_code != 0 and "is searched by query texts" in refused.output
    invoke_cli("index", "-r", "sparse-vectors", "--data", write_jsonl(tmp_path / "sparse.jsonl", [
        {"_id": "s", "vector": {"ice": 1.0}}]), "--out", tmp_path / "sparse")
    refused = invoke_cli("search", "--index", tmp_path / "sparse", "--query-vectors", queries, ok=False)
    assert refused.exit_code != 0 and "these are token vectors" in refused.output
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [{"_id": "q1", "vector": [[1.0, 2.0]]}, {"_id": "q2",
                                                                                         "vector": [1.0, 2.0]}])
    with pytest.raises(DataFormatError, match=r"mixed.jsonl:2: a vector dense .*the file's first is token vectors"):
        read_query_vectors(mixed)


def test_the_service_creates_fills_and_searches_an_index_of_token_vectors(tmp_path):
    from semiret.serving import ServeSettings, create_app
    from semiret.serving.client import ServerError

    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    documents = _documents(40, seed=7)
    with LocalClient(create_app(settings)) as http:
        client = client_of(http, api_key="key")
        assert client.create_index("multi", "multivectors", {"ann": "exact", "dim": DIM})["documents"] == 0
        assert client.add("multi", documents[:30]) == 30
        assert client.add("multi", [{**d.to_record(), "vector": d.vector.tolist()} for d in documents[30:]]) == 10
        query = documents[4].vector[:3]
        ids = _maxsim(documents, query, 4)[0]
        assert client.search("multi", [query], k=4).ids == [ids]  # (a list of queries' matrices)
        assert client.search("multi", np.stack([query, documents[9].vector[:3]]), k=1).ids == [[ids[0]], ["d9"]]
        for body, message in (({"vectors": [[1.0] * DIM]}, "searched by query vectors token vectors .*this is dense"),
                              ({"vectors": [[[1.0] * DIM, [1.0]]]}, "token vector 1 has 1 numbers"),
                              ({"queries": ["walrus"]}, "no model to embed query texts")):
            with pytest.raises(ServerError, match=message) as raised:
                client._call("POST", "/indexes/multi/search", body)
            assert raised.value.status == 422
        assert sum(count for _, count in client.facet("multi", "even", query=query, depth=5)) == 5
        with pytest.raises(SemiretError, match="a facet counts the hits of one query"):
            client.facet("multi", "even", query=[query])
        client.create_index("dense", "vectors", {"dim": DIM})
        client.add("dense", [Document("a", "", vector=np.ones(DIM))])
        with pytest.raises(ServerError, match="searched by query vectors dense .*this is token vectors") as raised:
            client._call("POST", "/indexes/dense/search", {"vectors": [query.tolist()]})
        assert raised.value.status == 422


def test_framework_adapters_refuse_an_index_of_token_vectors(tmp_path):
    from semiret.integrations._shared import check_query_model

    retriever = MultiVectorsRetriever.build(_documents(5), tmp_path / "m", ann="exact")
    with pytest.raises(SemiretError, match="makes one vector a text|make one vector a text"):
        check_query_model(retriever, True, "embeddings", "LangChain")


def test_token_pooling_keeps_a_share_of_each_document_s_vectors(tmp_path):
    """pool_factor (Clavie et al. 2024): Ward clusters of each document's token vectors, their unit means stored;
    a document still found by its own vectors, the index recording the factor so that adds and syncs pool alike."""
    from semiret.search.late_interaction import pooled_tokens

    rng = np.random.default_rng(3)
    centres = rng.normal(size=(3, DIM))  # three tight groups of four: pooled by 4, one vector a group
    vectors = np.repeat(centres, 4, axis=0) + 0.01 * rng.normal(size=(12, DIM))
    pooled = pooled_tokens(vectors, 4, 0, unit=True)
    assert pooled.shape == (3, DIM)
    unit_centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
    assert np.abs(pooled @ unit_centres.T).max(axis=1) == pytest.approx(1.0, abs=1e-3)
    kept = pooled_tokens(vectors, 4, 1, unit=True)  # (the first vector protected, as colbert's [CLS])
    assert len(kept) == 1 + 11 // 4 and np.array_equal(kept[0], vectors[0].astype(np.float32))
    assert pooled_tokens(vectors[:1], 2, 0, unit=True).shape == (1, DIM)
    long = rng.normal(size=(5000, DIM)).astype(np.float32)  # (pooled a window at a time: memory stays small)
    assert len(pooled_tokens(long, 2, 0, unit=True)) == 2048 // 2 * 2 + 904 // 2
    opposite = np.eye(DIM, dtype=np.float32)[:1] * np.array([[1.0], [-1.0]], np.float32)
    assert np.array_equal(pooled_tokens(opposite, 2, 0, unit=True), opposite)  # (no zero mean stored)
    documents = _documents(40)
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", ann="exact", pool_factor=2)
    assert retriever.index.describe()["token_vectors"] == sum(max(1, len(d.vector) // 2) for d in documents)
    assert retriever.index.meta["analyzer"]["pool_factor"] == 2
    assert retriever.search([d.vector for d in documents[:10]], k=1).ids == [[d.id] for d in documents[:10]]
    reopened = open_retriever(tmp_path / "m")
    assert reopened.sync(documents).unchanged == 40
    reopened.add([Document("fresh", "", vector=rng.normal(size=(6, DIM)))])
    assert len(reopened.index.get_vector("fresh")) == 3
    with pytest.raises(SemiretError, match="pool_factor"):
        MultiVectorsRetriever.build(documents, tmp_path / "bad", pool_factor=0)


def test_the_first_hits_do_not_change_with_k_when_the_probe_finds_few_candidates(tmp_path):
    """Pages of a ranking agree: a probe that finds fewer than ndocs candidates (most documents deleted, as a filter
    hides them) widens whatever k is, so a search for 10 hits and one for 20 rank their first 10 alike."""
    rng = np.random.default_rng(0)
    topics = rng.normal(size=(40, DIM))

    def near_topics(n):
        return topics[rng.choice(40, n)] + 0.3 * rng.normal(size=(n, DIM))

    documents = [Document(f"d{i}", "", vector=near_topics(int(rng.integers(1, 6)))) for i in range(1500)]
    retriever = MultiVectorsRetriever.build(documents, tmp_path / "m", nbits=0)
    retriever.delete([d.id for d in documents if int(d.id[1:]) % 5])  # (80% hidden: 300 live, above ndocs)
    narrow = retriever.with_options(nprobe=1)
    queries = [near_topics(1) for _ in range(40)]
    assert [ids[:10] for ids in narrow.search(queries, k=20).ids] == narrow.search(queries, k=10).ids
