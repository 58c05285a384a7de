"""semiret as a LlamaIndex retriever, over an index in this process and over a server; LlamaIndex's documents and
nodes indexed by semiret."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import zlib

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import Document as LlamaDocument
from llama_index.core.schema import ImageNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters
from llama_index.core.vector_stores.utils import build_metadata_filter_fn  # (its own vector store's filters)

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.integrations.llamaindex import SemiretRetriever, semiret_documents, semiret_filter
from semiret.search import BM25Retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of

TEXTS = ["statins lower cholesterol: a study", "aspirin and heart attacks, a study", "a study of statins and the heart",
         "sleep and memory, a study", "heart failure study of statins", "a study of diet"]
METADATA = [{"kind": "even", "year": 2018, "tags": ["drug", "lipid"]}, {"kind": "odd", "year": 2019, "tags": ["drug"]},
            {"kind": "even", "year": 2020, "tags": ["drug", "heart"]}, {"kind": "odd", "year": 2021, "tags": []},
            {"kind": "even", "year": 2022, "tags": ["heart"]}, None]  # (the last has no fields: != and nin pass it)
DOCS = [Document(f"d{i}", text, title=f"Title {i}", metadata=metadata)
        for i, (text, metadata) in enumerate(zip(TEXTS, METADATA))]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BM25Retriever.build(DOCS, tmp_path_factory.mktemp("llamaindex") / "idx")


def test_an_index_answers_llamaindex_nodes_as_its_search(index):
    retriever = SemiretRetriever.from_index(index.index.path, k=2, filter={"kind": "even"})
    found = retriever.retrieve("statins heart")
    expected = index.search("statins heart", k=2, filter={"kind": "even"})
    assert [n.node_id for n in found] == [h.id for h in expected] and len(found) == 2
    assert [n.score for n in found] == pytest.approx([h.score for h in expected])
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in found)
    first = DOCS[int(found[0].node_id[1:])]
    assert found[0].node.text == first.full_text and found[0].node.metadata == first.metadata
    assert found[0].node.metadata["kind"] == "even"
    unfiltered = SemiretRetriever(index, k=3).retrieve(QueryBundle("statins heart"))  # (a bundle, as engines give)
    assert [(n.node_id, n.score) for n in unfiltered] == [(h.id, pytest.approx(h.score))
                                                          for h in index.search("statins heart", k=3)]
    grouped = SemiretRetriever(index, k=2, search_kwargs={"group_by": "kind"}).retrieve("heart")
    assert {n.node.metadata["kind"] for n in grouped} == {"odd", "even"}
    assert asyncio.run(retriever.aretrieve("statins heart")) == found
    top = SemiretRetriever.from_index(index.index.path, similarity_top_k=3)  # LlamaIndex's name for k
    assert top.k == 3 and len(top.retrieve("statins heart")) == 3
    with pytest.raises(SemiretError, match="give one"):
        SemiretRetriever(index, k=2, similarity_top_k=3)


@pytest.mark.parametrize("filters", [
    MetadataFilters(filters=[MetadataFilter(key="kind", value="odd")]),
    MetadataFilters(filters=[MetadataFilter(key="kind", value="odd", operator=FilterOperator.NE)]),
    MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.GTE),
                             MetadataFilter(key="year", value=2022, operator=FilterOperator.LT)]),
    MetadataFilters(filters=[MetadataFilter(key="year", value=2019, operator=FilterOperator.LTE),
                             MetadataFilter(key="year", value=2021, operator=FilterOperator.GT)],
                    condition=FilterCondition.OR),
    MetadataFilters(filters=[MetadataFilter(key="year", value=[2018, 2021], operator=FilterOperator.IN)]),
    MetadataFilters(filters=[MetadataFilter(key="year", value=[2018, 2021], operator=FilterOperator.NIN)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value="drug", operator=FilterOperator.CONTAINS)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value=["lipid", "heart"], operator=FilterOperator.ANY)]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value=["drug", "heart"], operator=FilterOperator.ALL)]),
    MetadataFilters(filters=[MetadataFilter(key="kind", value="odd"),
                             MetadataFilter(key="year", value=2022, operator=FilterOperator.GTE)],
                    condition=FilterCondition.NOT),
], ids=["eq", "ne", "range", "or", "in", "nin", "contains", "any", "all", "not"])
def test_llamaindex_filters_pass_the_documents_llamaindex_would(index, filters):
    passes = build_metadata_filter_fn(lambda doc_id: DOCS[int(doc_id[1:])].metadata or {}, filters)
    wanted = {d.id for d in DOCS if passes(d.id)}  # LlamaIndex's own vector store's reading of the filters
    found = SemiretRetriever(index, k=len(DOCS), filter=filters).retrieve("study")  # ("study": every document)
    assert {n.node_id for n in found} == wanted and 0 < len(wanted) < len(DOCS)


def test_nested_llamaindex_filters_and_those_semiret_lacks(index):
    nested = MetadataFilters(filters=[
        MetadataFilter(key="kind", value="even"),
        MetadataFilters(filters=[MetadataFilter(key="year", value=2018), MetadataFilter(key="year", value=2022)],
                        condition=FilterCondition.OR)])
    assert semiret_filter(nested) == {"$and": [{"kind": "even"}, {"$or": [{"year": 2018}, {"year": 2022}]}]}
    assert {n.node_id for n in SemiretRetriever(index, k=6, filter=nested).retrieve("study")} == {"d0", "d4"}
    assert semiret_filter(MetadataFilters(filters=[])) is None
    with pytest.raises(SemiretError, match="on 'kind' uses 'text_match', which semiret's filters lack"):
        SemiretRetriever(index, filter=MetadataFilters(filters=[
            MetadataFilter(key="kind", value="od", operator=FilterOperator.TEXT_MATCH)]))
    with pytest.raises(SemiretError, match="on 'year' compares with '==' to a list"):
        semiret_filter(MetadataFilters(filters=[MetadataFilter(key="year", value=[2018, 2019])]))


def test_a_served_index_answers_as_the_local_one(tmp_path, index):
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as app_client:
        client = client_of(LocalClient(app_client.app), api_key="key")
        client.create_index("notes", "bm25")
        client.add("notes", DOCS)
        filters = MetadataFilters(filters=[MetadataFilter(key="year", value=2019, operator=FilterOperator.GTE)])
        served = SemiretRetriever(client, index="notes", k=3, filter=filters)
        local = SemiretRetriever(index, k=3, filter=filters)
        as_served = [(n.node_id, n.node.text, n.node.metadata, n.score) for n in served.retrieve("statins heart")]
        assert as_served == [(n.node_id, n.node.text, n.node.metadata, pytest.approx(n.score))
                             for n in local.retrieve("statins heart")]
        assert len(as_served) == 3 and all(year >= 2019 for _, _, m, _ in as_served for year in [m["year"]])
        assert [n.node_id for n in asyncio.run(served.aretrieve("statins heart"))] == [n[0] for n in as_served]
    by_url = SemiretRetriever.from_server("http://localhost:8000", "notes", api_key="key", k=2, filter=filters)
    assert (by_url.index, by_url.k, by_url.filter) == ("notes", 2, {"year": {"gte": 2019}})  # (nothing sent yet)


class WordsEmbedding(BaseEmbedding):
    """A deterministic toy embedding model: a text's vector counts its words, each hashed to one of 64 dimensions."""

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * 64
        for word in text.lower().split():
            vector[zlib.crc32(word.encode()) % 64] += 1.0
        return vector

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


