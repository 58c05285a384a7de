"""Test helpers: tiny corpora, BEIR folders written into a directory, the shared data's location, and a
textbook SPLADE forward to compare encoders against. Fixtures live in ``conftest.py``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

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


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def tiny_tokenizer(directory) -> str:
    """A WordPiece tokenizer of a few words: "walrus", "seal" and "ice" are one token each, and each "x" after one
    another ("sealxx": 3 tokens); any other word is [UNK], one token; "." and "!" one each."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "walrus", "seal", "ice", "##x", ".", "!"]
    tokenizer = Tokenizer(models.WordPiece({token: i for i, token in enumerate(vocabulary)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    return str(directory / "tokenizer.json")


def write_beir(root: Path, docs=TINY_DOCS, queries=TINY_QUERIES, qrels=TINY_QRELS, split="test") -> Path:
    """A BEIR-layout collection folder."""
    root.mkdir(parents=True, exist_ok=True)
    write_jsonl(root / "corpus.jsonl", [d.to_record() for d in docs])
    write_jsonl(root / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    (root / "qrels").mkdir(exist_ok=True)
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{g}" for q, docs_ in qrels.items() for d, g in docs_.items()]
    (root / "qrels" / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def leftovers(directory: Path) -> list[str]:
    """Temporary files or folders that staging left behind in ``directory`` (recursively)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if ".tmp-" in p.name or ".old-" in p.name)


def require_shared_data() -> None:
    if not SCIFACT.is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA} (CI places ../shared beside the clone)")


TOKENIZER_SOURCE = "splade-tiny"
MAX_POSITIONS = 64


def naive_splade(directory: Path, texts: list[str], max_length: int = MAX_POSITIONS):
    """The textbook SPLADE forward, for comparison: full [batch, length, V] logits, masked max."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    batch = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch).logits
    weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
    return weights.amax(dim=1).numpy()


class Crash(Exception):
    """Raised by :func:`recording_loss` to interrupt a training run."""


def recording_loss(monkeypatch, loss_class, crash_at: int | None = None) -> list[float]:
    """Per-step totals of ``loss_class``'s calls (raising :class:`Crash` at call ``crash_at``, from 0)."""
    totals = []
    original = loss_class.__call__

    def call(self, model, batch, step):
        if len(totals) == crash_at:
            raise Crash
        output = original(self, model, batch, step)
        totals.append(output.total.item())
        return output

    monkeypatch.setattr(loss_class, "__call__", call)
    return totals


def checkpointed_weights(run: Path):
    """The trainer's last checkpoint of a run, flattened (float32; the saved model is float16)."""
    import torch
    from safetensors.torch import load_file

    tensors = load_file(str(run / "checkpoint" / "model.safetensors"))
    return torch.cat([tensors[k].flatten() for k in sorted(tensors)]).numpy()


def folder_files_parsed(monkeypatch) -> list[str]:
    """The ids of the files of a folder of documents parsed from now on (each kind's reader counted)."""
    from semiret.data import folder as folder_module

    parsed: list[str] = []
    for suffix, reader in list(folder_module.READERS.items()):
        def counting(raw, notes, reader=reader):
            parsed.append(notes.current)
            return reader(raw, notes)
        monkeypatch.setitem(folder_module.READERS, suffix, counting)
    return parsed


def client_of(http, api_key: str | None = None):
    """A :class:`~semiret.serving.Client` whose requests go to ``http`` (FastAPI's test client of an app), in this
    process, not over a socket."""
    from semiret.serving import Client

    def transport(method, route, body, headers):
        answer = http.request(method, route, content=body, headers=headers)
        return answer.status_code, answer.content

    return Client("http://testserver", api_key=api_key, transport=transport)


def two_segment_bm25(docs: list, path: Path, first: int, deleted: tuple[str, ...]):
    """BM25 over ``docs`` in two segments (the first ``first``, then the rest added), ``deleted`` deleted: the live
    documents by id, and the retriever."""
    from semiret.search import BM25Retriever

    retriever = BM25Retriever.build(docs[:first], path)
    retriever.add(docs[first:])
    retriever.delete(list(deleted))
    assert len(retriever.index.segments) == 2
    return {d.id: d for d in docs if d.id not in deleted}, retriever



class LocalClient(TestClient):
    """fastapi's test client, its requests naming ``localhost`` as a local program's do (a server answers reads
    without a key to loopback names only: ``testserver``, the default, gets a 403)."""

    def __init__(self, app, **options):
        super().__init__(app, base_url="http://localhost", **options)


def invoke_cli(*args, ok: bool = True):
    """``semiret ARGS`` run in-process (each argument as its string); with ``ok``, its exit status asserted 0."""
    from typer.testing import CliRunner

    from semiret.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if ok:
        assert result.exit_code == 0, result.output + repr(result.exception)
    return result


def ltr_corpus(topics: int = 40):
    """A learned ranking's corpus (``semiret ltr``): per topic five documents holding its word in their texts, as
    often as a draw says, the relevant one also in its title (which only a BM25 index of the titles reads): BM25 over
    the texts ranks it anywhere."""
    rng = np.random.default_rng(0)
    docs, queries, qrels = [], {}, {}
    for topic in range(topics):
        word = f"topic{topic}"
        for number, count in enumerate(rng.permutation(5) + 1):
            relevant = number == 0
            filler = " ".join(f"filler{int(x)}" for x in rng.integers(0, 30, 8))
            docs.append(Document(f"t{topic}-{number}", f"{(word + ' ') * int(count)}{filler}",
                                 title=word if relevant else f"heading{int(rng.integers(0, 1000))}"))
        queries[f"q{topic}"] = word
        qrels[f"q{topic}"] = {f"t{topic}-0": 1}
    return docs, queries, qrels
