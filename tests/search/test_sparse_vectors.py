"""Sparse vectors brought by the user: the ``sparse-vectors`` retriever (documents' own ``{term: weight}`` vectors,
as Pyserini's JsonVectorCollection and ``--impact`` search, Qdrant's sparse vectors), queried by sparse vectors or by
texts cut by the tokenizer the index was built with."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from semiret.data.collection import Document, iter_corpus, query_vectors, read_query_vectors
from semiret.errors import DataFormatError, SemiretError
from semiret.search import SparseVectorsRetriever, VectorsRetriever, open_retriever

from helpers import LocalClient, client_of, invoke_cli, tiny_tokenizer, write_jsonl

TERMS = ["walrus", "seal", "ice", "##x", "##ing", "floe", "krill", "arctic"]


def _documents(n=30, seed=0) -> list[Document]:
    """Documents each bringing a few of :data:`TERMS` with random weights (a SPLADE vector's shape, made elsewhere)."""
    rng = np.random.default_rng(seed)
    documents = []
    for i in range(n):
        chosen = rng.choice(TERMS, size=rng.integers(1, 5), replace=False)
        documents.append(Document(f"d{i}", f"text {i}", metadata={"even": i % 2 == 0},
                                  vector={str(t): round(float(rng.uniform(0.1, 3.0)), 3) for t in chosen}))
    return documents


def _by_hand(documents, query: dict, k: int) -> tuple[list[str], list[float]]:
    """The dot products of ``query`` with each document's vector, the best ``k`` documents with a positive one."""
    scores = [(sum(weight * d.vector.get(term, 0.0) for term, weight in query.items()), n)
              for n, d in enumerate(documents)]
    ranked = sorted((item for item in scores if item[0] > 0), key=lambda item: (-item[0], item[1]))[:k]
    return [documents[n].id for _, n in ranked], [score for score, _ in ranked]


def test_scores_are_the_dot_products_of_the_vectors(tmp_path):
    documents = _documents()
    retriever = SparseVectorsRetriever.build(documents, tmp_path / "s")
    for query in ({"ice": 1.0, "walrus": 2.5}, {"##ing": 0.7}, {"krill": 1.0, "floe": 0.5, "seal": 3.0}):
        ids, scores = _by_hand(documents, query, 5)
        hits = retriever.search(query, k=5)
        assert [h.id for h in hits] == ids
        np.testing.assert_allclose([h.score for h in hits], scores, rtol=1e-5)
    batch = retriever.search([{"ice": 1.0}, {"seal": 1.0, "nothing-known": 4.0}], k=3)
    assert batch.ids == [_by_hand(documents, {"ice": 1.0}, 3)[0], _by_hand(documents, {"seal": 1.0}, 3)[0]]
    assert retriever.index.kind == "impact" and retriever.index.meta["analyzer"] == {"type": "sparse-vectors"}
    assert retriever.search({"never-seen": 1.0, "neither": 2.0}) == []  # unknown terms only: no hits, no error
    assert retriever.search({"ice": 0.0}) == []


def test_terms_and_scores_read_back_by_name(tmp_path):
    documents = _documents()
    retriever = SparseVectorsRetriever.build(documents, tmp_path / "s")
    target = next(d for d in documents if len(d.vector) >= 2)
    held = retriever.document_terms(target.id)
    assert {t.term: t.weight for t in held} == pytest.approx(target.vector)
    assert all(t.document_frequency == sum(t.term in d.vector for d in documents) for t in held)
    query = {term: 1.5 for term in target.vector} | {"unknown": 2.0}
    explained = retriever.explain(query, target.id)
    assert {part.term: part.contribution for part in explained.terms} == pytest.approx(
        {term: 1.5 * weight for term, weight in target.vector.items()})
    assert explained.score == pytest.approx(_by_hand([target], query, 1)[1][0], rel=1e-5)
    assert retriever.count(query={"ice": 1.0}) == sum("ice" in d.vector for d in documents)


def test_new_terms_added_later_are_searched_at_once_and_the_vocabulary_survives_a_merge(tmp_path):
    documents = _documents(10)
    retriever = SparseVectorsRetriever.build(documents, tmp_path / "s")
    assert retriever.search({"narwhal": 1.0}) == []
    retriever.add([Document("n1", "", vector={"narwhal": 2.0, "ice": 0.5}),
                   Document("n2", "", vector={"narwhal": 1.0, "tusk": 4.0})])
    assert [(h.id, h.score) for h in retriever.search({"narwhal": 1.0, "tusk": 0.5})] == [("n2", 3.0), ("n1", 2.0)]
    reopened = open_retriever(tmp_path / "s")  # another process's view: the new terms were committed with them
    assert reopened.name == "sparse-vectors" and reopened.search({"tusk": 1.0})[0].id == "n2"
    reopened.delete(["n2"])
    retriever.index.refresh()
    retriever.index.merge()
    assert [h.id for h in retriever.search({"narwhal": 1.0})] == ["n1"] and retriever.search({"tusk": 1.0}) == []
    assert retriever.index.get_vector("n1") == {"ice": 0.5, "narwhal": 2.0}
    even = retriever.search({"ice": 1.0, "narwhal": 1.0}, k=20, filter={"even": True})
    assert {h.id for h in even} == {d.id for d in documents[::2] if "ice" in d.vector}


def test_recommend_and_sync_read_the_stored_vectors(tmp_path):
    documents = _documents(12)
    retriever = SparseVectorsRetriever.build(documents, tmp_path / "s")
    example = documents[3]
    like = retriever.recommend([example.id], k=3)
    assert example.id not in [h.id for h in like]
    assert [h.id for h in like] == [h.id for h in retriever.search(example.vector, k=4) if h.id != example.id][:3]
    moved = Document("d2", documents[2].text, metadata=documents[2].metadata, vector={"orca": 1.0})
    counts = retriever.sync([*documents[:2], moved, *documents[3:]])
    assert (counts.unchanged, counts.replaced, counts.added, counts.deleted) == (11, 1, 0, 0)
    assert retriever.search({"orca": 1.0})[0].id == "d2"


def test_text_queries_are_cut_by_the_tokenizer_the_index_was_built_with(tmp_path):
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    documents = [Document("a", "A walrus rests on the ice.", vector={"walrus": 2.0, "ice": 1.0}),
                 Document("b", "", vector={"seal": 1.0, "##x": 3.0, "ice": 0.5}),
                 Document("c", "", vector={"seal": 0.25}),
                 Document("d", "", vector={"krill": 1.0})]
    plain = SparseVectorsRetriever.build(documents, tmp_path / "s", query_tokenizer=tokenizer)
    assert plain.index.meta["analyzer"]["query_tokenizer"] == tokenizer
    # "walrus on ice": walrus, ice ("on" is [UNK], never a term); "sealxx!": seal, ##x, ! (the last no document's)
    assert [(h.id, h.score) for h in plain.search("walrus on ice")] == [("a", 3.0), ("b", 0.5)]
    assert [(h.id, h.score) for h in plain.search("sealxx!")] == [("b", 4.0), ("c", 0.25)]
    assert [t.term for t in plain.analyze("sealxx!")] == ["##x", "seal", "!"]  # (weights 1, 1, and 0: unknown)
    idf = SparseVectorsRetriever.open(tmp_path / "s", query_idf="corpus")
    df = {"walrus": 1, "ice": 2, "seal": 2, "##x": 1}

    def lucene(term: str) -> float:
        return math.log(1 + (4 - df[term] + 0.5) / (df[term] + 0.5))

    hits = idf.search("walrus on ice", k=4)
    assert [h.id for h in hits] == ["a", "b"]
    np.testing.assert_allclose([h.score for h in hits], [2 * lucene("walrus") + lucene("ice"), 0.5 * lucene("ice")],
                               rtol=1e-5)
    explained = idf.explain("sealxx", "b")
    assert {p.term: p.query_weight for p in explained.terms} == pytest.approx({"seal": lucene("seal"),
                                                                              "##x": lucene("##x")})
    assert idf.search({"krill": 1.0})[0].id == "d"  # sparse query vectors still
    assert plain.highlight("walrus seal", "a") == ["A <em>walrus</em> rests on the ice."]


def test_a_text_query_without_a_tokenizer_is_refused_saying_how_to_give_one(tmp_path):
    retriever = SparseVectorsRetriever.build(_documents(5), tmp_path / "s")
    for call in (lambda: retriever.search("walrus"), lambda: retriever.explain("walrus", "d0"),
                 lambda: retriever.count(query="walrus")):
        with pytest.raises(SemiretError, match="built without a query tokenizer.*--query-tokenizer NAME_OR_DIR"):
            call()
    with pytest.raises(SemiretError, match="query_idf .* built without a query tokenizer"):
        SparseVectorsRetriever.open(tmp_path / "s", query_idf="corpus")


def test_bad_documents_are_refused_naming_them_and_the_index_is_untouched(tmp_path):
    retriever = SparseVectorsRetriever.build(_documents(5), tmp_path / "s")
    terms_before = list(retriever.index.vocab)
    for bad, message in (
            ([Document("ok", "", vector={"new-term": 1.0}), Document("x", "no vector")], "'x' has no vector"),
            ([Document("x", "", vector=[1.0, 2.0])], "'x' brings a vector dense .* sparse-vectors retriever holds "
                                                     "sparse"),
            ([{"_id": "x", "vector": {}}], "document 0: .*holds no term"),
            ([{"_id": "x", "vector": {"a": 0}}], "no term of positive weight"),
            ([{"_id": "x", "vector": {"a": -0.5}}], "weight of term 'a' is negative"),
            ([{"_id": "x", "vector": {"a": float("nan")}}], "weight of term 'a' is nan"),
            ([{"_id": "x", "vector": {"a": "1"}}], "weight of term 'a' must be a number, got str"),
            ([{"_id": "x", "vector": {"a": True}}], "must be a number, got bool")):
        with pytest.raises(SemiretError, match=message):
            retriever.add(bad)
    for bad, message in (({1: 1.0}, "a term that is not a string: 1"), ({"a\nb": 1.0}, "no line break"),
                         ({"": 1.0}, "at least one character"), ({"a": math.inf}, "is inf")):
        with pytest.raises(SemiretError, match=f"document 'x': its vector.*{message}"):
            Document("x", "", vector=bad)
    assert retriever.index.n_docs == 5 and retriever.index.vocab == terms_before
    assert open_retriever(tmp_path / "s").index.vocab == terms_before and retriever.search({"new-term": 1.0}) == []


def test_vectors_of_the_other_kind_are_refused_both_ways(tmp_path):
    sparse = SparseVectorsRetriever.build(_documents(5), tmp_path / "s")
    with pytest.raises(SemiretError, match="searched by query vectors sparse .*these are dense"):
        sparse.search([0.5, 1.0])
    with pytest.raises(SemiretError, match="query vector 1: the weight of term 'b' is negative"):
        sparse.search([{"a": 1.0}, {"b": -1.0}])
    with pytest.raises(SemiretError, match="the query vector holds no term"):
        sparse.search({})
    dense = VectorsRetriever.build([Document("v", "", vector=[1.0, 0.0])], tmp_path / "v")
    with pytest.raises(SemiretError, match="searched by query vectors dense .*these are sparse"):
        dense.search({"ice": 1.0})
    with pytest.raises(SemiretError, match="'w' brings a vector sparse .*index such documents with the sparse-vectors"):
        dense.add([Document("w", "", vector={"ice": 1.0})])
    with pytest.raises(SemiretError, match="share that one vector"):
        SparseVectorsRetriever.build(_documents(3), tmp_path / "passages", chunking=2)


def test_corpus_and_query_files_bring_sparse_vectors(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [
        {"id": "a", "contents": "walrus", "vector": {"walrus": 3, "##ing": 1.5}, "source": "s"},  # Pyserini's form
        {"_id": "b", "vector": {"seal": 2}}])  # a vector alone is a document
    documents = list(iter_corpus(corpus, metadata_fields=["*"]))
    assert [d.vector for d in documents] == [{"walrus": 3.0, "##ing": 1.5}, {"seal": 2.0}]
    assert documents[0].metadata == {"source": "s"} and documents[0].text == "walrus"
    write_jsonl(corpus, [{"_id": "a", "vector": {"walrus": 1}}, {"_id": "b", "vector": {"seal": -2}}])
    with pytest.raises(DataFormatError, match=r"corpus.jsonl:2: field 'vector': the weight of term 'seal' is negative"):
        list(iter_corpus(corpus))
    queries = write_jsonl(tmp_path / "q.jsonl", [{"_id": "q1", "vector": {"seal": 1}}, {"_id": "q2", "vector": [1.0]}])
    with pytest.raises(DataFormatError, match=r"q.jsonl:2: a vector dense \(a list of numbers\); the file's first is "
                                              r"sparse"):
        read_query_vectors(queries)
    write_jsonl(queries, [{"_id": "q1", "vector": {"seal": 1, "walrus": 0}}])
    assert read_query_vectors(queries) == {"q1": {"seal": 1.0}}
    assert query_vectors({"q1": "a text"}) is None  # a dict of texts is no vector (search() says to pass its texts)


def test_the_command_line_indexes_searches_evaluates_and_exports_sparse_vectors(tmp_path):
    documents = _documents(12, seed=3)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{**d.to_record(), "kind": int(d.id[1:]) % 2,
                                                      "vector": d.vector} for d in documents])
    asked = [dict(list(documents[i].vector.items())[:2]) for i in range(3)]
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": f"q{i}", "vector": v} for i, v in enumerate(asked)])
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3)))
    invoke_cli("index", "-r", "sparse-vectors", "--data", corpus, "--out", tmp_path / "s", "--metadata-fields", "kind")
    lines = [json.loads(line) for line in invoke_cli("search", "--index", tmp_path / "s", "--query-vectors", queries,
                                                  "-k", "3", "--json").stdout.splitlines()]
    for line, query in zip(lines, asked):
        ids, scores = _by_hand(documents, query, 3)
        assert [hit["id"] for hit in line["hits"]] == ids
        assert [hit["score"] for hit in line["hits"]] == pytest.approx(scores, rel=1e-5)
    figures = json.loads(invoke_cli("eval", "--data", corpus, "--query-vectors", queries, "--qrels", qrels, "-r",
                                 "sparse-vectors", "--json").stdout)
    by_hand = [_by_hand(documents, query, 10)[0] for query in asked]
    assert figures["retriever"] == "sparse-vectors" and figures["queries"] == 3
    assert figures["nDCG@10"] == pytest.approx(np.mean([1 / math.log2(2 + ids.index(f"d{i}"))
                                                        for i, ids in enumerate(by_hand)]))
    refused = invoke_cli("search", "--index", tmp_path / "s", "walrus", ok=False)
    assert refused.exit_code != 0 and "--query-tokenizer" in refused.output
    invoke_cli("export", tmp_path / "s", "-o", tmp_path / "exported.jsonl")
    exported = [json.loads(line) for line in (tmp_path / "exported.jsonl").read_text().splitlines()]
    assert [(r["_id"], r["vector"], r["metadata"]) for r in exported] == [
        (d.id, d.vector, {**d.metadata, "kind": int(d.id[1:]) % 2}) for d in documents]  # (3 decimals: as written)
    tiny_tokenizer(tmp_path / "tok")  # texts cut by the tokenizer (a folder) that made the terms, weighed by IDF
    invoke_cli("index", "-r", "sparse-vectors", "--data", tmp_path / "exported.jsonl", "--out", tmp_path / "again",
            "--query-tokenizer", tmp_path / "tok")
    by_text = json.loads(invoke_cli("search", "--index", tmp_path / "again", "--query-idf", "corpus", "--json",
                                 "sealxx").stdout)
    expected = open_retriever(tmp_path / "again").search({"seal": 1.0, "##x": 1.0}, k=10)  # (idf: weights differ)
    assert {hit["id"] for hit in by_text["hits"]} == {h.id for h in expected} and by_text["hits"]
    again = open_retriever(tmp_path / "again")
    assert [(h.id, h.score) for h in again.search(asked[0], k=5)] == [
        (h.id, h.score) for h in open_retriever(tmp_path / "s").search(asked[0], k=5)]


