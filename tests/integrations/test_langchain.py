"""semiret as a LangChain retriever, over an index in this process and over a server; LangChain's documents
indexed by semiret."""

from __future__ import annotations

import pytest
from langchain_core.documents import Document as LangChainDocument

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.integrations.langchain import SCORE_KEY, SemiretRetriever, semiret_documents
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

DOCS = [Document(f"d{i}", text, title=f"Title {i}", metadata={"kind": "odd" if i % 2 else "even"})
        for i, text in enumerate(["statins lower cholesterol", "aspirin and heart attacks", "statins and the heart",
                                  "sleep and memory", "heart failure trials of statins"])]


def test_an_index_answers_langchain_documents_as_its_search(tmp_path):
    index = BM25Retriever.build(DOCS, tmp_path / "idx")
    retriever = SemiretRetriever.from_index(tmp_path / "idx", k=2, filter={"kind": "even"})
    found = retriever.invoke("statins heart")
    expected = index.search("statins heart", k=2, filter={"kind": "even"})
    assert [d.id for d in found] == [h.id for h in expected] and len(found) == 2
    first = DOCS[int(found[0].id[1:])]
    assert found[0].page_content == first.full_text and found[0].metadata["kind"] == "even"
    assert found[0].metadata[SCORE_KEY] == pytest.approx(expected[0].score)
    grouped = SemiretRetriever(searcher=index, k=2, search_kwargs={"group_by": "kind"}).invoke("heart")
    assert {d.metadata["kind"] for d in grouped} == {"odd", "even"}


def test_a_langchain_retriever_sees_what_was_written_after_it_was_made(tmp_path):
    """A RAG chain's retriever, made once, never saw a later add (``semiret add --sync --watch``, another
    process's, another retriever's) nor a delete: its index is read as last committed at each query."""
    from semiret.search import open_retriever

    BM25Retriever.build(DOCS, tmp_path / "idx")
    retriever = SemiretRetriever.from_index(tmp_path / "idx", k=2)
    writer = open_retriever(tmp_path / "idx")
    writer.add([Document("new", "walruses and statins on the ice")])
    assert [d.id for d in retriever.invoke("walruses")] == ["new"]
    writer.delete(["new", "d0"])
    writer.index.merge()
    assert retriever.invoke("walruses") == [] and "d0" not in [d.id for d in retriever.invoke("statins")]


def test_a_served_index_answers_as_the_local_one(tmp_path):
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as app_client:
        client = client_of(LocalClient(app_client.app), api_key="key")
        client.create_index("notes", "bm25")
        client.add("notes", DOCS)
        served = SemiretRetriever(searcher=client, index="notes", k=3).invoke("statins")
        local = SemiretRetriever.from_index(BM25Retriever.build(DOCS, tmp_path / "local").index.path, k=3)
        assert [(d.id, d.page_content, d.metadata) for d in served] == [
            (d.id, d.page_content, {**d.metadata, SCORE_KEY: pytest.approx(d.metadata[SCORE_KEY])})
            for d in local.invoke("statins")]


def test_langchain_documents_are_indexed_by_their_ids(tmp_path):
    loaded = [LangChainDocument(page_content="statins and the heart", metadata={"source": "a.txt", "page": 1}),
              LangChainDocument(page_content="sleep and memory", metadata={"source": "b.txt"})]
    documents = semiret_documents(loaded, id_key="source")
    assert [(d.id, d.text, d.metadata) for d in documents] == [
        ("a.txt", "statins and the heart", {"source": "a.txt", "page": 1}),
        ("b.txt", "sleep and memory", {"source": "b.txt"})]
    index = BM25Retriever.build(documents, tmp_path / "idx")
    assert SemiretRetriever(searcher=index, k=1).invoke("memory")[0].id == "b.txt"
    with_ids = semiret_documents([LangChainDocument(id="x", page_content="text")])
    assert with_ids[0].id == "x"
    pages = [LangChainDocument(page_content=f"page {n}", metadata={"source": "a.pdf", "page": n}) for n in range(3)]
    split = semiret_documents([*pages, LangChainDocument(page_content="b", metadata={"source": "b.txt"})], "source")
    assert [d.id for d in split] == ["a.pdf#0", "a.pdf#1", "a.pdf#2", "b.txt"]
    assert split[1].metadata == {"source": "a.pdf", "page": 1}  # (the source kept: a filter reads it)
    with pytest.raises(SemiretError, match="document 1 has no id and no metadata 'id'"):
        semiret_documents([LangChainDocument(id="x", page_content="a"), LangChainDocument(page_content="b")])