def test_an_index_of_vectors_is_searched_with_the_embed_model_that_made_them(tmp_path):
    from semiret.search import VectorsRetriever

    model = WordsEmbedding()
    nodes = [TextNode(id_=f"v{n}", text=text, embedding=model.get_text_embedding(text))
             for n, text in enumerate(["statins lower cholesterol", "sleep and memory", "aspirin and the heart"])]
    documents = semiret_documents(nodes)  # (each node's embedding: the vector indexed)
    assert documents[1].vector.tolist() == nodes[1].embedding
    index = VectorsRetriever.build(documents, tmp_path / "vectors")
    retriever = SemiretRetriever.from_index(tmp_path / "vectors", embed_model=model, k=1)
    assert [(n.node_id, n.node.text) for n in retriever.retrieve("sleep and memory")] == [("v1", "sleep and memory")]
    given = QueryBundle("anything", embedding=nodes[2].embedding)  # (a bundle's own embedding, searched as it is)
    assert retriever.retrieve(given)[0].node_id == "v2"
    with pytest.raises(SemiretError, match="give embed_model, the LlamaIndex model"):
        SemiretRetriever(index)
    with pytest.raises(SemiretError, match="embed_model is a LlamaIndex embedding model .* got str"):
        SemiretRetriever(index, embed_model="model")


