"""End-to-end evaluation: build (or open) an index, run the queries, score, time, measure size."""

from __future__ import annotations

import json
import logging
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np

from semiret.data.chunking import PARENT_FIELD, Chunking
from semiret.data.collection import Collection, count_documents, searched_qrels
from semiret.data.trec import read_trec_run, write_trec_run
from semiret.files import check_output_file
from semiret.evaluation.metrics import check_measures, parse_measures, score_run
from semiret.evaluation.significance import TESTS, check_baseline, compare_runs
from semiret.indexes.storage import META_FILE, read_meta
from semiret.errors import SemiretError
from semiret.search.boosting import Boost
from semiret.search.candidates import CANDIDATES, candidate_depth
from semiret.search.diversity import Diversity
from semiret.search.fused import FusedSearch, check_fusion_asked
from semiret.search.fusion import RRF_K, check_fusion
from semiret.search.rerank import Reranking
from semiret.search.retrievers import Retriever, open_retriever, resolve_backend, retriever_class
from semiret.text.bm25 import BM25Parameters
from semiret.text.fields import TextFields
from semiret.text.token_counts import recorded_tokenizer

log = logging.getLogger(__name__)
RERANK_FLAGS = "--cross-encoder/--colbert/--ltr"
"""The command line's flags of a re-ranking (``rerank``), as messages name them."""
LATENCY_QUERIES = 200
"""Queries timed one at a time for the latency figures (enough for a stable median)."""
SPARSITY_FIGURES = ("avg_nnz_per_doc", "flops", "avg_query_terms")
"""Every inverted index (BM25, bag-of-tokens, learned sparse): expansion rate and FLOPS
(:mod:`semiret.indexes.sparsity`), so that a learned model's cost reads against BM25's; null for dense."""
COST_FIGURES = ("rerank_pairs", "distinct_candidates", "distinct_candidates_fraction", "documents_embedded",
                "queries_embedded", "documents_scored_per_query", "documents_scored_fraction")
"""Late-parametric re-ranking: the embedding work of the run (SiDR Table 8); search inside decoded clusters
(GDR): the documents each query scored."""


DEFAULT_RETRIEVER = "bm25"
"""What ``evaluate`` builds when told neither a retriever nor an existing index."""


