"""``semiret encode``: a corpus's or queries' vectors written as the ``vectors`` and ``sparse-vectors`` retrievers
and ``--query-vectors`` read them, so that encoding elsewhere then indexing gives the searches a model's index gives."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from semiret.cli import app
from semiret.models.encoders import load_encoder

from helpers import TINY_DOCS, write_jsonl

runner = CliRunner()
QUERIES = {"q1": "cats and dogs", "q2": "statins cancer risk"}


def invoke(*args, ok: bool = True):
    result = runner.invoke(app, [str(a) for a in args])
    assert (result.exit_code == 0) == ok, result.output + repr(result.exception)
    return result


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def hits(output: str) -> list[list[tuple[str, float]]]:
    return [[(hit["id"], hit["score"]) for hit in json.loads(line)["hits"]] for line in output.splitlines()]


def test_dense_vectors_encoded_then_indexed_search_as_the_models_own_index(tmp_path, corpus_jsonl, tiny_bert):
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": i, "text": t} for i, t in QUERIES.items()])
    invoke("encode", corpus_jsonl, "--model", tiny_bert, "--family", "dense", "-o", tmp_path / "docs.jsonl",
           "--batch-size", "4")
    invoke("encode", queries, "--queries", "--model", tiny_bert, "--family", "dense", "-o", tmp_path / "q.jsonl")
    written = lines(tmp_path / "docs.jsonl")
    assert [record["_id"] for record in written] == [d.id for d in TINY_DOCS]
    assert written[0]["title"] == TINY_DOCS[0].title and len(written[0]["vector"]) == 32
    assert [record["_id"] for record in lines(tmp_path / "q.jsonl")] == list(QUERIES)
    invoke("index", "--data", tmp_path / "docs.jsonl", "--out", tmp_path / "vectors", "-r", "vectors",
           "--similarity", "dot")  # (the tiny model does not normalise its vectors: its index ranks by dot products)
    invoke("index", "--data", corpus_jsonl, "--out", tmp_path / "dense", "-r", "dense", "--model", tiny_bert,
           "--precision", "float32")
    from_vectors = hits(invoke("search", "--index", tmp_path / "vectors", "--query-vectors", tmp_path / "q.jsonl",
                               "-k", "3", "--json").stdout)
    from_model = hits(invoke("search", "--index", tmp_path / "dense", "--queries", queries, "-k", "3",
                             "--json").stdout)
    assert [[i for i, _ in q] for q in from_vectors] == [[i for i, _ in q] for q in from_model]
    np.testing.assert_allclose([s for q in from_vectors for _, s in q], [s for q in from_model for _, s in q],
                               rtol=1e-5)


def test_sparse_vectors_are_token_weights_of_the_models_vectors(tmp_path, corpus_jsonl, tiny_bert):
    invoke("encode", corpus_jsonl, "--model", tiny_bert, "--family", "splade", "-o", tmp_path / "docs.jsonl")
    written = lines(tmp_path / "docs.jsonl")
    encoder = load_encoder(str(tiny_bert), "splade")
    expected = encoder.encode_document([d.full_text for d in TINY_DOCS], show_progress=False)
    ids, values = expected.row(1)
    tokens = encoder.tokenizer.convert_ids_to_tokens(ids.tolist())
    assert written[1]["vector"].keys() == set(tokens)
    np.testing.assert_allclose([written[1]["vector"][t] for t in tokens], values, rtol=1e-6)
    assert list(written[1]["vector"].values()) == sorted(written[1]["vector"].values(), reverse=True)
    invoke("index", "--data", tmp_path / "docs.jsonl", "--out", tmp_path / "sparse", "-r", "sparse-vectors")


def test_an_inference_free_models_queries_are_not_its_to_encode(tmp_path):
    queries = write_jsonl(tmp_path / "queries.jsonl", [{"_id": "q1", "text": "statins"}])
    refused = invoke("encode", queries, "--queries", "--model", "inference-free-scifact", ok=False)
    assert "inference-free model" in refused.output and "IDF" in refused.output
