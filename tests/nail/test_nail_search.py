"""NAIL's retrievers on a tiny saved model: nail-sparse (top-k impact postings), nail-exh (the score matrix,
every document) and bm25+nail (BM25's candidates re-ranked), each checked against φ_d computed directly; the
torch-free query side; empty queries; refusals (another tokenizer, a matrix over the memory allowance)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import TINY_DOCS, leftovers

from semiret.data.collection import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, open_retriever
from semiret.search.nail import (
    BM25NailRetriever,
    NailExhaustiveRetriever,
    NailSparseRetriever,
)
from semiret.text.wordpiece import WordPieceVocabulary

QUERY = "statins cancer risk"


@pytest.fixture(scope="module")
def phi(tiny_nail):
    """φ_d of TINY_DOCS by the model itself, and the query's distinct non-special tokens."""
    from semiret.models.nail import NailModel

    scores = NailModel.load(str(tiny_nail)).score_documents([d.full_text for d in TINY_DOCS])
    tokens = sorted(set(WordPieceVocabulary(str(tiny_nail)).encode(QUERY)))
    return scores, tokens


def _expected(phi, ids=None):
    scores, tokens = phi
    totals = scores[:, tokens].sum(axis=1)
    rows = range(len(TINY_DOCS)) if ids is None else [i for i, d in enumerate(TINY_DOCS) if d.id in ids]
    return sorted(((TINY_DOCS[i].id, totals[i]) for i in rows), key=lambda x: -x[1])


def test_nail_exh_scores_every_document_by_lookup_and_sum(tiny_nail, phi, tmp_path):
    retriever = NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(tiny_nail))
    hits = retriever.search(QUERY, k=6)
    expected = _expected(phi)
    assert [h.id for h in hits] == [d for d, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=2e-3, abs=2e-3)  # float16 storage


def test_a_nail_index_refuses_documents_of_a_model_retrained_in_place(tiny_nail, tmp_path):
    import torch

    from semiret.models.nail import NailModel

    model = tmp_path / "model"
    shutil.copytree(tiny_nail, model)
    NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(model))
    retrained = NailModel.load(str(model))
    with torch.no_grad():
        for parameter in retrained.parameters():
            parameter.add_(0.01)
    retrained.save(model, fp16=False)
    before = {f: f.read_bytes() for f in sorted((tmp_path / "exh").rglob("*")) if f.is_file()}
    with pytest.raises(SemiretError, match="exh was built with other weights than .*model holds now"):
        open_retriever(tmp_path / "exh").add([Document("d9", "statins again")])
    assert {f: f.read_bytes() for f in sorted((tmp_path / "exh").rglob("*")) if f.is_file()} == before


def test_bm25_nail_reranks_only_bm25_candidates(tiny_nail, phi, tmp_path):
    retriever = BM25NailRetriever.build(TINY_DOCS, tmp_path / "rerank", model=str(tiny_nail))
    candidates = {h.id for h in open_retriever(tmp_path / "rerank", "bm25").search(QUERY, k=100)}
    assert candidates and len(candidates) < len(TINY_DOCS)  # BM25 finds some documents, not all
    hits = retriever.search(QUERY, k=10)
    assert [h.id for h in hits] == [d for d, _ in _expected(phi, candidates)]
    shallow = BM25NailRetriever.open(tmp_path / "rerank", rerank_depth=1).search(QUERY, k=1)
    assert [h.id for h in shallow] == [BM25Retriever.open(tmp_path / "rerank").search(QUERY, k=1)[0].id]


def test_bm25_nail_re_ranks_its_depth_whatever_k_and_ranks_bm25_s_next_ones_below(tiny_nail, phi, tmp_path):
    """k beyond the re-ranking depth: the depth's documents re-ranked, then BM25's next ones in its order, each
    scored below them (k re-ranked as many before, so the depth did nothing at k >= depth, and pages past it came
    from other rankings); a page of the ranking is the same slice of it whatever k."""
    query = "cats dogs statins cancer garden birds"
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "rerank", model=str(tiny_nail))
    bm25 = [h.id for h in open_retriever(tmp_path / "rerank", "bm25").search(query, k=100)]
    assert len(bm25) >= 4
    shallow = BM25NailRetriever.open(tmp_path / "rerank", rerank_depth=2)
    hits = shallow.search(query, k=len(bm25))
    top = [h.id for h in shallow.search(query, k=2)]
    assert set(top) == set(bm25[:2]) and [h.id for h in hits] == top + bm25[2:]
    assert all(a.score > b.score for a, b in zip(hits[1:], hits[2:]))  # the tail below, in BM25's order
    for offset in range(len(bm25)):  # a page of the ranking, as the service pages it
        assert [h.id for h in shallow.search(query, k=offset + 1)][offset] == hits[offset].id