def evaluate(data: str | Path, retriever: str | Retriever | None = None, split: str = "test",
             index: str | Path | None = None,
             depth: int = 100, measures: list[str] | None = None, run_path: str | Path | None = None,
             rebuild: bool = False, n_threads: int = 1, baseline: str | Path | None = None, test: str = "t",
             backend=None,
             queries_file: str | Path | None = None, qrels_file: str | Path | None = None,
             chunk_words: int | None = None, chunk_overlap: int = 0, chunk_sentences: bool = False,
             chunk_tokens: int | None = None, chunk_tokenizer: str | None = None, diversity: float | None = None,
             candidates: int | None = None, boost: "dict | list[dict] | None" = None,
             rerank: "Reranking | None" = None, query_vectors_file: str | Path | None = None,
             fuse_with: Sequence[str | Path] = (), fuse_method: str = "rrf", fuse_weights: Sequence[float] | None = None,
             fuse_depth: int = CANDIDATES, **options) -> dict:
    """Evaluate ``retriever`` on a BEIR collection and return the figures as one flat dict.

    An existing ``index`` directory is reused unless ``rebuild``; without one a temporary index is built.
    ``retriever`` None: the one an existing ``index`` was built for (what ``semiret adapt`` chose, say), else
    :data:`DEFAULT_RETRIEVER`; an open :class:`~semiret.search.retrievers.Retriever` (one of your own, say) is
    evaluated as it is, over its index (no ``index``, ``rebuild`` or options then).
    The figures name the retriever's ``options`` that shaped them (those of the index only when it was built here).
    ``baseline``: a TREC run (say, BM25's, written by an earlier ``run_path``) to compare against query by query
    (:func:`~semiret.evaluation.significance.compare_runs`), under ``vs_baseline``. With a ``backend``
    (``milvus:URI``), ``index`` names a Milvus collection (without one, a temporary collection is built and
    dropped). ``queries_file`` and ``qrels_file`` read queries and judgements from files of their own
    (:class:`~semiret.data.collection.Collection`; ``data`` may then be a corpus file). ``chunk_words`` or
    ``chunk_tokens`` (and ``chunk_overlap``, ``chunk_sentences``, ``chunk_tokenizer``, as ``semiret index`` takes
    them): the documents indexed as passages (:mod:`semiret.data.chunking`), an index found refused unless it holds
    those passages; an index of passages, so built or found, is searched for documents by their best passage (MaxP:
    its hits grouped by ``parent``, ``depth`` documents), and ``documents`` counts its passages. ``diversity`` (and
    ``candidates``): hits picked by maximal marginal relevance (:mod:`semiret.search.diversity`), for its cost in
    relevance and latency; the run ranks them in the order picked, and ``options`` records both. ``boost``: the
    hits' scores boosted by their metadata (:mod:`semiret.search.boosting`), for what it does to relevance;
    ``options`` records it. ``rerank``: the best hits ranked again by a cross-encoder or late interaction
    (:class:`~semiret.search.rerank.Reranking`); ``options`` records its model and depth. ``query_vectors_file``:
    the queries as vectors made elsewhere (:func:`~semiret.data.collection.read_query_vectors`; in place of
    ``queries_file``), searched as they are over a dense index (retrievers ``vectors``, ``dense``), sparse ones
    over an index of sparse vectors (``sparse-vectors``), token vectors over an index of them (``multivectors``).
    ``fuse_with``:
    other indexes of the corpus (each searched by its own retriever) whose rankings are fused with this one's at query
    time (:class:`~semiret.search.fused.FusedSearch`, by ``fuse_method`` with ``fuse_weights``, each index's best
    ``fuse_depth``): the figures are the fused search's, its size the indexes' together, and ``options`` records the
    fusion.
    """
    if run_path:  # not after the whole evaluation, and never over a file it reads (--baseline)
        check_output_file(run_path, "TREC run (--run)", (baseline, queries_file, qrels_file, query_vectors_file))
    if n_threads < 1:
        raise SemiretError(f"--threads must be at least 1, got {n_threads}")
    if depth < 1:
        raise SemiretError(f"the depth searched (--depth) must be at least 1, got {depth}")
    if test not in TESTS:
        raise SemiretError(f"unknown significance test {test!r} (--test: {', '.join(TESTS)})")
    if test != "t" and baseline is None:
        raise SemiretError(f"--test {test} is a test against a baseline: give --baseline RUN too")
    if boost is not None:
        Boost(boost)  # bad functions fail before any index is built
    if diversity is None and boost is None and candidates is not None:
        raise SemiretError("--candidates is for a diversified or boosted search: give --diversity or --boost too")
    if candidates is not None and not isinstance(candidates, bool) and isinstance(candidates, int) \
            and 0 < candidates < depth:
        raise SemiretError(f"--candidates ({candidates}) must be at least --depth ({depth}), the hits chosen from them")
    if diversity is not None:
        Diversity(diversity, candidates)  # bad values fail before any index is built
    elif boost is not None:
        candidate_depth(depth, candidates)
    picking = {name: value for name, value in (("diversity", diversity), ("candidates", candidates),
                                               ("boost", boost), ("rerank", rerank)) if value is not None}
    chunking = Chunking.of_options(chunk_words, chunk_overlap, chunk_sentences, chunk_tokens, chunk_tokenizer)
    for asked, given in (("--diversity", diversity), (RERANK_FLAGS, rerank)):
        if given is not None and chunking is not None:
            searched = "diversified" if asked == "--diversity" else "re-ranked"
            raise SemiretError(f"{asked} with --chunk-{chunking.unit}: passages are ranked by document (grouped by "
                               f"parent), which a {searched} search does not do")
    fusing = {}
    check_fusion_asked(fuse_with, fuse_method, fuse_weights, fuse_depth)
    if fuse_with:
        check_fusion(fuse_method, fuse_weights, 1 + len(fuse_with), RRF_K)
        refused = [flag for flag, given in (("--diversity", diversity), ("--boost", boost), (RERANK_FLAGS, rerank),
                                            ("--query-vectors", query_vectors_file)) if given is not None]
        if refused:
            raise SemiretError(f"a fused search (--fuse-with) fuses plain searches: {', '.join(refused)} does not apply")
        fusing = {"fuse_with": [str(path) for path in fuse_with], "fuse_method": fuse_method,
                  "fuse_weights": fuse_weights, "fuse_depth": fuse_depth}
    if query_vectors_file is not None and queries_file is not None:
        raise SemiretError("give the queries as texts (--queries) or as vectors (--query-vectors), not both")
    collection = Collection(data, query_vectors_file or queries_file, qrels_file,
                            query_vectors=query_vectors_file is not None)
    queries = collection.queries(split)
    qrels = searched_qrels(collection, split, queries)
    measure_objects = parse_measures(measures)
    check_measures(measure_objects, qrels)  # before any index is opened or searched
    warn_deeper_measures(measure_objects, depth)
    baseline_run = read_trec_run(baseline) if baseline is not None else None
    if baseline_run is not None:  # a bad or mismatched baseline fails before any index is built
        check_baseline(baseline_run, qrels, f"the baseline run {baseline}")
    store = resolve_backend(backend)
    opened = retriever if isinstance(retriever, Retriever) else None
    if opened is not None:
        if index is not None or rebuild or options or backend is not None:
            raise SemiretError("a retriever object is evaluated as it is, over its own index: give it no index, "
                               "rebuild, backend or options")
        retriever, index = opened.name, opened.index.path
    if retriever is None:
        retriever = _built_for(index, store) or DEFAULT_RETRIEVER
    cls = type(opened) if opened is not None else retriever_class(retriever)
    if query_vectors_file is not None and not cls.queries.searches_vectors:  # before any index is built
        raise SemiretError(f"--query-vectors searches a dense index (retrievers dense, vectors), one of sparse "
                           f"vectors (sparse-vectors) or of token vectors (multivectors); {retriever} searches query "
                           "texts")
    build_options, search_options = cls.split_options(options)  # unknown options fail before any work
    cls.search_options(search_options)  # as do bad values of the search options (checked when made)
    scratch = temporary_collection = None
    if index is None and store is None:
        scratch = Path(tempfile.mkdtemp(prefix="semiret-eval-"))
        index = scratch / "index"
    elif index is None:
        index = temporary_collection = f"semiret_eval_{uuid.uuid4().hex}"
    index = Path(index)
    try:
        build_seconds = None
        exists = opened is not None or (store.exists(index) if store is not None else (index / META_FILE).is_file())
        if rebuild or not exists:
            start = time.perf_counter()
            read = TextFields.parse(build_options.get("text_fields"))  # (BM25F's fields other than title and text)
            cls.build(collection.corpus(read.metadata_names if read else None), index,
                      total=count_documents(collection.corpus_path), overwrite=True,
                      backend=store, chunking=chunking, **build_options)
            build_seconds = time.perf_counter() - start
        elif opened is None and (ignored := _unlike_the_index(index, build_options, store)):
            log.warning("%s exists and is searched as it was built: %s only apply when an index is built (add "
                        "--rebuild to build it again with them)", index,
                        ", ".join(f"{name}={value!r}" for name, value in ignored.items()))
        searcher = opened or open_retriever(index, retriever, backend=store, **search_options)
        held = (_recorded_meta(index) if store is None and (index / META_FILE).is_file()  # a hybrid's parts' too
                else getattr(searcher.index, "meta", None))
        model, fingerprint = _recorded_model(held)
        _warn_training_queries(model, collection, split)
        if chunking is not None and not _holds_passages(searcher.chunking, chunking):
            raise SemiretError(f"{index} holds {_passages(searcher.chunking)}, not {chunking.describe()}: --rebuild "
                               f"it, or leave out --chunk-{chunking.unit}")
        grouped = {"group_by": PARENT_FIELD} if searcher.chunking is not None else {}  # documents by best passage
        for asked, given in (("--diversity", diversity), (RERANK_FLAGS, rerank)):
            if grouped and given is not None:
                raise SemiretError(f"{index} holds passages, ranked by document (grouped by parent), which a "
                                   f"{'diversified' if asked == '--diversity' else 're-ranked'} search ({asked}) "
                                   "does not do")
        grouped.update(picking)
        warn_unknown_documents(qrels, searcher)
        fused = FusedSearch([searcher, *(open_retriever(path, backend=store) for path in fuse_with)], fuse_method,
                            fuse_weights, fuse_depth) if fuse_with else None
        searching = fused or searcher
        if fused is not None:
            grouped = {}  # (the fused search ranks documents, an index of passages by each document's best)

        query_ids = list(queries)
        texts = [queries[q] for q in query_ids]
        # the first query alone, then the rest timed as the batch: a query encoder loads on first use
        by_group = "group_by" in grouped
        run = searching.search(texts[:1], k=depth, **grouped).as_run(query_ids[:1], by_group=by_group)
        start = time.perf_counter()
        rest = searching.search(texts[1:], k=depth, n_threads=n_threads, **grouped) if len(texts) > 1 else None
        batch_seconds = time.perf_counter() - start
        cost_figures = getattr(searcher.query_side, "cost_figures", None)  # embedding work of this run (re-ranking)
        costs = cost_figures() if cost_figures is not None and fused is None else {}
        sparsity = _sparsity(searcher, texts) if fused is None else {}
        if rest is not None:
            run.update(rest.as_run(query_ids[1:], by_group=by_group))
        if run_path:
            write_trec_run(run, run_path, tag="fused" if fused else retriever)

        latencies = []
        for text in texts[:LATENCY_QUERIES]:
            start = time.perf_counter()
            searching.search([text], k=10, **grouped)
            latencies.append((time.perf_counter() - start) * 1000)

        figures = {
            "retriever": retriever, "dataset": collection.name, "split": collection.judged_split(split),
            "qrels": str(collection.qrels_path(split)), "queries": len(query_ids),
            **score_run(run, qrels, measure_objects),
            "index_build_s": round(build_seconds, 3) if build_seconds is not None else None,
            "index_size_mb": _megabytes(sum(part.index.size_on_disk() or 0 for part in fused.retrievers)
                                        if fused else searcher.index.size_on_disk()),
            "documents": searcher.index.n_docs,
            "latency_ms_median": round(statistics.median(latencies), 4),
            "latency_ms_p95": round(float(np.percentile(latencies, 95)), 4),  # interpolated: never below the median
            "batch_qps": round((len(query_ids) - 1) / batch_seconds, 1) if rest is not None else None,
        }
        # one key set for every retriever (the ``--json`` contract); null where a figure does not apply
        figures.update({key: costs.get(key) for key in COST_FIGURES})
        figures.update({key: sparsity.get(key) for key in SPARSITY_FIGURES})
        figures["chunking"] = searcher.chunking.record() if searcher.chunking is not None else None
        target = searcher.query_side.synonym_target(searcher.index)
        synonyms = target[1].of(target[0]) if target is not None else None
        figures["synonym_rules"] = synonyms.rules if synonyms is not None else None  # the index's own too
        applied = {**(build_options if build_seconds is not None else {}), **search_options, **picking,
                   **({"rerank": rerank.describe()} if rerank is not None else {}), **fusing}
        figures["options"] = {name: value for name, value in applied.items() if value is not None}
        figures["model"], figures["model_fingerprint"] = model, fingerprint  # which model: not in options when reused
        figures["baseline_run"] = str(baseline) if baseline is not None else None
        figures["vs_baseline"] = (compare_runs(run, baseline_run, qrels, measure_objects, test)
                                  if baseline_run is not None else None)
        return figures
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        if temporary_collection is not None and store.exists(temporary_collection):
            store.drop(temporary_collection)