def test_the_service_creates_fills_and_searches_an_index_of_sparse_vectors(tmp_path):
    from semiret.serving import ServeSettings, create_app
    from semiret.serving.client import ServerError

    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    documents = _documents(10, seed=7)
    with LocalClient(create_app(settings)) as http:
        client = client_of(http, api_key="key")
        assert client.create_index("sparse", "sparse-vectors")["documents"] == 0
        assert client.add("sparse", documents[:6]) == 6
        assert client.add("sparse", [{**d.to_record(), "vector": d.vector} for d in documents[6:]]) == 4
        query = {"ice": 1.0, "seal": 2.0}
        ids, scores = _by_hand(documents, query, 4)
        hits = client.search("sparse", query, k=4)
        assert [h.id for h in hits] == ids and [h.score for h in hits] == pytest.approx(scores, rel=1e-5)
        assert client.search("sparse", [query, {"unknown": 1.0}], k=4).ids == [ids, []]
        for body, message in (({"vectors": [{"ice": -1.0}]}, "negative"), ({"vectors": [[1.0, 2.0]]}, "this is dense"),
                              ({"queries": ["walrus"]}, "without a query tokenizer")):
            with pytest.raises(ServerError, match=message) as raised:
                client._call("POST", "/indexes/sparse/search", body)
            assert raised.value.status == 422
        with pytest.raises(ServerError, match="weight of term 'a' is negative") as raised:  # (the client checks
            client._call("PUT", "/indexes/sparse/documents",  # documents first: the server's own answer)
                         {"documents": [documents[0].to_record() | {"_id": "ok", "vector": {"new-term": 1.0}},
                                        {"_id": "bad", "vector": {"a": -1.0}}]})
        assert raised.value.status == 422 and client.count("sparse") == 10
        assert client.search("sparse", {"new-term": 1.0}) == []
        holding = sum(1 for d in documents if {"ice", "seal"} & set(d.vector))  # total hits of a sparse vector
        counted = http.post("/indexes/sparse/documents/count", json={"vector": query})
        assert counted.status_code == 200 and counted.json()["count"] == holding
        both = http.post("/indexes/sparse/documents/count", json={"vector": query, "query": "ice"})
        assert both.status_code == 422 and "not both" in both.text
        client.create_index("words", "bm25")
        other = http.post("/indexes/words/documents/count", json={"vector": query})
        assert other.status_code == 422 and "holds no sparse vectors" in other.text