def test_bm25_nail_gives_each_query_its_own_hits_whatever_the_threads(tiny_nail, tmp_path):
    """A batch searched by several threads (each a share of the queries, in one compiled call): every query's hits
    are those it gets alone (the second thread re-ranked its queries by the first thread's token queries)."""
    queries = ["statins cancer risk", "cats and dogs", "garden birds in the morning", "heart mice", "dogs statins",
               "birds cancer"]
    retriever = BM25NailRetriever.build(TINY_DOCS, tmp_path / "rerank", model=str(tiny_nail))
    alone = [retriever.search([query], k=3) for query in queries]
    for threads in (1, 2, 3):
        together = retriever.search(queries, k=3, n_threads=threads)
        assert together.ids == [hits.ids[0] for hits in alone]
        assert together.scores == [hits.scores[0] for hits in alone]


def test_nail_exh_keeps_ties_in_document_order_whatever_k():
    from semiret.indexes.score_matrix import _top_k

    values = np.zeros(50, np.float32)
    values[7] = 2.0
    assert list(_top_k(values, 3)) == [7, 0, 1] == list(_top_k(values, 50)[:3])
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(1, 40))
        values = rng.integers(0, 4, n).astype(np.float32)
        k = int(rng.integers(1, n + 1))
        assert list(_top_k(values, k)) == list(np.lexsort((np.arange(n), -values))[:k])


def test_bm25_nail_can_add_a_share_of_bm25s_score(tiny_nail, phi, tmp_path):
    """Beyond the paper: with ``bm25_weight`` w a candidate scores NAIL's score + w x its BM25 score."""
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "rerank", model=str(tiny_nail))
    bm25 = {h.id: h.score for h in open_retriever(tmp_path / "rerank", "bm25").search(QUERY, k=100)}
    nail = dict(_expected(phi, set(bm25)))
    for weight in (0.0, 0.7, 50.0):
        hits = BM25NailRetriever.open(tmp_path / "rerank", bm25_weight=weight).search(QUERY, k=10)
        expected = sorted(bm25, key=lambda d: -(nail[d] + weight * bm25[d]))
        assert [h.id for h in hits] == expected
        assert [h.score for h in hits] == pytest.approx([nail[d] + weight * bm25[d] for d in expected], rel=2e-3,
                                                        abs=2e-3)
    with pytest.raises(SemiretError, match="BM25 weight"):
        BM25NailRetriever.open(tmp_path / "rerank", bm25_weight=-1.0)
    # a model may record the weight to use when none is asked for (the packaged one does)
    recorded = tmp_path / "recorded"
    shutil.copytree(tiny_nail, recorded)
    marker = json.loads((recorded / "nail.json").read_text())
    (recorded / "nail.json").write_text(json.dumps({**marker, "search": {"bm25_weight": 0.7}}))
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "recorded-index", model=str(recorded))
    by_default = BM25NailRetriever.open(tmp_path / "recorded-index").search(QUERY, k=10)
    assert [h.id for h in by_default] == sorted(bm25, key=lambda d: -(nail[d] + 0.7 * bm25[d]))[:10]
    asked = BM25NailRetriever.open(tmp_path / "recorded-index", bm25_weight=0.0).search(QUERY, k=10)
    assert [h.id for h in asked] == sorted(bm25, key=lambda d: -nail[d])[:10]


