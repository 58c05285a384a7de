"""Long documents as passages (`--chunk-words`) and grouped searches (`group_by`): windows of words, documents ranked by
their best passage as the whole ranking grouped by hand, passages kept in step with their documents through add,
replace and delete, `semiret eval --chunk-words`, and the service's `group_by`; windows of whole sentences
(`--chunk-sentences`) and of tokens (`--chunk-tokens`), recorded and cut alike after reopening."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data import Document
from semiret.data.chunking import Chunking
from semiret.errors import SemiretError
from semiret.search import BM25Retriever, open_retriever
from semiret.serving import ServeSettings, create_app

from helpers import LocalClient, client_of, tiny_tokenizer, write_beir

WORDS = "statins heart cancer risk trial dose cohort blood pressure diet sleep walrus".split()


def _documents(n: int = 30, seed: int = 3) -> list[Document]:
    rng = random.Random(seed)
    return [Document(f"d{i}", " ".join(rng.choices(WORDS, k=rng.randint(3, 40))), f"title {i}",
                     {"source": ["a", "b", "c"][i % 3], "tags": ["x", "y"][: i % 2 + 1]}) for i in range(n)]


@pytest.mark.parametrize("words, overlap, n, expected", [
    (4, 1, 0, [("d", "")]),
    (4, 1, 4, [("d", "w0 w1 w2 w3")]),
    (4, 1, 5, [("d#0", "w0 w1 w2 w3"), ("d#1", "w3 w4")]),
    (4, 1, 7, [("d#0", "w0 w1 w2 w3"), ("d#1", "w3 w4 w5 w6")]),
    (4, 0, 9, [("d#0", "w0 w1 w2 w3"), ("d#1", "w4 w5 w6 w7"), ("d#2", "w8")]),
])
def test_windows_of_words(words, overlap, n, expected, caplog):
    document = Document("d", " ".join(f"w{i}" for i in range(n)), "T", {"year": 2020})
    passages = Chunking(words, overlap).passages(document)
    assert [(p.id, p.text) for p in passages] == expected
    assert [p.metadata for p in passages] == [{"year": 2020, "parent": "d", "chunk": c} for c in range(len(expected))]
    assert {p.title for p in passages} == {"T"}
    assert list(Chunking(words, overlap).documents(passages)) == [document]  # joined again
    assert list(Chunking(words, overlap).documents(passages))[0].metadata == {"year": 2020}
    if len(passages) > 1:
        with pytest.raises(SemiretError, match="not in order"):
            list(Chunking(words, overlap).documents(passages[::-1]))
        with pytest.raises(SemiretError, match="not stored together"):
            list(Chunking(words, overlap).documents([passages[0], Document("o", "x", metadata={"parent": "o",
                                                                                              "chunk": 0}),
                                                     passages[1]]))
    assert "lack passages" not in caplog.text
    if len(passages) == 3:  # the middle window deleted: the two others joined whole, and said so
        [joined] = Chunking(words, overlap).documents([passages[0], passages[2]])
        assert joined.text.split() == passages[0].text.split() + passages[2].text.split()
        assert "1 document(s) lack passages deleted on their own ('d')" in caplog.text
    with pytest.raises(SemiretError, match="is not a passage"):
        list(Chunking(words, overlap).documents([document]))


@pytest.mark.parametrize("overlap", [0, 2])
def test_chinese_and_japanese_characters_are_words_of_their_own(overlap):
    """Text without spaces between words is cut into windows too (each Han or kana character counting as a word) and
    joined again as it was, its spaces kept within windows."""
    text = "北京大学是中国最好的大学之一。" * 3 + "Apple公司 in Tokyo。これはペンです end"
    chunking = Chunking(8, overlap)
    passages = chunking.passages(Document("z", text))
    assert len(passages) > 5 and all(len(p.text) <= 8 + len("Apple in Tokyo") for p in passages)
    assert passages[0].text == "北京大学是中国最"  # eight characters, eight words
    joined = list(chunking.documents(passages))[0].text
    assert joined.replace(" ", "") == text.replace(" ", "")  # every character, in order, once
    assert "Apple公司 in Tokyo" in joined or [p.text for p in passages if "Apple" in p.text]  # spaces within windows


@pytest.mark.parametrize("text, words, overlap", [("Hello 世界 this is 日本語 ok", 3, 1),
                                                  ("中文 alpha\x1fbeta gamma delta epsilon", 2, 1),
                                                  ("中 one\x1ctwo three four five six seven", 3, 2)])
def test_passages_join_back_into_their_words_where_scripts_and_separators_meet(text, words, overlap):
    """A space between a Chinese character and a word at a window's end is known from the overlap (it was lost:
    "世界this"); U+001C to U+001F separate words both ways a text is cut (a word was counted twice: "beta beta")."""
    chunking = Chunking(words, overlap)
    joined = list(chunking.documents(chunking.passages(Document("d", text))))[0].text
    assert joined.split() == text.split() and (" " in text) == (" " in joined)
    if "Hello" in text:
        assert joined == text


def test_an_index_made_before_counting_characters_reads_its_passages_back_as_made():
    """Passages of an index whose record has no ``spaceless`` (made when only runs of non-space characters were
    words) join back as they were cut: the text given, whatever Chinese it holds."""
    text = "我爱北京 天安门上 太阳升 伟大领袖 毛主席 指引 我们 向前进 和平 发展 合作 共赢"
    before = Chunking.recorded({"words": 4, "overlap": 1})
    assert not before.spaceless and Chunking.recorded(Chunking(4, 1).record()).spaceless
    passages = before.passages(Document("a", text))
    assert passages[0].text == "我爱北京 天安门上 太阳升 伟大领袖"
    assert list(before.documents(passages))[0].text == text


@pytest.mark.parametrize("words, overlap, message", [(0, 0, "at least one word"), (5, 5, "less than their 5 words"),
                                                     (5, -1, "at least 0")])
def test_bad_windows_are_refused(words, overlap, message):
    with pytest.raises(SemiretError, match=message):
        Chunking(words, overlap)


def test_a_document_holding_the_passage_fields_is_refused():
    with pytest.raises(SemiretError, match="document 'd' has metadata field.* parent"):
        Chunking(5).passages(Document("d", "a b c", metadata={"parent": "x"}))


def _grouped_by_hand(retriever, query: str, field: str, k: int, size: int) -> list[tuple]:
    """The whole ranking, grouped afterwards: what a grouped search must give."""
    groups: dict = {}
    for hit in retriever.search(query, k=10_000):
        value = (hit.metadata or {}).get(field)
        for each in value if isinstance(value, list) else [value]:
            if each is None or (each not in groups and len(groups) == k):
                continue
            members = groups.setdefault(each, [])
            if len(members) < size:
                members.append((hit.id, hit.score, each))
    return [member for members in groups.values() for member in members]


@pytest.mark.parametrize("field, size", [("parent", 1), ("parent", 3), ("source", 2), ("tags", 2)])
def test_a_grouped_search_is_the_whole_ranking_grouped(tmp_path, field, size):
    retriever = BM25Retriever.build(_documents(), tmp_path / "index", chunking=Chunking(6, 2))
    for query in ("statins heart", "walrus sleep diet", "risk"):
        hits = retriever.search(query, k=4, group_by=field, group_size=size)
        assert [(h.id, h.score, h.group) for h in hits] == _grouped_by_hand(retriever, query, field, 4, size)
    assert len({h.group for h in retriever.search("statins", k=4, group_by="parent")}) == 4
    filtered = retriever.search("statins heart", k=3, group_by="parent", filter={"source": "b"})
    assert len(filtered) == 3 and all(h.metadata["source"] == "b" for h in filtered)
    run = retriever.search(["statins heart"], k=5, group_by="parent").as_run(["q"], by_group=True)
    assert list(run["q"]) == [h.group for h in retriever.search("statins heart", k=5, group_by="parent")]


def test_grouping_refuses_what_it_cannot_do(tmp_path):
    bare = BM25Retriever.build(_documents(5), tmp_path / "bare", store_texts=False)
    with pytest.raises(SemiretError, match="no metadata to group by"):
        bare.search("statins", group_by="source")
    with pytest.raises(SemiretError, match="group_size must be a positive integer"):
        open_retriever(tmp_path / "bare").search("statins", group_by="source", group_size=0)
    for size in (0, 2, "x", True):  # a group size without groups is a mistake, not ignored
        with pytest.raises(SemiretError, match="give group_by"):
            open_retriever(tmp_path / "bare").search("statins", group_size=size)
    with pytest.raises(SemiretError, match="passages find their documents"):
        BM25Retriever.build(_documents(5), tmp_path / "x", store_texts=False, chunking=Chunking(5))


def test_passages_follow_their_documents_through_add_replace_and_delete(tmp_path):
    retriever = BM25Retriever.build(_documents(10), tmp_path / "index", chunking=Chunking(6, 2))
    assert retriever.chunking == Chunking(6, 2) and open_retriever(tmp_path / "index").chunking == Chunking(6, 2)
    long = Document("new", " ".join(["walrus"] * 20), metadata={"source": "z"})
    assert retriever.add([long]) == 5  # split as at the build: 20 words, windows of 6 every 4
    assert retriever.count({"parent": "new"}) == 5
    assert retriever.get_document("new") == long  # a document's id: its passages joined again
    assert set(retriever.get_documents(["new", "new#1", "nope"])) == {"new", "new#1"}
    with pytest.raises(SemiretError, match="document 'new' is already in"):
        retriever.add([Document("new", "walrus walrus")])  # its passages would be new#0.. or new: a clash by parent
    assert retriever.add([Document("new", "walrus walrus")], replace=True) == 1  # the old passages go first
    assert retriever.add([Document("new", "walrus " * 100)], replace=True) == 25  # more than 16 windows
    assert retriever.add([Document("new", "walrus walrus")], replace=True) == 1 and retriever.count({"parent": "new"}) == 1
    assert retriever.count({"parent": "new"}) == 1 and retriever.get_document("new").text == "walrus walrus"
    passages_of_d1 = retriever.count({"parent": "d1"})
    assert passages_of_d1 > 1
    assert retriever.delete(["d1"]) == passages_of_d1 and retriever.count({"parent": "d1"}) == 0
    assert retriever.delete(["d2#0"]) == 1 and "d2#1" in retriever.index
    with pytest.raises(SemiretError, match="no document or passage 'nope'"):
        retriever.delete(["d3", "nope"])
    assert retriever.count({"parent": "d3"}) > 0  # nothing deleted
    assert retriever.delete(["d3", "nope"], missing_ok=True) > 0 and retriever.count({"parent": "d3"}) == 0
    deleted = CliRunner().invoke(app, ["delete", "--index", str(tmp_path / "index"), "d4"])
    assert deleted.exit_code == 0 and open_retriever(tmp_path / "index").count({"parent": "d4"}) == 0


def test_eval_ranks_documents_by_their_best_passage(tmp_path):
    documents = _documents(24)
    queries = {"q1": "statins heart walrus", "q2": "sleep diet"}
    qrels = {"q1": {"d3": 1, "d7": 1}, "q2": {"d11": 1}}
    beir = write_beir(tmp_path / "beir", documents, queries, qrels)
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--data", str(beir), "-r", "bm25", "--chunk-words", "6", "--chunk-overlap",
                                 "2", "--index", str(tmp_path / "passages"), "--run", str(tmp_path / "run.trec"),
                                 "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    passages = open_retriever(tmp_path / "passages")
    assert figures["chunking"] == {"words": 6, "overlap": 2, "spaceless": True} and figures["documents"] == passages.count() > 24
    run_ids = {line.split()[2] for line in (tmp_path / "run.trec").read_text().splitlines()}
    assert run_ids <= {d.id for d in documents}  # documents, not passages
    best = passages.search("sleep diet", k=100, group_by="parent")
    ranked = [line.split()[2] for line in (tmp_path / "run.trec").read_text().splitlines() if line.startswith("q2 ")]
    assert ranked == [h.group for h in sorted(best, key=lambda h: (h.score, h.group), reverse=True)]  # trec_eval's
    whole = runner.invoke(app, ["eval", "--data", str(beir), "-r", "bm25", "--json"])
    assert json.loads(whole.stdout)["chunking"] is None
    again = runner.invoke(app, ["eval", "--data", str(beir), "--index", str(tmp_path / "passages"), "--chunk-words",
                                "8", "--json"])
    assert again.exit_code == 2 and "passages of 6 words overlapping by 2, not passages of 8" in again.output
    meta = json.loads((tmp_path / "passages" / "meta.json").read_text())
    del meta["chunking"]["spaceless"]  # an index made before characters counted as words
    (tmp_path / "passages" / "meta.json").write_text(json.dumps(meta))
    older = runner.invoke(app, ["eval", "--data", str(beir), "--index", str(tmp_path / "passages"), "--chunk-words",
                                "6", "--chunk-overlap", "2", "--json"])  # (refused: "6 by 2, not 6 by 2")
    assert older.exit_code == 0, older.output


def test_the_service_groups_and_pages_groups(tmp_path):
    BM25Retriever.build(_documents(), tmp_path / "index", chunking=Chunking(6, 2))
    settings = ServeSettings({"docs": str(tmp_path / "index")}, api_key="key", write_process=False)
    with LocalClient(create_app(settings)) as client:
        def grouped(**body):
            found = client.post("/indexes/docs/search", json={"queries": ["statins heart"], "group_by": "parent",
                                                              **body})
            assert found.status_code == 200, found.text
            return [(hit["id"], hit["group"]) for hit in found.json()["results"][0]]

        first, second = grouped(k=3, group_size=2), grouped(k=3, group_size=2, offset=3)
        assert [g for _, g in first + second] == [g for _, g in grouped(k=6, group_size=2)]
        assert not {g for _, g in first} & {g for _, g in second}
        too_many = client.post("/indexes/docs/search", json={"queries": ["x"], "group_by": "parent", "k": 20,
                                                             "offset": 5, "group_size": 50})  # 1,250 hits > --max-k
        assert too_many.status_code == 422 and too_many.json()["detail"][0]["loc"] == ["body", "group_size"]
        bad = client.post("/indexes/docs/search", json={"queries": ["x"], "group_by": ""})
        assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "group_by"]
        alone = client.post("/indexes/docs/search", json={"queries": ["x"], "group_size": 2})
        assert alone.status_code == 422 and alone.json()["detail"][0]["loc"] == ["body", "group_size"]
        added = client.put("/indexes/docs/documents", headers={"X-API-Key": "key"},
                           json={"documents": [{"_id": "long", "text": "walrus " * 12}]})
        assert added.json() == {"status": "acknowledged", "upserted": 1, "passages": 3}  # split as the index's
        assert client.get("/indexes/docs/documents/long").json()["text"] == ("walrus " * 12).strip()
        deleted = client.post("/indexes/docs/documents/delete", headers={"X-API-Key": "key"},
                              json={"ids": ["long", "never-added"]})
        assert deleted.json() == {"status": "acknowledged", "deleted": 1, "passages": 3}
        assert client.get("/indexes/docs").json()["chunking"] == {"words": 6, "overlap": 2, "spaceless": True}
    info = json.loads(CliRunner().invoke(app, ["info", str(tmp_path / "index")]).stdout)
    assert info["chunking"] == {"words": 6, "overlap": 2, "spaceless": True}


def test_groups_are_filled_however_deep_their_members_lie(tmp_path):
    documents = ([Document("b0", "statins statins statins", metadata={"g": "b"})]
                 + [Document(f"a{i}", "statins statins", metadata={"g": "a"}) for i in range(150)]
                 + [Document(f"b{i}", "statins heart sleep diet", metadata={"g": "b"}) for i in range(1, 4)])
    retriever = BM25Retriever.build(documents, tmp_path / "index")
    hits = retriever.search("statins", k=2, group_by="g", group_size=3)
    assert [(h.group, h.id) for h in hits] == [(g, i) for i, _, g in _grouped_by_hand(retriever, "statins", "g", 2, 3)]
    assert [h.id for h in hits if h.group == "b"] == ["b0", "b1", "b2"]


def test_a_grouped_search_stops_once_every_group_there_is_is_found(tmp_path, monkeypatch):
    retriever = BM25Retriever.build(_documents(400), tmp_path / "index")  # three sources
    depths = []
    search = type(retriever.query_side).search

    def recording(query_side, index, texts, k, n_threads):
        depths.append(k)
        return search(query_side, index, texts, k, n_threads)

    monkeypatch.setattr(type(retriever.query_side), "search", recording)
    hits = retriever.search("statins", k=5, group_by="source", group_size=2)
    assert {h.group for h in hits} == {"a", "b", "c"} and len(hits) == 6 and depths == [100]


def test_passages_never_take_another_documents_id_and_a_failed_replace_keeps_the_old_ones(tmp_path, monkeypatch):
    retriever = BM25Retriever.build([Document("x#0", "unrelated sleep", metadata={"k": "keep"})]
                                    + _documents(5), tmp_path / "index", chunking=Chunking(6, 2))
    with pytest.raises(SemiretError, match="take the id 'x#0' of the document 'x#0'"):
        retriever.add([Document("x", " ".join(["walrus"] * 20))], replace=True)
    with pytest.raises(SemiretError, match="take the id 'd1#0' of a passage of 'd1'"):
        retriever.add([Document("d1#0", "walrus")], replace=True)
    assert retriever.get_document("x#0").metadata == {"k": "keep", "parent": "x#0", "chunk": 0}
    before = sorted(d.id for d in retriever.iter_documents({"parent": "d2"}))

    def failing(documents):
        raise RuntimeError("the encoder failed")

    monkeypatch.setattr(retriever.document_side, "encode", failing)
    with pytest.raises(RuntimeError):
        retriever.add([Document("d2", "walrus " * 30)], replace=True)
    assert sorted(d.id for d in open_retriever(tmp_path / "index").iter_documents({"parent": "d2"})) == before


def test_a_hybrid_index_made_around_passages_keeps_them_passages(tmp_path):
    from semiret.search import BagOfTokensRetriever, HybridRetriever

    BagOfTokensRetriever.build(_documents(6), tmp_path / "bot", chunking=Chunking(6, 2))
    hybrid = HybridRetriever.around(tmp_path / "bot", tmp_path / "hybrid")
    assert hybrid.chunking == Chunking(6, 2)
    assert hybrid.add([Document("long", "walrus " * 12)]) == 3 and hybrid.delete(["long"]) == 3


def test_groups_named_by_other_values_than_strings_make_no_run(tmp_path):
    retriever = BM25Retriever.build([Document("a", "statins", metadata={"year": 2020})], tmp_path / "index")
    with pytest.raises(SemiretError, match="string ids; a group's value is 2020"):
        retriever.search(["statins"], group_by="year").as_run(["q"], by_group=True)
    with pytest.raises(SemiretError, match="give --chunk-words too"):
        Chunking.of_options(None, 5)
    assert list(retriever.get_documents(["zz", "a"])) == ["a"]


def test_search_command_groups(tmp_path):
    BM25Retriever.build(_documents(), tmp_path / "index", chunking=Chunking(6, 2))
    runner = CliRunner()
    lines = runner.invoke(app, ["search", "--index", str(tmp_path / "index"), "statins heart", "--group-by", "parent",
                                "-k", "3", "--json", "--run", str(tmp_path / "run.trec")]).stdout.splitlines()
    hits = json.loads(lines[0])["hits"]
    assert len({h["group"] for h in hits}) == 3 == len(hits)
    assert [line.split()[2] for line in (tmp_path / "run.trec").read_text().splitlines()] == [h["group"] for h in hits]
    table = runner.invoke(app, ["search", "--index", str(tmp_path / "index"), "statins heart", "--group-by", "source",
                                "--group-size", "2", "-k", "2"]).stdout
    assert "group" in table and any(f'"{value}"' in table for value in "abc")
    alone = runner.invoke(app, ["search", "--index", str(tmp_path / "index"), "statins", "--group-size", "2"])
    assert alone.exit_code != 0 and "give group_by (--group-by)" in alone.output
    (tmp_path / "queries.tsv").write_text("q1\tstatins heart\n")
    unseen = runner.invoke(app, ["search", "--index", str(tmp_path / "index"), "--queries",
                                 str(tmp_path / "queries.tsv"), "--run", str(tmp_path / "run2.trec"),
                                 "--highlight"])  # nothing would show the highlights
    assert unseen.exit_code != 0 and "--highlight" in unseen.output and not (tmp_path / "run2.trec").exists()


def test_a_passage_index_exports_its_documents(tmp_path):
    documents = _documents(12)
    BM25Retriever.build(documents, tmp_path / "index", chunking=Chunking(6, 2))
    runner = CliRunner()
    joined = runner.invoke(app, ["export", str(tmp_path / "index"), "-o", str(tmp_path / "documents.jsonl")])
    assert joined.exit_code == 0, joined.output
    from semiret.data import iter_corpus

    back = list(iter_corpus(tmp_path / "documents.jsonl"))
    assert [(d.id, d.text.split(), d.title, d.metadata) for d in back] == [
        (d.id, d.text.split(), d.title, d.metadata) for d in documents]
    stored = runner.invoke(app, ["export", str(tmp_path / "index"), "--passages"])
    assert len(stored.stdout.splitlines()) == open_retriever(tmp_path / "index").count() > 12
    again = runner.invoke(app, ["index", "--data", str(tmp_path / "documents.jsonl"), "--out", str(tmp_path / "again"),
                                "--chunk-words", "6", "--chunk-overlap", "2"])
    assert again.exit_code == 0 and open_retriever(tmp_path / "again").count() == open_retriever(tmp_path / "index").count()


def test_a_replace_reaches_every_passage_whatever_was_deleted_before(tmp_path):
    retriever = BM25Retriever.build([Document("A", " ".join(f"w{i}" for i in range(40)))], tmp_path / "index",
                                    chunking=Chunking(1))
    retriever.delete([f"A#{i}" for i in range(10, 30)])  # a run of deleted passages, A#15 among them
    assert retriever.add([Document("A", "w0 w1")], replace=True) == 2
    assert sorted(retriever.index.live_ids()) == ["A#0", "A#1"]


def test_a_value_repeated_in_a_list_counts_and_groups_once(tmp_path):
    documents = [Document("d1", "statins", metadata={"tags": ["a", "a"], "n": [1, 1.0]}),
                 Document("d2", "statins", metadata={"tags": ["a", "b"], "n": 1}), Document("d3", "heart")]
    retriever = BM25Retriever.build(documents, tmp_path / "index")
    assert retriever.facet("tags") == [("a", 2), ("b", 1)] and retriever.facet("n") == [(1, 2)]
    hits = retriever.search("statins", k=2, group_by="tags", group_size=3)
    assert sorted((h.group, h.id) for h in hits) == [("a", "d1"), ("a", "d2"), ("b", "d2")]


def test_facets_of_an_index_of_passages_count_documents_once(tmp_path):
    documents = [Document("A", " ".join(["statins"] * 30), metadata={"author": "team1", "year": 2010, "tags": ["x", "y"]}),
                 Document("B", " ".join(["statins heart"] * 10), metadata={"author": "team1", "year": 2020}),
                 Document("C", "statins", metadata={"author": "team2", "year": 2020, "tags": ["x"]}),
                 Document("D", " ".join(["walrus"] * 20), metadata={"author": "team2", "year": 2021})]
    retriever = BM25Retriever.build(documents[:2], tmp_path / "index", chunking=Chunking(4, 0))
    retriever.add(documents[2:])  # a second segment
    assert retriever.count() > 4  # passages
    assert retriever.facet("author") == [("team1", 2), ("team2", 2)]
    assert retriever.facet("tags") == [("x", 2), ("y", 1)]
    assert retriever.facet("author", filter={"year": {"gte": 2020}}) == [("team2", 2), ("team1", 1)]
    assert retriever.facet("year", ranges=[{"lt": 2015}, {"gte": 2015}]) == [({"lt": 2015}, 1), ({"gte": 2015}, 3)]
    assert retriever.facet("author", query="statins", depth=100) == [("team1", 2), ("team2", 1)]
    assert retriever.facet("year", query="statins", depth=100, ranges=[{"gte": 2015}]) == [({"gte": 2015}, 2)]
    out = CliRunner().invoke(app, ["facet", str(tmp_path / "index"), "author"])
    assert [json.loads(line) for line in out.stdout.splitlines()] == [{"value": "team1", "count": 2},
                                                                       {"value": "team2", "count": 2}]
    settings = ServeSettings({"docs": str(tmp_path / "index")}, write_process=False)
    with LocalClient(create_app(settings)) as client:
        found = client.post("/indexes/docs/facet", json={"field": "author", "query": "statins", "depth": 100})
        assert found.status_code == 200, found.text
        assert found.json()["values"] == [{"value": "team1", "count": 2}, {"value": "team2", "count": 1}]
    plain = BM25Retriever.build(documents, tmp_path / "plain")  # an index of whole documents counts as before
    assert plain.facet("author") == [("team1", 2), ("team2", 2)]


def test_an_export_takes_whole_documents_whatever_the_filter_passes(tmp_path):
    documents = [Document("A", "w0 w1 w2 w3 w4", metadata={"s": "x"}), Document("B", "v0 v1 v2", metadata={"s": "y"})]
    BM25Retriever.build(documents, tmp_path / "index", chunking=Chunking(2, 1))
    runner = CliRunner()
    for spec in ("chunk=0", 's=x'):
        out = runner.invoke(app, ["export", str(tmp_path / "index"), "--filter", spec]).stdout.splitlines()
        exported = [json.loads(line) for line in out]
        assert [(d["_id"], d["text"]) for d in exported] == (
            [("A", "w0 w1 w2 w3 w4"), ("B", "v0 v1 v2")] if spec == "chunk=0" else [("A", "w0 w1 w2 w3 w4")])
    BM25Retriever.build(documents, tmp_path / "whole")
    refused = runner.invoke(app, ["export", str(tmp_path / "whole"), "--passages"])
    assert refused.exit_code == 2 and "holds whole documents" in refused.output


def test_a_milvus_collection_of_passages_exports_its_documents(tmp_path):
    pytest.importorskip("milvus_lite", reason="needs milvus-lite (pip install 'semiret[milvus]')")
    from semiret.indexes.milvus import MilvusBackend
    from semiret.search import BagOfTokensRetriever

    uri = f"milvus:{tmp_path / 'milvus.db'}"
    long = Document("A", " ".join(f"w{i}" for i in range(30)))
    collection = BagOfTokensRetriever.build([long, Document("B", "v0 v1")], "passages",
                                            backend=MilvusBackend(str(tmp_path / "milvus.db")), chunking=Chunking(2, 0))
    assert collection.count() == 16
    out = CliRunner().invoke(app, ["export", "passages", "--backend", uri])
    assert out.exit_code == 0, out.output
    assert [(d["_id"], d["text"]) for d in map(json.loads, out.stdout.splitlines())] == [("A", long.text), ("B", "v0 v1")]
    assert collection.add([Document("A", "w0")], replace=True) == 1 and collection.count() == 2


def test_the_python_api_takes_a_chunking_as_a_dict_or_a_number_of_words(tmp_path):
    long = Document("d", " ".join(f"w{i}" for i in range(10)))
    as_dict = BM25Retriever.build([long], tmp_path / "a", chunking={"words": 4, "overlap": 1})
    as_words = BM25Retriever.build([long], tmp_path / "b", chunking=4)
    assert as_dict.chunking == Chunking(4, 1) and as_words.chunking == Chunking(4, 0)
    assert as_dict.index.n_docs == 3 and as_words.index.n_docs == 3
    for wrong in ({"size": 4}, "4", 4.5):
        with pytest.raises(SemiretError, match="chunking is a Chunking\\(words, overlap\\), a dict"):
            BM25Retriever.build([long], tmp_path / "c", chunking=wrong)


def test_grouping_by_a_field_no_document_holds_says_so(tmp_path, caplog):
    """Once, as a grouping (it spoke of "a filter" first, which none was); ``"parent"`` over whole documents is
    each document's own group (tests/search/test_python_api.py)."""
    bare = BM25Retriever.build([Document("d", "statins and cancer")], tmp_path / "bare")
    held = BM25Retriever.build([Document("d", "statins and cancer", metadata={"year": 2020})], tmp_path / "held")
    for whole in (bare, held):
        caplog.clear()
        with caplog.at_level("WARNING"):
            assert whole.search("statins", k=3, group_by="source") == []
        assert [r.getMessage() for r in caplog.records] == [
            f"no document of {whole.index.path} holds the field 'source' to group by, so no hits"]
        assert [h.group for h in whole.search("statins", k=3, group_by="parent")] == ["d"]