def _holds_passages(held: Chunking | None, asked: Chunking) -> bool:
    """Whether an index's passages are those asked for: the same budget, overlap and sentences, and the tokenizer
    that counts, where one is named (``spaceless`` aside: an older index counted no characters, and reads back so)."""
    same = ("words", "tokens", "overlap", "sentences")
    return held is not None and all(getattr(held, name) == getattr(asked, name) for name in same) and (
        asked.tokenizer is None or held.tokenizer == recorded_tokenizer(asked.tokenizer))


def _passages(chunking: Chunking | None) -> str:
    return "whole documents" if chunking is None else chunking.describe()


def _megabytes(size: int | None) -> float | None:
    """An index's size in MB (None where its store does not say: Milvus)."""
    return round(size / 2**20, 3) if size is not None else None


def _sparsity(searcher, texts: list[str]) -> dict:
    """Expansion rate and FLOPS (:mod:`semiret.indexes.sparsity`) of any inverted index, with the queries as
    its first stage searches them."""
    from semiret.indexes.inverted import InvertedIndex
    from semiret.indexes.sparsity import sparsity_report

    if not isinstance(searcher.index, InvertedIndex):
        return {}
    report = sparsity_report(searcher.index, searcher.encode_queries(texts))
    return {k: report[k] for k in SPARSITY_FIGURES}


