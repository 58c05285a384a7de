"""Late interaction (``LateInteraction``, ``Reranking(kind="late-interaction")``, ``--colbert``): MaxSim computed by
hand over each checkpoint kind's token vectors (any encoder's; PyLate's with its projection, prefixes and query
expansion; Stanford ColBERT's with its markers and punctuation mask), the cache of documents' vectors, the kind told
from a checkpoint's files, and the second stage over a search, the command line and ``semiret eval``."""

from __future__ import annotations

import json
import string

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from semiret.cli import app
from semiret.errors import SemiretError
from semiret.models.late_interaction import LateInteraction, checkpoint_kind, maxsim
from semiret.search import BM25Retriever
from semiret.search.rerank import Reranking

from helpers import MAX_POSITIONS, TINY_DOCS, TOKENIZER_SOURCE, write_beir

QUERY = "statins and the heart"
TEXTS = ["Statins lower cholesterol, and the heart gains.", "garden birds in the morning", "cats chase dogs!"]
PROJECTED = 8


def _bert(directory, seed: int, vocab_size: int = 30522, prefix: str = ""):
    """A 2-layer, 32-wide BERT saved in ``directory`` (its weights' names under ``prefix``), with the tokenizer."""
    from transformers import BertConfig, BertModel

    from semiret.models.loading import load_tokenizer

    torch.manual_seed(seed)
    model = BertModel(BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=MAX_POSITIONS), add_pooling_layer=False)
    model.save_pretrained(directory)
    tokenizer = load_tokenizer(TOKENIZER_SOURCE)
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    directory = tmp_path_factory.mktemp("plain-encoder")
    model, tokenizer = _bert(directory, 0)
    tokenizer.save_pretrained(directory)
    return directory, model, tokenizer


@pytest.fixture(scope="module")
def pylate(tmp_path_factory):
    """A PyLate ColBERT folder: the encoder with ``[Q] ``/``[D] `` added to its tokenizer, a Dense module projecting
    32 -> 8, queries expanded to 10 tokens, documents cut at 12."""
    from safetensors.torch import save_file

    directory = tmp_path_factory.mktemp("pylate")
    model, tokenizer = _bert(directory, 1)
    tokenizer.add_tokens(["[Q] ", "[D] "])
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    (directory / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Dense", "type": "pylate.models.Dense.Dense"}]))
    (directory / "config_sentence_transformers.json").write_text(json.dumps({
        "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 10, "document_length": 12,
        "do_query_expansion": True, "attend_to_expansion_tokens": False, "skiplist_words": list("!,.")}))
    (directory / "1_Dense").mkdir()
    torch.manual_seed(2)
    linear = torch.randn(PROJECTED, 32)
    save_file({"linear.weight": linear}, str(directory / "1_Dense" / "model.safetensors"))
    return directory, model, tokenizer, linear


@pytest.fixture(scope="module")
def stanford(tmp_path_factory):
    """A Stanford ColBERT folder: HF_ColBERT's weights (``bert.`` prefixed) and ``linear.weight`` in one file, its
    ``artifact.metadata`` (queries of 9 tokens, documents of 11, punctuation masked)."""
    from safetensors.torch import load_file, save_file

    directory = tmp_path_factory.mktemp("stanford")
    model, tokenizer = _bert(directory, 3)
    tokenizer.save_pretrained(directory)
    weights = {f"bert.{key}": value for key, value in load_file(str(directory / "model.safetensors")).items()}
    torch.manual_seed(4)
    linear = torch.randn(PROJECTED, 32)
    save_file({**weights, "linear.weight": linear}, str(directory / "model.safetensors"))
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "architectures": ["HF_ColBERT"]}))
    (directory / "artifact.metadata").write_text(json.dumps({
        "query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 9, "doc_maxlen": 11,
        "mask_punctuation": True, "attend_to_mask_tokens": False, "dim": PROJECTED}))
    return directory, model, tokenizer, linear


