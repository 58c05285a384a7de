"""Analyzers and vocabularies: the BM25 word analyzer, the term dictionary, WordPiece vocabularies."""

from __future__ import annotations

import json

import numpy as np
import pytest

from semiret.data import Document
from semiret.errors import SemiretError
from semiret.text import TermDictionary, WordAnalyzer, WordPieceVocabulary
from semiret.text.postings import token_set_postings, word_count_postings


@pytest.fixture(scope="module")
def vocabulary():
    return WordPieceVocabulary("bert-base-uncased")


# ---------------------------------------------------------------------------- WordAnalyzer
def test_analyzer_lowercases_drops_stopwords_and_stems():
    analyzer = WordAnalyzer()
    assert analyzer("The Running DOGS are running quickly, and it is a test") == ["run", "dog", "run", "quick", "test"]


def test_analyzer_drops_single_characters_and_punctuation():
    assert WordAnalyzer()("x y z -- ok!? e.g. 42 7") == ["ok", "42"]


def test_analyzer_without_stemming_or_stopwords():
    assert WordAnalyzer(stemmer=None)("The running dogs") == ["running", "dogs"]
    assert WordAnalyzer(stopwords="none", stemmer=None)("The running dogs") == ["the", "running", "dogs"]


def test_analyzer_case_sensitive():
    assert WordAnalyzer(lowercase=False, stemmer=None)("The Cat THE cat") == ["The", "Cat", "THE", "cat"]


def test_analyzer_unicode_words():
    assert WordAnalyzer(stemmer=None)("Über naïve café") == ["über", "naïve", "café"]


def test_analyzer_config_round_trips():
    analyzer = WordAnalyzer(stopwords="none", stemmer="french", lowercase=False)
    config = analyzer.config()
    assert config["type"] == "word"
    rebuilt = WordAnalyzer(**{k: v for k, v in config.items() if k != "type"})
    text = "Les Chats mangeaient"
    assert rebuilt(text) == analyzer(text)


def test_analyzer_rejects_unknown_options():
    with pytest.raises(ValueError, match="unknown stopword list"):
        WordAnalyzer(stopwords="klingon")
    with pytest.raises(ValueError, match="unknown stemmer"):
        WordAnalyzer(stemmer="klingon")


def test_analyzer_matches_bm25s_tokenizer():
    import bm25s
    import Stemmer

    texts = ["The quick brown foxes jumped over the lazy dogs!", "Statins reduced cancer risks in 2019 trials."]
    ours = [WordAnalyzer()(t) for t in texts]
    theirs = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), return_ids=False,
                            show_progress=False)
    assert ours == theirs


# ---------------------------------------------------------------------------- TermDictionary
def test_term_dictionary_grows_and_looks_up():
    terms = TermDictionary()
    assert terms.lookup(["a", "b", "a"], add=True) == [0, 1, 0]
    assert terms.lookup(["b", "c", "a"], add=False) == [1, 0]  # unknown 'c' dropped
    assert len(terms) == 2
    assert terms.lookup(["c"], add=True) == [2]
    assert terms.terms == ["a", "b", "c"]


def test_term_dictionary_shares_its_list():
    shared = ["x", "y"]
    terms = TermDictionary(shared)
    assert terms.lookup(["y", "z"], add=True) == [1, 2]
    assert shared == ["x", "y", "z"]


def test_word_count_postings_counts_terms():
    terms = TermDictionary()
    docs = [Document("a", "dog dog cat"), Document("b", ""), Document("c", "cat", "Dogs")]
    postings = word_count_postings(docs, WordAnalyzer(), terms)
    assert terms.terms == ["dog", "cat"]
    assert postings.ids == ["a", "b", "c"]
    assert postings.offsets.tolist() == [0, 2, 2, 4]
    assert postings.lengths.tolist() == [3, 0, 2]
    rows = [dict(zip(postings.terms[s:e].tolist(), postings.values[s:e].tolist()))
            for s, e in zip(postings.offsets[:-1], postings.offsets[1:])]
    assert rows == [{0: 2.0, 1: 1.0}, {}, {0: 1.0, 1: 1.0}]


# ---------------------------------------------------------------------------- WordPieceVocabulary
def test_wordpiece_special_tokens_are_excluded(vocabulary):
    mask = vocabulary.excluded_mask
    ids = vocabulary.token_ids()
    for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        assert mask[ids[special]], special
    raw = vocabulary._tokenizer.encode("hello [SEP] world [MASK]", add_special_tokens=False).ids
    assert ids["[SEP]"] in raw and ids["[MASK]"] in raw
    assert vocabulary.encode("hello [SEP] world [MASK]") == [ids["hello"], ids["world"]]