def test_what_a_review_found_is_refused_clearly(tmp_path):
    """A weight float32 holds as 0 is left out as a 0 is (and a vector of only such is refused, not indexed empty); a
    dict of query arrays keyed by id is named as such, not read as a sparse vector; a hybrid does not take an index of
    brought vectors (its text queries could not search it); Milvus refuses a vocabulary the documents grow."""
    tiny = Document("t", "text", vector={"ice": 1e-46, "seal": 1.0})
    assert tiny.vector == {"seal": 1.0}
    with pytest.raises(SemiretError, match="no term of positive weight"):
        Document("z", "text", vector={"ice": 1e-46})
    assert query_vectors({"ice": 1e-46, "seal": 2}) == ([{"seal": 2.0}], True)
    with pytest.raises(SemiretError, match="dict") as refused:
        VectorsRetriever.build([Document("d", "x", vector=[1.0, 0.0])]).search({"q1": np.array([1.0, 0.0])})
    assert "weight of term" not in str(refused.value)
    from semiret.search.hybrid import HybridRetriever

    with pytest.raises(SemiretError, match="fuse-with"):
        HybridRetriever.build(_documents(5), tmp_path / "hybrid", neural="sparse-vectors")
    built = SparseVectorsRetriever.build(_documents(5), tmp_path / "sparse")
    with pytest.raises(SemiretError, match="fuse-with"):
        HybridRetriever.around(built.index.path, tmp_path / "around")
    assert not (tmp_path / "hybrid").exists() and not (tmp_path / "around").exists()
    from semiret.indexes.milvus import MilvusBackend

    with pytest.raises(SemiretError, match="cannot live in Milvus"):
        SparseVectorsRetriever.build(_documents(5), "sparse", backend=MilvusBackend(str(tmp_path / "milvus.db")))