def _vectors(model, tokenizer, ids: list[int], attended: list[int], linear=None) -> np.ndarray:
    """Unit token vectors of ``ids`` read by ``model`` (attending to ``attended``), projected by ``linear``."""
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids]), attention_mask=torch.tensor([attended])).last_hidden_state[0]
        if linear is not None:
            hidden = hidden @ linear.T
        return torch.nn.functional.normalize(hidden, dim=-1).numpy()


def _by_hand(query_vectors: np.ndarray, document_vectors: np.ndarray) -> float:
    return float(sum(max(float(q @ d) for d in document_vectors) for q in query_vectors))


def test_any_encoder_s_token_vectors_scored_by_maxsim(plain):
    directory, model, tokenizer = plain
    late = LateInteraction.from_pretrained(str(directory))
    assert checkpoint_kind(directory) == "encoder" and late.projections == [] and not late.markers
    query = _vectors(model, tokenizer, tokenizer(QUERY)["input_ids"], [1] * len(tokenizer(QUERY)["input_ids"]))
    expected = []
    for text in TEXTS:
        ids = tokenizer(text)["input_ids"]
        expected.append(_by_hand(query, _vectors(model, tokenizer, ids, [1] * len(ids))))
    np.testing.assert_allclose(late.score(QUERY, TEXTS, batch_size=2), expected, rtol=1e-4)
    assert maxsim(query, np.zeros((0, 32), np.float32)) == 0.0


def test_a_pylate_checkpoint_reads_its_prefixes_expansion_projection_and_skiplist(pylate):
    directory, model, tokenizer, linear = pylate
    late = LateInteraction.from_pretrained(str(directory))
    assert checkpoint_kind(directory) == "pylate" and late.config.query_length == 10
    q_marker, d_marker = tokenizer.convert_tokens_to_ids("[Q] "), tokenizer.convert_tokens_to_ids("[D] ")
    words = tokenizer(QUERY)["input_ids"]  # [CLS] ... [SEP]
    query_ids = [words[0], q_marker, *words[1:]]
    query_ids += [tokenizer.mask_token_id] * (10 - len(query_ids))  # expanded with [MASK], not attended to
    attended = [1] * (len(words) + 1) + [0] * (10 - len(words) - 1)
    query = _vectors(model, tokenizer, query_ids, attended, linear)
    encoded = late.encode_query([QUERY])[0]
    assert encoded.shape == (10, PROJECTED)  # every position counts, the expansion's too
    np.testing.assert_allclose(encoded, query, atol=1e-5)
    expected, lengths = [], []
    for text in TEXTS:
        words = tokenizer(text, truncation=True, max_length=11)["input_ids"]  # 12 with the marker
        ids = [words[0], d_marker, *words[1:]]
        vectors = _vectors(model, tokenizer, ids, [1] * len(ids), linear)
        kept = [i for i, token in enumerate(ids) if tokenizer.convert_ids_to_tokens(token) not in ("!", ",", ".")]
        expected.append(_by_hand(query, vectors[kept]))
        lengths.append(len(kept))
    assert [len(v) for v in late.encode_document(TEXTS)] == lengths and lengths[0] == 11  # the first's "," skipped
    np.testing.assert_allclose(late.score(QUERY, TEXTS), expected, rtol=1e-4)


def test_a_stanford_colbert_checkpoint_reads_its_markers_and_masks_punctuation(stanford):
    directory, model, tokenizer, linear = stanford
    late = LateInteraction.from_pretrained(str(directory))
    assert checkpoint_kind(directory) == "colbert" and late.config.skiplist == list(string.punctuation)
    assert late.markers == {"query": tokenizer.convert_tokens_to_ids("[unused0]"),
                            "document": tokenizer.convert_tokens_to_ids("[unused1]")}
    words = tokenizer(QUERY)["input_ids"]
    query_ids = [words[0], late.markers["query"], *words[1:]]
    query_ids += [tokenizer.mask_token_id] * (9 - len(query_ids))
    query = _vectors(model, tokenizer, query_ids, [1] * (len(words) + 1) + [0] * (9 - len(words) - 1), linear)
    text = TEXTS[2]  # "cats chase dogs!"
    ids = [tokenizer(text)["input_ids"][0], late.markers["document"], *tokenizer(text)["input_ids"][1:]]
    vectors = _vectors(model, tokenizer, ids, [1] * len(ids), linear)
    kept = [i for i, token in enumerate(ids) if tokenizer.convert_ids_to_tokens(token) != "!"]
    assert late.score(QUERY, [text])[0] == pytest.approx(_by_hand(query, vectors[kept]), rel=1e-4)