def test_wordpiece_unused_tokens_are_excluded(vocabulary):
    mask = vocabulary.excluded_mask
    unused = [i for t, i in vocabulary.token_ids().items() if t.startswith("[unused")]
    assert len(unused) == 994
    assert mask[unused].all()
    ordinary = [vocabulary.token_ids()[t] for t in ("the", "cancer", "!", "##s")]
    assert not mask[ordinary].any()
    # bert-base-uncased: exactly the ids below 999 are special or unused
    assert mask.sum() == 999 and mask[:999].all()


def test_wordpiece_min_id_excludes_low_ids():
    vocabulary = WordPieceVocabulary("bert-base-uncased", min_id=1500)
    mask = vocabulary.excluded_mask
    assert mask[:1500].all() and not mask[1500:].any()
    ids = vocabulary.token_ids()
    assert ids["!"] < 1500 <= ids["hello"]
    assert vocabulary.encode("hello !") == [ids["hello"]]
    assert WordPieceVocabulary("bert-base-uncased", min_id=999).excluded_mask.sum() == 999


def test_wordpiece_batched_encode_equals_single_encode(vocabulary):
    texts = ["Statins reduce cancer risk.", "", "unbelievably tokenized WordPieces!!", "[CLS] café naïve 42",
             "a " * 50]
    flat, offsets = vocabulary.encode_batch(texts)
    assert len(offsets) == len(texts) + 1 and offsets[0] == 0 and offsets[-1] == len(flat)
    mask = vocabulary.excluded_mask
    for i, text in enumerate(texts):
        row = flat[offsets[i]: offsets[i + 1]]
        assert [t for t in row.tolist() if not mask[t]] == vocabulary.encode(text)


def test_wordpiece_max_length_truncates():
    vocabulary = WordPieceVocabulary("bert-base-uncased", max_length=4)
    flat, offsets = vocabulary.encode_batch(["one two three four five six seven", "short"])
    assert np.diff(offsets).tolist() == [4, 1]
    assert len(vocabulary.encode("one two three four five six seven")) == 4


def _whole_text_ids(vocabulary, text):
    ids = vocabulary._tokenizer.encode(text, add_special_tokens=False).ids
    return [i for i in ids if not vocabulary.excluded_mask[i]]


@pytest.mark.parametrize("max_length", [None, 5])
def test_wordpiece_word_cache_gives_the_whole_text_tokenization(max_length):
    """Query words are tokenized once and cached; the ids must be those of tokenizing the whole text, also
    around characters where Python and BERT disagree on what whitespace is."""
    import random

    vocabulary = WordPieceVocabulary("bert-base-uncased", max_length=max_length)
    assert vocabulary.word_local
    pieces = list("abc XYZ\t\n\r.,;-'\"()") + ["\x1c", "\x1f", "\x85", "\xa0", "\u3000", "\u2028", "é",
                                                   "e\u0301", "\u0301", "中文", "Σ", "ß", "ﬁ", "\ufffd", "\x00",
                                                   "[CLS]", "[MASK]", "[unused3]", "İ", "\u200b", "🙂", "statins"]
    rng = random.Random(7)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 25))) for _ in range(3000)]
    for text in texts + texts:  # the second pass is served from the cache
        assert vocabulary.encode(text) == _whole_text_ids(vocabulary, text), repr(text)


def test_wordpiece_word_cache_is_bounded(monkeypatch):
    import semiret.text.wordpiece as wordpiece

    monkeypatch.setattr(wordpiece, "WORD_CACHE_SIZE", 10)
    vocabulary = WordPieceVocabulary("bert-base-uncased")
    for i in range(100):
        assert vocabulary.encode(f"word{i} cancer") == _whole_text_ids(vocabulary, f"word{i} cancer")
        assert len(vocabulary._word_cache) <= 10