def test_llamaindex_documents_are_indexed_by_their_ids(tmp_path, index):
    loaded = [LlamaDocument(id_="a", text="statins and the heart", metadata={"file_path": "a.txt", "page": 1}),
              LlamaDocument(text="sleep and memory", metadata={"file_path": "b.txt"})]
    documents = semiret_documents(loaded)
    assert [(d.id, d.text, d.title, d.metadata, d.vector) for d in documents] == [
        ("a", "statins and the heart", "", {"file_path": "a.txt", "page": 1}, None),
        (loaded[1].id_, "sleep and memory", "", {"file_path": "b.txt"}, None)]  # (LlamaIndex's own random id)
    built = BM25Retriever.build(documents, tmp_path / "idx")
    assert SemiretRetriever(built, k=1).retrieve("memory")[0].node_id == loaded[1].id_
    pages = [TextNode(text=f"page {n}", metadata={"file_path": "a.pdf", "page": n}) for n in range(3)]
    split = semiret_documents([*pages, TextNode(text="b", metadata={"file_path": "b.txt"})], id_key="file_path")
    assert [d.id for d in split] == ["a.pdf#0", "a.pdf#1", "a.pdf#2", "b.txt"]
    assert split[1].metadata == {"file_path": "a.pdf", "page": 1}  # (the path kept: a filter reads it)
    # both ways: the nodes a search gives, indexed again, are the documents that were searched
    found = [n.node for n in SemiretRetriever(index, k=6).retrieve("study")]
    assert [(d.id, d.text, d.metadata) for d in semiret_documents(found)] == [
        (d.id, d.full_text, d.metadata) for d in (DOCS[int(node.node_id[1:])] for node in found)]


