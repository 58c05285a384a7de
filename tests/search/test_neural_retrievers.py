"""The neural retrievers (splade, inference-free, dense) end to end on tiny random models."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import MSMARCO_IDF, TINY_QUERIES
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.evaluation.evaluate import evaluate
from semiret.search import DenseRetriever, InferenceFreeRetriever, SpladeRetriever, open_retriever


def test_splade_build_search_add_delete(tmp_path, tiny_docs, tiny_bert):
    retriever = SpladeRetriever.build(tiny_docs, tmp_path / "splade", model=str(tiny_bert))
    documents = retriever.document_side.encoder.encode_document([d.full_text for d in tiny_docs], show_progress=False)
    queries = retriever.document_side.encoder.encode_query(list(TINY_QUERIES.values()))
    scores = queries.to_dense() @ documents.to_dense().T
    hits = retriever.search(list(TINY_QUERIES.values()), k=3)
    for row, ids, got in zip(scores, hits.ids, hits.scores):
        np.testing.assert_allclose(got, np.sort(row)[::-1][:3], rtol=1e-5)
        assert ids[0] == tiny_docs[int(np.argmax(row))].id
    reopened = open_retriever(tmp_path / "splade")
    assert isinstance(reopened, SpladeRetriever)
    reopened.add([Document("d7", tiny_docs[0].text, tiny_docs[0].title)])
    assert "d7" in reopened.search([tiny_docs[0].full_text], k=2).ids[0]
    reopened.delete(["d7"])
    assert "d7" not in reopened.search([tiny_docs[0].full_text], k=7).ids[0]


def test_pruning_and_quantization_shape_the_index(tmp_path, tiny_docs, tiny_bert):
    full = SpladeRetriever.build(tiny_docs, tmp_path / "full", model=str(tiny_bert))
    small = SpladeRetriever.build(tiny_docs, tmp_path / "small", model=str(tiny_bert), top_k=5, quantize_bits=8)
    assert small.index.average_postings_per_document() == 5
    assert small.index.meta["quantization"]["bits"] == 8
    assert small.index.size_on_disk() < full.index.size_on_disk()
    assert small.index.meta["analyzer"]["top_k"] == 5
    small.add([Document("d7", "more cats")])  # later documents are pruned the same way
    assert small.index.average_postings_per_document() == 5


def test_inference_free_reuses_splade_documents(tmp_path, tiny_docs, tiny_bert):
    SpladeRetriever.build(tiny_docs, tmp_path / "idx", model=str(tiny_bert))
    corpus_idf = open_retriever(tmp_path / "idx", "inference-free")
    assert isinstance(corpus_idf, InferenceFreeRetriever) and corpus_idf.document_side._encoder is None
    query = corpus_idf.encode_query("cats and dogs")
    np.testing.assert_allclose(query.weights, corpus_idf.index.idf()[query.terms])
    table = open_retriever(tmp_path / "idx", "inference-free", idf=str(MSMARCO_IDF))
    table.add([Document("d7", "cats and dogs again")])  # the document side loads the encoder when needed
    documents = table.document_side.encoder.encode_document([d.full_text for d in tiny_docs] + ["cats and dogs again"],
                                                       show_progress=False).to_dense()
    ids = [d.id for d in tiny_docs] + ["d7"]
    # words the random model's document vectors hold ("theodore" is the added d7's strongest), so that the hits
    # compared are not empty: the documents' own words ("cats and dogs") are rarely among them
    for text in ("theodore designation", "statins cancer risk"):
        query = table.encode_query(text)
        scores = documents[:, query.terms] @ query.weights
        hits = table.search([text], k=7)
        assert hits.ids[0] == [ids[i] for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        assert len(hits.ids[0]) > 1
    assert table.search(["theodore"], k=1).ids == [["d7"]]  # the added document, encoded on adding
    built = InferenceFreeRetriever.build(tiny_docs, tmp_path / "if", model=str(tiny_bert))
    assert built.index.meta["retriever"] == "inference-free"


@pytest.mark.parametrize("ann", ["exact", "hnsw", "tree"])
def test_dense_retriever(tmp_path, tiny_docs, tiny_bert, ann):
    retriever = DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(tiny_bert), ann=ann)
    vectors = retriever.document_side.encoder.encode_document([d.full_text for d in tiny_docs], show_progress=False)
    hits = retriever.search([tiny_docs[2].full_text], k=1)
    assert hits.ids == [[tiny_docs[int(np.argmax(vectors @ vectors[2]))].id]]
    reopened = open_retriever(tmp_path / "dense", ef_search=32, beam=2)
    assert isinstance(reopened, DenseRetriever) and reopened.index.meta["ann"] == ann
    reopened.add([Document("d7", "a brand new text")])
    assert reopened.search(["a brand new text"], k=1).ids == [["d7"]]
    assert reopened.search([""], k=3).ids == [[]]


def test_a_dense_index_whose_encoder_was_replaced_by_another_dimension_is_refused(tmp_path, tiny_docs, tiny_bert):
    import shutil

    import torch
    from transformers import BertConfig, BertForMaskedLM

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(model))
    before = sorted((tmp_path / "dense").rglob("*"))
    torch.manual_seed(0)
    BertForMaskedLM(BertConfig(hidden_size=48, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=64)).save_pretrained(model)
    reopened = open_retriever(tmp_path / "dense")
    with pytest.raises(SemiretError, match="holds 32-dimensional vectors but its encoder .* gives 48"):
        reopened.search("a query")
    with pytest.raises(SemiretError, match="holds 32-dimensional"):
        reopened.add([Document("d9", "new text")])
    assert sorted((tmp_path / "dense").rglob("*")) == before


def _retrain_in_place(model_dir) -> None:
    """Other weights of the same shapes in the same folder: what a second training run into it leaves."""
    import torch
    from transformers import BertForMaskedLM

    model = BertForMaskedLM.from_pretrained(model_dir)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    model.save_pretrained(model_dir)


@pytest.mark.parametrize("retriever", [DenseRetriever, SpladeRetriever, InferenceFreeRetriever])
def test_an_index_whose_model_was_retrained_in_place_is_refused(tmp_path, tiny_docs, tiny_bert, retriever):
    """The index records its model's weights: queries (or new documents) of the retrained model are refused
    instead of being matched against vectors of the old one, and the index is left as it was."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    retriever.build(tiny_docs, tmp_path / "index", model=str(model))
    open_retriever(tmp_path / "index").add([Document("d8", "the same weights: added")])
    before = {f: f.read_bytes() for f in sorted((tmp_path / "index").rglob("*")) if f.is_file()}
    _retrain_in_place(model)
    reopened = open_retriever(tmp_path / "index")
    with pytest.raises(SemiretError, match="index was built with other weights than .*model holds now"):
        reopened.add([Document("d9", "new text")])
    if retriever is not InferenceFreeRetriever:  # its queries need no model
        with pytest.raises(SemiretError, match="rebuild the index with this model"):
            open_retriever(tmp_path / "index").search("a query")
    assert {f: f.read_bytes() for f in sorted((tmp_path / "index").rglob("*")) if f.is_file()} == before