def test_a_sparse_query_vector_is_explained_on_the_command_line_and_over_http(tmp_path):
    """``semiret explain --query-vector`` and the service's explain ``"vector"`` (and a search's ``explain`` of query
    vectors) give each term's query weight, document weight and product, as ``Retriever.explain`` does; a retriever
    that takes no sparse vectors says so."""
    from semiret.search import BM25Retriever
    from semiret.serving import ServeSettings, create_app
    from semiret.serving.client import ServerError

    documents = _documents(12, seed=5)
    target = next(d for d in documents if len(d.vector) >= 2)
    query = {term: 0.5 + n for n, term in enumerate(target.vector)} | {"unknown": 2.0}
    expected = {term: query[term] * weight for term, weight in target.vector.items()}
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{**d.to_record(), "vector": d.vector} for d in documents])
    invoke_cli("index", "-r", "sparse-vectors", "--data", corpus, "--out", tmp_path / "s")
    shown = json.loads(invoke_cli("explain", "--index", tmp_path / "s", "--id", target.id, "--query-vector",
                               json.dumps(query), "--json").stdout)
    assert {t["term"]: t["contribution"] for t in shown["terms"] if t["contribution"]} == pytest.approx(expected)
    assert {t["term"]: t["query_weight"] for t in shown["terms"] if t["contribution"]} == pytest.approx(
        {t: query[t] for t in target.vector})
    assert {t["term"]: t["document_weight"] for t in shown["terms"] if t["contribution"]} == pytest.approx(
        target.vector)
    assert shown["score"] == pytest.approx(sum(expected.values()), rel=1e-5) and shown["matched"]
    table = invoke_cli("explain", "--index", tmp_path / "s", "--id", target.id, "--query-vector", json.dumps(query))
    assert f"{shown['score']:.4f}" in table.stdout
    for args, message in ((["--query-vector", "[1, 2]"], "JSON object"), (["--query-vector", "{nope"], "not JSON"),
                          ([], "one of the two"), (["walrus", "--query-vector", '{"ice": 1}'], "one of the two"),
                          (["--query-vector", '{"ice": 1}', "--operators"], "no words")):
        refused = invoke_cli("explain", "--index", tmp_path / "s", "--id", target.id, *args, ok=False)
        assert refused.exit_code != 0 and message in refused.output, refused.output
    BM25Retriever.build(documents, tmp_path / "words")
    with pytest.raises(SemiretError, match="takes no sparse query vector"):
        open_retriever(tmp_path / "words").explain({"ice": 1.0}, "d0")
    refused = invoke_cli("explain", "--index", tmp_path / "words", "--id", "d0", "--query-vector", '{"ice": 1}', ok=False)
    assert refused.exit_code != 0 and "takes no sparse query vector" in refused.output

    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as http:
        client = client_of(http, api_key="key")
        client.create_index("sparse", "sparse-vectors")
        client.add("sparse", documents)
        explained = client.explain("sparse", query, target.id)
        assert {p.term: p.contribution for p in explained.terms if p.contribution} == pytest.approx(expected)
        assert explained.score == pytest.approx(shown["score"], rel=1e-6) and explained.matched
        filtered = client.explain("sparse", query, target.id, filter={"even": not target.metadata["even"]})
        assert not filtered.matched and filtered.unmatched == "filter"
        hits = client.search("sparse", query, k=3, explain=True)
        assert hits and all(h.explanation.score == pytest.approx(h.score, rel=1e-5) for h in hits)
        for body, message in (({"id": target.id}, "query"), ({"id": target.id, "vector": query, "query": "ice"},
                                                             "not both"),
                              ({"id": target.id, "vector": {"ice": 1.0}, "operators": True}, "no words"),
                              ({"id": target.id, "vector": {"ice": -1.0}}, "negative")):
            answer = http.post("/indexes/sparse/explain", json=body)
            assert answer.status_code == 422 and message in answer.text, answer.text
        client.create_index("words", "bm25")
        client.add("words", documents)
        other = http.post("/indexes/words/explain", json={"id": "d0", "vector": {"ice": 1.0}})
        assert other.status_code == 422 and "holds no sparse vectors" in other.text
        client.create_index("dense", "vectors", {"dim": 2})
        client.add("dense", [Document("v", "x", vector=[1.0, 0.0]), Document("w", "y", vector=[0.0, 1.0])])
        with pytest.raises(ServerError, match="explain_invalid") as raised:  # dense vectors: no terms to add up
            client.search("dense", [1.0, 0.5], explain=True)
        assert raised.value.status == 422
        with pytest.raises(SemiretError, match="one sparse query vector"):
            client.explain("sparse", [query, query], target.id)