def test_a_boosted_search_over_passages_finds_k_documents(tmp_path):
    """Grouped by document, a boosted search's 100 candidate passages held about 20 documents: k = 40 found them
    only (eval's R@100 fell with a boost that changed no score). Given no candidates, it searches deeper until it
    has its k documents; given some, it chooses among those."""
    documents = [Document(f"d{i}", " ".join(["statins heart"] * 60 + [f"w{i}"]), metadata={"year": 2000 + i % 7})
                 for i in range(60)]
    retriever = BM25Retriever.build(documents, tmp_path / "passages", chunking=Chunking(8, 2))
    boost = {"field": "year", "modifier": "log1p"}
    found = retriever.search("statins heart", k=40, group_by="parent", boost=boost)
    assert len({hit.group for hit in found}) == 40
    chosen = retriever.search("statins heart", k=40, group_by="parent", boost=boost, candidates=100)
    assert len({hit.group for hit in chosen}) < 40  # 100 passages: about 6 documents' worth


# ---------------------------------------------------------------------------------------------- sentences and tokens
def _joined(chunking: Chunking, passages: list[Document]) -> str:
    [document] = chunking.documents(passages)
    return document.text


@pytest.mark.parametrize("word, ends", [
    ("it.", True), ("rats!", True), ("real?", True), ('said."', True), ("(end.)", True), ("3.5.", True),
    ("2020.", True), ("etc.", True), ("東京。", True), ("好！", True), ("吗？", True), ("。」", True),
    ("e.g.", False), ("i.e.", False), ("al.", False), ("Fig.", False), ("(Dr.", False), ("vs.", False),
    ("U.S.", False), ("J.", False), ("3.5", False), ("e.g.,", False), ("word", False), ("東京", False)])