def test_bm25_nail_reranks_candidates_of_every_segment(tiny_nail, phi, tmp_path):
    """Candidates are addressed by segment and local number: documents spread over three segments, one deleted,
    are re-ranked as one list, the k best of all segments."""
    query = "cats garden morning mailman"
    tokens = sorted(set(WordPieceVocabulary(str(tiny_nail)).encode(query)))
    retriever = BM25NailRetriever.build(TINY_DOCS[:2], tmp_path / "rerank", model=str(tiny_nail))
    retriever.add(TINY_DOCS[2:4])
    retriever.add(TINY_DOCS[4:])
    retriever.delete(["d1"])
    assert len(retriever.index.snapshot.segments) == 3
    candidates = {h.id for h in open_retriever(tmp_path / "rerank", "bm25").search(query, k=100)}
    assert candidates == {"d2", "d4", "d5"}  # in each of the three segments; d1 is deleted
    expected = _expected((phi[0], tokens), candidates)
    for k in (1, 2, 10):
        hits = retriever.search(query, k=k)
        assert [h.id for h in hits] == [d for d, _ in expected][:k]
        assert [h.score for h in hits] == pytest.approx([s for _, s in expected][:k], rel=2e-3, abs=2e-3)
    batch = retriever.search([query, "zzzz qqqq", query], k=3)
    assert batch.ids[0] == batch.ids[2] == [d for d, _ in expected] and batch.ids[1] == []


def test_bm25_nail_reranks_the_best_depth_over_all_segments_as_a_fresh_build(tiny_nail, phi, tmp_path):
    """Each segment re-ranked its own best ``rerank_depth``: an index with added documents re-ranked up to
    segments x depth candidates (at depth 1 with two segments, two), and merging changed the results."""
    import itertools

    words = "cats dogs mice garden morning mailman statins cancer risk birds letters".split()
    queries = [" ".join(pair) for pair in itertools.combinations(words, 2)]
    grown = BM25NailRetriever.build(TINY_DOCS[:3], tmp_path / "grown", model=str(tiny_nail))
    grown.add(TINY_DOCS[3:])
    BM25NailRetriever.build(TINY_DOCS, tmp_path / "fresh", model=str(tiny_nail))
    for depth in (1, 2, 100):
        ours = BM25NailRetriever.open(tmp_path / "grown", rerank_depth=depth).search(queries, k=3)
        theirs = BM25NailRetriever.open(tmp_path / "fresh", rerank_depth=depth).search(queries, k=3)
        assert ours.ids == theirs.ids, depth
        for mine, expected in zip(ours.scores, theirs.scores):
            assert np.allclose(mine, expected, rtol=1e-3, atol=1e-3)


def test_the_score_matrix_follows_adds_deletes_and_merges(tiny_nail, phi, tmp_path):
    retriever = NailExhaustiveRetriever.build(TINY_DOCS[:3], tmp_path / "exh", model=str(tiny_nail))
    retriever.add(TINY_DOCS[3:])
    retriever.delete(["d3"])
    before = retriever.search(QUERY, k=6)
    assert "d3" not in [h.id for h in before]
    assert [h.id for h in before] == [d for d, _ in _expected(phi) if d != "d3"]
    retriever.index.merge()
    merged = open_retriever(tmp_path / "exh").search(QUERY, k=6)
    assert [(h.id, round(h.score, 3)) for h in merged] == [(h.id, round(h.score, 3)) for h in before]
    rerank = open_retriever(tmp_path / "exh", "bm25+nail").search(QUERY, k=6)
    assert "d3" not in [h.id for h in rerank]


def test_nail_sparse_keeps_each_document_top_k_positive_tokens(tiny_nail, phi, tmp_path):
    scores, _ = phi
    retriever = NailSparseRetriever.build(TINY_DOCS, tmp_path / "sparse", model=str(tiny_nail), top_k=50)
    excluded = WordPieceVocabulary(str(tiny_nail)).excluded_mask
    assert retriever.index.average_postings_per_document() == pytest.approx(
        np.mean([min(50, int(((row > 0) & ~excluded).sum())) for row in scores]))
    full = NailSparseRetriever.build(TINY_DOCS, tmp_path / "full", model=str(tiny_nail), top_k=30522)
    expected = [(d, s) for d, s in _expected(phi) if s > 0]
    assert len(expected) >= 2
    hits = full.search(QUERY, k=6)
    assert [h.id for h in hits] == [d for d, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected], rel=1e-5)


@pytest.mark.parametrize("name", ["nail-exh", "bm25+nail", "nail-sparse"])
def test_a_query_without_known_tokens_finds_nothing(tiny_nail, tmp_path, name):
    retriever = open_retriever(_built(name, tiny_nail, tmp_path), name)
    assert retriever.search("\u2603\u2603", k=5) == []  # tokenized as [UNK], a special token
    hits = retriever.search(["\u2603", QUERY], k=3)
    assert hits.ids[0] == [] and len(hits.ids[1]) > 0