def test_an_inference_free_index_refuses_query_weights_replaced_in_its_model(tmp_path, tiny_docs, tiny_bert):
    """Its queries read the model's idf.json as it is now and load no weights: a model retrained in place weighted
    queries for the old documents' vectors without a word. The table is recorded by its hash."""
    import json
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    (model / "idf.json").write_text(json.dumps({"cats": 2.0, "dogs": 1.5}))
    InferenceFreeRetriever.build(tiny_docs, tmp_path / "index", model=str(model))
    open_retriever(tmp_path / "index").search("cats")  # the table it was built with: searched
    (model / "idf.json").write_text(json.dumps({"cats": 0.5, "dogs": 3.0}))
    with pytest.raises(SemiretError, match="whose query weights \\(idf.json\\) are not those it held then"):
        open_retriever(tmp_path / "index").search("cats")
    assert open_retriever(tmp_path / "index", idf="msmarco").search("cats") is not None  # a table given: no check
    shutil.rmtree(model)
    with pytest.raises(SemiretError, match="idf.json\\) are not there now \\(moved or deleted\\?\\)"):
        open_retriever(tmp_path / "index").search("cats")


def test_the_weights_fingerprint_is_that_of_the_saved_fp16_checkpoint(tmp_path, tiny_bert):
    """A model indexed in memory after training and the same model loaded from its fp16 checkpoint agree; any
    change of a weight beyond float16's rounding does not."""
    import torch

    from semiret.models.base import weights_fingerprint
    from semiret.models.encoders import load_encoder

    encoder = load_encoder(str(tiny_bert), "dense")
    with torch.no_grad():
        next(encoder.parameters()).mul_(1.0 + 1e-5)  # float32 weights no checkpoint of float16 can hold exactly
    fingerprint = weights_fingerprint(encoder)
    assert weights_fingerprint(load_encoder(str(encoder.save(tmp_path / "saved", fp16=True)))) == fingerprint
    with torch.no_grad():
        next(encoder.parameters())[0, 0] += 0.01
    assert weights_fingerprint(encoder) != fingerprint