def test_a_sentence_ends_at_its_mark_unless_an_abbreviation_holds_it(word, ends):
    from semiret.data.chunking import ends_sentence

    assert ends_sentence(word) is ends


def test_sentences_are_packed_whole_and_overlap_by_whole_sentences():
    """Sentences of 5, 3, 4, 3 (a paragraph without a mark) and 7 words in windows of 8 overlapping by up to 3: the
    first two fill a window; the next repeats the second (3 words) before the third; the third (4 words) is too long
    to repeat; "No mark here" would not leave the last sentence room, so it is not repeated either."""
    text = ("Dr. Smith et al. came. We saw it. A fig. 2 moment.\n\nNo mark here\n\n"
            "The end is near now, e.g. soon.")
    chunking = Chunking(8, 3, sentences=True)
    passages = chunking.passages(Document("d", text, "T"))
    assert [p.text for p in passages] == ["Dr. Smith et al. came. We saw it.", "We saw it. A fig. 2 moment.",
                                          "No mark here", "The end is near now, e.g. soon."]
    assert [p.id for p in passages] == ["d#0", "d#1", "d#2", "d#3"]
    assert [p.metadata for p in passages] == [{"parent": "d", "chunk": c, "chunk_start": start}
                                              for c, start in enumerate([0, 5, 12, 15])]  # "Dr.", "We", "No", "The"
    assert {p.title for p in passages} == {"T"}
    assert Chunking(8, 3).passages(Document("d", text))[1].text == "We saw it. A fig. 2 moment. No"  # (words)
    assert _joined(chunking, passages) == " ".join(text.split())  # the overlaps left out
    assert chunking.passages(Document("s", "One. Two.")) == [
        Document("s", "One. Two.", metadata={"parent": "s", "chunk": 0, "chunk_start": 0})]
    repeated = Chunking(3, 2, sentences=True)  # "xx yy." not repeated (it and the next would not fit): a new one
    passages = repeated.passages(Document("r", "aa bb cc. xx yy. xx yy. zz."))
    assert [p.text for p in passages] == ["aa bb cc.", "xx yy.", "xx yy. zz."]
    assert _joined(repeated, passages) == "aa bb cc. xx yy. xx yy. zz."