def _built(name, tiny_nail, tmp_path):
    from semiret.search.retrievers import retriever_class

    options = {"top_k": 30522} if name == "nail-sparse" else {}  # an untrained model: keep every positive score
    retriever_class(name).build(TINY_DOCS, tmp_path / name, model=str(tiny_nail), **options)
    return tmp_path / name


def test_an_index_built_with_another_tokenizer_is_refused(tiny_nail, tiny_bert, tmp_path):
    import shutil

    model = shutil.copytree(tiny_nail, tmp_path / "model")
    path = _built("nail-exh", model, tmp_path)
    spec = json.loads((model / "tokenizer.json").read_text())
    spec["model"]["vocab"]["zzzz-new-token"] = spec["model"]["vocab"].pop("[unused0]")
    (model / "tokenizer.json").write_text(json.dumps(spec))
    with pytest.raises(SemiretError, match="another tokenizer"):
        open_retriever(path)
    with pytest.raises(SemiretError, match="holds no NAIL score matrix"):
        open_retriever(BM25Retriever.build(TINY_DOCS, tmp_path / "bm25").index.path, "nail-exh")
    fine = open_retriever(_built("nail-sparse", tiny_nail, tmp_path), "nail-sparse")  # built by a NAIL model
    assert fine.name == "nail-sparse" and len(fine.search(["statins cancer"], k=2).ids[0]) == 2
    with pytest.raises(SemiretError, match="not built by a NAIL model"):
        open_retriever(_splade_index(tmp_path, tiny_bert), "nail-sparse")


def _splade_index(tmp_path, model):
    from semiret.search import SpladeRetriever

    return SpladeRetriever.build(TINY_DOCS, tmp_path / "splade", model=str(model)).index.path


def test_a_score_matrix_over_the_memory_allowance_is_refused_and_nothing_is_written(tiny_nail, tmp_path):
    with pytest.raises(SemiretError, match=r"more than the 1\.0 kB allowed: index these documents with -r nail-sparse"):
        NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(tiny_nail), max_matrix_gb=1e-6)
    with pytest.raises(SemiretError, match=r"max_matrix_gb \(--max-matrix-gb\) must be positive"):
        NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(tiny_nail), max_matrix_gb=-1)
    assert not (tmp_path / "exh").exists() and not leftovers(tmp_path)


def test_a_known_number_of_documents_too_many_for_the_matrix_is_refused_before_any_is_scored(
        tiny_nail, tmp_path, monkeypatch):
    from semiret.search.nail import NailModelSide

    monkeypatch.setattr(NailModelSide, "scores", lambda *args: pytest.fail("scored"))
    with pytest.raises(SemiretError, match=r"would take 0\.4 MB \(float16, 6 documents x 30522 tokens\), more than "
                                           r"the 0\.1 MB allowed: index these documents with -r nail-sparse"):
        NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(tiny_nail), max_matrix_gb=1e-4)
    with pytest.raises(SemiretError, match=r"over 0\.1 MB \(float16, 2\+ documents"):  # streamed: batch by batch
        NailExhaustiveRetriever.build(iter(TINY_DOCS), tmp_path / "exh", model=str(tiny_nail), max_matrix_gb=1e-4,
                                      batch_size=2)
    assert not (tmp_path / "exh").exists()


def test_a_model_that_is_not_a_saved_nail_model_is_refused_before_indexing(tiny_bert, tmp_path):
    with pytest.raises(SemiretError, match="not a saved NAIL model"):
        NailSparseRetriever.build(TINY_DOCS, tmp_path / "x", model=str(tiny_bert))