def test_options_are_checked(tmp_path, tiny_docs, tiny_bert):
    with pytest.raises(SemiretError, match="ann do not apply to retriever 'splade'"):
        SpladeRetriever.build(tiny_docs, tmp_path / "x", model=str(tiny_bert), ann="hnsw")
    with pytest.raises(SemiretError, match="unknown model"):
        SpladeRetriever.build(tiny_docs, tmp_path / "y", model="no-such-model")
    SpladeRetriever.build(tiny_docs, tmp_path / "z", model=str(tiny_bert))
    with pytest.raises(SemiretError, match="is an 'impact' index built for splade; dense needs one of"):
        DenseRetriever.from_index(open_retriever(tmp_path / "z").index)


def test_cli_eval_and_search_with_a_model(tmp_path, beir_dir, tiny_bert):
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--data", str(beir_dir), "-r", "splade", "--model", str(tiny_bert),
                                 "--index", str(tmp_path / "idx"), "--batch-size", "4", "--top-k", "50", "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures.keys() == evaluate(beir_dir, "bm25").keys()
    result = runner.invoke(app, ["search", "--index", str(tmp_path / "idx"), "-r", "inference-free", "--idf",
                                 "msmarco", "--json", "-k", "2", "cats"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[0])["query"] == "cats"  # (random model: hits may be none)
    result = runner.invoke(app, ["index", "--data", str(beir_dir), "--out", str(tmp_path / "dense"), "-r", "dense",
                                 "--model", str(tiny_bert), "--ann", "ivf"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["info", str(tmp_path / "dense")])
    assert '"ann": "ivf"' in result.output
    result = runner.invoke(app, ["delete", "--index", str(tmp_path / "dense"), "d1"])
    assert result.exit_code == 0 and "deleted 1" in result.output


def test_min_idf_drops_query_stopwords(tmp_path, tiny_docs, tiny_bert):
    SpladeRetriever.build(tiny_docs, tmp_path / "idx", model=str(tiny_bert))
    every = open_retriever(tmp_path / "idx", "inference-free", idf=str(MSMARCO_IDF), min_idf=0)
    default = open_retriever(tmp_path / "idx", "inference-free", idf=str(MSMARCO_IDF))
    text = "the risk of cancer and statins"
    full, kept = every.encode_query(text), default.encode_query(text)
    dropped = {every.query_side.vocabulary.token(int(t)) for t in np.setdiff1d(full.terms, kept.terms)}
    assert default.query_side.min_idf == 1.0 and dropped == {"the", "of", "and"}
    assert np.all(kept.weights >= 1.0) and np.all(full.weights[np.isin(full.terms, kept.terms)] == kept.weights)
    documents = default.document_side.encoder.encode_document([d.full_text for d in tiny_docs], show_progress=False)
    scores = documents.to_dense()[:, kept.terms] @ kept.weights
    hits = default.search([text], k=len(tiny_docs))
    assert hits.ids[0] == [tiny_docs[i].id for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
    with pytest.raises(SemiretError, match="min_idf"):
        open_retriever(tmp_path / "idx", "inference-free", min_idf=-1.0)
    result = CliRunner().invoke(app, ["search", "--index", str(tmp_path / "idx"), "-r", "inference-free", "--idf",
                                      "msmarco", "--min-idf", "0", "--json", "the"])
    assert result.exit_code == 0, result.output


@pytest.mark.integration  # encodes with the packaged inference-free-scifact
def test_inference_free_defaults_to_the_packaged_model(tmp_path, tiny_docs):
    from semiret.models.checkpoints import INFERENCE_FREE

    retriever = InferenceFreeRetriever.build(tiny_docs, tmp_path / "idx")
    assert retriever.index.meta["analyzer"]["model"] == INFERENCE_FREE.default  # by name: the index outlives the venv
    assert retriever.query_side.idf_source.endswith("idf.json")  # the table the model was trained with
    assert retriever.search(["statins and cancer risk"], k=1).ids[0][0] == "d3"


def test_a_dense_index_reads_queries_and_documents_with_its_model_s_prompts(tmp_path, tiny_docs, tiny_bert):
    """An E5-like model's prompts (its sentence-transformers config) are put before the documents indexed and added and
    before the queries; the index records them, so that its documents and queries are read alike whatever the model
    folder says later, and an index made before prompts were read keeps reading without them."""
    from sentence_transformers import SentenceTransformer, models

    from semiret.models.dense import DenseEncoder

    transformer = models.Transformer(str(tiny_bert), max_seq_length=32)
    folder = tmp_path / "e5"
    SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_embedding_dimension(), "mean")],
                        similarity_fn_name="cosine").save(str(folder))
    config = folder / "config_sentence_transformers.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "prompts": {"query": "query: ",
                                                                                  "passage": "passage: "}}))
    plain = DenseEncoder.from_pretrained(str(folder), precision="float32", query_prompt="", document_prompt="")
    DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(folder), precision="float32")
    reopened = open_retriever(tmp_path / "dense")
    recorded = reopened.index.meta["analyzer"]
    assert (recorded["query_prompt"], recorded["document_prompt"]) == ("query: ", "passage: ")
    reopened.add([Document("new", "a new document about cats")])
    for doc in [*tiny_docs, Document("new", "a new document about cats")]:
        np.testing.assert_allclose(reopened.index.get_vector(doc.id), plain.encode_document(
            "passage: " + doc.full_text, show_progress=False), atol=1e-5)
    np.testing.assert_allclose(reopened.encode_query("cats"), plain.encode_query("query: cats"), atol=1e-5)

    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d.to_record()) + "\n" for d in tiny_docs))
    built = CliRunner().invoke(app, ["index", "--data", str(tmp_path / "corpus.jsonl"), "--out", str(tmp_path / "none"),
                                "-r", "dense", "--model", str(folder), "--query-prompt", "", "--document-prompt", "",
                                "--precision", "float32"])
    assert built.exit_code == 0, built.output
    unprompted = open_retriever(tmp_path / "none")
    np.testing.assert_allclose(unprompted.encode_query("cats"), plain.encode_query("cats"), atol=1e-5)
    assert recorded["normalize"] is True  # its similarity: cosine
    meta = tmp_path / "dense" / "meta.json"  # as an index from before prompts and similarities were read records it
    old = json.loads(meta.read_text())
    for key in ("query_prompt", "document_prompt", "normalize"):
        del old["analyzer"][key]
    meta.write_text(json.dumps(old))
    # read as then: no prompts, and no normalisation without a Normalize module, whatever the folder's config says
    unnormalised = DenseEncoder.from_pretrained(str(folder), precision="float32", query_prompt="", document_prompt="",
                                                normalize=False)
    np.testing.assert_allclose(open_retriever(tmp_path / "dense").encode_query("cats"),
                               unnormalised.encode_query("cats"), atol=1e-5)