def test_wordpiece_tokenizers_that_are_not_word_local_skip_the_cache(tmp_path):
    """A byte-level BPE keeps the space inside its tokens: tokenizing word by word would change the ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(["the cat sat on the mat", "a cat and a hat"] * 20,
                                  trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    vocabulary = WordPieceVocabulary(str(tmp_path / "tokenizer.json"))
    assert not vocabulary.word_local
    for text in ["the cat", "the  cat sat", " a hat"]:
        assert vocabulary.encode(text) == _whole_text_ids(vocabulary, text)
    assert vocabulary.encode("the cat") != vocabulary.encode("the") + vocabulary.encode("cat")


def test_wordpiece_config_and_token(vocabulary):
    assert vocabulary.config() == {"type": "wordpiece", "tokenizer": "bert-base-uncased", "max_length": None,
                                   "min_id": None}
    assert vocabulary.size == 30522
    assert vocabulary.token(vocabulary.token_ids()["cancer"]) == "cancer"


def test_token_set_postings_count_each_distinct_token_and_the_binary_index_reads_them_as_sets(vocabulary, tmp_path):
    from semiret.search import BagOfTokensRetriever

    docs = [Document("a", "cancer cancer cancer risk"), Document("b", "[SEP] [MASK]")]
    postings = token_set_postings(docs, vocabulary)
    ids = vocabulary.token_ids()
    first = postings.terms[postings.offsets[0]: postings.offsets[1]].tolist()
    assert sorted(first) == sorted([ids["cancer"], ids["risk"]])
    assert postings.values[postings.offsets[0]: postings.offsets[1]].tolist() == [3.0, 1.0]
    assert postings.offsets[2] == postings.offsets[1]  # only special tokens: nothing indexed
    assert postings.lengths.tolist() == [4, 0]
    # the counts are what a binary index is built from, and it scores each distinct token once: a set
    retriever = BagOfTokensRetriever.build(docs, tmp_path / "bot")
    assert retriever.index.kind == "binary"
    hits = retriever.search(["cancer", "cancer risk"], k=2)
    assert hits.ids == [["a"], ["a"]] and hits.scores == [[1.0], [2.0]]


def test_unknown_tokenizer_is_a_clear_error(tmp_path):
    with pytest.raises(SemiretError, match="unknown model 'no-such-tokenizer'"):
        WordPieceVocabulary("no-such-tokenizer")
    (tmp_path / "model").mkdir()
    with pytest.raises(SemiretError, match="has no tokenizer.json"):
        WordPieceVocabulary(str(tmp_path / "model"))


def test_new_bm25_indexes_normalize_unicode_and_old_ones_read_as_they_were_built(tmp_path):
    """NFC by default: "café" typed composed finds it written decomposed; NFKC (as Lucene's ICU normalizer) also
    makes a ligature its letters; an index whose analyzer config predates the option keeps reading text as it
    was built."""
    from semiret.data import Document
    from semiret.search import BM25Retriever, open_retriever
    from semiret.text.analyzer import WordAnalyzer

    documents = [Document("a", "cafe\u0301 au lait"), Document("b", "the \ufb01nal report")]
    bm25 = BM25Retriever.build(documents, tmp_path / "i")
    assert [h.id for h in bm25.search("café")] == ["a"] and bm25.search("final") == []
    assert bm25.index.meta["analyzer"]["unicode_form"] == "NFC"
    folded = BM25Retriever.build(documents, unicode_form="NFKC")
    assert [h.id for h in folded.search("final")] == ["b"] and [h.id for h in folded.search("café")] == ["a"]
    assert BM25Retriever.build(documents, unicode_form="none").search("café") == []
    assert WordAnalyzer().words("cafe\u0301") == ["cafe"]  # the old default: the combining accent is no letter
    with pytest.raises(ValueError, match="unknown Unicode normalization 'NFX'"):
        WordAnalyzer(unicode_form="NFX")
    meta = tmp_path / "i" / "meta.json"
    config = json.loads(meta.read_text())
    del config["analyzer"]["unicode_form"]  # as written before the option
    meta.write_text(json.dumps(config))
    assert open_retriever(tmp_path / "i").document_side.analyzer.unicode_form is None


def test_a_tokenizer_file_changed_in_place_is_read_again(tmp_path):
    """Tokenizers are loaded once per file and shared; a file rewritten since is a new key, not the old tokenizer."""
    import os

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    def save(texts, vocabulary_size):
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
        tokenizer.train_from_iterator(texts * 20, trainers.BpeTrainer(vocab_size=vocabulary_size))
        tokenizer.save(str(tmp_path / "tokenizer.json"))

    save(["the cat sat on the mat"], 40)
    first = WordPieceVocabulary(str(tmp_path / "tokenizer.json"))
    assert WordPieceVocabulary(str(tmp_path / "tokenizer.json"))._tokenizer is first._tokenizer  # shared
    mtime = (tmp_path / "tokenizer.json").stat().st_mtime_ns
    save(["a dog and a frog in a bog"], 60)
    os.utime(tmp_path / "tokenizer.json", ns=(mtime + 10**9, mtime + 10**9))  # a coarse clock still sees it changed
    second = WordPieceVocabulary(str(tmp_path / "tokenizer.json"))
    assert second.size != first.size and second.encode("dog") != first.encode("dog")
    assert second.excluded_mask.shape == (second.size,) and second.excluded_mask.flags.writeable
