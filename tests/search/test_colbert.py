"""Late interaction as a first stage (retriever ``colbert``, :mod:`semiret.indexes.multivector`): MaxSim over the whole
corpus as the late-interaction model scores it, PLAID's candidates equal to exact search at full breadth, its centroid
pruning, the kernels by hand, adds, deletions, merges and filters, bad input, the command line and the service."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from transformers import AutoModel
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes.multivector import (CENTROID_THRESHOLD, PRUNED_STAGE_FACTOR, UNPACKED, MultiVectorIndex,
                                        ResidualCodec, approximate_best, centroid_interaction, default_centroids,
                                        kept_centroids, pack_buckets, probed_documents)
from semiret.models.late_interaction import LateInteraction, LateInteractionConfig
from semiret.search import ColbertRetriever, open_retriever
from semiret.types import SyncCounts, TokenEmbeddings

from helpers import LocalClient, client_of, write_beir

WORDS = ("cats chase mice garden dogs bark mailman statins reduce heart disease cancer risk birds sing morning "
         "letters tumour growth therapy seals ice walrus ocean winter").split()


def _documents(n: int, seed: int = 0) -> list[Document]:
    rng = np.random.default_rng(seed)
    return [Document(f"d{i}", " ".join(rng.choice(WORDS, size=int(rng.integers(6, 14)))),
                     metadata={"kind": i % 3}) for i in range(n)]


@pytest.fixture(scope="module")
def built(tiny_bert, tmp_path_factory):
    """A plaid index of whole vectors and an exact one of the same 60 documents (about 700 token vectors: 17
    centroids)."""
    root = tmp_path_factory.mktemp("colbert")
    documents = _documents(60)
    plaid = ColbertRetriever.build(documents, root / "plaid", model=str(tiny_bert), nbits=0)  # (vectors kept whole)
    exact = ColbertRetriever.build(documents, root / "exact", model=str(tiny_bert), ann="exact")
    return documents, plaid, exact


def test_scores_are_maxsim_as_the_model_gives_it_and_plaid_at_full_breadth_is_exact(built, tiny_bert):
    documents, plaid, exact = built
    described = plaid.index.describe()
    assert described["centroids"] == default_centroids(described["token_vectors"]) > 2
    model = LateInteraction.from_pretrained(str(tiny_bert))
    by_id = {d.id: d.full_text for d in documents}
    query = "statins and heart disease"
    expected = model.score(query, [by_id[d.id] for d in documents])
    order = np.argsort(-expected, kind="stable")[:10]
    hits = exact.search(query, k=10)
    assert [h.id for h in hits] == [documents[i].id for i in order]
    assert [h.score for h in hits] == pytest.approx(expected[order], abs=2e-2)  # (vectors stored in float16)
    wide = plaid.with_options(nprobe=described["centroids"], ndocs=len(documents))
    for text in (query, "walrus on the ice", "morning birds sing in the garden"):
        assert [(h.id, h.score) for h in wide.search(text, k=10)] == [(h.id, h.score) for h in exact.search(text, k=10)]
    narrow = plaid.with_options(nprobe=1, ndocs=3).search(query, k=3)  # the best 3 candidates, scored exactly
    assert 0 < len(narrow) <= 3 and all(h.score == pytest.approx(expected[int(h.id[1:])], abs=2e-2) for h in narrow)
    assert exact.search(["   ", query], k=3).ids[0] == []  # a blank query finds nothing


def test_the_kernels_by_hand():
    rng = np.random.default_rng(0)
    offsets = np.array([0, 3, 3, 7, 9], np.int64)
    codes = rng.integers(0, 5, 9).astype(np.int32)
    similarities = rng.normal(size=(5, 4)).astype(np.float32)  # [centroids, query tokens]
    documents = np.array([0, 2, 3], np.int64)
    expected = [similarities[codes[offsets[d]:offsets[d + 1]]].max(axis=0).sum() for d in documents]
    whole = centroid_interaction(documents, offsets, codes, similarities, np.ones(5, bool))
    np.testing.assert_allclose(whole, expected, rtol=1e-6)
    kept = np.array([True, False, True, False, False])  # PLAID's pruning: the other centroids' tokens left out
    pruned = [similarities[[c for c in codes[offsets[d]:offsets[d + 1]] if kept[c]]].max(axis=0).sum()
              if kept[codes[offsets[d]:offsets[d + 1]]].any() else -np.inf for d in documents]
    np.testing.assert_allclose(centroid_interaction(documents, offsets, codes, similarities, kept), pruned, rtol=1e-6)
    assert pruned != expected
    query = np.array([[0.9, 0.5, 0.3, -0.2], [0.1, 0.2, 0.46, 0.0]], np.float32)  # [query tokens, centroids]
    assert kept_centroids(query, 0.5).tolist() == [True, True, True, False]  # bests 0.9, 0.5, 0.46, 0: >= 0.45
    assert kept_centroids(query, 1.0).tolist() == [True, False, False, False]
    assert kept_centroids(-np.abs(query) - 0.1, 0.5).tolist() == [False, False, False, True]  # (the best is kept)
    list_offsets = np.array([0, 2, 3, 5], np.int64)
    list_documents = np.array([0, 3, 1, 1, 4], np.int32)
    hidden = np.array([False, False, False, True, False])
    assert probed_documents(np.array([0, 2]), list_offsets, list_documents, hidden).tolist() == [0, 1, 4]


def test_added_documents_are_found_at_once_deleted_ones_never_and_a_merge_trains_centroids(tiny_bert, tmp_path,
                                                                                           caplog):
    documents = _documents(40, seed=1)
    retriever = ColbertRetriever.build(documents, tmp_path / "cb", model=str(tiny_bert), nbits=0)
    new = Document("new", "walrus walrus seals on the winter ice ocean")
    with caplog.at_level(logging.WARNING):
        retriever.add([new])
    assert "searched exactly" in caplog.text
    assert retriever.index.describe()["segments_searched_exactly"] == 1
    found = {h.id: h.score for h in retriever.search("walrus seals ice", k=41)}
    model = LateInteraction.from_pretrained(str(tiny_bert))
    assert found["new"] == pytest.approx(model.score("walrus seals ice", [new.full_text])[0], abs=2e-2)
    retriever.delete(["new", "d0"])
    assert {"new", "d0"}.isdisjoint(h.id for h in retriever.search("walrus seals ice", k=41))
    assert len(retriever.search("walrus seals ice", k=100)) == 39
    before = [(h.id, h.score) for h in retriever.search("cats and dogs", k=5)]
    retriever.index.merge()
    described = retriever.index.describe()
    assert described["segments"] == 1 and described["centroids"] > 2 and "segments_searched_exactly" not in described
    reopened = open_retriever(tmp_path / "cb").with_options(nprobe=described["centroids"], ndocs=100)
    assert [(h.id, h.score) for h in reopened.search("cats and dogs", k=5)] == before
    kinds = {h.id: documents[int(h.id[1:])].metadata["kind"] for h in reopened.search("cats", k=10,
                                                                                       filter={"kind": 2})}
    assert kinds and set(kinds.values()) == {2}


def test_a_sync_after_merge_shards_of_compressed_shards_leaves_every_document(tiny_bert, tmp_path):
    """The merge compresses the second shard's codes again by the first shard's codec; a colbert index's sync
    compares the stored texts (its model would encode them alike), never those codes: nothing is encoded again."""
    from semiret.indexes.segments import merge_shards

    documents = _documents(80, seed=2)
    shards = [tmp_path / f"shard-{i}" for i in range(2)]
    for i, shard in enumerate(shards):
        ColbertRetriever.build(documents[40 * i:40 * (i + 1)], shard, model=str(tiny_bert))
    assert len({open_retriever(shard).index.segments[0].codec.id for shard in shards}) == 2  # (compressed, 2 bits)
    merge_shards(tmp_path / "merged", shards)
    merged = open_retriever(tmp_path / "merged")
    assert merged.sync(documents) == SyncCounts(added=0, replaced=0, unchanged=80, deleted=0)
    edited = Document("d45", "walrus seals on the winter ice", metadata=documents[45].metadata)
    assert merged.sync([*documents[:45], edited, *documents[46:]]) == SyncCounts(0, 1, 79, 0)


def test_bad_options_and_a_replaced_model_are_refused_before_any_encoding(tiny_bert, tiny_distilbert, tmp_path):
    for options, message in (({"ann": "ivf"}, "unknown multi-vector search"), ({"centroids": 1}, "at least 2"),
                             ({"ann": "exact", "centroids": 8}, "plaid's"), ({"nbits": 3}, "one of 1, 2, 4"),
                             ({"ann": "exact", "nbits": 2}, "plaid's")):
        with pytest.raises(SemiretError, match=message):
            ColbertRetriever.build(_documents(3), tmp_path / "bad", model=str(tiny_bert), **options)
    assert not (tmp_path / "bad").exists()
    with pytest.raises(SemiretError, match="nprobe"):
        ColbertRetriever.build(_documents(3), tmp_path / "bad", model=str(tiny_bert), nprobe=0)
    with pytest.raises(SemiretError, match="sidr"):
        ColbertRetriever.build(_documents(3), tmp_path / "bad", model="sidr-scifact")
    with pytest.raises(SemiretError, match="not an encoder"):  # (a decoder LM of the registry, refused unloaded)
        ColbertRetriever.build(_documents(3), tmp_path / "bad", model="smollm2-135m")
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=30522)).save_pretrained(tmp_path / "gpt")
    with pytest.raises(SemiretError, match="decoder-only"):  # (a decoder LM in a folder)
        LateInteraction(AutoModel.from_pretrained(tmp_path / "gpt"), None, "gpt", LateInteractionConfig())
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    retriever = ColbertRetriever.build(_documents(5), tmp_path / "cb", model=str(model))
    shutil.rmtree(model)
    shutil.copytree(tiny_distilbert, model)  # another model at the same path
    with pytest.raises(SemiretError, match="other weights"):
        open_retriever(tmp_path / "cb").search("cats")
    assert retriever.index.n_docs == 5


def test_the_command_line_indexes_searches_and_evaluates(tiny_bert, tmp_path):
    root = write_beir(tmp_path / "beir")
    runner = CliRunner()

    def invoke(*args):
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, result.output + repr(result.exception)
        return result.stdout

    invoke("index", "-r", "colbert", "--model", tiny_bert, "--data", root, "--out", tmp_path / "cb")
    found = json.loads(invoke("search", "--index", tmp_path / "cb", "--json", "-k", "3", "statins cancer risk"))
    expected = open_retriever(tmp_path / "cb").search("statins cancer risk", k=3)
    assert [h["id"] for h in found["hits"]] == [h.id for h in expected] and len(expected) == 3
    figures = json.loads(invoke("eval", "--data", root, "-r", "colbert", "--model", tiny_bert, "--ann", "exact",
                                "--json"))
    assert figures["retriever"] == "colbert" and figures["queries"] == 3 and 0 < figures["nDCG@10"] <= 1
    info = json.loads(invoke("info", tmp_path / "cb"))
    assert info["kind"] == "multivector" and info["token_vectors"] > 0


def test_the_service_searches_and_fills_a_colbert_index(tiny_bert, tmp_path):
    from semiret.serving import ServeSettings, create_app

    ColbertRetriever.build(_documents(20, seed=2), tmp_path / "cb", model=str(tiny_bert))
    settings = ServeSettings({"cb": str(tmp_path / "cb")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as http:
        client = client_of(http, api_key="key")
        assert client.add("cb", [Document("walrus", "walrus walrus walrus on the ice")]) == 1
        assert "walrus" in [h.id for h in client.search("cb", "walrus", k=21)]  # (an untrained model: anywhere)
        assert [h.id for h in client.search("cb", "cats and dogs", k=5)] == [
            h.id for h in open_retriever(tmp_path / "cb").search("cats and dogs", k=5)]


def test_a_hybrid_fuses_bm25_with_colbert(tiny_bert, tmp_path):
    from semiret.search import BM25Retriever, HybridRetriever

    documents = _documents(30, seed=4)
    hybrid = HybridRetriever.build(documents, tmp_path / "h", neural="colbert", model=str(tiny_bert), fusion="rrf")
    alone = ColbertRetriever.build(documents, tmp_path / "cb", model=str(tiny_bert))
    lexical = BM25Retriever.build(documents)
    query = "walrus ice"
    ranks = {}
    for ranking in (lexical.search(query, k=100), alone.search(query, k=100)):
        for rank, hit in enumerate(ranking, 1):
            ranks[hit.id] = ranks.get(hit.id, 0) + 1 / (60 + rank)
    fused = hybrid.search(query, k=5)
    assert [h.id for h in fused] == sorted(ranks, key=lambda d: (-ranks[d], d))[:5] or \
        [round(h.score, 6) for h in fused] == sorted((round(v, 6) for v in ranks.values()), reverse=True)[:5]


def test_residuals_are_packed_and_decompressed_as_colbertv2_does():
    rng = np.random.default_rng(1)
    for nbits in (1, 2, 4):
        buckets = rng.integers(0, 2 ** nbits, size=(7, 16)).astype(np.uint8)
        assert (UNPACKED[nbits][pack_buckets(buckets, nbits)].reshape(7, 16) == buckets).all()
    vectors = rng.normal(size=(5000, 16)).astype(np.float16)
    codec = ResidualCodec.train(vectors, 4, 2)
    codes, packed = codec.compress(vectors)
    residuals = (vectors.astype(np.float32) - codec.centroids[codes]).ravel()
    np.testing.assert_allclose(codec.weights, np.quantile(residuals, [0.125, 0.375, 0.625, 0.875]), rtol=0.05,
                               atol=0.02)
    buckets = UNPACKED[2][packed].reshape(5000, 16).ravel()
    assert np.all(np.diff([residuals[buckets == b].max() for b in range(4)]) > 0)  # buckets ordered by value
    assert abs(np.bincount(buckets, minlength=4) / buckets.size - 0.25).max() < 0.02  # at the quantiles
    by_hand = codec.centroids[codes] + codec.weights[buckets.reshape(5000, 16)]
    np.testing.assert_allclose(codec.decompress(codes, packed),
                               by_hand / np.linalg.norm(by_hand, axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_a_compressed_index_ranks_as_the_whole_vectors_do_in_a_fraction_of_the_space(built, tiny_bert, tmp_path):
    documents, _, exact = built
    compressed = ColbertRetriever.build(documents, tmp_path / "c", model=str(tiny_bert), nbits=4)
    described = compressed.index.describe()
    assert described["nbits"] == 4 and not (tmp_path / "c" / "seg-000000" / "tokens.npy").exists()
    residuals = np.load(tmp_path / "c" / "seg-000000" / "residuals.npy", mmap_mode="r")
    assert residuals.dtype == np.uint8 and residuals.shape == (described["token_vectors"], 32 * 4 // 8)  # (float16: 64)
    wide = compressed.with_options(nprobe=described["centroids"], ndocs=len(documents))
    for text in ("statins and heart disease", "walrus on the ice"):
        whole = {h.id: h.score for h in exact.search(text, k=len(documents))}
        approximate = wide.search(text, k=len(documents))
        assert max(abs(h.score - whole[h.id]) for h in approximate) < 0.15 * max(map(abs, whole.values()))
        top = {h.id for h in exact.search(text, k=10)}
        assert len(top & {h.id for h in approximate[:10]}) >= 7
    before = [(h.id, h.score) for h in compressed.search("walrus on the ice", k=60)]
    for round_ in range(3):  # adds compressed by the index's codec; merges copy codes and residuals: nothing moves
        compressed.add([Document(f"new{round_}", "walrus seals ice")])
        assert compressed.index.segments[-1].codec.id == compressed.index.segments[0].codec.id
        compressed.index.merge()
        assert [(h.id, h.score) for h in compressed.search("walrus on the ice", k=60 + round_ + 1)
                if not h.id.startswith("new")] == before
    assert compressed.index.describe()["segments"] == 1 and len(compressed.search("walrus", k=100)) == 63


def test_plaid_finds_k_hits_whatever_its_probe_under_filters_and_deletions(built):
    documents, plaid, exact = built
    narrow = plaid.with_options(nprobe=1, ndocs=10)
    assert len(narrow.search("cats", k=60)) == 60  # (fewer visible documents than ndocs: all scored exactly)
    kinds = narrow.search("cats", k=20, filter={"kind": 1})
    assert len(kinds) == 20 and all(documents[int(h.id[1:])].metadata["kind"] == 1 for h in kinds)
    assert len(narrow.search("cats", k=15, filter={"kind": 1})) == 15  # (the probe widened until 15 are candidates)
    wanted = [d.id for d in documents[::4]]  # a re-ranking's candidates: each one scored, as exact search scores it
    found = {h.id: h.score for h in narrow.search("cats", k=len(wanted), filter={"$id": wanted})}
    assert found == {h.id: h.score for h in exact.search("cats", k=len(wanted), filter={"$id": wanted})}


def test_plaid_prunes_weak_centroids_first_and_still_finds_k_hits(built):
    # by hand: documents 0-3 hold centroid 0 (the query's best), document 4 centroid 1 (0.9 times as similar) alone
    similarities = np.array([[1.0, 0.9], [0.0, 0.9]], np.float32)  # [query tokens, centroids]
    offsets, codes = np.arange(6, dtype=np.int64), np.array([0, 0, 0, 0, 1], np.int32)
    candidates = np.arange(5)  # centroid interaction: 1.0 each, 1.8 for document 4
    assert PRUNED_STAGE_FACTOR == 4  # (ndocs 1: the pruned stage keeps 4 of the 5)
    assert approximate_best(candidates, offsets, codes, similarities, 1, 0).tolist() == [4]  # no pruning
    assert approximate_best(candidates, offsets, codes, similarities, 1, CENTROID_THRESHOLD).tolist() == [4]
    assert approximate_best(candidates, offsets, codes, similarities, 1, 1.0).tolist() != [4]  # centroid 1 pruned
    assert 4 in approximate_best(candidates, offsets, codes, similarities, 2, 1.0)  # (5 <= 4 x 2: no pruned stage)
    plaid = built[1]
    narrow = plaid.with_options(nprobe=1, ndocs=3, centroid_threshold=1.0)
    for text in ("statins and heart disease", "walrus on the ice", "cats chase mice"):  # the harshest pruning: k hits
        assert len(narrow.search(text, k=3)) == 3
        assert len(narrow.search(text, k=3, filter={"kind": 1})) == 3
    for bad in (-0.1, 1.5, float("nan"), True):
        with pytest.raises(SemiretError, match="centroid_threshold"):
            plaid.with_options(centroid_threshold=bad)
    with pytest.raises(SemiretError, match="centroid_threshold"):
        plaid.index.search([np.zeros((1, 32), np.float32)], centroid_threshold=2.0)


def test_the_default_pruning_keeps_the_exact_best_of_clustered_token_vectors(tmp_path):
    """Token vectors near a few of 24 topics each, as a trained model's cluster, and for each query one document
    holding its vectors: the default pruning leaves out most centroids, yet finds that document first."""
    rng = np.random.default_rng(0)
    dim = 32

    def near(points: np.ndarray, count: int | None = None, noise: float = 0.1) -> np.ndarray:
        chosen = points if count is None else points[rng.choice(len(points), count)]
        vectors = chosen + rng.normal(scale=noise, size=chosen.shape)
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)

    topics = near(rng.normal(size=(24, dim)))
    queries = [near(topics[rng.choice(24, 2, replace=False)], 6) for _ in range(20)]
    vectors = [near(topics[rng.choice(24, 3, replace=False)], 12) for _ in range(400)] + \
        [np.concatenate([near(query, noise=0.02), near(topics, 6)]) for query in queries]  # d400 + i: query i's
    offsets = np.concatenate([[0], np.cumsum([len(v) for v in vectors])])
    batch = TokenEmbeddings([f"d{i}" for i in range(len(vectors))], offsets, np.concatenate(vectors).astype(np.float16))
    index = MultiVectorIndex.build(tmp_path / "mv", "multivector", [batch], dim, {}, store_texts=False)
    segment = index.segments[0]
    assert max(kept_centroids(q @ segment.centroids.T, CENTROID_THRESHOLD).mean() for q in queries) < 0.5
    found = index.search(queries, k=10, ndocs=8)  # (ndocs: k, 10; the pruned stage keeps 40 of the candidates)
    stored = np.asarray(segment.vectors, np.float32)
    for i, (query, ids) in enumerate(zip(queries, found.ids)):
        exact = [(query @ stored[offsets[d]:offsets[d + 1]].T).max(axis=1).sum() for d in range(len(vectors))]
        assert len(ids) == 10 and ids[0] == f"d{int(np.argmax(exact))}" == f"d{400 + i}"


@pytest.mark.integration
def test_an_encoder_semiret_saved_gives_its_token_vectors(tmp_path):
    from semiret.models.encoders import load_encoder

    retriever = ColbertRetriever.build(_documents(12, seed=5), tmp_path / "cb", model="hce-scifact", ann="exact")
    encoder = load_encoder("hce-scifact")
    model = LateInteraction(encoder.backbone, encoder.tokenizer, "hce-scifact", LateInteractionConfig())
    texts = {d.id: d.full_text for d in _documents(12, seed=5)}
    expected = model.score("statins and heart disease", list(texts.values()))
    hits = retriever.search("statins and heart disease", k=3)
    assert [h.score for h in hits] == pytest.approx(sorted(expected, reverse=True)[:3], abs=2e-2)


def test_token_pooling_stores_fewer_vectors_of_each_document(tmp_path, tiny_docs, tiny_bert):
    whole = ColbertRetriever.build(tiny_docs, tmp_path / "whole", model=str(tiny_bert), ann="exact")
    pooled = ColbertRetriever.build(tiny_docs, tmp_path / "pooled", model=str(tiny_bert), ann="exact", pool_factor=3)
    lengths = np.diff(whole.index.segments[0].offsets)
    assert pooled.index.describe()["token_vectors"] == sum(1 + max(1, (n - 1) // 3) if n > 2 else n for n in lengths)
    assert pooled.index.meta["analyzer"]["pool_factor"] == 3
    first = whole.index.get_vector(tiny_docs[0].id)[0]  # ([CLS] kept as it is)
    np.testing.assert_allclose(pooled.index.get_vector(tiny_docs[0].id)[0], first, atol=2e-3)
    reopened = open_retriever(tmp_path / "pooled")
    reopened.add([Document("fresh", tiny_docs[0].text, title=tiny_docs[0].title)])
    assert len(reopened.index.get_vector("fresh")) == len(pooled.index.get_vector(tiny_docs[0].id))

