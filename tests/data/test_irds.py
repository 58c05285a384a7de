"""``--data irds:ID``: an ir_datasets collection written once into a BEIR folder of the cache, then read as any
other (splits from the dataset and its sub-datasets, titles kept, queries merged), with clear errors. ir_datasets
itself is stood in for by a module of the same shape (nothing is downloaded)."""

from __future__ import annotations

import json
import sys
import types
from collections import namedtuple

import pytest
from typer.testing import CliRunner

from semiret.cli import app
from semiret.data.collection import Collection
from semiret.data.paths import dataset
from semiret.errors import SemiretError

Doc = namedtuple("Doc", ["doc_id", "text", "title"])


class BodyDoc(namedtuple("BodyDoc", ["doc_id", "body"])):
    def default_text(self):  # a document with no text field: ir_datasets's own reading of it
        return self.body


Query = namedtuple("Query", ["query_id", "text"])
Qrel = namedtuple("Qrel", ["query_id", "doc_id", "relevance", "iteration"])


class FakeDataset:
    def __init__(self, docs=None, queries=None, qrels=None):
        self.docs, self.queries, self.qrels = docs, queries, qrels
        self.docs_read = 0

    def has_docs(self):
        return self.docs is not None

    def has_queries(self):
        return self.queries is not None

    def has_qrels(self):
        return self.qrels is not None

    def docs_iter(self):
        self.docs_read += 1
        return iter(self.docs)

    def docs_count(self):
        return len(self.docs)

    def queries_iter(self):
        return iter(self.queries)

    def qrels_iter(self):
        return iter(self.qrels)


DOCS = [Doc("d1", "statins lower cholesterol", "Statins"), Doc("d2", "aspirin and heart attacks", "Aspirin"),
        Doc("d3", "sleep and memory", "")]


@pytest.fixture
def fake_irds(monkeypatch, tmp_path):
    """A stand-in ``ir_datasets`` module: ``col`` (documents) with splits ``col/train`` and ``col/test``, a flat
    ``flat`` (documents, queries and judgements in one), and ``nodocs``; the cache in a folder of the test's."""
    monkeypatch.setenv("SEMIRET_CACHE", str(tmp_path / "cache"))
    registry = {
        "col": FakeDataset(DOCS),
        "col/train": FakeDataset(DOCS, [Query("q1", "statins cholesterol")], [Qrel("q1", "d1", 1, "0")]),
        "col/test": FakeDataset(DOCS, [Query("q2", "heart attacks"), Query("q1", "statins cholesterol")],
                                [Qrel("q2", "d2", 2, "0")]),
        "col/test/deeper": FakeDataset(DOCS, [Query("q9", "x")], [Qrel("q9", "d3", 1, "0")]),
        "flat": FakeDataset([BodyDoc("b1", "a body")], [Query("q", "body")], [Qrel("q", "b1", 1, "0")]),
        "nodocs": FakeDataset(None, [Query("q", "x")], [Qrel("q", "x", 1, "0")]),
        "clash": FakeDataset(DOCS),
        "clash/2017": FakeDataset(DOCS, [Query("1", "statins 2017")], [Qrel("1", "d1", 1, "0")]),
        "clash/2018": FakeDataset(DOCS, [Query("1", "aspirin 2018")], [Qrel("1", "d2", 1, "0")]),
        "noqueries": FakeDataset(DOCS, None, [Qrel("q", "d1", 1, "0")]),
        "queriesonly": FakeDataset(DOCS, [Query("q", "sleep")], None),
    }

    def load(name):
        return registry[name]  # a KeyError for an unknown id, as ir_datasets's registry

    monkeypatch.setitem(sys.modules, "ir_datasets", types.SimpleNamespace(load=load, registry=registry))
    return registry


def test_a_collection_is_written_once_with_its_splits(fake_irds, tmp_path):
    folder = dataset("irds:col")
    assert folder == tmp_path / "cache" / "irds" / "col"
    collection = Collection(folder)
    assert collection.splits() == ["test", "train"]  # one level down only
    assert collection.qrels("test") == {"q2": {"d2": 2}} and collection.queries("train") == {"q1": "statins cholesterol"}
    records = [json.loads(line) for line in (folder / "corpus.jsonl").read_text().splitlines()]
    assert records[0] == {"_id": "d1", "title": "Statins", "text": "statins lower cholesterol"}
    assert dataset("irds:col") == folder and fake_irds["col"].docs_read == 1  # read once, then the folder
    flat = Collection(dataset("irds:flat"))
    assert flat.splits() == ["test"] and next(flat.corpus()).text == "a body"  # the default text


def test_eval_reads_an_ir_datasets_collection(fake_irds):
    result = CliRunner().invoke(app, ["eval", "--data", "irds:col", "--split", "test", "-r", "bm25", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["nDCG@10"] == 1.0


def test_bad_ir_datasets_names_are_clear_errors(fake_irds, monkeypatch, tmp_path):
    with pytest.raises(SemiretError, match="ir_datasets has no dataset 'nope'"):
        dataset("irds:nope")
    with pytest.raises(SemiretError, match="'nodocs' has no documents"):
        dataset("irds:nodocs")
    assert not (tmp_path / "cache" / "irds" / "nodocs").exists()
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # not installed
    with pytest.raises(SemiretError, match="needs the ir_datasets package"):
        dataset("irds:other")


def test_splits_that_give_one_query_two_texts_are_refused(fake_irds, tmp_path):
    with pytest.raises(SemiretError, match=r"the query '1' has two texts, in irds:clash/2017 and in irds:clash/2018"):
        dataset("irds:clash")
    assert not (tmp_path / "cache" / "irds" / "clash").exists()
    assert Collection(dataset("irds:clash/2018")).queries("test") == {"1": "aspirin 2018"}
    assert Collection(dataset("irds:noqueries")).splits() == []  # judgements without queries: nothing to search
    assert Collection(dataset("irds:queriesonly")).queries() == {"q": "sleep"}


def test_an_interrupted_write_is_written_anew(fake_irds, tmp_path):
    folder = tmp_path / "cache" / "irds" / "col"
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("half a line")
    assert len(list(Collection(dataset("irds:col")).corpus())) == 3