def _tokens_chunking(tmp_path, tokens: int, overlap: int) -> Chunking:
    from semiret.text.token_counts import counting

    return counting(Chunking(tokens=tokens, overlap=overlap, tokenizer=tiny_tokenizer(tmp_path / "tok")))


@pytest.mark.parametrize("kind, text, texts, starts", [
    # "no." is not carried into the last window (it and the next "no." would not fit), yet the window before ends
    # with it: matching repeated words joined one "no." too few
    ("sentences", "Yes. Oh no. no. no.", ["Yes.", "Oh no.", "no. no."], [0, 1, 3]),
    # "icexx" (3 tokens) is not carried (it would leave no room for "seal"), yet the window before ends with it
    ("tokens", "sealx ice icexx icexx seal", ["sealx ice", "ice icexx", "icexx seal"], [0, 1, 3]),
])
def test_passages_join_back_exactly_where_the_text_repeats_itself_at_a_window_s_edge(tmp_path, kind, text, texts,
                                                                                     starts):
    """Passages of sentences or tokens record the number of their first word (``chunk_start``), and join back by it:
    every word once, however the text repeats itself where windows meet; a run of them from the middle too."""
    chunking = Chunking(2, 1, sentences=True) if kind == "sentences" else _tokens_chunking(tmp_path, 4, 3)
    passages = chunking.passages(Document("d", text, metadata={"year": 2020}))
    assert [p.text for p in passages] == texts
    assert [p.metadata for p in passages] == [{"year": 2020, "parent": "d", "chunk": c, "chunk_start": start}
                                              for c, start in enumerate(starts)]
    [joined] = chunking.documents(passages)
    assert joined == Document("d", text, metadata={"year": 2020})  # the passage fields left out
    assert chunking.joined(passages[1:]).text == " ".join(text.split()[starts[1]:])