def test_a_dense_index_keeps_the_first_dimensions_of_its_embeddings(tmp_path, tiny_docs, tiny_bert):
    """truncate_dim (sentence-transformers' Matryoshka truncation): the first dimensions, normalised again, of
    documents and queries alike, recorded so that the index reopened reads queries and added documents so."""
    from semiret.models.encoders import load_encoder

    truncated = DenseRetriever.build(tiny_docs, tmp_path / "dense", model=str(tiny_bert), truncate_dim=8)
    assert truncated.index.meta["dim"] == 8 and truncated.index.meta["analyzer"]["truncate_dim"] == 8
    full = load_encoder(str(tiny_bert), "dense").encode_query(["cats and dogs"])[0]
    reopened = open_retriever(tmp_path / "dense")
    np.testing.assert_allclose(reopened.encode_query("cats and dogs"), full[:8], atol=1e-5)  # (not normalised)
    unit = load_encoder(str(tiny_bert), "dense", normalize=True, truncate_dim=8).encode_query(["cats and dogs"])[0]
    np.testing.assert_allclose(unit, full[:8] / np.linalg.norm(full[:8]), atol=1e-5)  # cut, then normalised
    reopened.add([Document("fresh", "cats and dogs")])
    assert reopened.search("cats and dogs", k=1)[0].id == "fresh"
    for bad in (0, 33):
        with pytest.raises(SemiretError, match="truncate_dim .*from 1 to 32"):
            DenseRetriever.build(tiny_docs, tmp_path / f"bad{bad}", model=str(tiny_bert), truncate_dim=bad)