def test_bad_input_is_a_clear_error_naming_the_item(tmp_path, index):
    with pytest.raises(SemiretError, match="item 1 is a str, not a LlamaIndex node"):
        semiret_documents([TextNode(text="a"), "b"])
    with pytest.raises(SemiretError, match=r"item 0 is a NodeWithScore.*give its \.node"):
        semiret_documents([NodeWithScore(node=TextNode(text="a"), score=1.0)])
    with pytest.raises(SemiretError, match="node 1 \\('y'\\) has no metadata 'file_path' to take its id from"):
        semiret_documents([TextNode(id_="x", text="a", metadata={"file_path": "a"}), TextNode(id_="y", text="b")],
                          id_key="file_path")
    with pytest.raises(SemiretError, match="node 0 \\('img'\\, a ImageNode\\) has no text, only media"):
        semiret_documents([ImageNode(id_="img", image="aGVsbG8=")])
    with pytest.raises(SemiretError, match="give index"):
        SemiretRetriever(client_of(None, api_key="key"))
    with pytest.raises(SemiretError, match="leave index out"):
        SemiretRetriever(index, index="notes")
    with pytest.raises(SemiretError, match="Retriever or Client, got str"):
        SemiretRetriever("idx")
    with pytest.raises(SemiretError, match="k is the number of nodes a query retrieves, at least 1, got 0"):
        SemiretRetriever(index, k=0)
    bare = BM25Retriever.build(DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no text to give LlamaIndex"):
        SemiretRetriever(bare)


def test_retrieving_and_indexing_download_nothing(tmp_path, index):
    """No socket is opened to anywhere, and neither NLTK (whose data LlamaIndex downloads when its bundled copy is
    missing) nor tiktoken (whose encodings it may fetch) is imported."""
    script = textwrap.dedent(f"""
        import socket, sys

        def refuse(event, args):
            if event in ("socket.connect", "socket.getaddrinfo", "urllib.Request"):
                raise OSError(f"no network in this test: {{event}} {{args!r}}")
        sys.addaudithook(refuse)
        from llama_index.core.schema import Document
        from semiret.integrations.llamaindex import SemiretRetriever, semiret_documents
        from semiret.search import BM25Retriever

        built = BM25Retriever.build(semiret_documents([Document(id_="a", text="statins and the heart")]),
                                    {str(tmp_path / "offline")!r})
        assert SemiretRetriever(built).retrieve("heart")[0].node_id == "a"
        print(sorted(m for m in ("nltk", "tiktoken") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"



def test_a_node_comes_with_its_context_from_an_index_and_from_a_server(tmp_path):
    """``search_kwargs={"context": N}``: each node's text is its passage with N passages around it, as
    ``Retriever.context`` gives it, in this process as over a server; a search argument neither takes is an error
    naming those it takes."""
    from semiret.data.chunking import Chunking

    documents = [Document("long", " ".join(f"w{n}" for n in range(20)) + " statins " +
                          " ".join(f"v{n}" for n in range(20)), title="Long"), Document("short", "aspirin")]
    index = BM25Retriever.build(documents, tmp_path / "idx", chunking=Chunking(8))
    local = SemiretRetriever.from_index(tmp_path / "idx", k=1, search_kwargs={"context": 2}).retrieve("statins")
    passage = index.search("statins", k=1)[0]
    assert [n.node_id for n in local] == [passage.id] and local[0].node.text == index.context(passage.id, 2)
    assert local[0].node.text != passage.document.full_text and local[0].node.metadata["parent"] == "long"
    assert SemiretRetriever(index, k=1).retrieve("statins")[0].node.text == passage.document.full_text
    settings = ServeSettings({}, api_key="key", write_process=False, data_dir=str(tmp_path / "data"))
    with LocalClient(create_app(settings)) as app_client:
        client = client_of(LocalClient(app_client.app), api_key="key")
        client.create_index("long", "bm25", chunk_words=8)
        client.add("long", documents)
        served = SemiretRetriever(client, index="long", k=1, search_kwargs={"context": 2}).retrieve("statins")
        assert [(n.node_id, n.node.text) for n in served] == [(n.node_id, n.node.text) for n in local]
    with pytest.raises(SemiretError, match="'window': not an argument of a search; it takes boost, candidates, "
                                           "context, diversity"):
        SemiretRetriever.from_index(tmp_path / "idx", search_kwargs={"window": 1})
    with pytest.raises(SemiretError, match="search_kwargs is a dict"):
        SemiretRetriever(index, search_kwargs=["context"])


def test_without_llamaindex_importing_the_adapter_says_what_to_install(monkeypatch):
    import importlib

    for name in [name for name in sys.modules if name.split(".")[0] == "llama_index"]:
        monkeypatch.setitem(sys.modules, name, None)  # (importing it then fails, as where it is not installed)
    monkeypatch.delitem(sys.modules, "semiret.integrations.llamaindex")
    with pytest.raises(ImportError, match=r"pip install 'semiret\[llamaindex\]' \(or pip install llama-index-core\)"
                       ) as missing:
        importlib.import_module("semiret.integrations.llamaindex")
    assert isinstance(missing.value, SemiretError) and missing.value.name.startswith("llama_index")