def test_a_retriever_is_made_of_what_it_can_search(tmp_path):
    index = BM25Retriever.build(DOCS, tmp_path / "idx")
    with pytest.raises(SemiretError, match="give index"):
        SemiretRetriever(searcher=client_of(None, api_key="key"))
    with pytest.raises(SemiretError, match="leave index out"):
        SemiretRetriever(searcher=index, index="notes")
    with pytest.raises(SemiretError, match="Retriever or Client, got str"):
        SemiretRetriever(searcher="idx")
    bare = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no text to give LangChain"):
        SemiretRetriever(searcher=bare)


def test_an_index_of_vectors_is_searched_with_the_embeddings_that_made_them(tmp_path):
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from semiret.search import VectorsRetriever

    embeddings = DeterministicFakeEmbedding(size=8)
    texts = ["statins lower cholesterol", "sleep and memory", "aspirin and the heart"]
    index = VectorsRetriever.build([Document(f"v{n}", text, vector=embeddings.embed_query(text))
                                    for n, text in enumerate(texts)], tmp_path / "vectors")
    found = SemiretRetriever(searcher=index, embeddings=embeddings, k=1).invoke("sleep and memory")
    assert [(d.id, d.page_content) for d in found] == [("v1", "sleep and memory")]
    opened = SemiretRetriever.from_index(tmp_path / "vectors", embeddings=embeddings, k=1)  # as the README opens it
    assert [d.id for d in opened.invoke("aspirin and the heart")] == ["v2"]
    with pytest.raises(SemiretError, match="give embeddings"):
        SemiretRetriever(searcher=index)
    with pytest.raises(SemiretError, match="with embed_query"):
        SemiretRetriever(searcher=index, embeddings="model")


PASSAGES = [Document("long", " ".join(f"w{n}" for n in range(20)) + " statins " + " ".join(f"v{n}" for n in range(20)),
                     title="Long"), Document("short", "aspirin and the heart")]


def test_a_hit_comes_with_its_context_from_an_index_and_from_a_server(tmp_path):
    """``search_kwargs={"context": N}``: each document's text is its passage with N passages around it, as
    ``Retriever.context`` (``semiret search --context``, the server's ``"context"``) gives it, in this process as
    over a server; without it, the passage alone; a search argument neither takes is an error naming those it takes
    (a bare TypeError was raised at the first query)."""
    from semiret.data.chunking import Chunking

    index = BM25Retriever.build(PASSAGES, tmp_path / "idx", chunking=Chunking(8))
    local = SemiretRetriever.from_index(tmp_path / "idx", k=1, search_kwargs={"context": 1}).invoke("statins")
    passage = index.search("statins", k=1)[0]
    assert [d.id for d in local] == [passage.id] and passage.document.full_text != index.context(passage.id, 1)
    assert local[0].page_content == index.context(passage.id, 1) and "w19 statins v0" in local[0].page_content
    assert local[0].metadata["parent"] == "long"
    alone = SemiretRetriever(searcher=index, k=1).invoke("statins")
    assert alone[0].page_content == passage.document.full_text
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as app_client:
        client = client_of(LocalClient(app_client.app), api_key="key")
        client.create_index("long", "bm25", chunk_words=8)
        client.add("long", PASSAGES)
        served = SemiretRetriever(searcher=client, index="long", k=1, search_kwargs={"context": 1}).invoke("statins")
        assert [(d.id, d.page_content) for d in served] == [(d.id, d.page_content) for d in local]
    for wrong, message in (({"contxt": 1}, "'contxt': not an argument of a search; it takes boost, candidates, "
                                           "context, diversity"),
                           ({"k": 2}, "'k': the retriever gives that itself"),
                           ({"context": -1}, "context is the number of passages .* got -1")):
        with pytest.raises(SemiretError, match=message):
            SemiretRetriever.from_index(tmp_path / "idx", search_kwargs=wrong)


def test_without_langchain_importing_the_adapter_says_what_to_install(monkeypatch):
    import importlib
    import sys

    for name in [name for name in sys.modules if name.split(".")[0] == "langchain_core"]:
        monkeypatch.setitem(sys.modules, name, None)  # (importing it then fails, as where it is not installed)
    monkeypatch.delitem(sys.modules, "semiret.integrations.langchain")
    with pytest.raises(ImportError, match=r"pip install 'semiret\[langchain\]' \(or pip install langchain-core\)"
                       ) as missing:
        importlib.import_module("semiret.integrations.langchain")
    assert isinstance(missing.value, SemiretError) and missing.value.name.startswith("langchain_core")