@pytest.mark.parametrize("kind", ["sentences", "tokens"])
def test_passages_of_sentences_and_tokens_start_where_they_say_and_join_back_whatever_they_repeat(tmp_path, kind):
    """Texts of few distinct words and sentences, so that windows often meet where the text repeats itself: each
    passage's words are the document's from its ``chunk_start`` on, and the passages join back into the text; with a
    passage deleted on its own, into the words of the others, each once."""
    rng = random.Random(7)
    words = ["seal.", "ice", "icexx", "sealx!", "walrus"]
    for _ in range(150):
        text = " ".join(rng.choices(words, k=rng.randint(1, 14)))
        budget = rng.randint(2, 6)
        overlap = rng.randint(0, budget - 1)
        chunking = (Chunking(budget, overlap, sentences=True) if kind == "sentences"
                    else _tokens_chunking(tmp_path, budget, overlap))
        passages = chunking.passages(Document("d", text))
        for passage in passages:
            start = passage.metadata["chunk_start"]
            assert text.split()[start:start + len(passage.text.split())] == passage.text.split(), (text, passage)
        assert _joined(chunking, passages) == text, (text, budget, overlap, [p.text for p in passages])
        if len(passages) > 2:
            kept = passages[:1] + passages[2:]
            covered = sorted({p.metadata["chunk_start"] + n for p in kept for n in range(len(p.text.split()))})
            assert _joined(chunking, kept).split() == [text.split()[n] for n in covered]