def test_searching_a_nail_index_never_imports_torch(tiny_nail, tmp_path):
    for name in ("nail-exh", "bm25+nail", "nail-sparse"):
        _built(name, tiny_nail, tmp_path)
    code = (f"import sys\nfrom semiret.search import open_retriever\n"
            f"for name in ('nail-exh', 'bm25+nail', 'nail-sparse'):\n"
            f"    assert open_retriever({str(tmp_path)!r} + '/' + name, name).search({QUERY!r})\n"
            f"print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_demo_runs_nail_pipelines_only_when_given_a_model(tiny_nail, beir_dir, tmp_path, monkeypatch):
    from semiret import demo

    monkeypatch.setattr(demo, "demo_systems", lambda *flags: [("BM25", "bm25", {})])
    monkeypatch.setattr(demo, "plot_quality_latency", lambda rows, path, title: path)
    assert [r["retriever"] for r in demo.run_demo(str(beir_dir), tmp_path / "plain")] == ["bm25"]
    rows = demo.run_demo(str(beir_dir), tmp_path / "nail", nail=str(tiny_nail))
    assert [r["retriever"] for r in rows] == ["bm25", "bm25+nail", "nail-exh", "nail-sparse"]
    assert rows[2]["index_build_s"] is None  # nail-exh reuses the index bm25+nail built


def test_the_rerank_kernel_sums_float16_rows_keeps_ties_in_first_stage_order_and_pads():
    from semiret.indexes.score_matrix import FLOAT16_TABLE, rank_candidates

    matrix = np.array([[0.5, 1.0, 0.25, 1.0, 2.0],  # term 0 over documents 0..4
                       [0.5, 0.0, 0.75, 0.0, 0.0]], np.float16)  # term 1
    bits = matrix.view(np.uint16)
    docs = np.array([2, 0, 3, 1], np.int32)  # candidates in no particular order; first-stage scores:
    stage = np.array([6, 7, 9, 8], np.float32)  # the first stage's order is 3, 1, 0, 2
    totals = np.empty(4, np.float32)
    scores, locals_ = np.empty(3, np.float32), np.empty(3, np.int32)
    both, first = (np.array([0, 1]), np.array([1.0, 1.0], np.float32)), (np.array([0]), np.array([2.0], np.float32))
    rank_candidates(*both, bits, FLOAT16_TABLE, docs, stage, 4, np.float32(0.0), totals, scores, locals_)
    # documents 3, 1, 0, 2 all score 1.0: the first stage's order, cut to 3
    assert locals_.tolist() == [3, 1, 0] and scores.tolist() == [1.0, 1.0, 1.0]
    rank_candidates(*both, bits, FLOAT16_TABLE, docs, stage, 4, np.float32(0.5), totals, scores, locals_)
    assert locals_.tolist() == [3, 1, 0] and scores.tolist() == [5.5, 5.0, 4.5]  # 1 + 0.5 x the first stage's
    equal = np.full(4, 5.0, np.float32)  # equal first-stage scores too: the earlier document
    rank_candidates(*both, bits, FLOAT16_TABLE, docs, equal, 4, np.float32(0.0), totals, scores, locals_)
    assert locals_.tolist() == [0, 1, 2]
    rank_candidates(*first, bits, FLOAT16_TABLE, docs[2:3], stage[2:3], 1, np.float32(0.0), totals, scores, locals_)
    assert locals_.tolist() == [3, -1, -1] and scores[0] == 2.0 and np.isneginf(scores[1:]).all()
    no_terms = (np.array([], np.int64), np.array([], np.float32))
    rank_candidates(*no_terms, bits, FLOAT16_TABLE, docs, stage, 4, np.float32(0.5), totals, scores, locals_)
    assert locals_.tolist() == [-1, -1, -1]



def test_a_saved_nail_model_keeps_the_tied_head_once(tiny_nail, tmp_path):
    """The decoder's file leaves out the MLM head it shares with the encoder (its tied word embeddings are the
    encoder's, saved there): nothing stored twice, and the model loads back with every weight as it was (in float16, as saved)."""
    import torch
    from safetensors import safe_open

    from semiret.models.nail import DECODER_FILE, NailModel

    model = NailModel.load(str(tiny_nail))
    with safe_open(str(model.save(tmp_path / "again") / DECODER_FILE), "pt") as decoder:
        assert not [k for k in decoder.keys() if k.startswith(("_projection.", "_transform.", "lm."))]
    loaded, expected = NailModel.load(str(tmp_path / "again")).state_dict(), model.state_dict()
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k].half().to(loaded[k].dtype)) for k in expected)  # saved in float16


def test_a_score_matrix_of_another_shape_than_its_segment_is_refused_on_open(tiny_nail, tmp_path):
    """Compiled lookups would read past the end of a matrix cut short: its shape is checked against meta.json."""
    from semiret.errors import IndexFormatError

    NailExhaustiveRetriever.build(TINY_DOCS, tmp_path / "exh", model=str(tiny_nail))
    scores = next((tmp_path / "exh").glob("seg-*/scores.npy"))
    np.save(scores, np.load(scores)[:, :2])
    for name in ("nail-exh", "bm25+nail"):
        with pytest.raises(IndexFormatError, match="scores.npy holds scores of shape"):
            open_retriever(tmp_path / "exh", name).search(QUERY, k=3)