def _built_for(index: str | Path | None, store) -> str | None:
    """The retriever an existing index records (``meta.json``'s ``retriever``); None without an index."""
    if index is None:
        return None
    if store is not None:
        return store.open(index).meta.get("retriever") if store.exists(index) else None
    return read_meta(Path(index), None).get("retriever") if (Path(index) / META_FILE).is_file() else None


def _unlike_the_index(index: Path, build_options: dict, store=None) -> dict:
    """The build options whose value differs from what ``index`` (a collection of ``store``, a Milvus backend)
    recorded under the same name (models compared by folder); options it recorded nothing for cannot be compared and
    are left out."""
    meta = store.open(str(index)).meta if store is not None else _recorded_meta(index)
    return {name: value for name, value in build_options.items()
            if (recorded := _recorded(meta, name)) is not None
            and (_model_folder(value) != _model_folder(recorded) if name == "model" else value != recorded)}


def _recorded_meta(index: Path) -> dict:
    """An index's ``meta.json`` with its parts' (a hybrid's BM25 parameters are its lexical part's), BM25's parameters
    complete (a Lucene index records only k1 and b)."""
    meta = read_meta(index, None)
    if isinstance(meta.get("parts"), list):
        meta = {**meta, "parts": {name: _recorded_meta(index / name) for name in meta["parts"]}}
    if isinstance(meta.get("bm25"), dict):
        meta = {**meta, "bm25": vars(BM25Parameters(**meta["bm25"]))}
    return meta