def test_the_start_of_passages_is_reserved_where_they_record_it(tmp_path):
    """A document holding ``chunk_start`` is refused by passages of sentences or tokens, as one holding ``parent`` or
    ``chunk``; windows of words record no start and keep such a field as the document's own, as they always did.
    Passages of sentences or tokens that record no start (cut before they did) are not joined by guesswork."""
    document = Document("d", "One two. Three four. Five six.", metadata={"chunk_start": 7})
    for chunking in (Chunking(4, 2, sentences=True), _tokens_chunking(tmp_path, 4, 2)):
        with pytest.raises(SemiretError, match="document 'd' has metadata field.* chunk_start"):
            chunking.passages(document)
    words = Chunking(4, 2)
    passages = words.passages(document)
    assert [p.metadata for p in passages] == [{"chunk_start": 7, "parent": "d", "chunk": c} for c in range(2)]
    assert list(words.documents(passages)) == [document]
    sentences = Chunking(4, 2, sentences=True)
    unmarked = [Document(p.id, p.text, metadata={k: v for k, v in p.metadata.items() if k != "chunk_start"})
                for p in sentences.passages(Document("d", document.text))]
    with pytest.raises(SemiretError, match="passages of 'd' do not record where they start .*rebuild the index"):
        list(sentences.documents(unmarked))


def test_an_index_of_sentences_keeps_its_passages_starts_through_metadata_updates_and_syncs(tmp_path):
    """The index reads its documents back exactly (get, export); new metadata, even replacing all of it, keeps each
    passage's ``chunk_start`` (a value given for it is not taken), and a sync of the same documents changes none."""
    text = "Yes. Oh no. no. no."
    retriever = BM25Retriever.build([Document("a", text, metadata={"k": 1})], tmp_path / "index",
                                    chunking=Chunking(2, 1, sentences=True))
    assert retriever.get_document("a") == Document("a", text, metadata={"k": 1})
    assert retriever.set_metadata({"k": 2, "chunk_start": 9, "chunk": 5}, ["a"], overwrite=True) == 3
    stored = sorted(retriever.iter_documents({"parent": "a"}), key=lambda p: p.metadata["chunk"])
    assert [p.metadata for p in stored] == [{"k": 2, "parent": "a", "chunk": c, "chunk_start": start}
                                            for c, start in enumerate([0, 1, 3])]
    assert retriever.get_document("a") == Document("a", text, metadata={"k": 2})
    assert retriever.sync([Document("a", text, metadata={"k": 2})]).unchanged == 1
    exported = CliRunner().invoke(app, ["export", str(tmp_path / "index")])
    assert exported.exit_code == 0 and json.loads(exported.stdout)["text"] == text, exported.output


