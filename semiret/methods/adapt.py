"""``semiret adapt``: label-free adaptation of a trained model to a user's corpus, composed from the recipes'
own label-free stages:

- an **inference-free** model (``inference-free-scifact`` or a saved one): the inference-free paper's
  pre-training stage on pseudo-queries of the corpus (:func:`semiret.methods.inference_free.train_inference_free`
  with no fine-tuning), distilled from a teacher ensemble that keeps BM25, with the corpus's own IDF as the
  query side (the choice that measured best out of domain, docs/results.md);
- a **dense** encoder (``minilm``, ``hce-scifact``, a saved one): HCE-U, the hierarchy loss on inverse-cloze
  pseudo-queries (:func:`semiret.methods.hce.train_hce`, ``scenario="unsupervised"``), at gentler settings than
  HCE's and averaged with the start (:data:`DENSE_ADAPT`);
- a **SiDR** model (``sidr-scifact``, a saved one): SiDR's own training (:func:`semiret.methods.sidr.train_sidr`:
  the semi-parametric loss, negatives retrieved from the corpus's bag-of-tokens index) continued on pseudo-queries
  of the corpus, each judged relevant to its source document, distilled in-batch from the same teacher ensemble
  (BM25 kept in it), averaged half with the start (:data:`SIDR_ADAPT`); searched as ``sidr-full``;
- a **GDR** model (``gdr-scifact``, a saved one): GDR trained again without labels over a prefix tree of this
  corpus (:func:`semiret.methods.gdr.train_gdr`: E_D's vectors clustered by Algorithm 1, the decoder learning the
  new cluster ids from the corpus's random spans and inverse-cloze sentences plus the pseudo-queries above), E_Q
  going on from the model's own; its recorded search settings (beta) carried over (:data:`GDR_ADAPT`). The starting
  model's tree is SciFact's, into which a foreign corpus's documents only join the nearest leaf.
- a **NAIL** model (``nail-scifact``, a saved one): NAIL's own self-supervised pre-training stage
  (:func:`semiret.methods.nail.train_nail` with no fine-tuning: inverse-cloze and cropped pairs of the corpus,
  in-batch negatives) continued from the model (which keeps its recorded BM25 weight), distilled in-batch from the
  same teacher ensemble; searched as ``bm25+nail``, BM25 already inside, so no fusion is checked.

Without labels the only check is a **known-item test**: held-out pseudo-queries (``check_queries`` documents'
crops and sentences, drawn with another seed than training's) each judged relevant to the document it was cut
from; nDCG@10 and R@100 of the starting and the adapted model over the whole corpus. The adapted model is kept
only when its known-item nDCG@10 is not below the start's; otherwise ``<output>/model`` is the starting model
unchanged. (The test favours a model trained on pseudo-queries of the same kind: it guards against a model
made worse, it does not prove one better.) Then BM25 fused with the kept model (``hybrid``) is checked the same
way, and the corpus is indexed that way unless fusion is significantly worse than the model alone there (paired
t-test, p < 0.05): the known-item queries are near their ceiling (nDCG@10 about 0.9 on Vaswani) and cannot
rank the two, while on real queries out of its domain a model is often below BM25 and fusion holds it at BM25's
level or above (Vaswani: 0.437 fused against 0.408 alone, docs/results.md). ``--no-hybrid`` skips that step.

``<output>`` then holds ``model/`` (with ``adapted-corpus.json``: the corpus it was adapted to, so building an
index of another corpus with it fails), ``index/`` (the corpus indexed with that model, or with BM25 and the
model, ready for ``semiret search``; the report's ``retriever`` says which), ``adapt.json`` (the report) and
``train/`` (the resumable run). Packaged model files are never written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

from semiret.data.collection import Collection, Document, beir_file, corpus_file, iter_corpus
from semiret.data.packaged import PACKAGED_CHECKPOINTS, check_run_output
from semiret.errors import SemiretError
from semiret.files import atomic_write_json
from semiret.models.checkpoints import (ADAPTED_CORPUS_FILE, GDR, INFERENCE_FREE, NAIL, SIDR,
                                       corpus_fingerprint)
from semiret.text.languages import language

log = logging.getLogger(__name__)

MIN_DOCUMENTS = 500
"""Smaller corpora give too few pseudo-queries to adapt on without over-fitting, and too few held-out ones to
tell a better model from a worse one."""
CHECK_QUERIES = 300
"""Known-item check queries by default, fewer on a corpus under twice as many documents (half of them)."""
CHECK_MEASURES = ("nDCG@10", "R@100")
PROBE_DOCUMENTS = 64
NO_TEACHERS = "none"
"""``--teachers none``: SiDR and NAIL train on their own loss alone (inference-free adaptation needs teachers)."""
DISTILLING_KINDS = ("inference-free", "sidr", "nail")
"""The model kinds whose adaptation distils from ``--teachers``."""


@dataclass
class AdaptConfig:
    data: str = ""
    """The corpus to adapt to: a BEIR folder, a corpus file (.jsonl/.tsv/.csv) or a folder of documents; no labels
    are read."""
    model: str = INFERENCE_FREE.default
    """The model to adapt: an inference-free model (default: the packaged one), a dense encoder (minilm,
    hce-scifact, a saved one), a SiDR model (sidr-scifact, a saved one), a GDR model (gdr-scifact, a saved one)
    or a NAIL model (nail-scifact, a saved one)."""
    output: str | None = None
    """Folder for the adapted model, its index, the report and the run (default: adapted/<corpus>-<model>)."""
    epochs: int | None = None
    """Training epochs over the pseudo-queries (default: 2; GDR models 1, an epoch of theirs covering every
    document of the corpus)."""
    queries_per_epoch: int = 1024
    """Pseudo-queries trained on per epoch (the inference-free recipe's pre-training default; 8x more moved
    Vaswani's nDCG@10 by -0.005, docs/results.md)."""
    teachers: str = "dense:minilm@128,sparse:splade-tiny,bm25"
    """Inference-free, SiDR and NAIL models: the teacher ensemble (BM25 kept in it; see semiret train
    inference-free), distilled from as each recipe's training does. ``none``: SiDR and NAIL without distillation
    (SiDR: Vaswani in 6 minutes instead of 10 on a 2-core CPU, fused nDCG@10 0.002 lower; docs/results.md)."""
    batch_size: int = 32
    """Pseudo-queries per step."""
    max_length: int = 128
    """Document tokens read in training (the adapted model indexes at the length the starting model did)."""
    check_queries: int | None = None
    """Held-out known-item pseudo-queries the starting and the adapted model are compared on (default: 300, or half
    the corpus's documents with text where that is fewer)."""
    hybrid: bool = True
    """Also check BM25 fused with the kept model (the ``hybrid`` retriever's defaults) and index the corpus that
    way unless the known-item check finds fusion significantly worse than the model alone (NAIL models: BM25 is
    their first stage already)."""
    language: str = "english"
    """Language of the documents for the hybrid index's BM25 (bm25's --language: its stemmer and stopwords)."""
    seed: int = 12345
    resume: bool = True
    """Continue an adaptation into the same --output where its training stopped; --no-resume starts the training
    over (what to do after changing an option, or the corpus, of an earlier run there)."""
    threads: int | None = None
    """Torch threads (default: torch's choice)."""
    device: str = "auto"
    """Where the model trains and encodes the corpus: auto (CUDA when torch sees a GPU, else the CPU), cpu, cuda,
    cuda:N or mps."""


def check_numbers(config: AdaptConfig) -> None:
    """Numbers that cannot work, refused before anything loads, each naming its flag."""
    too_few_epochs = config.epochs is not None and config.epochs < 1
    too_few_checks = config.check_queries is not None and config.check_queries < 10
    if too_few_epochs or config.queries_per_epoch < 1 or too_few_checks:
        raise SemiretError("adaptation needs at least 1 epoch (--epochs), 1 pseudo-query per epoch "
                           "(--queries-per-epoch) and 10 check queries (--check-queries)")
    if config.batch_size < 1:
        raise SemiretError(f"--batch-size must be at least 1, got {config.batch_size}")
    language(config.language)  # an unknown --language fails here, not after training
    if config.max_length < 2:
        raise SemiretError(f"--max-length must be at least 2 tokens, got {config.max_length}")
    if config.threads is not None and config.threads < 0:
        raise SemiretError(f"--threads must be 0 (torch's choice) or more, got {config.threads}")


def check_teachers(kind: str, teachers: str) -> None:
    """``--teachers`` checked before anything loads: a list the recipe can use, or ``none`` for SiDR and NAIL;
    other kinds adapt without teachers, and are told so when given some."""
    from semiret.training.teachers import parse_teachers

    if kind not in DISTILLING_KINDS:
        if teachers != AdaptConfig.teachers:
            log.warning("--teachers is for inference-free, SiDR and NAIL models: a %s model adapts without them", kind)
    elif teachers == NO_TEACHERS:
        if kind == "inference-free":
            raise SemiretError("inference-free adaptation is distillation: give it teachers (--teachers, default "
                               f"{AdaptConfig.teachers}); '{NO_TEACHERS}' is for SiDR and NAIL models")
    else:
        parse_teachers(teachers)


def distilled_from(config: AdaptConfig) -> str:
    """The teachers a SiDR or NAIL recipe is given ('': none)."""
    return "" if config.teachers == NO_TEACHERS else config.teachers


def default_output(data: str, model: str) -> Path:
    return Path("adapted") / f"{Path(data).stem if Path(data).is_file() else Path(data).name}-{Path(model).name}"


SAVED_KINDS = {SIDR: "sidr", GDR: "gdr", NAIL: "nail"}
"""Saved-model kinds adapt recognises by their marker file (an inference-free model also by its name)."""


def model_kind(model: str) -> str:
    """'inference-free', 'sidr', 'gdr', 'nail' or 'dense' (torch-free checks of the model's files); an error for
    any other model."""
    from semiret.models.base import ENCODER_FILE

    for kind, name in SAVED_KINDS.items():
        if any((folder / kind.marker).is_file() for folder in (Path(model), PACKAGED_CHECKPOINTS / model)):
            return name
    if INFERENCE_FREE.directory(model) is not None:
        return "inference-free"
    saved = model_directory_of("dense", model) / ENCODER_FILE
    if (json.loads(saved.read_text())["family"] if saved.is_file() else model) in ("dense", "minilm"):
        return "dense"
    raise SemiretError(f"semiret adapt adapts inference-free, SiDR, GDR, NAIL and dense models; {model!r} is none of "
                       "them (for other models, search with -r hybrid, BM25 fused with the model; docs/results.md, "
                       "'Every packaged model against BM25 out of domain')")


def read_corpus(data: str) -> tuple[Path | None, list[Document]]:
    """(the BEIR folder ``data`` names, or None for a corpus file or a folder of documents; its documents). Errors
    name the file and line."""
    from semiret.data.paths import dataset

    source = dataset(data)
    if corpus_file(source) == source:  # a corpus file, a folder of documents
        return None, list(iter_corpus(source))
    return source, list(Collection(source).corpus())


def write_corpus_copy(documents: list[Document], folder: Path) -> Path:
    """A corpus file's documents as the BEIR folder ``folder`` (what the recipes read), published in one rename:
    a run stopped while writing leaves an earlier copy whole."""
    from semiret.files import staged_directory

    with staged_directory(folder) as staged:
        with open(staged / "corpus.jsonl", "w", encoding="utf-8") as handle:
            for document in documents:
                handle.write(document.to_json() + "\n")
    return folder


CHECK_SEED_OFFSET = 7919
"""The check's documents are drawn with the run's seed plus this (the training's with the seed)."""


REPORT_FILE = "adapt.json"
WRITTEN = ("corpus", "model", "index", "train", "start-index", "hybrid-index")
"""What an adaptation writes in its --output folder (besides its report)."""


def check_adapt_output(output: Path, data: str, start: str) -> None:
    """Refuse, before any work, an --output where the run would replace what it did not write (an index or a model
    of the user's: a folder holding them and no adaptation's record), the corpus it reads (--data inside a folder it
    writes) or the model it starts from (``start``, a folder: a finished run's ``train/model`` given as --model was
    deleted with the run folder before the training read it)."""
    from semiret.data.paths import dataset

    read = {"--data": (data, dataset(data).resolve()), "--model": (start, Path(start).resolve())}
    for name in WRITTEN:
        written = (output / name).resolve()
        for option, (given, source) in read.items():
            if source == written or written in source.parents:
                raise SemiretError(f"{option} {given} lies in {output / name}, which adapt writes: move it, or give "
                                   "another --output")
    ours = (output / REPORT_FILE).is_file() or (output / "train" / "adapt-options.json").is_file()
    theirs = [name for name in WRITTEN if (output / name).exists()]
    if theirs and not ours:
        raise SemiretError(f"--output {output} holds {', '.join(theirs)} that no adaptation wrote, which adapt would "
                           "replace: give a new or empty folder")


def check_set(documents: list[Document], config: AdaptConfig) -> tuple[dict[str, str], dict]:
    """Known-item check queries: one pseudo-query (crop or sentence) of each of ``check_queries`` documents drawn
    with the run's seed (:data:`CHECK_SEED_OFFSET`), judged relevant to its source document; the training's
    pseudo-queries are drawn from the others (:func:`pseudo_labelled_collection`), so none is trained on."""
    from semiret.training.pseudo_queries import known_item_queries

    queries = known_item_queries(documents, config.check_queries, config.seed + CHECK_SEED_OFFSET, prefix="check")
    return {q.id: q.text for q in queries}, {q.id: {q.document_id: 1} for q in queries}


def known_item_run(retriever, queries: dict[str, str]) -> dict:
    ids = list(queries)
    return retriever.search([queries[q] for q in ids], k=100).as_run(ids)


def _rounded(figures: dict) -> dict:
    return {name: round(value, 4) for name, value in figures.items()}


def known_item_figures(run: dict, qrels: dict) -> dict:
    from semiret.evaluation.metrics import parse_measures, score_run

    return score_run(run, qrels, parse_measures(list(CHECK_MEASURES)))


def fusion_against_model(fused_run: dict, model_run: dict, qrels: dict) -> dict:
    """The known-item nDCG@10 of BM25 fused with the model against the model alone: the mean difference, the
    paired t-test's p-value and whether fusion is significantly worse (then the model alone is indexed)."""
    from semiret.evaluation.metrics import parse_measures
    from semiret.evaluation.significance import compare_runs

    compared = compare_runs(fused_run, model_run, qrels, parse_measures(["nDCG@10"]))["nDCG@10"]
    return {"delta": compared["delta"], "p_value": compared["p_value"],
            "worse": compared["significant"] and compared["delta"] < 0}


def retriever_name(kind: str) -> str:
    return {"inference-free": "inference-free", "sidr": "sidr-full", "gdr": "gdr",
            "nail": "bm25+nail"}.get(kind, "dense")


def teacher_work(config: AdaptConfig, documents: int) -> float:
    """The teachers' share of an estimate, in the student's document encodings: each neural teacher encodes the
    corpus and the pseudo-queries (about 0.3 of a corpus); MiniLM costs ~2.5x SPLADE-tiny."""
    from semiret.training.teachers import parse_teachers

    if config.teachers == NO_TEACHERS:
        return 0.0
    cost = {"dense": 2.5, "sparse": 1.0, "sidr": 2.0}
    return sum(cost.get(kind, 0.0) for kind, _, _ in parse_teachers(config.teachers)) * documents * 1.3


def estimate_seconds(kind: str, model: str, documents: list[Document], config: AdaptConfig) -> float:
    """Seconds the adaptation should take here, from a probe: the time the model takes to encode 64 of the
    corpus's documents, scaled by the work each stage does in document encodings (a training encoding
    counted 3x for the backward pass; teachers at their own cost relative to the student)."""
    from semiret.models.base import torch_threads
    from semiret.models.encoders import load_encoder

    if kind == "sidr":
        path, meta = SIDR.read(model)
        encoder = load_encoder(str(path / ("encoder" if meta["shared"] else "document")), "vdr")
    elif kind == "gdr":
        recorded = GDR.read(model)[1]["config"]
        encoder = load_encoder(recorded["document_encoder"], "dense", max_length=recorded["document_max_length"])
    elif kind == "nail":
        from semiret.models.nail import NailModel

        encoder = NailModel.load(model)
    else:
        encoder = load_encoder(model, "splade" if kind == "inference-free" else "dense")
    # 64 documents spread over the corpus, the fastest of two timed passes after a warm-up at the same shapes: 16
    # from its start ranged over 1.5x between runs (a first batch of a shape pays for its kernels, a corpus's
    # first documents need not be typical)
    with_text = [d for d in documents if d.full_text.strip()]  # an empty document costs nothing: not typical
    probe = [d.full_text for d in with_text[:: max(len(with_text) // PROBE_DOCUMENTS, 1)][:PROBE_DOCUMENTS]]
    encode = encoder.score_documents if kind == "nail" else partial(encoder.encode_document, show_progress=False)
    passes = []
    with torch_threads(config.threads):  # the threads the run will have
        encode(probe, batch_size=16)
        for _ in range(2):
            started = time.perf_counter()
            encode(probe, batch_size=16)
            passes.append(time.perf_counter() - started)
    per_document = min(passes) / len(probe)
    trained = config.epochs * config.queries_per_epoch
    n = len(documents)
    if kind == "inference-free":
        work = teacher_work(config, n) + 3 * trained * 8 * 0.5 + 2 * n  # 8 candidates at pre-training's 128 tokens
    elif kind == "sidr":
        # query, positive, a retrieved negative per pair; the bag-of-tokens index; the teachers at half their
        # pre-training weight, the probe reading SiDR's 256 tokens (climate-fever, AMD EPYC: MiniLM@128 1.14 and
        # SPLADE-tiny 0.94 of a probe document's time; docs/results.md)
        work = 0.5 * teacher_work(config, n) + 3 * trained * 3 + n
    elif kind == "gdr":
        # E_D over the corpus, both indexes and their known-item checks: about 1.5 documents' encoding per document;
        # per epoch GDR_ADAPT's spans and a sentence of every document besides the pseudo-queries, each a short query
        # through E_Q with the backward pass through its top layers, and the decoder: about 1.05 documents' encoding
        # each (fitted on Vaswani and climate-fever on the AMD EPYC: 14% over and 15% under; docs/results.md)
        per_epoch = (GDR_ADAPT["spans_per_document"] + 1) * n + config.queries_per_epoch
        work = 1.5 * n + config.epochs * per_epoch * 1.05
    elif kind == "nail":
        # the score matrix twice (start and adapted); a pair's passage, backward pass; the teachers over a pair of
        # every document, as for SiDR
        work = 0.5 * teacher_work(config, n) + 2 * n + 3 * trained
    else:
        # both indexes with their checks, and the corpus embedded for the tree before each epoch; a step's queries
        # and positives with gradients, its negatives read from that embedding (fitted on Vaswani and climate-fever
        # on the AMD EPYC, both within 3%; docs/results.md)
        work = (2 + config.epochs) * n + trained
    return per_document * work  # the hybrid index adds BM25 beside the model's index, encoding nothing


def model_directory_of(kind: str, model: str) -> Path:
    """The folder holding ``model``'s files (a registry name resolved, a packaged checkpoint found)."""
    from semiret.data.packaged import resolve_model_path

    if kind == "inference-free":
        return INFERENCE_FREE.directory(model)
    if kind in ("sidr", "gdr", "nail"):
        return {"sidr": SIDR, "gdr": GDR, "nail": NAIL}[kind].directory(model)
    shipped = PACKAGED_CHECKPOINTS / model
    return shipped if shipped.is_dir() and not Path(model).exists() else resolve_model_path(model)


def indexing_length(kind: str, model: str) -> int | None:
    """The document length ``model`` indexes at (recorded with a saved encoder; None: the model's own)."""
    from semiret.models.base import ENCODER_FILE

    saved = model_directory_of(kind, model) / ENCODER_FILE
    return json.loads(saved.read_text()).get("max_length") if saved.is_file() else None


SIDR_ADAPT = {"learning_rate": 5e-5, "warmup_epochs": 0.5, "average_with_base": 0.5}
"""SiDR's training goes on from the trained model at a quarter of its learning rate from scratch (2e-4), and the
result is averaged half with the start (WiSE-FT), as :data:`DENSE_ADAPT` does: fused with BM25 on climate-fever's
training queries, 0.399 against 0.391 unaveraged (p = 0.001) and 0.390 unadapted (docs/results.md)."""
DENSE_ADAPT = {"learning_rate": 2e-5, "span_words": 16, "average_with_base": 0.5, "negative_gradients": False,
               "cached_negatives": True, "dev_every_epoch": False}
"""HCE-U for a dense encoder at gentler settings than HCE's own: a fifth of its learning rate, 16-word
pseudo-queries (a query's length, not the paper's 64), and the result averaged half with the start (WiSE-FT);
the sampled negatives without gradients on every device, as these settings were chosen, and read from the corpus
embedding each epoch starts from (at a fifth of the learning rate they go little stale), no dev figure after the
last epoch (adapt checks its own): Vaswani in 17 minutes instead of about 28.5 on the slower 2-core machine, its
known-item check 0.530 -> 0.607, climate-fever 0.637 -> 0.696 (docs/results.md).
HCE-U at HCE's own settings made ``hce-scifact`` worse on real queries while the known-item check rose (0.52 ->
0.64 on Vaswani): fused with BM25, climate-fever's training queries 0.405 against 0.414 unadapted, and these
settings 0.425 (+0.011, p = 0.02; docs/results.md). SimCSE pseudo-queries instead of spans (HCE-U's other option,
better from MiniLM) were worse there: -0.011 fused (p = 0.009)."""

GDR_ADAPT = {"trained_query_layers": 2, "span_words": 16, "spans_per_document": 2}
"""GDR on a new corpus at the packaged model's own settings but for its pseudo-queries: E_Q's top 2 layers trained
(what fitted the CPU budget), two random spans of 16 words (a query's length, as :data:`DENSE_ADAPT`'s; the recipe's
one of 40 words costs 1.5x more per step) and a sentence of every document; the decoder has the start's shape and
starts afresh, since the tree it learns is new. One epoch of these (:data:`DEFAULT_EPOCHS`) against two of the
recipe's: Vaswani's known-item check 0.411 -> 0.463 (two epochs 0.460) in 16 min 42 s instead of 31 min 55 s on the
slower 2-core machine; the adapted index on its test queries +0.014 (p = 0.04), kept on climate-fever too (0.562 ->
0.564). One epoch with a single span: climate-fever's check fell, the start was kept (docs/results.md)."""

DEFAULT_EPOCHS = {"gdr": 1}
"""Epochs of ``adapt`` by model kind where not 2: a GDR epoch trains on every document's spans and sentence besides
the pseudo-queries, about 30 times the other kinds' epochs on a 10k-document corpus (:data:`GDR_ADAPT`)."""

NAIL_ADAPT = {"average_with_base": 0.5, "distillation_weight": 32.0}
"""NAIL's pre-training on the corpus at adapt's settings, distilled in-batch from adapt's teachers, averaged half with
the start (WiSE-FT, as :data:`DENSE_ADAPT`). The distillation's weight is the pre-training batch (32): NAIL's Eq. 3
is summed over a batch's queries and the KL is a mean, so at weight 1 the term changed nothing. On climate-fever's
training queries, what adapt indexes (``bm25+nail``) scored 0.3498 with the teachers against 0.3410 without (+0.009,
p = 0.005), both below the unadapted model's 0.3910 there while level with it on the test queries (docs/results.md)."""


def checked_documents(documents: list[Document], config: AdaptConfig) -> set[str]:
    """The ids of the check's documents (:func:`check_set`), which no training may draw from."""
    return {document for qrels in check_set(documents, config)[1].values() for document in qrels}


def training_corpus(documents: list[Document], config: AdaptConfig, folder: Path) -> Path:
    """The corpus less the check's documents, as a BEIR folder: what the recipes that cut pseudo-queries from every
    document they are given (inference-free, NAIL, dense) train on, so that the check's queries stay held out (they
    were cut from the same documents, some word for word)."""
    checked = checked_documents(documents, config)
    return write_corpus_copy([d for d in documents if d.id not in checked], folder)


def pseudo_labelled_collection(corpus: Path, documents: list[Document], config: AdaptConfig, folder: Path) -> Path:
    """A BEIR folder beside the run: the corpus (linked), ``queries_per_epoch`` pseudo-queries of as many of its
    ``documents`` (crops and sentences, :func:`semiret.training.pseudo_queries.generate_pseudo_queries`) and their
    train qrels (each query judged relevant to its source document): what a recipe that trains on labels reads."""
    from semiret.training.pseudo_queries import known_item_queries

    queries = known_item_queries(documents, config.queries_per_epoch, config.seed, prefix="pseudo",
                                 excluded=checked_documents(documents, config))
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    source = beir_file(corpus, "corpus")
    link = folder / source.name  # its suffix says how to read it
    if not link.exists():
        link.symlink_to(source.resolve())
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as handle:
        for query in queries:
            handle.write(json.dumps({"_id": query.id, "text": query.text}, ensure_ascii=False) + "\n")
    with open(folder / "qrels" / "train.tsv", "w", encoding="utf-8") as handle:
        handle.write("query-id\tcorpus-id\tscore\n")
        handle.writelines(f"{query.id}\t{query.document_id}\t1\n" for query in queries)
    return folder


def index_options(kind: str, output: Path) -> dict:
    """Build options of every index (and the training) of one adaptation: GDR's start and adapted models share
    E_D, so its vectors of the corpus are computed once and kept in ``<output>/train/document-embeddings``."""
    return {"embedding_cache": str(output / "train" / "document-embeddings")} if kind == "gdr" else {}


TRAINING_OPTIONS = ("queries_per_epoch", "teachers", "batch_size", "max_length", "seed", "check_queries")
"""The options of ``semiret adapt`` that shape its training, with the model and the corpus (``--epochs`` may grow:
a run resumed with more trains on)."""


def prepare_run_folder(config: AdaptConfig, documents: list[Document], start: str, run: Path) -> None:
    """The training's run folder, checked before anything is computed: one left by an adaptation with other
    :data:`TRAINING_OPTIONS`, another start or another corpus is started over when it has no checkpoint yet, and
    is an error when it has one (``--no-resume`` starts it over, as it does any run)."""
    from semiret.training.trainer import STATE_FILE, start_state_reusable

    record = run / "adapt-options.json"
    made_with = {**{name: getattr(config, name) for name in TRAINING_OPTIONS}, "model": start,
                 "corpus": hashlib.blake2b("".join(corpus_fingerprint(documents)["document_hashes"]).encode(),
                                           digest_size=16).hexdigest()}
    recorded = json.loads(record.read_text()).get("made_with") if record.is_file() else None
    checkpointed = any(run.rglob(STATE_FILE))
    if not config.resume or not start_state_reusable(recorded, made_with, checkpointed, run):
        shutil.rmtree(run, ignore_errors=True)  # its checkpoints, pseudo-queries and cached vectors with them
    run.mkdir(parents=True, exist_ok=True)
    atomic_write_json(record, {"made_with": made_with})


def train_adapted(kind: str, config: AdaptConfig, corpus: Path, documents: list[Document], start: str,
                  run: Path) -> Path:
    """Run the recipe's label-free stage in ``run`` (:func:`prepare_run_folder`); the adapted model's folder."""
    length = indexing_length(kind, start)
    common = dict(data=str(corpus), output=str(run), base=start, batch_size=config.batch_size, seed=config.seed,
                  threads=config.threads, device=config.device)
    whole = corpus
    if kind in ("inference-free", "nail", "dense"):  # their own pseudo-queries of every document they are given
        corpus = training_corpus(documents, config, run / "training-corpus")
        common["data"] = str(corpus)
    if kind == "inference-free":
        from semiret.methods.inference_free import InferenceFreeTrainingConfig, train_inference_free

        train_inference_free(InferenceFreeTrainingConfig(  # the IDF of the whole corpus (it reads no query)
            **common, idf=f"corpus:{whole}", teachers=config.teachers, pretrain_corpora=[str(corpus)],
            pretrain_epochs=config.epochs, pretrain_queries_per_epoch=config.queries_per_epoch,
            pretrain_max_length=config.max_length, finetune_max_length=length or config.max_length,
            finetune_epochs=0, choose_document_threshold=False), resume=config.resume)
        return run / "model"
    if kind == "sidr":
        from semiret.methods.sidr import SiDRTrainingConfig, train_sidr

        labelled = pseudo_labelled_collection(corpus, documents, config, run / "pseudo-queries")
        train_sidr(SiDRTrainingConfig(**{**common, "data": str(labelled)}, epochs=config.epochs,
                                      teachers=distilled_from(config), **SIDR_ADAPT), resume=config.resume)
        return run / "model"
    if kind == "gdr":
        return train_adapted_gdr(config, corpus, documents, start, run, common)
    if kind == "nail":
        from semiret.methods.nail import NailTrainingConfig, train_nail

        train_nail(NailTrainingConfig(**common, pretrain_corpora=[str(corpus)], pretrain_epochs=config.epochs,
                                      pretrain_pairs_per_epoch=config.queries_per_epoch,
                                      pretrain_batch_size=config.batch_size, finetune_epochs=0,
                                      teachers=distilled_from(config), **NAIL_ADAPT), resume=config.resume)
        return with_search_settings(NAIL, start, run / "model")
    from semiret.methods.hce import HCETrainingConfig, train_hce

    train_hce(HCETrainingConfig(**common, scenario="unsupervised", epochs=config.epochs,
                                unsupervised_per_epoch=config.queries_per_epoch, document_max_length=config.max_length,
                                index_max_length=length or HCETrainingConfig.index_max_length, **DENSE_ADAPT),
              resume=config.resume)
    return run / "model"


def train_adapted_gdr(config: AdaptConfig, corpus: Path, documents: list[Document], start: str, run: Path,
                      common: dict) -> Path:
    """GDR trained again over a tree of this corpus, E_Q and the decoder's shape from ``start``, the start's
    search settings recorded in the result."""
    from semiret.methods.gdr import GDRTrainingConfig, train_gdr
    from semiret.models.gdr import QUERY_ENCODER

    path, meta = GDR.read(start)
    recorded = meta["config"]
    labelled = pseudo_labelled_collection(corpus, documents, config, run / "pseudo-queries")
    train_gdr(GDRTrainingConfig(
        **{**common, "data": str(labelled), "base": str(path / QUERY_ENCODER)},
        document_encoder=recorded["document_encoder"], document_max_length=recorded["document_max_length"],
        query_max_length=recorded["query_max_length"], branching=recorded["branching"],
        decoder_layers=recorded["decoder_layers"], heads=recorded["heads"], adaptive_head=recorded["adaptive_head"],
        adaptor_layers=recorded["adaptor_layers"],
        epochs=config.epochs, **index_options("gdr", run.parent), **GDR_ADAPT), resume=config.resume)
    return with_search_settings(GDR, start, run / "model")


def with_search_settings(kind, start: str, adapted: Path) -> Path:
    """``adapted`` with the search settings ``start`` records (GDR's beta, NAIL's BM25 weight), which training
    does not write."""
    recorded = kind.read(start)[1]
    if "search" in recorded:
        kind.write_marker(adapted, **{**kind.read(str(adapted))[1], "search": recorded["search"]})
    return adapted


def adapt(config: AdaptConfig, confirm=None) -> dict:
    """Adapt ``config.model`` to ``config.data`` (see the module's docstring); returns the report written to
    ``<output>/adapt.json``. ``confirm(estimate_seconds)``, when given, is called before training starts and
    may stop the run by returning False. Every encoding runs on ``config.device``, as the training does."""
    from semiret.models.devices import encoding_on

    if not config.data:
        raise SemiretError("say which corpus to adapt to (--data)")
    check_numbers(config)
    with encoding_on(config.device):
        return _adapt(config, confirm)


def _adapt(config: AdaptConfig, confirm) -> dict:
    from semiret.models.base import copy_model_directory
    from semiret.search.retrievers import retriever_class

    kind = model_kind(config.model)
    check_teachers(kind, config.teachers)
    config = replace(config, epochs=config.epochs or DEFAULT_EPOCHS.get(kind, 2))
    start = model_directory_of(kind, config.model) if kind in ("inference-free", "sidr") else config.model
    start = str(start)
    output = Path(config.output) if config.output else default_output(config.data, config.model)
    check_run_output(output, (model_directory_of(kind, start),), "adapt")
    check_adapt_output(output, config.data, str(model_directory_of(kind, start)))
    folder, documents = read_corpus(config.data)
    corpus = folder or output / "corpus"  # a corpus file is copied there once the run goes ahead
    with_text = sum(1 for d in documents if d.full_text.strip())
    if with_text < MIN_DOCUMENTS:
        empty = f" ({len(documents) - with_text} of its {len(documents)} have no text)" if with_text < len(documents) else ""
        raise SemiretError(f"{config.data} holds {with_text} documents with text{empty}; adapting needs at least "
                           f"{MIN_DOCUMENTS} (fewer give too few pseudo-queries to learn from and to check the result "
                           f"on): search it with {config.model} as it is, or with -r hybrid")
    if config.check_queries is None:  # the documented minimum corpus (MIN_DOCUMENTS) adapts with the defaults
        config = replace(config, check_queries=min(CHECK_QUERIES, with_text // 2))
    if config.check_queries > with_text // 2:  # the training's pseudo-queries are drawn from the other documents
        raise SemiretError(f"--check-queries {config.check_queries} would hold out more than half of the {with_text} "
                           f"documents with text, leaving too few to train on: give at most {with_text // 2}")
    estimate = estimate_seconds(kind, start, documents, config)
    duration = f"{estimate / 60:.0f} minutes" if estimate >= 90 else f"{estimate:.0f} seconds"
    log.warning("adapting %s to %s (%d documents) takes about %s on this machine", config.model, config.data,
                len(documents), duration)
    report = {"config": asdict(config), "kind": kind, "corpus": str(corpus), "documents": len(documents),
              "estimate_seconds": round(estimate, 2)}  # small corpora take under a second
    if confirm is not None and not confirm(estimate):
        return report
    prepare_run_folder(config, documents, start, output / "train")  # (a run it refuses changes nothing)
    (output / REPORT_FILE).unlink(missing_ok=True)  # until this run's is written: a run killed midway leaves none
    if folder is None:
        write_corpus_copy(documents, corpus)
    started = time.perf_counter()
    queries, qrels = check_set(documents, config)
    retriever = retriever_class(retriever_name(kind))
    start_index = output / "start-index"
    shared = index_options(kind, output)
    runs = {"start": known_item_run(retriever.build(documents, start_index, overwrite=True, model=start, **shared),
                                    queries)}
    before = known_item_figures(runs["start"], qrels)
    adapted = train_adapted(kind, config, corpus, documents, start, output / "train")
    atomic_write_json(adapted / ADAPTED_CORPUS_FILE, {"corpus": str(corpus), **corpus_fingerprint(documents)})
    # published first, then measured: the index records its model's path, so it is built from the published copy
    copy_model_directory(adapted, output / "model")
    runs["adapted"] = known_item_run(retriever.build(documents, output / "index", overwrite=True,
                                                     model=str(output / "model"), **shared), queries)
    after = known_item_figures(runs["adapted"], qrels)
    kept = after["nDCG@10"] >= before["nDCG@10"]
    if kept:
        shutil.rmtree(start_index)
    else:
        copy_model_directory(model_directory_of(kind, start), output / "model")
        shutil.rmtree(output / "index")
        start_index.rename(output / "index")
    check = {"queries": len(queries), "measure": "known-item pseudo-queries (held out)", "start": _rounded(before),
             "adapted": _rounded(after)}  # (kept or not by the figures unrounded: 0.51226 < 0.51234)
    searched_with = retriever_name(kind)
    if config.hybrid and kind != "nail":
        # BM25 beside the index just built: the corpus is not encoded again
        fused_run = known_item_run(retriever_class("hybrid").around(output / "index", output / "hybrid-index",
                                                                    overwrite=True, language=config.language), queries)
        check["hybrid"] = _rounded(known_item_figures(fused_run, qrels))
        check["hybrid_vs_model"] = fusion_against_model(fused_run, runs["adapted" if kept else "start"], qrels)
        if not check["hybrid_vs_model"]["worse"]:
            searched_with = "hybrid"
            shutil.rmtree(output / "index")
            (output / "hybrid-index").rename(output / "index")
        else:
            shutil.rmtree(output / "hybrid-index")
    report.update({"check": check, "kept": "adapted" if kept else "start", "retriever": searched_with,
                   "seconds": round(time.perf_counter() - started, 1),
                   "model": str(output / "model"), "index": str(output / "index"),
                   "search": f"semiret search --index {output / 'index'} -r {searched_with} 'your query'"})
    atomic_write_json(output / REPORT_FILE, report)
    return report