def _recorded_model(meta) -> tuple[str | None, str | None]:
    """The model an index records having been built with (an encoder's ``analyzer`` entry, a hybrid's neural part's:
    a packaged checkpoint by its name, a folder by its absolute path) and its weights' fingerprint where the index
    records one; (None, None) for an index of no model (BM25)."""
    if isinstance(meta, dict):
        model = meta.get("model")
        if isinstance(model, str):
            weights = meta.get("weights")
            return model, weights if isinstance(weights, str) else None
        for key in ("analyzer", *(k for k in meta if k != "analyzer")):  # the analyzer's first
            found = _recorded_model(meta.get(key))
            if found[0] is not None:
                return found
    return None, None


def _warn_training_queries(model: str | None, collection: Collection, split: str) -> None:
    """Warn where the queries scored are those ``model`` was trained on: a local model folder whose
    ``training.json`` (what ``semiret train`` leaves beside the weights) records these judgements (the same qrels
    file, or the same collection and split). Only that file is read, and only where it is there."""
    from semiret.data.packaged import PACKAGED_CHECKPOINTS

    if model is None:
        return
    record = next((folder / "training.json" for folder in (Path(model), PACKAGED_CHECKPOINTS / model)
                   if (folder / "training.json").is_file()), None)  # a folder here, or a packaged checkpoint's
    try:
        config = json.loads(record.read_text(encoding="utf-8")).get("config") if record is not None else None
    except (OSError, ValueError, AttributeError):  # (a record of no object: no warning)
        return
    if not isinstance(config, dict) or config.get("scenario") == "unsupervised" or not config.get("data"):
        return
    scored, data = collection.qrels_path(split), str(config["data"])
    trained_split, trained_qrels = config.get("split"), config.get("qrels_file")
    if not trained_split and not trained_qrels:
        return
    same = False
    try:
        from semiret.data.paths import dataset

        trained = (Path(trained_qrels) if trained_qrels else None if data.startswith("irds:")  # (never fetched here)
                   else dataset(data) / "qrels" / f"{trained_split}.tsv")
        same = trained is not None and trained.is_file() and scored.is_file() and os.path.samefile(trained, scored)
    except (OSError, SemiretError):  # (a collection named where it was trained, not here)
        pass
    if not same and not trained_qrels and collection.judged_split(split) == trained_split:
        same = Path(data).name.split(".")[0] == collection.name
    if same:
        log.warning("%s was trained on these queries (%s: its training.json): figures on them overstate what it does "
                    "on new queries", model, trained_qrels or f"{data}, split {trained_split!r}")