def test_chinese_and_japanese_sentences_end_at_their_full_width_marks():
    text = "今日は晴れ。明日は雨！本当？"  # sentences of 6, 5 and 3 characters
    passages = Chunking(8, 3, sentences=True).passages(Document("j", text))
    assert [p.text for p in passages] == ["今日は晴れ。", "明日は雨！本当？"]
    assert _joined(Chunking(8, 3, sentences=True), passages) == text


def test_a_sentence_longer_than_the_budget_is_cut_alone_by_words():
    text = "Short one. w0 w1 w2 w3 w4 w5 w6 w7 w8 w9. Tail here."
    chunking = Chunking(4, 1, sentences=True)
    passages = chunking.passages(Document("d", text))
    assert [p.text for p in passages] == ["Short one.", "w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9.", "Tail here."]
    assert max(len(p.text.split()) for p in passages) == 4
    assert _joined(chunking, passages) == text


def test_windows_of_tokens_count_each_word_s_tokens(tmp_path):
    """Budgets of 5 tokens, overlapping by 2: "walrus sealxx" (1 + 3) leaves no room for "icexxx" (4), and "sealxx"
    is over the overlap; "seal" (1) is repeated. A word over the budget ("icexxxxxx", 7) is a passage alone."""
    from tokenizers import Tokenizer

    from semiret.text.token_counts import counting

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    chunking = counting(Chunking(tokens=5, overlap=2, tokenizer=tokenizer))
    text = "walrus sealxx icexxx seal walrusx ice"
    passages = chunking.passages(Document("d", text))
    assert [p.text for p in passages] == ["walrus sealxx", "icexxx seal", "seal walrusx ice"]
    whole = Tokenizer.from_file(tokenizer)
    assert [len(whole.encode(p.text, add_special_tokens=False).ids) for p in passages] == [4, 5, 4]
    assert _joined(chunking, passages) == text
    long = chunking.passages(Document("e", "seal icexxxxxx seal"))
    assert [p.text for p in long] == ["seal", "icexxxxxx", "seal"] and _joined(chunking, long) == "seal icexxxxxx seal"
    in_sentences = counting(Chunking(tokens=5, overlap=2, sentences=True, tokenizer=tokenizer))
    sentences = in_sentences.passages(Document("f", "Seal ice. Walrusx ice! Sealxxx."))  # 3, 4 and 5 tokens
    assert [p.text for p in sentences] == ["Seal ice.", "Walrusx ice!", "Sealxxx."]
    with pytest.raises(SemiretError, match="counted by a tokenizer, which this chunking was given none of"):
        Chunking(tokens=5, tokenizer=tokenizer).passages(Document("d", text))


@pytest.mark.parametrize("make, message", [
    (lambda: Chunking.of_options(5, 0, tokens=5), "in words \\(--chunk-words\\) or in tokens \\(--chunk-tokens\\), "
                                                  "not both"),
    (lambda: Chunking.of_options(None, 0, sentences=True), "--chunk-sentences packs .*give --chunk-words too"),
    (lambda: Chunking.of_options(None, 0, tokenizer="t"), "--chunk-tokenizer counts .*give --chunk-words too"),
    (lambda: Chunking.of_options(5, 0, tokenizer="t"), "give --chunk-tokens, not --chunk-words"),
    (lambda: Chunking(tokens=0), "at least one token \\(--chunk-tokens\\), got 0"),
    (lambda: Chunking(tokens=5, overlap=5), "less than their 5 tokens, got 5"),
    (lambda: Chunking(sentences=True), "passages need a budget"),
])
def test_bad_sentence_and_token_windows_are_refused(make, message):
    with pytest.raises(SemiretError, match=message):
        make()


def test_an_old_record_reads_as_before_and_new_ones_round_trip():
    old = Chunking.recorded({"words": 4, "overlap": 1})
    assert old == Chunking(4, 1, spaceless=False) and not old.sentences and old.tokens is None
    assert old.record() == {"words": 4, "overlap": 1, "spaceless": False}  # no new keys
    assert Chunking(6, 2).record() == {"words": 6, "overlap": 2, "spaceless": True}
    for new in (Chunking(6, 2, sentences=True), Chunking(tokens=9, overlap=3, tokenizer="t", tokenizer_fingerprint="f"),
                Chunking(tokens=9, sentences=True, tokenizer="t", tokenizer_fingerprint="f")):
        assert Chunking.recorded(new.record()) == new == Chunking.of(new.record())
    assert Chunking(tokens=9, tokenizer="t").record() == {"tokens": 9, "tokenizer": "t", "tokenizer_fingerprint": None,
                                                          "overlap": 0, "spaceless": True}


def test_an_index_counts_with_its_own_tokenizer_and_cuts_added_documents_the_same(tmp_path):
    """No tokenizer named: the index's (bag of tokens: its WordPiece tokenizer) counts, and is recorded with its
    fingerprint; documents added after reopening are cut as a chunking of that record cuts them, and a tokenizer
    changed since is refused before anything is added."""
    from semiret.search import BagOfTokensRetriever
    from semiret.text.token_counts import recorded_chunking
    from semiret.text.wordpiece import tokenizer_fingerprint

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    first = Document("a", "Seal ice. Walrusx ice! Sealxxx.")
    built = BagOfTokensRetriever.build([first], tmp_path / "index", tokenizer=tokenizer,
                                       chunking=Chunking(tokens=5, overlap=2, sentences=True))
    record = json.loads((tmp_path / "index" / "meta.json").read_text())["chunking"]
    assert record == {"tokens": 5, "tokenizer": tokenizer, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer),
                      "overlap": 2, "spaceless": True, "sentences": True}
    assert built.index.n_docs == 3
    reopened = open_retriever(tmp_path / "index")
    assert reopened.chunking == Chunking.recorded(record)
    added = Document("b", "walrus sealxx icexxx seal walrusx ice. Ice seal!")
    assert reopened.add([added]) == 4
    expected = recorded_chunking(record).passages(added)
    assert sorted((p.id, p.text) for p in reopened.iter_documents({"parent": "b"})) == sorted(
        (p.id, p.text) for p in expected)
    assert [p.text for p in expected] == ["walrus sealxx", "icexxx seal", "seal walrusx ice.", "Ice seal!"]
    assert reopened.get_document("b").text == added.text  # joined again, counting with the recorded tokenizer
    Path(tokenizer).write_text(Path(tokenizer).read_text().replace('"##x"', '"##y"'))
    with pytest.raises(SemiretError, match="tokenizer.json has changed since"):
        open_retriever(tmp_path / "index").add([Document("c", "walrus " * 20)])
    assert open_retriever(tmp_path / "index").count({"parent": "c"}) == 0