def test_documents_vectors_are_cached_within_the_limit(plain, monkeypatch):
    directory, _, _ = plain
    late = LateInteraction.from_pretrained(str(directory))
    encoded: list[int] = []
    original = late.encode_document
    monkeypatch.setattr(late, "encode_document", lambda texts, *a: encoded.append(len(texts)) or original(texts, *a))
    first = late.score(QUERY, TEXTS)
    again = late.score("another query", TEXTS[:2] + TEXTS[:1])  # all cached: nothing encoded, a repeat read once
    assert encoded == [3] and len(again) == 3
    np.testing.assert_allclose(late.score(QUERY, TEXTS), first, rtol=1e-3)  # float16 kept: within its rounding
    small = LateInteraction(late.model, late.tokenizer, "small", late.config, cache_mb=0.001)  # 1,000 bytes
    small.score(QUERY, TEXTS)
    assert 0 < small._cache_bytes <= 1000 and len(small._cache) < 3  # the oldest dropped
    with pytest.raises(SemiretError, match="megabytes"):
        LateInteraction(late.model, late.tokenizer, "bad", late.config, cache_mb=-1)


def test_reranking_tells_the_kind_from_the_checkpoint(plain, pylate, stanford):
    assert isinstance(Reranking(str(pylate[0])).model, LateInteraction)
    assert isinstance(Reranking(str(stanford[0])).model, LateInteraction)
    with pytest.raises(SemiretError, match="no cross-encoder"):
        Reranking(str(plain[0]))  # a bare encoder is no cross-encoder; as late interaction it is read
    late = Reranking(str(plain[0]), depth=5, kind="late-interaction")
    assert late.describe() == {"model": str(plain[0]), "kind": "late-interaction", "depth": 5}
    with pytest.raises(SemiretError, match="kind is one of"):
        Reranking(str(plain[0]), kind="colbert")
    with pytest.raises(SemiretError, match="max_length is a cross-encoder's"):
        Reranking(str(plain[0]), kind="late-interaction", max_length=64)
    assert Reranking(str(plain[0]), kind="late-interaction", cache_mb=1).model._cache_limit == 1e6
    with pytest.raises(SemiretError, match="cache_mb is a late-interaction model's"):
        Reranking(late.model, cache_mb=1)


def test_a_search_re_ranked_by_late_interaction(tmp_path, pylate):
    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "idx")
    rerank = Reranking(str(pylate[0]), depth=4)
    first = retriever.search("cats and dogs", k=4)
    hits = retriever.search("cats and dogs", k=3, rerank=rerank)
    stored = retriever.index.get_documents([h.id for h in first])
    scores = rerank.model.score("cats and dogs", [stored[h.id].full_text for h in first])
    order = sorted(range(len(first)), key=lambda j: (-scores[j], j))[:3]
    assert [h.id for h in hits] == [first[j].id for j in order]
    assert [h.score for h in hits] == pytest.approx([float(scores[j]) for j in order], rel=1e-5)


