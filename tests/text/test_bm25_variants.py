"""BM25's variants (``variant=``, ``--variant``: Lucene, Robertson, ATIRE, BM25L, BM25+, as Kamphuis et al. 2020 and
bm25s define them): scores as bm25s's (BM25L and BM25+ less the part every document gets), stored weights inverted
exactly for merges and rewrites, what an index records, and bad parameters refused."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, open_retriever
from semiret.text.bm25 import BM25_VARIANTS, DEFAULT_DELTA, DELTA_VARIANTS, BM25Parameters

DOCS = [Document(f"d{i}", text) for i, text in enumerate([
    "statins reduce the risk of heart disease",
    "statins statins statins and cholesterol in older adults with heart failure and long follow up",
    "heart rate variability in athletes",
    "cholesterol lowering drugs and cancer risk: a long review of many trials of statins and other drugs",
    "vitamin d supplements and bone health",
    "risk factors of heart disease",
    "the cat sat on the mat",
])]
QUERIES = ["statins heart risk", "cholesterol", "heart heart disease", "cat"]


@pytest.mark.parametrize("variant", BM25_VARIANTS)
def test_scores_are_bm25s_scores(tmp_path, variant):
    import bm25s
    import Stemmer

    delta = 0.7 if variant in DELTA_VARIANTS else DEFAULT_DELTA
    BM25Retriever.build(DOCS, tmp_path / variant, variant=variant, k1=1.2, b=0.7, delta=delta)
    reference = bm25s.BM25(k1=1.2, b=0.7, method=variant, delta=delta)
    reference.index(bm25s.tokenize([d.text for d in DOCS], stopwords="en", stemmer=Stemmer.Stemmer("english"),
                                   show_progress=False), show_progress=False)
    reopened = open_retriever(tmp_path / variant)
    recorded = reopened.index.bm25
    assert (recorded.k1, recorded.b, recorded.variant) == (1.2, 0.7, variant)
    for query in QUERIES:
        tokens = reopened.document_side.analyzer(query)
        expected = reference.get_scores(tokens)
        if reference.nonoccurrence_array is not None:  # the part every document gets, which semiret does not add
            expected = expected - reference.nonoccurrence_array[reference.get_tokens_ids(tokens)].sum()
        hits = reopened.search(query, k=len(DOCS))
        assert {h.id: h.score for h in hits} == pytest.approx(
            {d.id: float(s) for d, s in zip(DOCS, expected) if s > 1e-6}, rel=1e-5, abs=1e-6), query


def test_the_variants_rank_differently(tmp_path):
    rankings = {variant: BM25Retriever.build(DOCS, tmp_path / variant, variant=variant).search(QUERIES, k=7).ids
                for variant in BM25_VARIANTS}
    assert len({json.dumps(ids) for ids in rankings.values()}) > 1
    assert rankings["lucene"] == BM25Retriever.build(DOCS, tmp_path / "default").search(QUERIES, k=7).ids


@pytest.mark.parametrize("variant", BM25_VARIANTS)
def test_stored_weights_invert_to_the_counts(variant):
    parameters = BM25Parameters(k1=1.3, b=0.6, variant=variant, delta=0.4 if variant in DELTA_VARIANTS else 0.5)
    tf = np.array([1, 2, 3, 8, 40, 1], np.float32)
    lengths = np.array([3, 17, 90, 200, 1000, 1], np.float32)
    stored = parameters.saturation(tf, lengths, 57.0)
    assert (stored > 0).all()
    assert parameters.term_frequency(stored, lengths, 57.0).tolist() == tf.tolist()


@pytest.mark.parametrize("variant", ["atire", "bm25l"])
def test_adds_merges_and_rewrites_keep_a_fresh_build_s_scores(tmp_path, variant):
    retriever = BM25Retriever.build(DOCS[:4], tmp_path / "grown", variant=variant)
    long = Document("long", "heart " + "words of a long document about many other things " * 30)
    retriever.add(DOCS[4:] + [long])  # moves the average length: the older segment rewritten
    retriever.delete(["d2"])

    def scores(searcher, query):
        return {h.id: h.score for h in searcher.search(query, k=8) if h.id != "d2"}

    # until a merge the deleted document counts in the statistics, as if it were there
    counted = BM25Retriever.build(DOCS + [long], tmp_path / "counted", variant=variant)
    assert all(scores(retriever, query) == pytest.approx(scores(counted, query), rel=1e-5) for query in QUERIES)
    retriever.index.merge()
    fresh = BM25Retriever.build([d for d in DOCS if d.id != "d2"] + [long], tmp_path / "fresh", variant=variant)
    assert all(scores(retriever, query) == pytest.approx(scores(fresh, query), rel=1e-5) for query in QUERIES)
    assert scores(retriever, "heart") != scores(counted, "heart")


def test_lucene_indexes_record_what_they_did_and_bad_parameters_are_refused(tmp_path):
    BM25Retriever.build(DOCS, tmp_path / "lucene")
    assert json.loads((tmp_path / "lucene" / "meta.json").read_text())["bm25"] == {"k1": 1.5, "b": 0.75}
    BM25Retriever.build(DOCS, tmp_path / "plus", variant="bm25+")
    recorded = json.loads((tmp_path / "plus" / "meta.json").read_text())["bm25"]
    assert recorded == {"k1": 1.5, "b": 0.75, "variant": "bm25+", "delta": 0.5}
    BM25Retriever.build(DOCS, tmp_path / "atire", variant="atire")
    assert json.loads((tmp_path / "atire" / "meta.json").read_text())["bm25"] == {"k1": 1.5, "b": 0.75,
                                                                                  "variant": "atire"}
    described = {name: open_retriever(tmp_path / name).index.describe()["bm25"] for name in ("atire", "lucene", "plus")}
    assert described == {"atire": {"variant": "atire", "k1": 1.5, "b": 0.75},  # no delta where the variant has none
                         "lucene": {"variant": "lucene", "k1": 1.5, "b": 0.75},
                         "plus": {"variant": "bm25+", "k1": 1.5, "b": 0.75, "delta": 0.5}}
    for wrong, message in (({"variant": "okapi"}, "must be one of lucene, robertson"),
                           ({"variant": "bm25l", "k1": 0.0}, "BM25L with k1 = 0"),
                           ({"variant": "bm25+", "delta": -1.0}, "delta"),
                           ({"delta": 0.3}, r"delta .* is BM25L's and BM25\+'s; lucene has none")):
        with pytest.raises(SemiretError, match=message):
            BM25Retriever.build(DOCS, tmp_path / "bad", **wrong)
        assert not (tmp_path / "bad").exists()
    printed = CliRunner().invoke(app, ["index", "--data", str(_corpus(tmp_path)), "--out", str(tmp_path / "cli"),
                                       "--variant", "bm25l", "--delta", "0.3"])
    assert printed.exit_code == 0, printed.output
    assert open_retriever(tmp_path / "cli").index.bm25 == BM25Parameters(variant="bm25l", delta=0.3)


def _corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(d.to_record()) + "\n" for d in DOCS))
    return path


def test_a_weight_at_float32_s_ceiling_stays_a_number_through_a_rewrite(tmp_path):
    documents = [Document("huge", "heart " * 30000 + "kidney"), Document("a", "heart kidney lung"),
                 Document("b", "lung liver")]
    retriever = BM25Retriever.build(documents, tmp_path / "grown", variant="atire", k1=0.001, b=0.0)
    added = [Document(f"x{i}", "liver " * 50 + "spleen") for i in range(5)]
    retriever.add(added)  # moves the average length: the first segment's weights recomputed from their counts
    fresh = BM25Retriever.build(documents + added, tmp_path / "fresh", variant="atire", k1=0.001, b=0.0)
    grown = retriever.search("heart kidney", k=3)
    assert [h.id for h in grown] == [h.id for h in fresh.search("heart kidney", k=3)] == ["huge", "a"]
    assert [h.score for h in grown] == pytest.approx([h.score for h in fresh.search("heart kidney", k=3)], rel=1e-5)
    assert all(np.isfinite(t.weight) for t in retriever.document_terms("huge"))


def test_eval_says_a_variant_does_not_change_an_index_built_without_it(tmp_path):
    from semiret.evaluation.evaluate import _unlike_the_index
    from semiret.search import BagOfTokensRetriever, HybridRetriever

    BM25Retriever.build(DOCS, tmp_path / "lucene")
    assert _unlike_the_index(tmp_path / "lucene", {"variant": "bm25l"}) == {"variant": "bm25l"}
    assert _unlike_the_index(tmp_path / "lucene", {"variant": "lucene", "k1": 1.5}) == {}
    HybridRetriever.build(DOCS, tmp_path / "hybrid", neural="bot")
    assert _unlike_the_index(tmp_path / "hybrid", {"k1": 0.5, "variant": "robertson"}) == {"k1": 0.5,
                                                                                          "variant": "robertson"}
    BagOfTokensRetriever.build(DOCS, tmp_path / "bot")
    with pytest.raises(SemiretError, match="bm25 takes k1, b, variant, delta, text_fields .* not 'vriant'"):
        HybridRetriever.around(tmp_path / "bot", tmp_path / "around", bm25={"vriant": "bm25l"})
    assert not (tmp_path / "around").exists()



def test_a_term_whose_robertson_idf_is_0_adds_nothing_and_lists_no_hit_twice(tmp_path):
    """Robertson's IDF is 0 for a term in more than half the documents: the term went to the kernels with weight
    0, which list a document once per term while its score is 0: 16 of k = 32 hits came back twice (a segment
    searched sparsely, many hits), and with pruning, over 24,000 documents, the list overran its buffer (a crash
    freeing memory). Such a term is dropped: every hit once, those of the other terms as without it."""
    documents = ([Document(f"a{i}", f"alpha filler{i % 50}") for i in range(3000)]  # over half hold alpha
                 + [Document(f"b{i}", ("alpha beta " if i < 300 else "") + f"other{i % 40} word{i % 13}")
                    for i in range(3000)])  # a sparse search of this segment (a fifth of its documents match)
    retriever = BM25Retriever.build(documents[:3000], tmp_path / "bm25", variant="robertson")
    retriever.add(documents[3000:])
    for prune in (False, True):
        for k in (10, 32, 100):
            found = retriever.index.search(retriever.encode_queries(["alpha beta", "beta"]), k=k, prune=prune)
            ids = found.ids[0]
            assert len(ids) == len(set(ids)) == k, (prune, k)
            assert ids == found.ids[1] and found.scores[0] == pytest.approx(found.scores[1]), (prune, k)
    listed = {t.term: (t.weight, t.document_frequency) for t in retriever.analyze("alpha beta")}
    assert listed["alpha"] == (0.0, 3300) and listed["beta"][0] > 0  # analyze lists it, as it weighs
