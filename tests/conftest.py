"""Shared fixtures: tiny corpora written into ``tmp_path``, a SciFact sample for integration tests, and tiny
randomly initialised transformers (built once per session, offline, with the packaged splade-tiny tokenizer;
the MLM bias is negative so SPLADE vectors are sparse, as trained ones are).

A test that runs a packaged model's weights (``minilm``, ``splade-tiny``, ``smollm2-135m``, a checkpoint under
``semiret/checkpoints``) or reads a real collection under ``../shared/data`` carries the ``integration`` marker
(declared in pyproject.toml); a packaged tokenizer or vocabulary alone does not make a test one.
``python -m pytest -q -n 2 -m "not integration"`` is the quick unit run, ``-m integration`` the rest, and no
``-m`` runs both. The unit run still reads the shared MS MARCO IDF table (``helpers.MSMARCO_IDF``)."""

from __future__ import annotations

import os

WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
"""With ``-n N`` every worker gets its share of the cores for torch, faiss and BLAS (set here, before any of them
is imported, and inherited by the commands and servers a test starts). Two workers each running torch's default
of a thread per core took 2.2x as long on the 2-core machine as with a thread each (106 s against 47 s for the
packaged GDR model's test run twice at once): their spinning threads took each other's cores. A variable already
set is kept."""
if WORKERS > 1:
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
        os.environ.setdefault(variable, str(max(1, (os.cpu_count() or 1) // WORKERS)))

import itertools
from pathlib import Path

import pytest
import typer.main
import typer.testing

from semiret import progress
from semiret.data import Document

from helpers import MAX_POSITIONS, SCIFACT, TINY_DOCS, TOKENIZER_SOURCE, require_shared_data, write_beir, write_jsonl


_click_commands: dict[int, tuple] = {}


def _click_command_once(app):
    """typer's ``CliRunner.invoke`` builds the click form of every command of the app at each call (37 ms for
    semiret's, as much as many commands under test take: 9 s of CPU of tests/cli and tests/search's 107). A click
    command is built once per app and process here, as a click application is defined once (the app is kept beside
    it, so its id is never reused)."""
    if id(app) not in _click_commands:
        _click_commands[id(app)] = (app, typer.main.get_command(app))
    return _click_commands[id(app)][1]


assert typer.testing._get_command is typer.main.get_command, "typer's CliRunner no longer builds commands this way"
typer.testing._get_command = _click_command_once

LONGEST_FILES_FIRST = ("serving/test_app.py", "adapt/test_adapt.py", "indexes/test_concurrency.py",
                       "serving/test_fault.py", "models/test_encoders_integration.py", "indexes/test_milvus.py",
                       "cli/test_cli.py", "sidr/test_sidr.py", "search/test_filters.py", "training/test_distributed.py",
                       "gdr/test_gdr_integration.py", "serving/test_data_dir.py", "serving/test_load.py",
                       "hce/test_hce.py", "inference_free/test_inference_free.py", "gdr/test_gdr.py",
                       "models/test_encoders.py", "hce/test_hce_integration.py", "nail/test_nail_search.py")
"""The test files that take the longest here (19 s to 75 s each on the 2-core machine, sixty-third session), longest
first: started first, so that with ``-n`` (a file per worker) no worker is left alone with one of them at the end
while the others are idle. xdist keeps this order only with ``--no-loadscope-reorder`` (pyproject's addopts): by
default it orders files by their number of tests, which put files of few slow tests (the kill test's 3) last."""


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    root = Path(__file__).parent
    def place(item) -> int:
        inside = item.path.is_relative_to(root)  # a test file named from elsewhere keeps its place
        return rank.get(item.path.relative_to(root).as_posix(), len(rank)) if inside else len(rank)

    items.sort(key=place)  # stable: the order is kept otherwise


@pytest.fixture(autouse=True)
def _quiet_progress():
    """No progress bars in test output."""
    progress.set_enabled(False)
    yield
    progress.set_enabled(True)


@pytest.fixture
def tiny_docs() -> list[Document]:
    return list(TINY_DOCS)


@pytest.fixture
def beir_dir(tmp_path) -> Path:
    return write_beir(tmp_path / "tiny")


@pytest.fixture
def corpus_jsonl(tmp_path) -> Path:
    return write_jsonl(tmp_path / "corpus.jsonl", [d.to_record() for d in TINY_DOCS])


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


def _save(model, directory: Path) -> Path:
    from semiret.models.loading import load_tokenizer

    model.save_pretrained(directory)
    load_tokenizer(TOKENIZER_SOURCE).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BertForMaskedLM directory."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                       intermediate_size=64, max_position_embeddings=MAX_POSITIONS))
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-0.3)
    return _save(model, tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def tiny_distilbert(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide DistilBertForMaskedLM directory."""
    import torch
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    torch.manual_seed(1)
    model = DistilBertForMaskedLM(DistilBertConfig(vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                                   max_position_embeddings=MAX_POSITIONS))
    with torch.no_grad():
        model.vocab_projector.bias.fill_(-0.3)
    return _save(model, tmp_path_factory.mktemp("tiny-distilbert"))


@pytest.fixture(scope="session")
def tiny_nail(tiny_bert, tmp_path_factory) -> Path:
    """A saved NAIL model on ``tiny_bert``: 4 decoder positions, 1 decoder layer, untrained."""
    import torch

    from semiret.models.nail import NailConfig, NailModel

    torch.manual_seed(0)
    model = NailModel.initialise(str(tiny_bert), NailConfig(positions=4, decoder_layers=1, max_length=MAX_POSITIONS))
    with torch.no_grad():
        model.lm.cls.predictions.bias.fill_(0.05)  # positive scores for many tokens, as a trained model gives
    return model.save(tmp_path_factory.mktemp("tiny-nail") / "model", fp16=False)


@pytest.fixture(scope="session")
def tiny_gdr(tiny_bert, tmp_path_factory) -> Path:
    """A saved GDR model on ``tiny_bert`` (its E_Q and E_D), untrained: ``TINY_DOCS`` in 3 leaves of 2."""
    import numpy as np
    import torch

    from semiret.models.encoders import load_encoder
    from semiret.models.gdr import Clusters, GDRConfig, GDRModel

    torch.manual_seed(0)
    encoder = load_encoder(str(tiny_bert), "dense")
    vectors = encoder.encode_document([d.full_text for d in TINY_DOCS], show_progress=False)
    leaves = np.asarray([0, 0, 1, 1, 2, 2])
    clusters = Clusters([(1, 0), (2, 0), (3, 0)], np.stack([vectors[leaves == leaf].mean(0) for leaf in range(3)]),
                        [d.id for d in TINY_DOCS], leaves)
    model = GDRModel(encoder, clusters, GDRConfig(branching=3, decoder_layers=1, heads=2,
                                                  document_encoder=str(tiny_bert)))
    return model.save(tmp_path_factory.mktemp("tiny-gdr") / "model", fp16=False)