def test_colbert_on_the_command_line(tmp_path, plain):
    root = write_beir(tmp_path / "beir")
    runner = CliRunner()
    assert runner.invoke(app, ["index", "--data", str(root), "--out", str(tmp_path / "idx")]).exit_code == 0
    found = runner.invoke(app, ["search", "cats and dogs", "--index", str(tmp_path / "idx"), "--colbert",
                                str(plain[0]), "--colbert-depth", "5", "--json"])
    assert found.exit_code == 0, found.output
    late = Reranking(str(plain[0]), depth=5, kind="late-interaction")
    expected = BM25Retriever.open(tmp_path / "idx").search("cats and dogs", k=10, rerank=late)
    assert [h["id"] for h in json.loads(found.output)["hits"]] == [h.id for h in expected]
    both = runner.invoke(app, ["search", "cats", "--index", str(tmp_path / "idx"), "--colbert", str(plain[0]),
                               "--cross-encoder", str(plain[0])])
    assert both.exit_code != 0 and "give one" in both.output
    figures = runner.invoke(app, ["eval", "--data", str(root), "-r", "bm25", "--colbert", str(plain[0]), "--json"])
    assert figures.exit_code == 0, figures.output
    assert json.loads(figures.output)["options"]["rerank"] == {"model": str(plain[0]), "kind": "late-interaction",
                                                                "depth": 100}


def test_a_server_and_a_saved_run_re_ranked_by_late_interaction(tmp_path, plain):
    from semiret.data.trec import read_trec_run, write_trec_run
    from semiret.serving import ServeSettings, create_app

    from helpers import LocalClient

    retriever = BM25Retriever.build(TINY_DOCS, tmp_path / "bm25")
    late = Reranking(str(plain[0]), depth=4, kind="late-interaction")
    expected = retriever.search(["cats and dogs", "morning birds"], k=3, rerank=late)
    served = ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False, colbert=str(plain[0]))
    with LocalClient(create_app(served)) as http:
        answer = http.post("/indexes/tiny/search", json={"queries": ["cats and dogs", "morning birds"], "k": 3,
                                                         "rerank": {"depth": 4}})
        assert answer.status_code == 200, answer.text
        assert [[hit["id"] for hit in hits] for hits in answer.json()["results"]] == expected.ids
    with pytest.raises(SemiretError, match="give one"):
        ServeSettings({"tiny": str(tmp_path / "bm25")}, cross_encoder=str(plain[0]), colbert=str(plain[0]))
    with pytest.raises(SemiretError, match="give --colbert too"):
        ServeSettings({"tiny": str(tmp_path / "bm25")}, colbert_cache=str(tmp_path / "store"))
    stored = ServeSettings({"tiny": str(tmp_path / "bm25")}, write_process=False, colbert=str(plain[0]),
                           colbert_cache=str(tmp_path / "store"))
    with LocalClient(create_app(stored)) as http:  # the hits' vectors kept in the folder, the same ranking
        answer = http.post("/indexes/tiny/search", json={"queries": ["cats and dogs", "morning birds"], "k": 3,
                                                         "rerank": {"depth": 4}})
        assert [[hit["id"] for hit in hits] for hits in answer.json()["results"]] == expected.ids
    assert json.loads((tmp_path / "store" / "meta.json").read_text())["kind"] == "tokens"
    refused = CliRunner().invoke(app, ["serve", "--index", f"tiny={tmp_path / 'bm25'}", "--colbert", str(plain[0]),
                                       "--colbert-cache", str(tmp_path / "store"), "--workers", "2"])
    assert refused.exit_code != 0 and "--workers 1" in refused.output
    first = {"q1": {hit.id: hit.score for hit in retriever.search("cats and dogs", k=4)}}
    write_trec_run(first, tmp_path / "first.run")
    (tmp_path / "queries.tsv").write_text("q1\tcats and dogs\n")
    result = CliRunner().invoke(app, ["rerank", str(tmp_path / "first.run"), "--index", str(tmp_path / "bm25"),
                                      "--queries", str(tmp_path / "queries.tsv"), "--colbert", str(plain[0]),
                                      "--out", str(tmp_path / "again.run")])
    assert result.exit_code == 0, result.output
    again = read_trec_run(tmp_path / "again.run")["q1"]
    scores = dict(zip(first["q1"], late.model.score("cats and dogs", [
        retriever.get_document(doc_id).full_text for doc_id in first["q1"]])))
    assert sorted(again, key=again.get, reverse=True) == sorted(scores, key=lambda d: (-scores[d], list(first["q1"]).index(d)))