def _recorded(meta, name: str):
    """The first value recorded under ``name`` anywhere in an index's ``meta.json`` (None: none)."""
    if isinstance(meta, dict):
        if name in meta:
            return meta[name]
        return next((found for value in meta.values() if (found := _recorded(value, name)) is not None), None)
    return None


def _model_folder(model) -> str:
    """A model name or folder as the resolved folder it names (packaged names resolved; others as given)."""
    from semiret.data.packaged import PACKAGED_CHECKPOINTS, REGISTRY, resolve_model_path

    for candidate in (Path(str(model)), PACKAGED_CHECKPOINTS / str(model)):
        if candidate.exists():
            return str(candidate.resolve())
    return str(resolve_model_path(model).resolve()) if model in REGISTRY else str(model)


def warn_deeper_measures(measures: dict, depth: int) -> None:
    """A warning naming the measures that read deeper than the ``depth`` documents searched per query."""
    deeper = [name for name, measure in measures.items() if (measure.params.get("cutoff") or 0) > depth]
    if deeper:
        log.warning("%s read(s) deeper than the %d documents searched per query (--depth): scored as if the "
                    "ranking stopped there", ", ".join(deeper), depth)


def warn_unknown_documents(qrels, searcher) -> None:
    """A warning when judged documents are not in the searched index (an index of another collection?): among its
    documents, whose passages it may hold."""
    judged = {d for docs in qrels.values() for d in docs}
    held = searcher.index if searcher.chunking is None else set(searcher.document_ids())
    unknown = [d for d in judged if d not in held]
    if unknown:
        log.warning("%d judged documents are not in the index (e.g. %r): they count as never retrieved",
                    len(unknown), unknown[0])

