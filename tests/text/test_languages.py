"""BM25 in other languages: a language's stemmer and stopwords, Chinese/Japanese/Korean as character pairs, and
full-text filters over text written without spaces."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.errors import OptionError, SemiretError
from semiret.indexes.filters import TextCondition
from semiret.search import BM25Retriever, HybridRetriever, open_retriever, retriever_class
from semiret.text.analyzer import WordAnalyzer, plain_words
from semiret.text.languages import cjk_bigrams, language, stopword_code

GERMAN = [Document("haus", "Die Häuser der Stadt sind alt und schön.", "Häuser"),
          Document("strasse", "In den Straßen fahren viele Autos.", "Straßen"),
          Document("katze", "Eine Katze schläft auf dem Dach des Hauses.", "Katzen"),
          Document("leer", "Und die der das.")]
CHINESE = [Document("beida", "北京大学是一所大学。"),
           Document("dongjing", "东京在日本。"),
           Document("apart", "北方的学者来到京城。")]


def test_languages_are_named_by_name_or_code_in_any_case():
    assert language("German") == language("de") and language("de").stemmer == "german"
    assert language("de").stopwords == "de" and language("finnish").stopwords == "none"  # no list: none
    assert language("zh").cjk_bigrams and language("zh").stemmer is None and not language("en").cjk_bigrams
    assert stopword_code("German") == "de" and stopword_code("none") == "none"
    with pytest.raises(OptionError, match=r"unknown language 'klingon' \(known: .*german \(de\)"):
        language("klingon")
    with pytest.raises(OptionError, match=r"unknown stopword list 'finnish' \(known: none, .*de \(german\)"):
        stopword_code("finnish")


def test_a_german_analyzer_stems_and_drops_german_stopwords():
    analyzer = WordAnalyzer(stopwords="german", stemmer="german")
    assert analyzer.stopwords == "de"  # kept as its code
    assert WordAnalyzer(stemmer="German").stemmer == "german"
    assert analyzer("Die Häuser und die Straßen der Städte") == ["haus", "strass", "stadt"]
    assert WordAnalyzer()("Die Häuser") == ["die", "häuser"]  # English: German words left as written


def test_cjk_text_becomes_overlapping_character_pairs():
    assert cjk_bigrams("北京大学") == ["北京", "京大", "大学"] and cjk_bigrams("京") == ["京"]
    analyzer = WordAnalyzer(stemmer=None, language="chinese")
    assert analyzer("abc北京def 東京 in 2020, 한국어 of 의") == ["abc", "北京", "def", "東京", "2020", "한국", "국어", "의"]
    assert analyzer("コーヒー") == ["コー", "ーヒ", "ヒー"]  # the long-vowel mark belongs to its katakana word
    assert analyzer.config()["language"] == "zh" and "language" not in WordAnalyzer().config()


def test_words_keep_their_combining_marks_and_turkish_its_dotted_and_dotless_i(tmp_path):
    hindi = BM25Retriever.build([Document("a", "भारत की राजधानी नई दिल्ली है।"), Document("b", "मुंबई एक शहर है।")],
                                tmp_path / "hi", language="hi")
    assert hindi.search(["दिल्ली"], k=5).ids == [["a"]]
    import Stemmer

    whole_words = ["राजधानी", "नई", "दिल्ली"]  # not cut at their vowel signs: stemmed whole
    assert hindi.document_side.analyzer(" ".join(whole_words)) == Stemmer.Stemmer("hindi").stemWords(whole_words)
    turkish = BM25Retriever.build([Document("a", "İstanbul Boğazı", "İZMİR"), Document("b", "IŞIK KİRLİLİĞİ")],
                                  tmp_path / "tr", language="tr")
    assert [turkish.search([query], k=5).ids[0] for query in ("istanbul", "izmir", "ışık", "kirliliği")] == [
        ["a"], ["a"], ["b"], ["b"]]
    assert TextCondition("istanbul").passes(None, Document("x", "İstanbul"))  # İ case-folds to i in filters too
    english = BM25Retriever.build([Document("a", "naïve café")], tmp_path / "en")
    assert english.document_side.analyzer.pattern == r"(?u)\b\w\w+\b"  # English: bm25s's pattern, as before


@pytest.mark.parametrize("language", ["en", "de"])
def test_invisible_characters_and_the_dotted_capital_i_are_read_as_a_reader_reads_them(tmp_path, language):
    """A soft hyphen (HTML's &shy;) or zero-width space inside a word, and İ outside Turkish, as Lucene's ICU folding
    reads them: the word found by search, full-text filters and highlights alike. An index built before (its
    analyzer recorded without the rule) keeps reading words as its terms were written."""
    documents = [Document("a", "Informations\u00adverarbeitung und Be\u00adhandlung"),
                 Document("b", "infor\u2060mation retrieval in İzmir"), Document("c", "nothing here"),
                 Document("d", "machine\u200blearning")]  # a zero-width space separates words, as Thai writes them
    index = BM25Retriever.build(documents, tmp_path / language, language=language)
    assert index.index.meta["analyzer"]["drop_invisible"] is True
    for query, expected in (("Informationsverarbeitung", "a"), ("Behandlung", "a"), ("information", "b"),
                            ("izmir", "b"), ("İZMİR", "b"), ("learning", "d")):
        assert index.search([query], k=5).ids == [[expected]], query
        assert index.scroll({"$text": query}).ids == [expected], query
    assert index.highlight("behandlung", "a") == ["Informations\u00adverarbeitung und <em>Be\u00adhandlung</em>"]
    assert plain_words("I ❤\ufe0f Paris 👩\u200d💻") == ["i", "paris"]  # an emoji's joiner or selector is no word
    from semiret.search.highlight import STEMMER  # dense retrievers' highlights: an accent typed apart, one word

    assert STEMMER("nai\u0308ve cafe\u0301") == STEMMER("naïve café") == ["naïv", "café"]
    before = WordAnalyzer(**{k: v for k, v in index.index.meta["analyzer"].items()
                             if k not in ("type", "drop_invisible")})
    assert "behandlung" not in before("Be\u00adhandlung") and "information" not in before("infor\u2060mation")


def test_cjk_languages_fold_character_widths_and_no_decomposed_form_is_taken(tmp_path):
    japanese = BM25Retriever.build([Document("a", "新しいｽﾏｰﾄﾌｫﾝとＳＮＳ")], tmp_path / "ja", language="ja")
    assert japanese.search(["スマートフォン"], k=5).ids == [["a"]] and japanese.search(["SNS"], k=5).ids == [["a"]]
    for written in ("スマートフォン", "sns", "ｓｎｓ"):  # full-text filters and operators fold widths as search does
        assert japanese.scroll({"$text": written}).ids == ["a"], written
    assert japanese.search("+sns 新しい", operators=True)[0].id == "a"
    assert japanese.document_side.analyzer.unicode_form == "NFKC"
    for form in ("NFD", "NFKD"):
        with pytest.raises(OptionError, match="none of NFC, NFKC or none"):
            BM25Retriever.build([Document("a", "Häuser")], tmp_path / form, language="de", unicode_form=form)
    assert BM25Retriever.build([Document("a", "x y")], tmp_path / "none", unicode_form="none"
                               ).document_side.analyzer.unicode_form is None


def test_bm25_with_a_language_finds_inflected_words_and_scores_as_bm25s(tmp_path):
    import bm25s
    import Stemmer

    german = BM25Retriever.build(GERMAN, tmp_path / "de", language="de")
    assert set(german.search(["Haus"], k=10).ids[0]) == {"haus", "katze"}  # Häuser, Hauses
    english = BM25Retriever.build(GERMAN, tmp_path / "en")
    assert english.search(["Haus"], k=10).ids == [["katze"]]  # 'hauses' stems as English, 'häuser' does not
    assert german.search(["und die"], k=10).ids == [[]]  # German stopwords only
    reference = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    reference.index(bm25s.tokenize([d.full_text for d in GERMAN], stopwords="de", stemmer=Stemmer.Stemmer("german"),
                                   show_progress=False), show_progress=False)
    reopened = open_retriever(tmp_path / "de")  # queries read as the index's documents were
    for query in ("Häuser der Stadt", "Katzen auf Dächern", "Straße"):
        expected = reference.get_scores(reopened.document_side.analyzer(query))
        hits = reopened.search([query], k=10)
        got = dict(zip(hits.ids[0], hits.scores[0]))
        assert got == pytest.approx({d.id: float(s) for d, s in zip(GERMAN, expected) if s > 0}, rel=1e-5)


def test_explicit_stopwords_and_stemmer_override_the_language(tmp_path):
    kept = BM25Retriever.build(GERMAN, tmp_path / "kept", language="german", stopwords="none", stemmer="none")
    analyzer = open_retriever(tmp_path / "kept").document_side.analyzer
    assert (analyzer.stopwords, analyzer.stemmer) == ("none", None)
    assert kept.search(["und die"], k=10).ids[0][0] == "leer"
    with pytest.raises(OptionError, match="unknown language"):
        BM25Retriever.build(GERMAN, tmp_path / "bad", language="elvish")
    assert not (tmp_path / "bad").exists()


def test_bm25_over_chinese_finds_words_without_spaces(tmp_path):
    index = BM25Retriever.build(CHINESE, tmp_path / "zh", language="zh")
    assert index.search(["大学"], k=10).ids == [["beida"]]
    assert index.search(["北京"], k=10).ids == [["beida"]]  # 'apart' holds both characters, never side by side
    assert index.search(["东京 日本"], k=10).ids[0][0] == "dongjing"
    assert open_retriever(tmp_path / "zh").document_side.analyzer.language == "zh"
    whole_runs = BM25Retriever.build(CHINESE, tmp_path / "en")  # English: a run between punctuation is one word
    assert whole_runs.search(["大学"], k=10).ids == [[]]


def test_the_cli_and_a_hybrid_take_the_language(tmp_path):
    from helpers import write_beir

    data = write_beir(tmp_path / "data", GERMAN, {"q1": "Haus"}, {"q1": {"haus": 1}})
    result = CliRunner().invoke(app, ["index", "--data", str(data), "--out", str(tmp_path / "cli"), "--language", "de"])
    assert result.exit_code == 0, result.output
    assert open_retriever(tmp_path / "cli").document_side.analyzer.stemmer == "german"
    hybrid = HybridRetriever.build(GERMAN, tmp_path / "hybrid", neural="idf", language="de")
    lexical = hybrid.index.parts["lexical"].meta["analyzer"]
    assert (lexical["stemmer"], lexical["stopwords"]) == ("german", "de")
    retriever_class("idf").build(GERMAN, tmp_path / "idf")
    result = CliRunner().invoke(app, ["hybrid-index", str(tmp_path / "idf"), str(tmp_path / "around"),
                                      "--language", "german"])
    assert result.exit_code == 0, result.output
    assert open_retriever(tmp_path / "around").index.parts["lexical"].meta["analyzer"]["stopwords"] == "de"
    with pytest.raises(OptionError, match="unknown language"):
        HybridRetriever.around(tmp_path / "idf", tmp_path / "never", language="elvish")
    assert not (tmp_path / "never").exists()


def test_full_text_filters_read_chinese_characters_as_words_and_runs_as_phrases():
    assert plain_words("北京大学 ABC東京") == ["北", "京", "大", "学", "abc", "東", "京"]
    assert plain_words("Café au lait") == ["café", "au", "lait"]
    condition = TextCondition("北京")
    assert condition.passes(None, CHINESE[0]) and not condition.passes(None, CHINESE[2])
    assert TextCondition("北 京").passes(None, CHINESE[2])  # apart: two words, each held
    assert TextCondition("北*").passes(None, CHINESE[0])
    with pytest.raises(SemiretError, match="each Chinese or Japanese character is a word"):
        TextCondition("北京*")


def test_ascii_text_is_read_into_the_same_words_by_its_quick_path():
    """ASCII text is read by the standard library's engine: every ASCII character, alone and in random texts, gives
    the words the Unicode pattern gives."""
    import random

    from semiret.text.analyzer import WORD, normalised_text

    rng = random.Random(3)
    texts = [chr(c) for c in range(128)] + ["".join(rng.choice([chr(c) for c in range(128)] + ["ab", "Z9", "_x"])
                                                    for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    for text in texts:
        assert plain_words(text) == WORD.findall(normalised_text(text)), repr(text)



def test_latin_greek_and_cyrillic_text_is_read_into_the_same_words_by_its_quick_path():
    """Text of Latin, Greek and Cyrillic letters is read by the standard library's engine: every character of those
    ranges, alone and in random texts with ASCII, combining marks (the slow path again), invisible characters and
    ideographs, gives the words the Unicode pattern gives."""
    import random

    from semiret.text.analyzer import _BEYOND_ALPHABETS, _IDEOGRAPHS_APART, IDEOGRAPH, WORD, normalised_text

    alphabets = [chr(c) for c in [*range(0x80, 0x300), *range(0x370, 0x483)]]
    others = ["ab", " ", ".", "\u0301", "\u00ad", "\u200d", "\u0483", "東", "ä", "\u2160"]
    rng = random.Random(5)
    texts = alphabets + ["".join(rng.choice(alphabets + others) for _ in range(rng.randint(1, 30))) for _ in range(5000)]
    quick = 0
    for text in texts:
        expected = WORD.findall(normalised_text(text))
        if IDEOGRAPH.search(text):
            expected = [piece for word in expected for piece in _IDEOGRAPHS_APART.findall(word)]
        assert plain_words(text) == expected, repr(text)
        quick += not _BEYOND_ALPHABETS.search(normalised_text(text))
    assert quick > len(alphabets)  # the quick path was taken, by the random texts too

PROSE = {"de": "Die Häuser der Stadt sind alt und schön, und in den Straßen fahren viele Autos auf dem Weg zur Arbeit. ",
         "fr": "Les maisons de la ville sont anciennes et les rues sont pleines de voitures pendant la journée. ",
         "pt": "As casas da cidade são antigas e as ruas estão cheias de carros no caminho para o trabalho. ",
         "it": "Le case della città sono antiche e le strade sono piene di macchine in centro la mattina. ",
         "ru": "Дома в городе старые, а улицы полны машин по дороге на работу утром. ",
         "el": "Τα σπίτια της πόλης είναι παλιά και οι δρόμοι είναι γεμάτοι αυτοκίνητα το πρωί. ",
         "en": "The houses of the city are old, and the streets are full of cars on the way to work in the morning. ",
         "ja": "東京はとても大きい都市で、たくさんの人が電車で会社に行きます。"}


def test_the_language_of_a_corpus_is_guessed_from_its_stopwords_and_scripts():
    from semiret.text.languages import guess_language

    assert {code: (guess_language([text] * 20) or (None,))[0] for code, text in PROSE.items()} == {
        "de": language("de"), "fr": language("fr"), "pt": language("pt"), "it": language("it"),
        "ru": language("ru"), "el": language("el"), "en": None, "ja": language("ja")}
    assert guess_language([PROSE["ru"]] * 20)[1] == "100% of their letters are Cyrillic"
    assert guess_language([PROSE["de"]] * 20)[1].endswith("% of their words are German stopwords")
    assert guess_language([PROSE["de"]]) is None  # too little text to tell
    assert guess_language(["iPhone 15 Pro Max 256GB", "Samsung Galaxy S24 Ultra"] * 50) is None
    assert guess_language(["北京大学是一所大学。" * 30])[0] == language("zh")
    assert guess_language(["한국어 문장은 띄어쓰기를 합니다. " * 50])[0] == language("ko")


def test_bm25_warns_when_the_documents_look_written_in_another_language(tmp_path, caplog):
    german = [Document(str(i), PROSE["de"]) for i in range(20)]
    BM25Retriever.build(german, tmp_path / "default")
    assert "the documents look German" in caplog.text and "--language de" in caplog.text
    caplog.clear()
    BM25Retriever.build(german, tmp_path / "chosen", language="de")
    BM25Retriever.build(german, tmp_path / "chosen-en-stopwords", language="de", stopwords="en")
    BM25Retriever.build([Document(str(i), PROSE["en"]) for i in range(20)], tmp_path / "english")
    assert "look" not in caplog.text


def test_an_index_created_empty_is_checked_at_its_first_add(tmp_path, caplog):
    german = [Document(str(i), PROSE["de"]) for i in range(20)]
    empty = BM25Retriever.build([], tmp_path / "empty")
    assert "look" not in caplog.text
    empty.add(german[:10])
    assert "the documents look German" in caplog.text and "create it again with --language de" in caplog.text
    caplog.clear()
    empty.add(german[10:])  # said once: the index holds documents now
    BM25Retriever.build([], tmp_path / "chosen", language="de").add(german)
    assert "look" not in caplog.text