def test_threads_half_precision_two_dense_modules_and_null_settings(tmp_path, pylate, plain):
    """Queries and documents encoded from threads at once keep their own lengths (a fast tokenizer's truncation is
    shared state); a checkpoint saved in bfloat16 scores in float32; PyLate's Dense modules are applied in order; a
    null setting reads as PyLate's default."""
    import shutil
    import threading

    from safetensors.torch import save_file

    late = LateInteraction.from_pretrained(str(pylate[0]))
    expected_query, expected_document = late.encode_query([QUERY])[0], late.encode_document([TEXTS[0]])[0]
    shapes, failures = [], []

    def encode(side):
        try:
            for _ in range(30):
                shapes.append((side, (late.encode_query([QUERY]) if side == "query" else
                                      late.encode_document([TEXTS[0]]))[0].shape))
        except Exception as exc:  # pragma: no cover - what the test reports
            failures.append(exc)

    threads = [threading.Thread(target=encode, args=(side,)) for side in ("query", "document", "query")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    assert {shape for side, shape in shapes if side == "query"} == {expected_query.shape}
    assert {shape for side, shape in shapes if side == "document"} == {expected_document.shape}

    half = tmp_path / "half"
    shutil.copytree(pylate[0], half)
    from transformers import AutoModel

    AutoModel.from_pretrained(half).to(torch.bfloat16).save_pretrained(half)
    scored = LateInteraction.from_pretrained(str(half)).score(QUERY, TEXTS)
    assert scored.dtype == np.float32 and np.allclose(scored, late.score(QUERY, TEXTS), rtol=0.05)

    chained = tmp_path / "chained"
    shutil.copytree(pylate[0], chained)
    modules = json.loads((chained / "modules.json").read_text())
    modules.append({"idx": 2, "name": "2", "path": "2_Dense", "type": "pylate.models.Dense.Dense"})
    (chained / "modules.json").write_text(json.dumps(modules))
    (chained / "2_Dense").mkdir()
    save_file({"linear.weight": torch.randn(4, PROJECTED)}, str(chained / "2_Dense" / "model.safetensors"))
    settings = json.loads((chained / "config_sentence_transformers.json").read_text())
    (chained / "config_sentence_transformers.json").write_text(json.dumps(
        {**settings, "document_prefix": None, "skiplist_words": None}))
    two = LateInteraction.from_pretrained(str(chained))
    assert two.encode_query([QUERY])[0].shape == (10, 4)  # 32 -> 8 -> 4
    assert two.config.document_marker == "[D] " and two.config.skiplist == list(string.punctuation)


def test_a_folder_keeps_documents_vectors_for_good(tmp_path, plain, pylate, monkeypatch):
    """``cache=DIR`` (``--colbert-cache``): every document encoded once, across Reranking objects (runs), its vectors
    read back memory-mapped as stored (float16); the folder bound to the model's weights."""
    first = Reranking(str(plain[0]), kind="late-interaction", cache=tmp_path / "store")
    scores = first.model.score(QUERY, TEXTS)
    again = Reranking(str(plain[0]), kind="late-interaction", cache=tmp_path / "store")
    encoded: list[int] = []
    original = again.model.encode_document
    monkeypatch.setattr(again.model, "encode_document",
                        lambda texts, *a: encoded.append(len(texts)) or original(texts, *a))
    np.testing.assert_allclose(again.model.score(QUERY, TEXTS), scores, rtol=1e-6)  # float16 stored, both times
    assert encoded == []
    again.model.score(QUERY, TEXTS + ["a text not seen"])
    assert encoded == [1]
    unrounded = LateInteraction.from_pretrained(str(plain[0])).score(QUERY, TEXTS)
    np.testing.assert_allclose(scores, unrounded, rtol=1e-3)
    with pytest.raises(SemiretError, match="not tokens embeddings of"):
        Reranking(str(pylate[0]), cache=tmp_path / "store")  # another model's vectors
    with pytest.raises(SemiretError, match="give --colbert too"):
        from semiret.cli import _reranking

        _reranking(None, None, None, tmp_path / "store")
