"""``hybrid``: BM25 and a neural retriever in one composite index, their scores fused (tokenizer-only ``idf``
stands in for the neural part here: same mechanics, no model)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.indexes.inverted import _aligned
from semiret.search import HybridRetriever, open_retriever
from semiret.types import SearchHits

from helpers import TINY_DOCS, TINY_QUERIES, leftovers, write_beir


@pytest.fixture
def hybrid(tmp_path):
    return HybridRetriever.build(TINY_DOCS, tmp_path / "hybrid", neural="idf")


def _ranks(hits, query):
    return {d: r for r, d in enumerate(hits.ids[query], 1)}


def test_rrf_fuses_the_two_rankings(hybrid):
    texts = list(TINY_QUERIES.values())
    fused = open_retriever(hybrid.index.path, fusion="rrf").search(texts, k=10)
    lexical = hybrid.query_side.parts["lexical"].search(texts, k=100)
    neural = hybrid.query_side.parts["neural"].search(texts, k=100)
    for q in range(len(texts)):
        lex, neu = _ranks(lexical, q), _ranks(neural, q)
        expected = {d: sum(0.5 / (60 + ranks[d]) for ranks in (lex, neu) if d in ranks) for d in set(lex) | set(neu)}
        assert fused.scores[q] == pytest.approx(sorted(expected.values(), reverse=True)[:10])
        assert [expected[d] for d in fused.ids[q]] == pytest.approx(fused.scores[q])


def _min_max(hits, query):
    scores = hits.scores[query]
    low, high = min(scores), max(scores)
    return {d: (s - low) / (high - low) if high > low else 1.0 for d, s in zip(hits.ids[query], scores)}


def _bounds(part, text):
    """A query's score bound in ``part``, found without the index's maxima: each distinct query term alone
    scores its best document (IDF and the term's count included), and the bound sums those."""
    encoded = part.query_side.encode_queries([text])[0]
    bound = 0.0
    for term, weight in zip(encoded.terms, encoded.weights):
        single = part.index.search([type(encoded)(encoded.terms[[list(encoded.terms).index(term)]],
                                                  encoded.weights[[list(encoded.terms).index(term)]])], k=1)
        bound += single.scores[0][0] if single.scores[0] else 0.0
    return bound


def _bound_fusion(searcher, text, weight=0.5, bounds=None):
    """Each document's expected 'bound' fused score for one query, from the parts searched alone (``bounds``:
    each part's bound, when found before documents were deleted)."""
    expected = {}
    for name, share in (("lexical", weight), ("neural", 1 - weight)):
        part = searcher.query_side.parts[name]
        hits = part.search([text], k=100)
        bound = (bounds or {}).get(name) or _bounds(part, text)
        for doc_id, score in zip(hits.ids[0], hits.scores[0]):
            expected[doc_id] = expected.get(doc_id, 0.0) + share * score / bound
    return expected


def _assert_fused(fused, query, expected):
    assert fused.scores[query] == pytest.approx(sorted(expected.values(), reverse=True)[:10], rel=1e-5)
    assert [expected[d] for d in fused.ids[query]] == pytest.approx(fused.scores[query], rel=1e-5)


@pytest.mark.parametrize("weight", [0.5, 0.3])
def test_default_fusion_divides_each_part_by_its_bound_over_every_document(hybrid, weight):
    """The default where both parts search postings: each part's score over the query's bound there (the sum of
    its terms' best single-term scores), weighted, summed over every document, not only each part's top hits."""
    searcher = open_retriever(hybrid.index.path, weight=weight)
    assert searcher.query_side.fusion == "bound"
    texts = list(TINY_QUERIES.values()) + ["cats dogs", "nothing matches zzzz"]
    fused = searcher.search(texts, k=10)
    for q, text in enumerate(texts):
        expected = _bound_fusion(searcher, text, weight)
        assert all(0.0 < value <= 1.0 + 1e-6 for value in expected.values())
        _assert_fused(fused, q, expected)
    assert fused.ids[-1] == [] and len(fused.ids[0]) > 1


def test_bound_fusion_over_segments_with_deletions_and_a_part_out_of_step(hybrid):
    """Several segments with deletions are searched in one pass; parts whose segments no longer hold the same
    documents in the same order (one part merged alone) are searched one by one and fused the same way. Deleted
    documents count in a bound until a merge drops them, as they do in document frequencies."""
    for n in range(3):
        hybrid.add([Document(f"x{n}{i}", f"cats {'dogs ' * i}and quokkas number {n}") for i in range(3)])
    texts = list(TINY_QUERIES.values()) + ["cats dogs quokkas"]
    before = open_retriever(hybrid.index.path).query_side.parts
    bounds = {text: {name: _bounds(part, text) for name, part in before.items()} for text in texts}
    hybrid.delete(["d1", "x11"])
    for merged in (False, True):
        if merged:
            hybrid.index.parts["neural"].merge()  # one part only: its segments no longer match the other's
            for text in texts:
                bounds[text]["neural"] = None  # its deleted documents are gone: found from the live ones
        searcher = open_retriever(hybrid.index.path)
        parts = searcher.index.parts
        assert (len(parts["neural"].segments) < len(parts["lexical"].segments)) == merged
        assert len(parts["lexical"].segments) > 1
        fused = searcher.search(texts, k=10)
        assert "d1" not in sum(fused.ids, []) and "x11" not in sum(fused.ids, [])
        for q, text in enumerate(texts):
            _assert_fused(fused, q, _bound_fusion(searcher, text, bounds=bounds[text]))


def test_bound_fusion_needs_parts_that_search_postings(tmp_path, tiny_bert):
    HybridRetriever.build(TINY_DOCS, tmp_path / "dense", neural="dense", model=str(tiny_bert))
    assert open_retriever(tmp_path / "dense").query_side.fusion == "score"
    with pytest.raises(SemiretError, match="fusion 'bound' needs a neural part that searches postings"):
        open_retriever(tmp_path / "dense", fusion="bound")


def test_score_fusion_sums_min_max_normalised_scores(hybrid):
    """'score': each ranking's top 100 scores mapped to [0, 1], weighted half and half, summed."""
    texts = list(TINY_QUERIES.values())
    fused = open_retriever(hybrid.index.path, fusion="score").search(texts, k=10)
    lexical = hybrid.query_side.parts["lexical"].search(texts, k=100)
    neural = hybrid.query_side.parts["neural"].search(texts, k=100)
    for q in range(len(texts)):
        lex, neu = _min_max(lexical, q), _min_max(neural, q)
        expected = {d: 0.5 * lex.get(d, 0.0) + 0.5 * neu.get(d, 0.0) for d in set(lex) | set(neu)}
        assert fused.scores[q] == pytest.approx(sorted(expected.values(), reverse=True)[:10])
        assert [expected[d] for d in fused.ids[q]] == pytest.approx(fused.scores[q])


def _standardised(hits, query, floor=None):
    """Each hit's z-score among its ranking's (sample standard deviation), by hand."""
    scores = hits.scores[query]
    mean = sum(scores) / len(scores)
    spread = (sum((s - mean) ** 2 for s in scores) / (len(scores) - 1)) ** 0.5 if len(scores) > 1 else 0.0
    return {d: (s - mean) / spread if spread else None for d, s in zip(hits.ids[query], scores)}


@pytest.mark.parametrize("fusion", ["zscore", "dbsf"])
def test_z_score_and_distribution_based_fusions(hybrid, fusion):
    """'zscore' (OpenSearch's: z-scores, those at or below 0 counting 0.001) and 'dbsf' (Qdrant's: mean +- 3 standard
    deviations onto [0, 1]), each ranking's top 100, weighted half and half, summed."""
    texts = list(TINY_QUERIES.values())
    fused = open_retriever(hybrid.index.path, fusion=fusion).search(texts, k=10)
    parts = [hybrid.query_side.parts[name].search(texts, k=100) for name in ("lexical", "neural")]
    for q in range(len(texts)):
        expected = {}
        for hits in parts:
            for d, z in _standardised(hits, q).items():
                share = (1.0 if z is None else max(z, 0.001)) if fusion == "zscore" else (
                    0.5 if z is None else 0.5 + z / 6)
                expected[d] = expected.get(d, 0.0) + 0.5 * share
        assert fused.scores[q] == pytest.approx(sorted(expected.values(), reverse=True)[:10])
        assert [expected[d] for d in fused.ids[q]] == pytest.approx(fused.scores[q])


def test_score_fusion_weight_picks_a_side(tmp_path, hybrid):
    text = "cats and dogs"
    only_bm25 = open_retriever(hybrid.index.path, fusion="score", weight=1.0).search(text, k=3)
    only_neural = open_retriever(hybrid.index.path, fusion="score", weight=0.0).search(text, k=3)
    assert [h.id for h in only_bm25] == hybrid.query_side.parts["lexical"].search([text], k=3).ids[0]
    assert [h.id for h in only_neural] == hybrid.query_side.parts["neural"].search([text], k=3).ids[0]
    assert only_bm25[0].score == 1.0 and only_bm25[0].text  # normalised best score; texts from the first part


@pytest.mark.parametrize("fusion", ["rrf", "score"])
def test_every_page_is_cut_from_one_fusion_whatever_k(hybrid, fusion, caplog):
    """Each part's best fusion_depth fused, whatever k: a page past fusion_depth (the service asks for k + offset)
    fused deeper lists, normalised or ranked again, and pages repeated and skipped hits. More than both parts'
    best fusion_depth is said once, not found."""
    import logging

    searcher = open_retriever(hybrid.index.path, fusion=fusion, fusion_depth=2)
    text = "cats dogs statins garden birds morning"
    whole = searcher.search(text, k=4)
    assert len(whole) >= 3  # both parts' best 2: 3 or 4 documents
    with caplog.at_level(logging.WARNING):
        deeper = searcher.search(text, k=len(TINY_DOCS))
    assert [(h.id, h.score) for h in deeper] == [(h.id, h.score) for h in whole]
    assert caplog.text.count("is past fusion_depth 2") == 1
    for k in range(1, len(whole) + 1):  # each page as the service cuts it: the first k of the same ranking
        assert [h.id for h in searcher.search(text, k=k)] == [h.id for h in whole][:k]


@pytest.mark.parametrize("fusion", ["rrf", "score"])
def test_fusion_on_id_hashes_equals_fusion_on_ids(hybrid, fusion):
    """Rankings of semiret indexes are joined on their id hashes (only the ids shown are decoded); the result is
    the ids' fusion exactly, scores and ties included, over several segments with deletions."""
    for n in range(3):  # three more segments, one document deleted from the first
        hybrid.add([Document(f"x{n}{i}", f"cats {'dogs ' * i}and quokkas number {n}") for i in range(3)])
    hybrid.delete(["d1"])
    searcher = open_retriever(hybrid.index.path, fusion=fusion, weight=0.3)
    assert len(searcher.index.parts["lexical"].segments) > 1
    texts = list(TINY_QUERIES.values()) + ["cats dogs quokkas", "nothing matches zzzz"]
    lexical, neural = (searcher.query_side.parts[name].search(texts, k=100) for name in ("lexical", "neural"))
    assert lexical.id_keys(0) is not None and neural.id_keys(0) is not None
    by_keys = searcher.query_side.fuse(lexical, neural, 10)
    as_ids = [SearchHits(hits.ids, hits.scores) for hits in (lexical, neural)]  # plain hits: no id hashes
    assert as_ids[0].id_keys(0) is None
    by_ids = searcher.query_side.fuse(*as_ids, 10)
    assert by_keys.ids == by_ids.ids and by_keys.scores == by_ids.scores
    assert any(len(ids) == 10 for ids in by_keys.ids) and by_keys.ids[-1] == []


def test_a_filtered_fuzzy_hybrid_explanation_adds_up_to_the_search_score(tmp_path):
    """Each part's bound was of the query read against every document, its terms of the query read against those
    that pass the filter (another fuzzy correction): 0.7583 explained for a hit of 0.8333."""
    docs = [Document("A", "zebrafish abcdexy study", metadata={"g": "x"}),
            Document("B", "abcdefh trial", metadata={"g": "y"}),
            Document("C", "unrelated words here", metadata={"g": "x"}), Document("D", "more filler text")]
    hybrid = HybridRetriever.build(docs, tmp_path / "hybrid", neural="idf", fuzzy=True)
    hit = hybrid.search("zebrafish abcdefg", k=1, filter={"g": "x"})[0]
    explained = hybrid.explain("zebrafish abcdefg", hit.id, filter={"g": "x"})
    assert hit.id == "A" and explained.score == pytest.approx(hit.score, rel=1e-6)
    marked = hybrid.highlight("zebrafish abcdefg", "A", filter={"g": "x"})
    assert marked and "<em>abcdexy</em>" in marked[0]


def test_adds_and_deletes_reach_both_parts_at_once(hybrid):
    hybrid.add([Document("d7", "A quokka photographs cats in the garden.")])
    assert hybrid.index.n_docs == 7 and all(part.n_docs == 7 for part in hybrid.index.parts.values())
    assert hybrid.search("quokka", k=1)[0].id == "d7"  # a word new to BM25's vocabulary, found at once
    assert hybrid.delete(["d7", "d1"]) == 2
    assert all(part.n_docs == 5 for part in hybrid.index.parts.values())
    reopened = open_retriever(hybrid.index.path)
    assert isinstance(reopened, HybridRetriever)
    assert "d1" not in [h.id for h in reopened.search("cats", k=10)]


def test_a_part_opened_on_its_own_is_searched_but_never_changed_alone(hybrid):
    """Adding to one part of a hybrid (``semiret add --index HYBRID/lexical``) would leave the parts holding different
    documents: refused, naming the hybrid to change instead; the part still opens and searches."""
    part = open_retriever(hybrid.index.path / "lexical")
    assert part.search("cats", k=1)[0].id == hybrid.search("cats", k=1)[0].id
    for change in (lambda: part.add([Document("d9", "walrus")]), lambda: part.delete(["d1"]), part.index.merge):
        with pytest.raises(SemiretError, match=f"is the 'lexical' part of the index {hybrid.index.path}, whose parts "
                                               "change together"):
            change()
    assert all(p.n_docs == 6 for p in open_retriever(hybrid.index.path).index.parts.values())
    assert hybrid.add([Document("d9", "walrus")]) == 1 and hybrid.search("walrus", k=1)[0].id == "d9"


def test_bad_input_is_refused_and_changes_nothing(tmp_path, hybrid):
    with pytest.raises(SemiretError, match="weight must be between 0 and 1"):
        open_retriever(hybrid.index.path, weight=1.5)
    with pytest.raises(SemiretError, match=r"fusion \(--fusion\) must be one of bound, score, rrf"):
        open_retriever(hybrid.index.path, fusion="max")
    for option, message in (({"rrf_k": -1}, r"rrf_k \(--rrf-k\) must be at least 0, got -1"),
                            ({"fusion_depth": 0}, r"fusion_depth \(--fusion-depth\) must be at least 1, got 0")):
        with pytest.raises(SemiretError, match=message):
            open_retriever(hybrid.index.path, **option)
    with pytest.raises(SemiretError, match="rrf_k \\(--rrf-k\\) applies to fusion 'rrf' only; this hybrid fuses by"):
        open_retriever(hybrid.index.path, fusion="score", rrf_k=10)  # it would change nothing: said, not ignored
    with pytest.raises(SemiretError, match="not with 'bm25'"):
        HybridRetriever.build(TINY_DOCS, tmp_path / "x", neural="bm25")
    with pytest.raises(SemiretError, match="takes no model"):
        HybridRetriever.build(TINY_DOCS, tmp_path / "y", neural="idf", model="minilm")
    with pytest.raises(SemiretError, match="already in"):
        hybrid.add([Document("d2", "again"), Document("d8", "new")])
    with pytest.raises(SemiretError, match="duplicate document id 'd8'"):
        hybrid.add([Document("d8", "new"), Document("d8", "twice")])
    assert all(part.n_docs == 6 for part in open_retriever(hybrid.index.path).index.parts.values())
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists() and not leftovers(tmp_path)


def test_cli_builds_and_evaluates_a_hybrid(tmp_path):
    beir = write_beir(tmp_path / "tiny")
    runner = CliRunner()
    built = runner.invoke(app, ["index", "--data", str(beir), "--out", str(tmp_path / "h"), "-r", "hybrid",
                                "--neural", "idf"])
    assert built.exit_code == 0, built.output
    assert json.loads(built.stdout)["parts"]["neural"]["kind"] == "binary"
    figures = runner.invoke(app, ["eval", "--data", str(beir), "-r", "hybrid", "--neural", "idf", "--fusion", "score",
                                  "--json"])
    assert figures.exit_code == 0, figures.output
    assert 0 < json.loads(figures.stdout)["nDCG@10"] <= 1


def test_a_hybrid_index_is_assembled_around_a_built_neural_index(tmp_path, hybrid):
    """``semiret hybrid-index``: BM25 from the neural index's stored texts, the neural index copied (merged: its
    deleted documents dropped, so the two parts align); it searches as a hybrid built from the live documents
    does, in one pass, and the neural index itself is left as it was."""
    from semiret.search import retriever_class

    neural = retriever_class("idf").build(TINY_DOCS, tmp_path / "idf")
    neural.delete(["d3"])
    result = CliRunner().invoke(app, ["hybrid-index", str(tmp_path / "idf"), str(tmp_path / "around")])
    assert result.exit_code == 0, result.output
    around = open_retriever(tmp_path / "around")
    assert isinstance(around, HybridRetriever) and around.index.n_docs == 5
    texts = list(TINY_QUERIES.values())
    fresh = HybridRetriever.build([d for d in TINY_DOCS if d.id != "d3"], tmp_path / "fresh", neural="idf")
    assert around.search(texts, k=10).ids == fresh.search(texts, k=10).ids  # the same statistics: d3 merged away
    assert _aligned(*(around.index.parts[name].snapshot for name in ("lexical", "neural")))  # one pass
    assert around.index.get_document("d2").text == hybrid.index.get_document("d2").text
    around.add([Document("d9", "A quokka photographs cats.")])
    assert around.search("quokka", k=1)[0].id == "d9" and neural.index.n_docs == 5
    around.delete(["d1"])
    lexical = around.index.parts["lexical"]
    first = lexical.segments[0].path.name
    around.add([Document("d10", "wombats dig " * 40)])  # moves BM25's average length: its segments are rewritten
    assert lexical.segments[0].path.name != first and lexical.segments[0].n_deleted == 1
    assert _aligned(*(around.index.parts[name].snapshot for name in ("lexical", "neural")))  # still one pass
    assert open_retriever(tmp_path / "idf").index.n_docs == 5


def test_a_hybrid_index_needs_a_neural_index_with_texts(tmp_path, hybrid):
    from semiret.search import retriever_class

    retriever_class("bm25").build(TINY_DOCS, tmp_path / "bm25")
    retriever_class("idf").build(TINY_DOCS, tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="not built by a neural retriever"):
        HybridRetriever.around(tmp_path / "bm25", tmp_path / "a")
    with pytest.raises(SemiretError, match="not built by a neural retriever"):
        HybridRetriever.around(hybrid.index.path, tmp_path / "b")
    with pytest.raises(SemiretError, match="stores no texts"):
        HybridRetriever.around(tmp_path / "bare", tmp_path / "c")
    retriever_class("idf").build(TINY_DOCS, tmp_path / "idf")
    before = hybrid.search(["cats"], k=10).ids
    with pytest.raises(SemiretError, match="already exists"):
        HybridRetriever.around(tmp_path / "idf", hybrid.index.path)
    assert open_retriever(hybrid.index.path).search(["cats"], k=10).ids == before
    for inside in ("idf", "idf/sub"):
        with pytest.raises(SemiretError, match="would replace or lie inside"):
            HybridRetriever.around(tmp_path / "idf", tmp_path / inside, overwrite=True)
    assert open_retriever(tmp_path / "idf").name == "idf" and not (tmp_path / "idf" / "sub").exists()
    assert not any((tmp_path / name).exists() for name in "abc") and not leftovers(tmp_path)


def test_the_bm25_part_takes_bm25_s_parameters(tmp_path):
    """k1, b, variant and delta reach the lexical part, built from the corpus or around a neural index, and bad
    ones fail before anything is written."""
    from semiret.search import retriever_class
    from semiret.text.bm25 import BM25Parameters

    built = HybridRetriever.build(TINY_DOCS, tmp_path / "built", neural="idf", k1=1.1, b=0.5, variant="bm25l")
    expected = BM25Parameters(1.1, 0.5, "bm25l", 0.5)
    assert built.index.parts["lexical"].bm25 == expected
    alone = retriever_class("bm25").build(TINY_DOCS, tmp_path / "alone", k1=1.1, b=0.5, variant="bm25l")
    lexical = built.query_side.parts["lexical"]
    assert lexical.search(list(TINY_QUERIES.values()), k=6).scores == alone.search(list(TINY_QUERIES.values()),
                                                                                      k=6).scores
    retriever_class("idf").build(TINY_DOCS, tmp_path / "idf")
    result = CliRunner().invoke(app, ["hybrid-index", str(tmp_path / "idf"), str(tmp_path / "around"), "--k1", "1.1",
                                      "--b", "0.5", "--variant", "bm25l"])
    assert result.exit_code == 0, result.output
    assert open_retriever(tmp_path / "around").index.parts["lexical"].bm25 == expected
    with pytest.raises(SemiretError, match="must be one of lucene"):
        HybridRetriever.around(tmp_path / "idf", tmp_path / "bad", bm25={"variant": "okapi"})
    with pytest.raises(SemiretError, match="must be one of lucene"):
        HybridRetriever.build(TINY_DOCS, tmp_path / "bad", neural="idf", variant="okapi")
    assert not (tmp_path / "bad").exists()


def test_info_shows_each_part_s_analyzer_and_parameters(tmp_path):
    """``semiret info``, ``CompositeIndex.describe`` and ``GET /indexes/{name}`` of a hybrid: each part's retriever
    and analyzer as its ``meta.json`` records them (the BM25 part's text_fields and k1/b, the neural part's
    tokenizer), beside the keys they had (nothing renamed)."""
    from semiret.serving import ServeSettings, create_app

    from helpers import LocalClient, client_of

    HybridRetriever.build(TINY_DOCS, tmp_path / "h", neural="idf", text_fields="title^2,text", k1=1.1, b=0.6)
    result = CliRunner().invoke(app, ["info", str(tmp_path / "h")])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    lexical, neural = info["parts"]["lexical"], info["parts"]["neural"]
    assert (lexical["retriever"], lexical["analyzer"]["text_fields"]) == ("bm25", {"title": 2, "text": 1})
    assert lexical["analyzer"]["stemmer"] == "english" and lexical["bm25"] == {"variant": "lucene", "k1": 1.1,
                                                                               "b": 0.6}
    assert neural["retriever"] == "idf" and neural["analyzer"]["tokenizer"] == "bert-base-uncased"
    assert {"kind", "documents", "terms", "segments"} <= lexical.keys() and info["retriever"] == "hybrid"
    assert info["analyzer"] == {"type": "composite", "parts": ["lexical", "neural"]}
    assert open_retriever(tmp_path / "h").index.describe()["parts"] == info["parts"]
    with LocalClient(create_app(ServeSettings({"h": str(tmp_path / "h")}, write_process=False))) as http:
        served = client_of(http).describe("h")
    assert served["parts"]["lexical"]["analyzer"]["text_fields"] == {"title": 2, "text": 1}
    assert served["parts"]["neural"]["analyzer"] == neural["analyzer"] and served["analyzer"] == info["analyzer"]
    assert served["retriever"] == "hybrid" and served["documents"] == len(TINY_DOCS)