def test_bm25_counts_tokens_only_with_a_tokenizer_named_and_a_hybrid_keeps_them(tmp_path):
    from semiret.search import BagOfTokensRetriever, HybridRetriever

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    with pytest.raises(SemiretError, match="a bm25 index has no tokenizer: name the tokenizer that counts"):
        BM25Retriever.build([Document("a", "seal")], tmp_path / "refused", chunking=Chunking(tokens=5))
    assert not (tmp_path / "refused").exists()
    text = "walrus sealxx icexxx seal walrusx ice"
    named = BM25Retriever.build([Document("a", text)], tmp_path / "bm25",
                                chunking={"tokens": 5, "overlap": 2, "tokenizer": tokenizer})
    assert named.chunking.tokenizer == tokenizer and named.index.n_docs == 3 and named.get_document("a").text == text
    BagOfTokensRetriever.build([Document("a", text)], tmp_path / "bot", tokenizer=tokenizer,
                               chunking=Chunking(tokens=5, overlap=2))
    hybrid = HybridRetriever.around(tmp_path / "bot", tmp_path / "hybrid")
    assert hybrid.chunking == open_retriever(tmp_path / "bot").chunking and hybrid.chunking.tokenizer == tokenizer
    assert hybrid.add([Document("b", "seal icexxxxxx seal")]) == 3 and hybrid.get_document("b").text == (
        "seal icexxxxxx seal")


def test_the_index_command_takes_sentences_and_tokens(tmp_path):
    from semiret.text.wordpiece import tokenizer_fingerprint

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    data = write_beir(tmp_path / "beir", docs=[Document("a", "Seal ice. Walrusx ice! Sealxxx.")])
    runner = CliRunner()
    built = runner.invoke(app, ["index", "--data", str(data), "--out", str(tmp_path / "bot"), "-r", "bot",
                                "--tokenizer", tokenizer, "--chunk-tokens", "5", "--chunk-overlap", "2",
                                "--chunk-sentences"])
    assert built.exit_code == 0, built.output
    info = json.loads(runner.invoke(app, ["info", str(tmp_path / "bot")]).stdout)
    assert info["chunking"] == {"tokens": 5, "tokenizer": tokenizer, "tokenizer_fingerprint": tokenizer_fingerprint(
        tokenizer), "overlap": 2, "spaceless": True, "sentences": True}
    assert open_retriever(tmp_path / "bot").count() == 3
    named = runner.invoke(app, ["index", "--data", str(data), "--out", str(tmp_path / "bm25"), "--chunk-tokens", "5",
                                "--chunk-tokenizer", tokenizer])
    assert named.exit_code == 0, named.output
    for flags, message in ((["--chunk-words", "5", "--chunk-tokens", "5"], "not both"),
                           (["--chunk-sentences"], "give --chunk-words too"),
                           (["--chunk-tokens", "5"], "has no tokenizer"),
                           (["--chunk-tokens", "5", "--chunk-overlap", "5"], "less than their 5 tokens")):
        refused = runner.invoke(app, ["index", "--data", str(data), "--out", str(tmp_path / "no"), *flags])
        assert refused.exit_code != 0 and message in refused.output, (flags, refused.output)
        assert not (tmp_path / "no").exists()


def test_the_service_creates_indexes_of_sentences_and_tokens(tmp_path):
    from semiret.text.token_counts import recorded_chunking
    from semiret.text.wordpiece import tokenizer_fingerprint

    settings = ServeSettings({}, data_dir=str(tmp_path / "data"), api_key="key", write_process=False)
    key = {"X-API-Key": "key"}
    with LocalClient(create_app(settings)) as client:
        created = client.put("/indexes/t", headers=key, json={"retriever": "bot", "chunk_tokens": 8,
                                                              "chunk_overlap": 2, "chunk_sentences": True})
        assert created.status_code == 201, created.text
        record = created.json()["chunking"]
        assert record == {"tokens": 8, "tokenizer": "bert-base-uncased", "overlap": 2, "spaceless": True,
                          "sentences": True, "tokenizer_fingerprint": tokenizer_fingerprint("bert-base-uncased")}
        document = Document("d", "Statins lower cholesterol. They are cheap! Trials show it, e.g. in 2020. " * 3)
        added = client.put("/indexes/t/documents", headers=key,
                           json={"documents": [{"_id": "d", "text": document.text}]})
        assert added.json()["upserted"] == 1
        assert added.json()["passages"] == len(recorded_chunking(record).passages(document)) > 1
        made = client_of(client, api_key="key").create_index("c", "bot", chunk_tokens=8, chunk_overlap=2,
                                                             chunk_sentences=True)
        assert made["chunking"] == record  # the Python client asks for the same
        counted = client_of(client, api_key="key").create_index("b", "bm25", chunk_tokens=8, chunk_tokenizer="minilm")
        assert counted["chunking"]["tokenizer"] == "minilm"  # a BM25 index counts by a tokenizer named
        refused = client.put("/indexes/u", headers=key, json={"retriever": "bm25", "chunk_tokens": 8,
                                                              "chunk_tokenizer": str(tmp_path)})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "chunk_tokenizer"]
        assert "not a model this server has installed" in refused.text
        for body, message in (({"chunk_words": 4, "chunk_tokens": 4}, "not both"),
                              ({"chunk_sentences": True}, "give --chunk-words too"),
                              ({"chunk_tokens": 4}, "a bm25 index has no tokenizer"),
                              ({"chunk_tokens": 0}, "greater than or equal to 1"),
                              ({"chunk_words": 4, "chunk_sentences": "yes"}, "valid boolean")):
            refused = client.put("/indexes/u", headers=key, json=body)
            assert refused.status_code == 422 and message in refused.text, (body, refused.text)
        assert client.get("/indexes/u").status_code == 404
