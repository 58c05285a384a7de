"""Shared fixtures: tiny corpora written into ``tmp_path``, and the shared real data for integration tests."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from semiret import progress
from semiret.data import Document

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SCIFACT = SHARED_DATA / "scifact"
MSMARCO_IDF = SHARED_DATA / "idf" / "msmarco-bert-base-uncased.json"

TINY_DOCS = [
    Document("d1", "Cats chase mice in the garden.", "Cats"),
    Document("d2", "Dogs chase cats; dogs bark at the mailman.", "Dogs"),
    Document("d3", "Statins reduce the risk of heart disease and may reduce cancer risk."),
    Document("d4", "Birds sing in the morning garden."),
    Document("d5", "The mailman delivers letters every morning, even to dogs."),
    Document("d6", "Cancer research: statin therapy and tumour growth in mice."),
]
TINY_QUERIES = {"q1": "cats and dogs", "q2": "statins cancer risk", "q3": "morning garden birds"}
TINY_QRELS = {"q1": {"d1": 1, "d2": 2}, "q2": {"d3": 1, "d6": 1}, "q3": {"d4": 1}}


@pytest.fixture(autouse=True)
def _quiet_progress():
    """No progress bars in test output."""
    progress.set_enabled(False)
    yield
    progress.set_enabled(True)


@pytest.fixture
def tiny_docs() -> list[Document]:
    return list(TINY_DOCS)


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_beir(root: Path, docs=TINY_DOCS, queries=TINY_QUERIES, qrels=TINY_QRELS, split="test") -> Path:
    """A BEIR-layout collection folder."""
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "corpus.jsonl", [d.to_record() for d in docs])
    write_jsonl(root / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    (root / "qrels").mkdir(exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, docs_ in qrels.items() for d, g in docs_.items()]
    (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.fixture
def beir_dir(tmp_path) -> Path:
    return write_beir(tmp_path / "tiny")


@pytest.fixture
def corpus_jsonl(tmp_path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", [d.to_record() for d in TINY_DOCS])


def leftovers(directory: Path) -> list[str]:
    """Temporary files or folders that staging left behind in ``directory`` (recursively)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


def require_shared_data() -> None:
    if not SCIFACT.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA} (CI places ../shared beside the clone)")


@pytest.fixture(scope="session")
def scifact_sample(tmp_path_factory) -> Path:
    """A BEIR folder with the first 300 SciFact documents plus every document judged for the kept queries."""
    require_shared_data()
    from semiret.data import iter_corpus, read_qrels, read_queries

    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    kept_queries = dict(itertools.islice(qrels.items(), 40))
    judged = {d for docs in kept_queries.values() for d in docs}
    docs = [d for i, d in enumerate(iter_corpus(SCIFACT)) if i < 300 or d.id in judged]
    queries = read_queries(SCIFACT)
    return write_beir(tmp_path_factory.mktemp("scifact-sample") / "scifact-sample", docs=docs,
                      queries={q: queries[q] for q in kept_queries}, qrels=kept_queries)
