"""Retrievers: BM25 against bm25s, bag-of-tokens overlap, IDF weighting (corpus and MS MARCO), options."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import DataFormatError, IndexFormatError, SemiretError
from semiret.indexes.segments import check_build_target
from semiret.search import BagOfTokensRetriever, BM25Retriever, IDFRetriever, open_retriever, retriever_class
from semiret.text.token_weights import load_token_weights
from semiret.text import WordAnalyzer, WordPieceVocabulary

from helpers import MSMARCO_IDF, TINY_DOCS, leftovers, require_shared_data, write_jsonl

CORPUS = TINY_DOCS + [
    Document("d7", "Heart disease and statins: a randomized trial of statin dosage in older patients."),
    Document("d8", "The garden of forking paths, a story."),
    Document("d9", ""),
    Document("d10", "Dogs dogs dogs dogs: repeated dogs everywhere, and cats too.", "On dogs"),
]
QUERIES = ["cats and dogs", "statins cancer risk", "morning garden birds", "heart disease statin trial",
           "dogs dogs mailman"]


@pytest.fixture(scope="module")
def vocabulary():
    return WordPieceVocabulary("bert-base-uncased")


@pytest.fixture
def bm25(tmp_path):
    return BM25Retriever.build(CORPUS, tmp_path / "bm25")


@pytest.fixture
def bot_index(tmp_path):
    return BagOfTokensRetriever.build(CORPUS, tmp_path / "bot").index.path


def all_scores(retriever, query: str) -> dict[str, float]:
    hits = retriever.search([query], k=1000)
    return dict(zip(hits.ids[0], hits.scores[0]))


# ---------------------------------------------------------------------------- BM25
@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (0.9, 0.4), (1.2, 1.0)])
def test_bm25_scores_equal_bm25s(tmp_path, k1, b):
    import bm25s
    import Stemmer

    ours = BM25Retriever.build(CORPUS, tmp_path / "idx", k1=k1, b=b)
    texts = [d.full_text for d in CORPUS]
    stemmer = Stemmer.Stemmer("english")
    reference = bm25s.BM25(k1=k1, b=b, method="lucene")
    reference.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    analyzer = WordAnalyzer()
    for query in QUERIES:
        expected = reference.get_scores(analyzer(query))
        got = all_scores(ours, query)
        assert set(got) == {d.id for d, s in zip(CORPUS, expected) if s > 0}
        for doc, score in zip(CORPUS, expected):
            if score > 0:
                assert got[doc.id] == pytest.approx(float(score), rel=1e-5)


def test_bm25_query_without_known_words_returns_nothing(bm25):
    hits = bm25.search(["zyzzyva quux", "", "the and of", "!!!"], k=5)
    assert hits.ids == [[], [], [], []] and hits.scores == [[], [], [], []]


def test_bm25_empty_documents_are_never_retrieved(bm25):
    assert "d9" in bm25.index
    everything = " ".join(d.full_text for d in CORPUS)
    assert "d9" not in bm25.search([everything], k=100).ids[0]


def test_bm25_open_restores_the_analyzer(tmp_path):
    BM25Retriever.build(CORPUS, tmp_path / "idx", stemmer="none", stopwords="none")
    reopened = open_retriever(tmp_path / "idx")
    assert isinstance(reopened, BM25Retriever)
    assert reopened.document_side.analyzer.stemmer is None and reopened.document_side.analyzer.stopwords == "none"
    assert reopened.search(["the"], k=3).ids[0]  # 'the' is a term without stopwords
    assert set(reopened.search(["statins"], k=10).ids[0]) == {"d3", "d7"}  # no stemming: d6 has only 'statin'
    assert set(BM25Retriever.build(CORPUS, tmp_path / "stemmed").search(["statins"], k=10).ids[0]) == {"d3", "d6", "d7"}


def test_bm25_add_new_words_and_delete(tmp_path, bm25):
    assert not bm25.search(["zebra"]).ids[0]
    assert bm25.add([Document("z1", "A zebra and a statin")]) == 1
    assert bm25.search(["zebras"], k=3).ids == [["z1"]]
    reopened = BM25Retriever.open(tmp_path / "bm25")
    assert reopened.search(["zebra"], k=3).ids == [["z1"]]
    assert reopened.index.get_document("z1").text == "A zebra and a statin"
    assert reopened.delete(["z1", "d1"]) == 2
    assert not reopened.search(["zebra"]).ids[0]
    assert "d1" not in BM25Retriever.open(tmp_path / "bm25").search(["cats"], k=20).ids[0]


def test_an_add_with_a_bad_id_fails_before_any_document_is_encoded(bm25, monkeypatch):
    """Encoding a file with a neural model can take minutes: an id already there, repeated or unusable is refused
    first."""
    def never(documents):
        raise AssertionError("encoded")

    monkeypatch.setattr(bm25.document_side, "encode", never)
    for documents, message in (([Document("new", "x"), Document("d1", "y")], "'d1' is already in"),
                               ([Document("n", "x"), Document("n", "y")], "duplicate document id 'n'"),
                               ([Document("a\nb", "x")], "holds the control character")):
        with pytest.raises(SemiretError, match=message):
            bm25.add(documents)


def test_bm25_search_after_a_failed_add(bm25):
    """A rejected add must not break later searches for the words it introduced."""
    with pytest.raises(SemiretError, match="already in"):
        bm25.add([Document("d1", "brand new vocabulary: quokka")])
    assert bm25.search(["quokka"]).ids == [[]]
    assert bm25.search(["cats"], k=1).ids[0]
    bm25.add([Document("q", "quokka")])
    assert bm25.search(["quokka"]).ids == [["q"]]


def test_bm25_add_replace(tmp_path, bm25):
    bm25.add([Document("d1", "now about quantum chromodynamics")], replace=True)
    for retriever in (bm25, BM25Retriever.open(tmp_path / "bm25")):
        assert "d1" not in retriever.search(["cats mice"], k=20).ids[0]
        assert retriever.search(["quantum"]).ids == [["d1"]]
        assert retriever.index.n_docs == len(CORPUS)


def test_bm25_merge_after_changes_equals_fresh_build(tmp_path, bm25):
    bm25.add([Document("n1", "Statins and dogs in a new trial"), Document("n2", "Cats sing in the garden")])
    bm25.delete(["d2", "d7"])
    bm25.index.merge()
    live = [d for d in CORPUS if d.id not in ("d2", "d7")] + [Document("n1", "Statins and dogs in a new trial"),
                                                            Document("n2", "Cats sing in the garden")]
    fresh = BM25Retriever.build(live, tmp_path / "fresh")
    for query in QUERIES:
        merged, rebuilt = all_scores(bm25, query), all_scores(fresh, query)
        assert merged.keys() == rebuilt.keys()
        for doc_id in merged:
            assert merged[doc_id] == pytest.approx(rebuilt[doc_id], abs=1e-5)


def test_failing_document_stream_leaves_no_index(tmp_path):
    def documents():
        yield from CORPUS[:3]
        raise RuntimeError("corpus reader broke")

    with pytest.raises(RuntimeError, match="corpus reader broke"):
        BM25Retriever.build(documents(), tmp_path / "idx", batch_size=2)
    assert list(tmp_path.iterdir()) == []


def test_build_refuses_existing_index_and_keeps_it(tmp_path, bm25):
    with pytest.raises(IndexFormatError, match="already exists"):
        BM25Retriever.build([Document("x", "other")], tmp_path / "bm25")
    assert BM25Retriever.open(tmp_path / "bm25").index.n_docs == len(CORPUS)
    rebuilt = BM25Retriever.build([Document("x", "other")], tmp_path / "bm25", overwrite=True)
    assert rebuilt.index.n_docs == 1 and leftovers(tmp_path) == []


def test_a_build_never_replaces_other_files_or_the_corpus_it_reads(tmp_path, bm25):
    """A folder of other files is refused with or without --overwrite (no hint to pass it); an index holding the
    corpus file being indexed is refused before it is read, and stays as it was."""
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("keep me")
    for overwrite in (False, True):
        with pytest.raises(IndexFormatError, match="is not a semiret index: choose another directory"):
            check_build_target(other, overwrite)
    corpus = write_jsonl(tmp_path / "bm25" / "corpus.jsonl", [d.to_record() for d in CORPUS])
    with pytest.raises(IndexFormatError, match="corpus .*corpus.jsonl lies inside .*bm25, which --overwrite would"):
        check_build_target(tmp_path / "bm25", True, source=corpus)
    check_build_target(tmp_path / "bm25", True, source=tmp_path / "elsewhere.jsonl")  # any other corpus: fine
    assert corpus.is_file() and (other / "mine.txt").read_text() == "keep me"


def test_a_tree_branching_below_2_is_refused_before_the_encoder_loads(tmp_path, monkeypatch):
    import semiret.models.encoders

    monkeypatch.setattr(semiret.models.encoders, "load_encoder", lambda *args, **kwargs: pytest.fail("loaded"))
    with pytest.raises(SemiretError, match=r"tree_branching \(--tree-branching\) must be at least 2, got 1"):
        retriever_class("dense").build(TINY_DOCS, tmp_path / "tree", model="minilm", ann="tree", tree_branching=1)
    assert not (tmp_path / "tree").exists()


def test_an_existing_index_is_refused_before_a_model_loads(tmp_path, bm25, monkeypatch):
    monkeypatch.setattr(retriever_class("dense").documents, "create",
                        classmethod(lambda *args: pytest.fail("a model loaded")))
    with pytest.raises(IndexFormatError, match="already exists"):
        retriever_class("dense").build([Document("x", "other")], tmp_path / "bm25", model="minilm")


# ---------------------------------------------------------------------------- bag of tokens
def test_bot_scores_are_shared_distinct_tokens(bot_index, vocabulary):
    bot = BagOfTokensRetriever.open(bot_index)
    doc_tokens = {d.id: set(vocabulary.encode(d.full_text)) for d in CORPUS}
    for query in QUERIES + ["dogs dogs dogs", "[CLS] statins [SEP]"]:
        q = set(vocabulary.encode(query))
        expected = {d: float(len(q & t)) for d, t in doc_tokens.items() if q & t}
        assert all_scores(bot, query) == expected


def test_bot_unknown_and_special_only_queries(bot_index):
    bot = BagOfTokensRetriever.open(bot_index)
    assert bot.search(["[SEP] [CLS] [PAD]", ""], k=3).ids == [[], []]


def test_bot_add_and_delete(bot_index):
    bot = BagOfTokensRetriever.open(bot_index)
    bot.add([Document("new", "xylophone orchestra")])
    assert bot.search(["xylophone"], k=3).ids == [["new"]]
    bot.delete(["new"])
    assert BagOfTokensRetriever.open(bot_index).search(["xylophone"], k=3).ids == [[]]


# ---------------------------------------------------------------------------- idf
@pytest.mark.parametrize("min_idf", [0.0, 1.0])
def test_idf_corpus_weights_are_lucene_idf(bot_index, vocabulary, min_idf):
    idf = IDFRetriever.open(bot_index, min_idf=min_idf)
    doc_tokens = {d.id: set(vocabulary.encode(d.full_text)) for d in CORPUS}
    n = len(CORPUS)

    def lucene_idf(token):
        df = sum(token in t for t in doc_tokens.values())
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    for query in QUERIES:
        q = set(vocabulary.encode(query))
        q = {x for x in q if lucene_idf(x) >= min_idf}  # query-side stopwords by IDF
        expected = {d: sum(lucene_idf(x) for x in q & t) for d, t in doc_tokens.items() if q & t}
        got = all_scores(idf, query)
        assert got.keys() == expected.keys()
        for doc_id, score in expected.items():
            assert got[doc_id] == pytest.approx(score, rel=1e-5)


def test_idf_corpus_weights_follow_additions(bot_index, vocabulary):
    idf = IDFRetriever.open(bot_index)
    token = vocabulary.encode("garden")[0]
    df = sum(token in vocabulary.encode(d.full_text) for d in CORPUS)
    before = idf.query_side.token_weights(idf.index)[token]
    assert before == pytest.approx(math.log(1 + (len(CORPUS) - df + 0.5) / (df + 0.5)), rel=1e-6)
    idf.add([Document(f"g{i}", "garden") for i in range(5)])
    after = idf.query_side.token_weights(idf.index)[token]
    assert after < before
    assert after == pytest.approx(math.log(1 + (len(CORPUS) + 5 - df - 5 + 0.5) / (df + 5 + 0.5)), rel=1e-6)


def test_idf_with_the_msmarco_table(bot_index, vocabulary):
    require_shared_data()
    table = json.loads(MSMARCO_IDF.read_text())
    idf = IDFRetriever.open(bot_index, idf=MSMARCO_IDF)
    weights = idf.query_side.token_weights(idf.index)
    ids = vocabulary.token_ids()
    assert weights[ids["cancer"]] == pytest.approx(table["cancer"])
    assert weights[ids["[CLS]"]] == 0.0 and weights[ids["[unused5]"]] == 0.0  # excluded ids never count
    doc_tokens = {d.id: set(vocabulary.encode(d.full_text)) for d in CORPUS}
    for query in QUERIES:
        q = {x for x in vocabulary.encode(query) if table[vocabulary.token(x)] >= idf.query_side.min_idf}
        expected = {d: sum(table[vocabulary.token(x)] for x in q & t) for d, t in doc_tokens.items() if q & t}
        got = all_scores(idf, query)
        assert got.keys() == {d for d, s in expected.items() if s > 0}
        for doc_id in got:
            assert got[doc_id] == pytest.approx(expected[doc_id], rel=1e-5)


def test_token_weight_table_for_another_vocabulary(tmp_path, vocabulary):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({f"▁piece{i}": 1.0 for i in range(100)} | {"the": 2.0}))
    with pytest.raises(DataFormatError, match="only 1 of 101 tokens belong to the bert-base-uncased vocabulary"):
        load_token_weights(path, vocabulary)


@pytest.mark.parametrize("bad", ["-1.5", "NaN", "Infinity", '"high"', "null"])
def test_token_weight_table_with_bad_weights(tmp_path, vocabulary, bad):
    path = tmp_path / "bad.json"
    path.write_text('{"the": 1.0, "cancer": %s}' % bad)
    with pytest.raises(DataFormatError, match="weight of token 'cancer' must be a finite non-negative number"):
        load_token_weights(path, vocabulary)


def test_token_weight_table_file_errors(tmp_path, vocabulary):
    with pytest.raises(DataFormatError, match="token-weight table not found"):
        load_token_weights(tmp_path / "missing.json", vocabulary)
    (tmp_path / "broken.json").write_text('{"the": 1.0,')
    with pytest.raises(DataFormatError, match="malformed JSON"):
        load_token_weights(tmp_path / "broken.json", vocabulary)
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(DataFormatError, match="expected a non-empty JSON object"):
        load_token_weights(tmp_path / "list.json", vocabulary)


def test_bad_table_is_reported_when_opening_the_retriever(bot_index, tmp_path):
    (tmp_path / "neg.json").write_text('{"the": -1}')
    with pytest.raises(DataFormatError, match="neg.json"):
        IDFRetriever.open(bot_index, idf=tmp_path / "neg.json")


# ---------------------------------------------------------------------------- options and kinds
def test_options_that_do_not_apply_are_errors(tmp_path, bot_index):
    with pytest.raises(SemiretError, match=r"option\(s\) idf do not apply to retriever 'bm25'"):
        BM25Retriever.build(CORPUS, tmp_path / "a", idf="corpus")
    with pytest.raises(SemiretError, match=r"option\(s\) k1 do not apply to retriever 'bot'"):
        BagOfTokensRetriever.build(CORPUS, tmp_path / "b", k1=1.2)
    with pytest.raises(SemiretError, match=r"option\(s\) b, k1 do not apply to retriever 'idf'") as idf:
        retriever_class("idf").split_options({"k1": 1.0, "b": 0.5, "idf": "corpus"})
    assert "tokenizer, max_length to build; idf, two_phase, min_idf, synonyms to search" in str(idf.value)  # which is which
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    assert retriever_class("bm25").split_options({"k1": 1.0, "idf": None}) == ({"k1": 1.0}, {})  # unset is fine


def test_options_that_do_not_apply_when_opening_are_errors(bm25, bot_index):
    with pytest.raises(SemiretError, match=r"option\(s\) idf do not apply when searching with retriever 'bot'"):
        open_retriever(bot_index, idf="corpus")
    with pytest.raises(SemiretError, match=r"option\(s\) idf do not apply when searching with retriever 'bm25'"):
        open_retriever(bm25.index.path, idf="corpus")
    with pytest.raises(SemiretError, match=r"option\(s\) k1 do not apply when searching"):
        BM25Retriever.open(bm25.index.path, k1=2.0)  # fixed when the index was built
    assert isinstance(open_retriever(bot_index, "idf", idf="corpus"), IDFRetriever)
    assert isinstance(open_retriever(bot_index, idf=None), BagOfTokensRetriever)


def test_build_and_search_options_are_split(tmp_path):
    cls = retriever_class("idf")
    options = {"tokenizer": "bert-base-uncased", "max_length": None, "idf": "corpus", "k1": None}
    assert cls.split_options(options) == ({"tokenizer": "bert-base-uncased"}, {"idf": "corpus"})


def test_unknown_retriever_and_wrong_index_kind(bm25, bot_index):
    with pytest.raises(SemiretError, match="unknown retriever 'splode'"):
        retriever_class("splode")
    with pytest.raises(SemiretError, match=r"is a 'bm25' index built for bm25; idf needs one of .*"
                                           r"Retrievers that search it: bm25 \(without -r: bm25\)"):
        open_retriever(bm25.index.path, "idf")
    with pytest.raises(SemiretError, match=r"is a 'binary' index built for bot; bm25 needs one of .*"
                                           r"Retrievers that search it: bot, idf, .*sidr-beta"):
        BM25Retriever.open(bot_index)
    assert isinstance(open_retriever(bot_index), BagOfTokensRetriever)
    assert isinstance(open_retriever(bot_index, "idf"), IDFRetriever)


def test_the_retrievers_named_for_a_wrong_index_open_it(tmp_path, tiny_bert):
    """Retrievers are named for an index of another kind only where they open it: an impact index of a SPLADE
    model is no SiDR or NAIL index, though of their kind."""
    from semiret.search import InferenceFreeRetriever

    InferenceFreeRetriever.build(TINY_DOCS, tmp_path / "if", model=str(tiny_bert))
    with pytest.raises(SemiretError, match="Retrievers that search it: ") as refused:
        open_retriever(tmp_path / "if", "bm25")
    named = str(refused.value).split("Retrievers that search it: ")[1].split(" (without")[0].split(", ")
    assert "sidr-full" not in named and "nail-sparse" not in named and "inference-free" in named
    for name in named:  # each opens it and searches
        assert open_retriever(tmp_path / "if", name).search("statins", k=1) is not None, name


def test_an_index_of_a_retriever_this_process_has_not_registered_says_to_import_it(tmp_path, bot_index):
    import json
    import shutil

    shutil.copytree(bot_index, tmp_path / "custom")
    meta = json.loads((tmp_path / "custom" / "meta.json").read_text())
    (tmp_path / "custom" / "meta.json").write_text(json.dumps({**meta, "retriever": "my-bot"}))
    with pytest.raises(SemiretError, match="built by the retriever 'my-bot', which this process has not registered: "
                                           "import the module that defines it first"):
        open_retriever(tmp_path / "custom")
    assert isinstance(open_retriever(tmp_path / "custom", "bot"), BagOfTokensRetriever)  # named: searched as asked


def test_opening_a_non_index_directory(tmp_path):
    with pytest.raises(IndexFormatError, match="is not a semiret index"):
        open_retriever(tmp_path)


def test_multithreaded_retriever_search(bm25):
    queries = QUERIES * 5
    one, many = bm25.search(queries, k=4), bm25.search(queries, k=4, n_threads=3)
    assert one.ids == many.ids and one.scores == many.scores
    assert np.all(np.diff(one.scores[0]) <= 0)


@pytest.mark.parametrize("options, message", [
    ({"nprobe": 0}, r"nprobe \(--nprobe\) must be at least 1, got 0"),
    ({"ef_search": -3}, r"ef_search \(--ef-search\) must be at least 1, got -3"),
    ({"beam": 0}, r"beam \(--beam\) must be at least 1, got 0"),
])
def test_dense_search_options_are_checked_before_any_search(options, message):
    from semiret.search import DenseRetriever

    with pytest.raises(SemiretError, match=message):
        DenseRetriever.search_options(options)


@pytest.mark.parametrize("options, message", [
    ({"hnsw_m": 0}, r"hnsw_m \(--hnsw-m\) must be at least 2, got 0"),  # not the default put in its place
    ({"nlist": 0}, r"nlist \(--nlist\) must be at least 1, got 0"),
    ({"tree_branching": 1}, r"tree_branching \(--tree-branching\) must be at least 2, got 1"),
])
def test_dense_index_options_are_checked_before_the_model_loads(tmp_path, options, message):
    from semiret.search import DenseRetriever

    with pytest.raises(SemiretError, match=message):
        DenseRetriever.build(TINY_DOCS, tmp_path / "dense", model="no-such-model", **options)
    assert not (tmp_path / "dense").exists()
